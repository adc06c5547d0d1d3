"""GPT-2 tiny, loaded from an HF-layout checkpoint, against an independent numpy GPT-2."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gpt2_testing import TINY_HF_CONFIG, numpy_gpt2_logits, numpy_greedy

from tenet_byoc.models.gpt2 import (
    GPT2Config,
    GPT2Runner,
    param_shapes,
    random_params,
)

ATOL = 1e-4
PROMPT = [5, 17, 0, 96, 42, 42, 8, 63, 1]


@pytest.fixture(scope="module")
def loaded(tiny_loaded):
    return tiny_loaded


@pytest.fixture(scope="module")
def runner(tiny_runner):
    return tiny_runner


def test_build_function_is_injected(runner, built_modules):
    assert len(built_modules) == 1 and built_modules[0] is runner.mod
    assert {gv.name_hint for gv in runner.mod.get_global_vars()} >= {"prefill", "decode"}


def test_functions_take_weights_in_param_shapes_order(runner):
    names = list(param_shapes(runner.config))
    prefill, decode = runner.mod["prefill"], runner.mod["decode"]
    assert [p.name for p in prefill.params] == ["input_ids", *names]
    assert [p.name for p in decode.params] == ["input_id", "past", *names]
    assert int(prefill.attrs["num_input"]) == 1 and int(decode.attrs["num_input"]) == 2


def test_bound_weights_give_the_same_logits(loaded, runner):
    config, params = loaded
    bound = GPT2Runner(config, params, bind_params=True)
    assert [p.name for p in bound.mod["prefill"].params] == ["input_ids"]
    assert [p.name for p in bound.mod["decode"].params] == ["input_id", "past"]
    logits, cache = bound.prefill(PROMPT[:-1])
    np.testing.assert_allclose(logits, runner.prefill(PROMPT[:-1])[0], rtol=0, atol=1e-6)
    step, _ = bound.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(step, runner.prefill(PROMPT)[0][-1], rtol=0, atol=ATOL)


def test_loader_reads_config_and_layout(loaded, tiny_hf_weights):
    config, params = loaded
    assert config == GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=97, n_positions=32, name=config.name
    )
    assert list(params) == list(param_shapes(config))
    # Conv1D weights come back transposed to [out, in]; the rest unchanged.
    np.testing.assert_array_equal(
        params["h.1.attn.c_attn.weight"], tiny_hf_weights["h.1.attn.c_attn.weight"].T
    )
    np.testing.assert_array_equal(
        params["h.0.mlp.c_proj.weight"], tiny_hf_weights["h.0.mlp.c_proj.weight"].T
    )
    np.testing.assert_array_equal(params["wte.weight"], tiny_hf_weights["wte.weight"])
    assert all(p.dtype == np.float32 and p.flags.c_contiguous for p in params.values())


def test_prefill_matches_numpy(runner, tiny_hf_weights):
    logits, cache = runner.prefill(PROMPT)
    expected = numpy_gpt2_logits(tiny_hf_weights, TINY_HF_CONFIG, PROMPT)
    assert logits.shape == (len(PROMPT), 97)
    assert np.abs(expected).max() > 1.0  # the comparison is not between near-zeros
    np.testing.assert_allclose(logits, expected, rtol=0, atol=ATOL)
    assert cache.length == len(PROMPT)
    assert [t.shape for t in cache.tensors] == [(1, 4, len(PROMPT), 16)] * 4


def test_single_token_prefill(runner, tiny_hf_weights):
    logits, _ = runner.prefill([7])
    expected = numpy_gpt2_logits(tiny_hf_weights, TINY_HF_CONFIG, [7])
    np.testing.assert_allclose(logits, expected, rtol=0, atol=ATOL)


def test_decode_equals_prefill_last_position(runner):
    full, _ = runner.prefill(PROMPT)
    _, cache = runner.prefill(PROMPT[:-1])
    step, new_cache = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(step, full[-1], rtol=0, atol=ATOL)
    assert new_cache.length == len(PROMPT)
    assert [t.shape for t in new_cache.tensors] == [(1, 4, len(PROMPT), 16)] * 4


def test_decode_cache_equals_prefill_cache(runner):
    _, full_cache = runner.prefill(PROMPT)
    _, cache = runner.prefill(PROMPT[:3])
    for token in PROMPT[3:]:
        _, cache = runner.decode(token, cache)
    for a, b in zip(cache.numpy(), full_cache.numpy(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=ATOL)


def test_decode_steps_match_numpy(runner, tiny_hf_weights):
    _, cache = runner.prefill(PROMPT[:2])
    expected = numpy_gpt2_logits(tiny_hf_weights, TINY_HF_CONFIG, PROMPT)
    for pos in range(2, len(PROMPT)):
        step, cache = runner.decode(PROMPT[pos], cache)
        np.testing.assert_allclose(step, expected[pos], rtol=0, atol=ATOL)


def test_decode_up_to_the_context_end(runner, tiny_hf_weights):
    ids = [(3 * i + 1) % 97 for i in range(32)]
    _, cache = runner.prefill(ids[:-1])
    step, cache = runner.decode(ids[-1], cache)
    expected = numpy_gpt2_logits(tiny_hf_weights, TINY_HF_CONFIG, ids)[-1]
    np.testing.assert_allclose(step, expected, rtol=0, atol=ATOL)
    assert cache.length == 32


def test_greedy_generation_matches_numpy(runner, tiny_hf_weights):
    got = runner.generate(PROMPT[:4], 6)
    assert got == numpy_greedy(tiny_hf_weights, TINY_HF_CONFIG, PROMPT[:4], 6)
    assert runner.generate(PROMPT[:4], 0) == []


def test_random_params_shapes_and_init():
    config = GPT2Config.preset("tiny")
    a, b = random_params(config, seed=3), random_params(config, seed=3)
    assert list(a) == list(param_shapes(config))
    for name, value in a.items():
        assert value.shape == param_shapes(config)[name] and value.dtype == np.float32
        np.testing.assert_array_equal(value, b[name])
    assert 0.015 < a["wte.weight"].std() < 0.025
    assert np.all(a["h.0.attn.c_attn.bias"] == 0) and np.all(a["ln_f.weight"] == 1)
    assert not np.array_equal(a["wte.weight"], random_params(config, seed=4)["wte.weight"])


_HAVE_HF = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


@pytest.mark.skipif(not _HAVE_HF, reason="torch and transformers are not installed")
def test_matches_transformers_gpt2(runner, tiny_checkpoint):
    import torch
    import transformers

    hf_config = transformers.GPT2Config(**TINY_HF_CONFIG)
    model = transformers.GPT2LMHeadModel(hf_config)
    model.eval()
    from safetensors.torch import load_file

    state = load_file(str(tiny_checkpoint / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Only the causal-mask buffers may differ (not persistent in recent versions).
    buffers = ("attn.bias", "attn.masked_bias")
    assert not [k for k in [*missing, *unexpected] if not k.endswith(buffers)]
    with torch.no_grad():
        expected = model(torch.tensor([PROMPT])).logits[0].numpy()
    logits, _ = runner.prefill(PROMPT)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=ATOL)
    _, cache = runner.prefill(PROMPT[:-1])
    step, _ = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(step, expected[-1], rtol=0, atol=ATOL)
