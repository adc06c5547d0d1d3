"""``tenet-byoc dse``: the files equal ``explore``'s points, a rerun resumes, accuracy joins
from the eval path, and bad input is one line."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from tenet_byoc import dse
from tenet_byoc_cli import main

SPACE = "rows: [8, 16]\ncols: [16]\ndataflows: [os, ws]\npe_formats: [[int8, fp16, fp32]]\n" \
        "buffer_bytes: [262144, 1048576]\ndram_gbps: [32]\nnode_nm: 28\n"
ARGS = ["--model", "gpt2", "--schemes", "none,per_token", "--prompt-len", "16",
        "--decode-steps", "2", "--executor", "serial", "--no-progress"]


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_dse_writes_points_fronts_and_plots_and_resumes(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    out = tmp_path / "out"
    assert main(["dse", *ARGS, "--space", str(space), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 design points (of 8" in printed
    ref = dse.explore("gpt2", ["none", "per_token"], space, prompt_len=16, decode_steps=2,
                      executor="serial", objective="tpot_ms")
    rows = list(csv.DictReader((out / "dse.csv").open()))
    assert [(r["key"], r["scheme"]) for r in rows] == [(r.key, r.scheme) for r in ref]
    for got, want in zip(rows, ref, strict=True):
        assert float(got["tpot_ms"]) == pytest.approx(want.tpot_ms, rel=1e-12)
        assert float(got["area_mm2"]) == pytest.approx(want.area_mm2, rel=1e-12)
        assert got["fronts"] == ";".join(want.fronts)
    assert (out / "dse_fronts.png").read_bytes()[:4] == b"\x89PNG"
    lines = (out / "points.jsonl").read_text().splitlines()
    # one row per (point, scheme) below the run's settings line
    assert [json.loads(line).keys() == {"run_settings"} for line in lines] == [True] + [False] * 16
    # the same command again reads every point back and appends nothing
    assert main(["dse", *ARGS, "--space", str(space), "--out", str(out)]) == 0
    assert (out / "points.jsonl").read_text().splitlines() == lines
    # another run into the same folder is refused rather than mixed in
    assert exit_code(["dse", *ARGS, "--batch", "2", "--space", str(space), "--out",
                      str(out)]) == 2
    assert "holds a different dse run (batch differ)" in capsys.readouterr().err


@pytest.mark.parametrize(("space", "extra", "message"), [
    ("rows: [8, 0]\n", [], "rows: value 0 must be a positive integer"),
    ("pe_formats: [[int8, fp9]]\n", [], "unknown PE format 'fp9'"),
    ("rows: [8]\n", ["--objective", "tpot"], "--objective 'tpot'"),
    ("rows: [8]\n", ["--checkpoint", "x"], "--checkpoint and --text go together"),
    ("rows: [8]\n", ["--prompt-len", "5000"], "prompt_len=5000 is longer"),
])
def test_bad_input_is_one_line(tmp_path, capsys, space, extra, message):
    path = tmp_path / "space.yaml"
    path.write_text(space)
    assert exit_code(["dse", *ARGS, "--space", str(path), "--out", str(tmp_path / "o"),
                      *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def _tiny_checkpoint(folder, text: str):
    """A tiny GPT-2 in Hugging Face's layout with a BPE tokenizer trained on ``text``."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from tenet_byoc.models.gpt2 import GPT2Config, random_params

    cfg = GPT2Config.preset("tiny")
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    folder.mkdir()
    save_file({f"transformer.{k}": np.ascontiguousarray(v.T if k.endswith(conv1d) else v)
               for k, v in random_params(cfg, seed=3).items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head,
        "vocab_size": cfg.vocab_size, "n_positions": cfg.n_positions}))
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=min(200, cfg.vocab_size),
                                                         special_tokens=["[UNK]"]))
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_accuracy_joins_each_scheme_from_the_eval_path(tmp_path, capsys):
    from tenet_byoc.experiments.evaluate import evaluate

    words = ["the", "array", "holds", "a", "buffer", "of", "weights", "and", "the", "model", "reads", "them", "each", "step"]
    rng = np.random.default_rng(0)
    text = " ".join(words[int(i)] for i in rng.integers(len(words), size=120)) + "\n"
    (tmp_path / "text.txt").write_text(text)
    ckpt = _tiny_checkpoint(tmp_path / "tiny", text)
    space = tmp_path / "space.yaml"
    space.write_text("rows: [8, 16]\ncols: [16]\n")
    argv = ["dse", *ARGS, "--space", str(space), "--out", str(tmp_path / "out"),
            "--checkpoint", str(ckpt), "--text", str(tmp_path / "text.txt"), "--window", "16",
            "--max-tokens", "48", "--other-model-accuracy"]  # a tiny GPT-2 beside gpt2's shapes
    assert main(argv) == 0
    assert "perplexity" in capsys.readouterr().out
    ref = {r.scheme: r for r in evaluate(ckpt, tmp_path / "text.txt", ["none", "per_token"],
                                         window=16, max_tokens=48, progress=False).rows}
    rows = list(csv.DictReader((tmp_path / "out" / "dse.csv").open()))
    assert len(rows) == 4
    for r in rows:
        assert float(r["perplexity"]) == pytest.approx(ref[r["scheme"]].perplexity, rel=1e-12)
        assert float(r["top1_agreement"]) == ref[r["scheme"]].top1_agreement
    assert not math.isnan(float(rows[0]["perplexity"]))
    assert any("accuracy" in r["fronts"] for r in rows)
