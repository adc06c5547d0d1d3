"""Llama configs, checkpoints and runner inputs that must be refused, each with a clear message."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from llama_testing import (
    TINY_LLAMA,
    TINY_QWEN2,
    make_llama_weights,
    numpy_llama_logits,
    write_checkpoint,
)
from safetensors.numpy import load_file, save_file

from tenet_byoc.models import from_pretrained
from tenet_byoc.models.checkpoint import CheckpointError
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.llama import LlamaConfig, LlamaRunner, load_checkpoint, random_params
from tenet_byoc.models.runner import KVCache


def _cfg(**changes) -> dict:
    out = {k: v for k, v in TINY_LLAMA.items() if k not in changes or changes[k] is not None}
    out.update({k: v for k, v in changes.items() if v is not None})
    return out


# -- config.json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values,theta",
    [
        (_cfg(), 1000.0),  # transformers 5: rope_parameters
        (_cfg(rope_parameters=None, rope_theta=5e5), 5e5),  # older: top-level rope_theta
        (_cfg(rope_parameters=None, rope_scaling=None), 10000.0),  # neither: the default
        (_cfg(rope_parameters=None, rope_scaling={"type": "default"}, rope_theta=3.0), 3.0),
    ],
)
def test_rope_theta_from_either_layout(values, theta):
    assert LlamaConfig.from_hf_dict(values).rope_theta == theta


@pytest.mark.parametrize(
    "values,message",
    [
        (_cfg(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}),
         r"rope_parameters \(rope_type 'llama3'\) lacks \['low_freq_factor', "
         r"'high_freq_factor', 'original_max_position_embeddings'\]"),
        (_cfg(rope_parameters=None, rope_scaling={"type": "linear"}),
         r"rope_scaling \(rope_type 'linear'\) lacks \['factor'\]"),
        (_cfg(rope_parameters={"rope_type": "longrope", "factor": 2.0}),
         r"rope_parameters.rope_type='longrope' is not supported.*known: \['default'"),
        (_cfg(rope_parameters={"rope_type": "linear", "factor": "2"}),
         r"rope_parameters.factor='2' must be a number"),
        (_cfg(rope_parameters={"rope_type": "linear", "factor": 0.5}),
         r"rope_parameters: RopeScaling.factor=0.5 must be >= 1"),
        (_cfg(rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                               "high_freq_factor": 1.0, "original_max_position_embeddings": 8}),
         r"high_freq_factor=1.0 must exceed low_freq_factor=4.0"),
        (_cfg(rope_parameters={"rope_type": "yarn", "factor": 4.0,
                               "original_max_position_embeddings": 8.5}),
         r"rope_parameters.original_max_position_embeddings=8.5 must be an integer"),
        (_cfg(rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5}),
         r"partial_rotary_factor=0.5"),
        (_cfg(partial_rotary_factor=0.25), r"config.json partial_rotary_factor=0.25"),
        (_cfg(hidden_act="gelu"), r"hidden_act='gelu'"),
        (_cfg(num_key_value_heads=3), r"num_key_value_heads=3 must divide num_attention_heads=4"),
        (_cfg(hidden_size=2**30), r"hidden_size=1073741824 must be in \[1, 16777216\]"),
        (_cfg(num_hidden_layers=0), r"num_hidden_layers=0"),
        (_cfg(model_type="mistral", sliding_window=1), r"sliding_window=1 must be >= 2"),
        (_cfg(intermediate_size=None), r"lacks \['intermediate_size'\]"),
        (_cfg(model_type="gpt_neox"), r"model_type='gpt_neox'"),
        ({**TINY_QWEN2, "use_sliding_window": True}, r"use_sliding_window=true"),
    ],
)
def test_unsupported_configs_name_the_field(values, message):
    with pytest.raises(ValueError, match=message):
        LlamaConfig.from_hf_dict(values)


def test_family_fields():
    qwen = LlamaConfig.from_hf_dict(TINY_QWEN2)
    assert (qwen.qkv_bias, qwen.o_bias, qwen.tie_word_embeddings) == (True, False, True)
    llama = LlamaConfig.from_hf_dict(_cfg(attention_bias=True, mlp_bias=True, head_dim=8))
    assert (llama.qkv_bias, llama.o_bias, llama.mlp_bias, llama.dim_per_head) == (
        True, True, True, 8)
    mistral = resolve_config("mistral-7b")
    assert (mistral.sliding_window, mistral.window, mistral.cache_length(5000)) == (
        4096, 4096, 4096)
    assert LlamaConfig.from_hf_dict(_cfg(model_type="mistral", sliding_window=32)).window is None
    assert resolve_config("llama-3-8b").group_size == 4


def test_resolve_config_from_file_folder_and_unknown_name(tmp_path):
    (tmp_path / "my.json").write_text(json.dumps(TINY_QWEN2))
    assert resolve_config(tmp_path / "my.json").vocab_size == 89
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, {})
    assert resolve_config(folder).name == "ckpt"
    with pytest.raises(ValueError, match="neither a built-in name.*llama-3-70b"):
        resolve_config("llama-9-1t")


# -- checkpoint files ------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    return write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, make_llama_weights(TINY_LLAMA))


def _refuse(folder, error, message):
    with pytest.raises(error, match=message):
        from_pretrained(folder, build=lambda mod: pytest.fail("built"))


def test_missing_folder_and_files(tmp_path, checkpoint):
    _refuse(tmp_path / "nowhere", FileNotFoundError, "nowhere.*does not exist")
    (checkpoint / "model.safetensors").unlink()
    _refuse(checkpoint, FileNotFoundError, "neither model.safetensors nor")
    (checkpoint / "config.json").unlink()
    _refuse(checkpoint, FileNotFoundError, r"config.json' not found")


@pytest.mark.parametrize(
    "text,message",
    [("{oops", "config.json' is not valid JSON"), ("[1, 2]", "must hold a JSON object"),
     (json.dumps({**TINY_LLAMA, "model_type": "bert"}), r"config.json': .*model_type='bert'"),
     (json.dumps({"model_type": "llama"}), r"config.json': .*lacks \['num_hidden_layers'")],
)
def test_bad_config_json(checkpoint, text, message):
    (checkpoint / "config.json").write_text(text)
    _refuse(checkpoint, (ValueError, TypeError), message)


def test_corrupt_and_truncated_weights_name_the_file(checkpoint):
    path = checkpoint / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    _refuse(checkpoint, CheckpointError, r"model.safetensors' is truncated: tensor")
    path.write_bytes(b"\xff" * 64)
    _refuse(checkpoint, CheckpointError, r"model.safetensors' is not a safetensors file")
    path.write_bytes(data[:8] + b"{" * (len(data) - 8))
    _refuse(checkpoint, CheckpointError, r"model.safetensors' has a corrupt safetensors header")


def test_missing_and_misshaped_tensors_are_named(tmp_path):
    weights = make_llama_weights(TINY_LLAMA)
    del weights["model.layers.1.mlp.up_proj.weight"]
    _refuse(write_checkpoint(tmp_path / "a", TINY_LLAMA, weights), KeyError,
            r"lacks tensor\(s\) 'model.layers.1.mlp.up_proj.weight' \(expected shape \[96, 64\]\); "
            "the config needs 21 tensors, the files hold 20")
    weights = make_llama_weights(TINY_LLAMA)
    weights["model.layers.0.self_attn.k_proj.weight"] = weights[
        "model.layers.0.self_attn.q_proj.weight"]
    _refuse(write_checkpoint(tmp_path / "b", TINY_LLAMA, weights), CheckpointError,
            r"'model.layers.0.self_attn.k_proj.weight' .* shape \[64, 64\], expected \[32, 64\]")


def test_sharded_index_naming_a_missing_shard(tmp_path):
    folder = write_checkpoint(tmp_path / "c", TINY_LLAMA, make_llama_weights(TINY_LLAMA), shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    _refuse(folder, FileNotFoundError, r"shard .*model-00002-of-00002.safetensors' named in")
    (folder / "model.safetensors.index.json").write_text("{}")
    _refuse(folder, CheckpointError, "is not a safetensors index")


def test_absurd_sizes_are_checked_against_the_file_first(checkpoint):
    (checkpoint / "config.json").write_text(json.dumps(_cfg(num_hidden_layers=1000)))
    start = time.perf_counter()
    _refuse(checkpoint, CheckpointError, r"model.safetensors' holds 2 layers \(layers.0 - "
            r"layers.1\); the config has num_hidden_layers=1000")
    (checkpoint / "config.json").write_text(json.dumps(_cfg(vocab_size=1_000_000)))
    _refuse(checkpoint, CheckpointError,
            r"'model.embed_tokens.weight' .* shape \[101, 64\], expected \[1000000, 64\]")
    assert time.perf_counter() - start < 2.0  # no per-layer loop, nothing built


# -- the runner ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner():
    """TVM's own build (no offload) of random weights from ``random_params``."""
    config = LlamaConfig.from_hf_dict(TINY_LLAMA)
    return LlamaRunner(config, random_params(config, seed=2, std=0.5))


