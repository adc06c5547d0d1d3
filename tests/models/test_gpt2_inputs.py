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
    with pytest.raises(KeyError, match=r"'h.1.attn.c_proj.weight'.*expected shape \[64, 64\]"):
        load_hf_checkpoint(folder)


def test_checkpoint_misshaped_tensor(tmp_path):
    weights = make_hf_weights(TINY_HF_CONFIG)
    # Stored as [out, in] instead of HF's Conv1D [in, out].
    weights["h.0.mlp.c_fc.weight"] = np.ascontiguousarray(weights["h.0.mlp.c_fc.weight"].T)
    folder = write_hf_checkpoint(tmp_path / "ckpt", TINY_HF_CONFIG, weights)
    with pytest.raises(
        ValueError, match=r"'h.0.mlp.c_fc.weight' has shape \[256, 64\], expected \[64, 256\]"
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
        ValueError, match=r"'wte.weight' has shape \[97, 64\], expected \[100, 64\]"
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
