"""`tenet-byoc eval`: perplexity of tiny transformers-written checkpoints against transformers'
own loss, quantized schemes against TVM's own build of the same quantized model, bad input."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from tenet_byoc_cli import main
from tenet_byoc.experiments.evaluate import (
    evaluate,
    prepare_eval,
    run_eval,
    token_nll,
    window_bounds,
)

needs_torch = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="the reference perplexity is transformers' (torch and transformers not installed)",
)

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the",
         "park", "while", "birds", "sang", "in", "tall", "green", "trees", "near", "an", "old",
         "stone", "bridge", "over", "quiet", "water"]
WINDOW = 24  # shorter than both models' context (32), so the text spans several windows


def _text(seed: int = 0, words: int = 160) -> str:
    """Seeded word salad with some structure: each word mostly follows its predecessor."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    for _ in range(words):
        i = (i + 1) % len(WORDS) if rng.random() < 0.7 else int(rng.integers(len(WORDS)))
        out.append(WORDS[i])
    return " ".join(out) + ".\n"


def _write_tokenizer(folder, text: str, vocab_size: int) -> int:
    """A BPE tokenizer trained on ``text`` with the tokenizers library; returns its size."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size,
                                                         special_tokens=["[UNK]"]))
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def _scale_weights(model) -> None:
    """Weights large enough that logits are far from uniform (HF's init gives ~uniform)."""
    import torch

    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("ln" in name or "norm" in name) and "bias" not in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)


def _hf_model(kind: str):
    import torch
    import transformers

    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=97,
                                         n_positions=32, bos_token_id=0, eos_token_id=0,
                                         attn_implementation="eager")
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            rope_theta=1000.0, tie_word_embeddings=False, attn_implementation="eager")
        model = transformers.LlamaForCausalLM(config)
    _scale_weights(model)
    return model.eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``kind -> (folder, text file, transformers model)``, each written once, on demand:
    saved with save_pretrained, with a tokenizer.json trained on the text."""
    made = {}

    def get(kind: str):
        if kind not in made:
            model = _hf_model(kind)
            folder = tmp_path_factory.mktemp(kind)
            model.save_pretrained(folder)
            text = _text()
            assert _write_tokenizer(folder, text, vocab_size=80) <= model.config.vocab_size
            path = folder.parent / f"{kind}.txt"
            path.write_text(text)
            made[kind] = folder, path, model
        return made[kind]

    return get


@pytest.fixture(params=["gpt2", "llama"])
def checkpoint(request, checkpoints):
    return checkpoints(request.param)


def _hf_perplexity(model, ids: list[int], window: int) -> tuple[float, int]:
    """transformers' perplexity over the same non-overlapping windows, from its own loss."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for begin in range(0, len(ids), window):
            chunk = ids[begin : begin + window]
            if len(chunk) < 2:
                continue
            t = torch.tensor([chunk])
            loss = model(t, labels=t).loss.item()  # mean over len(chunk) - 1 predictions
            total += loss * (len(chunk) - 1)
            count += len(chunk) - 1
    return math.exp(total / count), count