def test_tvm_build_of_random_params_matches_numpy(runner):
    params = random_params(runner.config, seed=2, std=0.5)
    hf = {("" if k == "lm_head.weight" else "model.") + k: v for k, v in params.items()}
    expected = numpy_llama_logits(hf, TINY_LLAMA, [3, 1, 4, 1, 5])
    assert np.abs(expected).max() > 1.0
    np.testing.assert_allclose(runner.prefill([3, 1, 4, 1, 5])[0], expected, rtol=0, atol=1e-4)


def test_runner_checks_before_the_vm(runner):
    with pytest.raises(ValueError, match=r"token id 101 at index 1 is out of range \[0, 101\)"):
        runner.prefill([1, 101])
    with pytest.raises(ValueError, match="33 tokens .* max_position_embeddings=32"):
        runner.prefill([1] * 33)
    with pytest.raises(ValueError, match="integers"):
        runner.prefill([1.5])
    _, cache = runner.prefill([1, 2, 3])
    with pytest.raises(ValueError, match=r"KVCache tensor 0 \(K of block 0\) is float32\[1, 2, 3, "
                                         r"16\]; expected float32\[1, 2, 5, 16\] for length=5"):
        runner.decode(4, KVCache(cache.tensors, 5))
    with pytest.raises(ValueError, match=r"KVCache has 3 tensors; expected 2 \* n_layer = 4"):
        runner.decode(4, KVCache(cache.tensors[:3], 3))
    with pytest.raises(ValueError, match="KVCache.length=0 must be a positive integer"):
        runner.decode(4, KVCache(cache.tensors, 0))
    with pytest.raises(TypeError, match="KVCache tensor 1 is a str, not a tensor"):
        runner.decode(4, KVCache((cache.tensors[0], "x", *cache.tensors[2:]), 3))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        runner.decode(4, cache.tensors)
    with pytest.raises(ValueError, match="token id -1"):
        runner.decode(-1, cache)
    step, _ = runner.decode(4, cache)
    assert step.shape == (101,) and np.isfinite(step).all()


