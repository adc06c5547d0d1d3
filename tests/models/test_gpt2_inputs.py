"""Bad inputs to GPT-2: configs, token ids, context length and checkpoint folders."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from gpt2_testing import TINY_HF_CONFIG, make_hf_weights, write_hf_checkpoint

from tenet_byoc.models.gpt2 import (
    PRESETS,
    GPT2Config,
    GPT2Runner,
    KVCache,
    check_kv_cache,
    check_token_ids,
    load_hf_checkpoint,
    random_params,
)

TINY = GPT2Config.preset("tiny")


@pytest.mark.parametrize(
    ("name", "layers", "width", "heads"),
    [
        ("small", 12, 768, 12),
        ("medium", 24, 1024, 16),
        ("large", 36, 1280, 20),
        ("xl", 48, 1600, 25),
    ],
)
def test_presets_have_gpt2_shapes(name, layers, width, heads):
    c = GPT2Config.preset(name)
    assert (c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_positions) == (
        layers,
        width,
        heads,
        50257,
        1024,
    )
    assert c.inner_dim == 4 * width and c.head_dim == 64


def test_tiny_preset():
    assert (TINY.n_layer, TINY.n_embd, TINY.n_head, TINY.vocab_size, TINY.n_positions) == (
        2,
        64,
        4,
        97,
        32,
    )
    assert set(PRESETS) == {"tiny", "small", "medium", "large", "xl"}


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_layer", 0), ("n_embd", -64), ("n_head", 2.5), ("vocab_size", True), ("n_positions", "1")],
)
def test_config_rejects_bad_field(field, value):
    kwargs = {"n_layer": 2, "n_embd": 64, "n_head": 4, field: value}
    with pytest.raises(ValueError, match=rf"{field}={value!r}"):
        GPT2Config(**kwargs)


def test_config_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="n_head=5"):
        GPT2Config(n_layer=1, n_embd=64, n_head=5)


def test_config_rejects_bad_epsilon_and_preset():
    with pytest.raises(ValueError, match="layer_norm_epsilon=0"):
        GPT2Config(n_layer=1, n_embd=64, n_head=4, layer_norm_epsilon=0)
    with pytest.raises(ValueError, match="'huge'"):
        GPT2Config.preset("huge")


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        TINY.n_layer = 3  # type: ignore[misc]


def test_config_from_hf_refuses_other_activation_and_scaling():
    with pytest.raises(ValueError, match="'relu'"):
        GPT2Config.from_hf_dict({**TINY_HF_CONFIG, "activation_function": "relu"})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True"):
        GPT2Config.from_hf_dict({**TINY_HF_CONFIG, "scale_attn_by_inverse_layer_idx": True})
    real_small = {**TINY_HF_CONFIG, "n_ctx": 1024, "scale_attn_weights": True, "n_inner": None}
    assert GPT2Config.from_hf_dict(real_small, name="x").n_positions == 32


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([1, 97], r"token id 97 at index 1 is out of range \[0, 97\)"),
        ([-1], r"token id -1 at index 0"),
        (list(range(33)), r"33 tokens .* n_positions=32"),
        ([], "non-empty"),
        ([1.5], "integers"),
    ],
)
def test_bad_token_ids(ids, message):
    with pytest.raises(ValueError, match=message):
        check_token_ids(TINY, ids)


def test_context_counts_the_cache():
    assert check_token_ids(TINY, [1], past_len=31).shape == (1, 1)
    with pytest.raises(ValueError, match="32 cached"):
        check_token_ids(TINY, [1], past_len=32)


def test_runner_checks_before_the_vm(tiny_runner):
    # R.take(mode="fast") does not bound-check: an id reaching the VM could crash it.
    with pytest.raises(ValueError, match="token id 100"):
        tiny_runner.prefill([1, 100])
    with pytest.raises(ValueError, match="33 tokens"):
        tiny_runner.prefill([1] * 33)
    _, cache = tiny_runner.prefill([1] * 32)
    with pytest.raises(ValueError, match="33 tokens"):
        tiny_runner.decode(1, cache)
    with pytest.raises(ValueError, match="token id -3"):
        tiny_runner.decode(-3, KVCache(cache.tensors, 4))
    with pytest.raises(ValueError, match="33 tokens"):
        tiny_runner.generate([1] * 30, 4)
    assert len(tiny_runner.generate([1] * 30, 3)) == 3
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        tiny_runner.generate([1], -1)


def test_runner_rejects_wrong_params():
    params = random_params(TINY)
    del params["h.1.mlp.c_fc.bias"]
    with pytest.raises(KeyError, match=r"'h.1.mlp.c_fc.bias' \(expected shape \[256\]\)"):
        GPT2Runner(TINY, params, build=lambda mod: pytest.fail("built"))
    params = random_params(TINY)
    params["wpe.weight"] = params["wpe.weight"][:16]
    with pytest.raises(ValueError, match=r"'wpe.weight' has shape \[16, 64\], expected \[32, 64\]"):
        GPT2Runner(TINY, params, build=lambda mod: pytest.fail("built"))


def test_checkpoint_missing_tensor(tmp_path):
    weights = make_hf_weights(TINY_HF_CONFIG)
    del weights["h.1.attn.c_proj.weight"]
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, weights)
    with pytest.raises(KeyError, match=r"lacks tensor\(s\) 'transformer.h.1.attn.c_proj.weight' "
                                       r"\(expected shape \[64, 64\]\)"):
        load_hf_checkpoint(folder)


def test_checkpoint_misshaped_tensor(tmp_path):
    weights = make_hf_weights(TINY_HF_CONFIG)
    # Stored as [out, in] instead of HF's Conv1D [in, out].
    weights["h.0.mlp.c_fc.weight"] = np.ascontiguousarray(weights["h.0.mlp.c_fc.weight"].T)
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, weights)
    with pytest.raises(
        ValueError,
        match=r"'transformer.h.0.mlp.c_fc.weight' in .* has shape \[256, 64\], expected \[64, 256\]",
    ):
        load_hf_checkpoint(folder)


def test_checkpoint_without_prefix_and_with_explicit_config(tmp_path):
    weights = make_hf_weights(TINY_HF_CONFIG)
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, weights, prefix="")
    (folder / "config.json").unlink()
    config, params = load_hf_checkpoint(folder, config=TINY)
    assert config is TINY
    np.testing.assert_array_equal(params["h.1.mlp.c_fc.weight"], weights["h.1.mlp.c_fc.weight"].T)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_checkpoint(folder)


def test_checkpoint_config_disagrees_with_tensors(tmp_path):
    weights = make_hf_weights(TINY_HF_CONFIG)
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, weights)
    (folder / "config.json").write_text(json.dumps({**TINY_HF_CONFIG, "vocab_size": 100}))
    with pytest.raises(
        ValueError, match=r"'transformer.wte.weight' in .* has shape \[97, 64\], expected \[100, 64\]"
    ):
        load_hf_checkpoint(folder)


def test_checkpoint_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_checkpoint(tmp_path / "nowhere")
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, make_hf_weights(TINY_HF_CONFIG))
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf_checkpoint(folder)
    shutil.rmtree(folder)


def _checkpoint(tmp_path):
    return write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, make_hf_weights(TINY_HF_CONFIG))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{oops", (r"config.json' is not valid JSON: Expecting property name enclosed in "
                   r"double quotes at line 1 column 2")),
        ("[1, 2]", r"config.json' must hold a JSON object, got list"),
        ('{"n_embd": 64}', r"config.json': config.json lacks 'n_layer', 'n_head'"),
        ('{"n_layer": 1000000000, "n_embd": 64, "n_head": 4}',
         r"config.json'.*n_layer=1000000000 is above the limit 1024"),
        ('{"n_layer": 2, "n_embd": 64, "n_head": 3}', r"config.json'.*n_head=3 must divide"),
    ],
    ids=["json", "list", "missing", "huge", "invalid"],
)
def test_checkpoint_bad_config_json_names_the_file(tmp_path, text, message):
    folder = _checkpoint(tmp_path)
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError, match=message):
        load_hf_checkpoint(folder)


def test_checkpoint_block_count_is_checked_before_building(tmp_path, monkeypatch):
    # A config with more blocks than the file fails on the file's header: the model (which
    # used to be built first, hanging on n_layer=1000) is never made.
    from tenet_byoc.models import gpt2

    folder = _checkpoint(tmp_path)
    (folder / "config.json").write_text(json.dumps({**TINY_HF_CONFIG, "n_layer": 1000}))
    monkeypatch.setattr(gpt2, "param_shapes", lambda config: pytest.fail("model built"))
    with pytest.raises(ValueError, match=r"model.safetensors' holds 2 layers \(h.0 - h.1\); "
                                         r"the config has n_layer=1000"):
        load_hf_checkpoint(folder)


def test_checkpoint_truncated_safetensors_names_the_file(tmp_path):
    folder = _checkpoint(tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"model.safetensors' is not a safetensors file or is "
                                         r"truncated: its header claims \d+ bytes, the file has 1000"):
        load_hf_checkpoint(folder)


def test_decode_checks_the_cache_against_its_tensors(tiny_runner):
    _, cache = tiny_runner.prefill([1, 2, 3])
    with pytest.raises(ValueError, match=r"KVCache tensor 0 \(K of block 0\) is "
                                         r"float32\[1, 4, 3, 16\]; expected float32\[1, 4, 1, 16\] "
                                         r"for length=1"):
        tiny_runner.decode(5, KVCache(cache.tensors, length=1))
    with pytest.raises(ValueError, match="KVCache has 3 tensors; expected 2 \\* n_layer = 4"):
        tiny_runner.decode(5, KVCache(cache.tensors[:3], length=3))
    with pytest.raises(ValueError, match=r"KVCache.length=32 leaves no position"):
        check_kv_cache(TINY, KVCache(cache.tensors, length=32))
    with pytest.raises(ValueError, match=r"KVCache.length=0 must be a positive integer"):
        check_kv_cache(TINY, KVCache(cache.tensors, length=0))
    with pytest.raises(TypeError, match="KVCache tensor 1 is a str, not a tensor"):
        check_kv_cache(TINY, KVCache((cache.tensors[0], "x", *cache.tensors[2:]), length=3))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        tiny_runner.decode(5, list(cache.tensors))


def test_vm_called_directly_with_an_id_past_the_vocabulary_does_not_crash(tiny_runner, tiny_loaded):
    # The embedding clips: id 10**6 reads wte's last row, exactly as id vocab_size - 1 does.
    import tvm

    config, _ = tiny_loaded
    run = tiny_runner.vm["prefill"]
    outs = [run(tvm.runtime.tensor(np.array([[1, i]], np.int32)), *tiny_runner._weights)[0].numpy()
            for i in (10**6, config.vocab_size - 1)]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_building_gpt2_prints_no_fast_mode_take_warning():
    # TVM warns "Fast mode segfaults when there are out-of-bounds indices" for every take
    # in fast mode; the embedding uses "clip" (ids are checked by the runner anyway).
    import subprocess
    import sys

    script = (
        "from tenet_byoc.models.gpt2 import GPT2Config, build_with_tvm, export_gpt2\n"
        "build_with_tvm(export_gpt2(GPT2Config.preset('tiny')))\n"
        "print('built')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=True)
    assert "built" in proc.stdout
    assert "Fast mode" not in proc.stderr + proc.stdout