@needs_torch
def test_float32_perplexity_equals_transformers(checkpoint):
    from tokenizers import Tokenizer

    folder, text, model = checkpoint
    result = evaluate(folder, text, ["none"], window=WINDOW, progress=False)
    (row,) = result.rows
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text.read_text()).ids
    want, predictions = _hf_perplexity(model, ids, WINDOW)
    assert len(ids) > 2 * WINDOW  # several windows, the last one partial
    assert row.predictions == predictions and row.windows == -(-len(ids) // WINDOW)
    assert math.isfinite(want) and want > 1.5  # a random model: far from a perfect one
    assert row.perplexity == pytest.approx(want, rel=1e-4)
    assert row.top1_agreement == 1.0 and row.delta_vs_float32 == 0.0
    # The run was offloaded and charged: one prefill per window.
    assert row.calls > 0 and row.calls % row.windows == 0
    assert row.latency_us > 0 and row.energy_pj > 0 and row.macs > 0


def _tvm_perplexity(folder, scheme: str, ids: np.ndarray, window: int) -> float:
    """The same quantized model built by TVM alone (no offload), scored by scipy."""
    from scipy.special import logsumexp

    import tenet_byoc
    from tenet_byoc.models import from_pretrained

    runner = from_pretrained(folder, bind_params=True, build=lambda mod: tenet_byoc.build(
        tenet_byoc.quantize(mod, scheme), offload=False))
    nll = []
    for begin, end in window_bounds(len(ids), window):
        chunk = ids[begin:end]
        logits, _ = runner.prefill(chunk)
        z = logits[:-1].astype(np.float64)
        nll.extend(logsumexp(z, axis=-1) - z[np.arange(len(z)), chunk[1:]])
    return math.exp(float(np.mean(nll)))


# TVM's own build of a quantized model takes 15-40 s here: one case by default.
@pytest.mark.parametrize("kind,scheme", [
    ("gpt2", "w8a8_per_channel_per_token"),
    pytest.param("gpt2", "w4a16_group32", marks=pytest.mark.slow),
    pytest.param("llama", "w8a8_per_channel_per_token", marks=pytest.mark.slow),
    pytest.param("llama", "w4a16_group32", marks=pytest.mark.slow),
])
def test_quantized_perplexity_equals_tvm_own_build(checkpoints, kind, scheme):
    folder, text, _ = checkpoints(kind)
    job = prepare_eval(folder, text, [scheme], window=WINDOW)
    float_row, row = run_eval(job, progress=False).rows
    assert (float_row.scheme, row.scheme) == ("none", scheme)
    want = _tvm_perplexity(folder, scheme, job.ids, WINDOW)
    assert row.perplexity == pytest.approx(want, rel=1e-4)
    assert row.perplexity != float_row.perplexity  # quantization changed something
    assert row.delta_vs_float32 == pytest.approx(row.perplexity - float_row.perplexity)
    assert 0.5 < row.top1_agreement <= 1.0
    assert row.macs >= float_row.macs and row.calls == float_row.calls


def test_windows_and_nll_by_hand():
    assert window_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert window_bounds(9, 4) == [(0, 4), (4, 8)]  # one leftover token predicts nothing
    assert window_bounds(3, 8) == [(0, 3)]
    # Two tokens, vocab 2: logits [0, log 3] give p(token 1) = 3/4.
    nll, top1 = token_nll(np.array([[0.0, math.log(3)], [5.0, 0.0]], np.float32),
                          np.array([0, 1]))
    assert nll == pytest.approx([-math.log(0.75)], rel=1e-6) and top1.tolist() == [1]


def _copy_checkpoint(src, dst) -> None:
    import shutil

    shutil.copytree(src, dst)


def test_bad_input_is_named(tmp_path, checkpoint):
    folder, text, _ = checkpoint
    bad = tmp_path / "ckpt"
    _copy_checkpoint(folder, bad)
    with pytest.raises(ValueError, match="unknown quantization scheme 'w2'"):
        prepare_eval(bad, text, ["none", "w2"])
    with pytest.raises(ValueError, match=r"window=40 is longer than the model's context \(32"):
        prepare_eval(bad, text, ["none"], window=40)
    with pytest.raises(FileNotFoundError, match="text file .*missing.txt' does not exist"):
        prepare_eval(bad, tmp_path / "missing.txt", ["none"])
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    with pytest.raises(ValueError, match="empty.txt' is empty"):
        prepare_eval(bad, empty, ["none"])
    short = tmp_path / "short.txt"
    short.write_text("cat")
    with pytest.raises(ValueError, match="short.txt' gives 1 token"):
        prepare_eval(bad, short, ["none"])
    with pytest.raises(ValueError, match=r"max_tokens=1 must be an integer >= 2"):
        prepare_eval(bad, text, ["none"], max_tokens=1)
    (bad / "tokenizer.json").write_text('{"model": ')
    with pytest.raises(ValueError, match="tokenizer.json' is not a readable tokenizer.json"):
        prepare_eval(bad, text, ["none"])
    (bad / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json' not found"):
        prepare_eval(bad, text, ["none"])
    (bad / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="config.json': model_type='bert' is not supported"):
        prepare_eval(bad, text, ["none"])
    with pytest.raises(FileNotFoundError, match="checkpoint folder .* does not exist"):
        prepare_eval(tmp_path / "nothing", text, ["none"])


def test_paths_of_the_wrong_kind_are_named(tmp_path, checkpoint):
    # Existing paths are never reported as missing: a folder for the text, a file for the
    # checkpoint say what they are and what is expected instead.
    folder, text, _ = checkpoint
    with pytest.raises(IsADirectoryError, match=f"text file '{tmp_path}' is a directory; --text "
                                                "takes a UTF-8 text file"):
        prepare_eval(folder, tmp_path, ["none"])
    with pytest.raises(NotADirectoryError, match=r"model.safetensors' is a file; pass the folder"):
        prepare_eval(folder / "model.safetensors", text, ["none"])


def test_tokenizer_of_another_model_is_refused(tmp_path, checkpoint):
    folder, text, _ = checkpoint
    bad = tmp_path / "ckpt"
    _copy_checkpoint(folder, bad)
    from tokenizers import Tokenizer, models, pre_tokenizers

    # A word-level tokenizer whose ids start past the model's vocabulary.
    vocab = {w: 200 + i for i, w in enumerate(dict.fromkeys(WORDS + ["[UNK]", "."]))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(bad / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.json' has token ids up to 2\d\d, but the "
                                         r"model's vocab_size is 1?\d\d \(config.json\)"):
        prepare_eval(bad, text, ["none"])


def test_a_tokenizer_far_smaller_than_the_model_warns(tmp_path, checkpoint):
    # Fewer tokens than vocab_size is normal (padded embeddings); under half is suspicious.
    folder, text, model = checkpoint
    bad = tmp_path / "ckpt"
    _copy_checkpoint(folder, bad)
    size = _write_tokenizer(bad, text.read_text(), vocab_size=30)
    assert size < model.config.vocab_size // 2
    with pytest.warns(UserWarning, match=rf"tokenizer.json' has {size} tokens for a model with "
                                         rf"vocab_size {model.config.vocab_size}"):
        prepare_eval(bad, text, ["none"], max_tokens=8)


def test_broken_weights_are_named(tmp_path, checkpoint):
    folder, text, _ = checkpoint
    bad = tmp_path / "ckpt"
    _copy_checkpoint(folder, bad)
    (bad / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(ValueError, match="model.safetensors"):
        prepare_eval(bad, text, ["none"])


def test_command_line(tmp_path, capsys, checkpoints):
    folder, text, _ = checkpoints("gpt2")
    out = tmp_path / "out"
    argv = ["eval", "--checkpoint", str(folder), "--text", str(text), "--schemes",
            "none,w8a8_per_tensor", "--window", "16", "--max-tokens", "50", "--no-progress",
            "--accelerator", "ws16", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| scheme | perplexity |" in printed and "| w8a8_per_tensor |" in printed
    assert "4 non-overlapping window(s) of up to 16 tokens, 46 predictions" in printed
    doc = json.loads((out / "eval.json").read_text())
    assert [r["scheme"] for r in doc["rows"]] == ["none", "w8a8_per_tensor"]
    assert (out / "eval.csv").read_text().startswith("scheme,perplexity,")
    # Bad input: one line, exit code 2, no traceback.
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--checkpoint", str(tmp_path), "--text", str(text), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "tenet-byoc eval: error:" in err and "config.json" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--checkpoint", str(folder), "--text", str(tmp_path), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"text file '{tmp_path}' is a directory" in err and "Traceback" not in err