def test_runner_rejects_wrong_params():
    config = LlamaConfig.from_hf_dict(TINY_QWEN2)
    params = random_params(config)
    del params["layers.1.self_attn.v_proj.bias"]
    with pytest.raises(KeyError, match=r"'layers.1.self_attn.v_proj.bias' \(expected shape \[8\]"):
        LlamaRunner(config, params, build=lambda mod: pytest.fail("built"))


def test_vm_called_directly_with_a_bad_id_does_not_crash(runner):
    import tvm

    ids = tvm.runtime.tensor(np.array([[1, 500]], np.int32))
    weights = runner._weights
    logits, _ = runner.vm["prefill"](ids, *weights)
    assert np.isfinite(logits.numpy()).all()  # clipped to the last row, not a segfault


def test_integer_tensors_are_ignored_unless_needed(tmp_path):
    weights = make_llama_weights(TINY_LLAMA)
    folder = write_checkpoint(tmp_path / "ok", TINY_LLAMA, weights)
    extra = {"model.layers.0.self_attn.rotary_emb.steps": np.arange(4, dtype=np.int64)}
    save_file({**load_file(folder / "model.safetensors"), **extra}, folder / "model.safetensors")
    _, params = load_checkpoint(folder)
    assert len(params) == 21
    weights["model.norm.weight"] = weights["model.norm.weight"].astype(np.int32)
    folder = write_checkpoint(tmp_path / "int", TINY_LLAMA, {})
    save_file(weights, folder / "model.safetensors")
    _refuse(folder, CheckpointError, r"'model.norm.weight' .* has dtype I32; readable")
