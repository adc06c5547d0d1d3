"""A tiny Mixtral made by transformers run quantized through tenet (each expert its own bound
function, rewritten by ``tenet_byoc.quantize``).

Logits must equal transformers' own model with every linear layer computed as the scheme's
definition (numpy fake quantization, ``moe_testing.fake_quantized_linears``), the experts
chosen must be that model's, and ``tenet_byoc.estimate`` of the scheme given the run's
routing must charge what the run charged, entry for entry (the host's routing aside).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tenet_byoc
from tenet_byoc.models import from_pretrained
from moe_testing import PROMPT, assert_estimate_equals_run, fake_quantized_linears, make_moe

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)


@pytest.mark.parametrize("scheme", ["w8a8_per_channel_per_token",
                                    pytest.param("w4a16_group32", marks=pytest.mark.slow)])
def test_quantized_mixtral_equals_fake_quantized_transformers(scheme, tmp_path):
    import torch

    model = make_moe("mixtral")
    # the experts' loop, through F.linear (grouped_mm would bypass the fake quantization)
    model.config._experts_implementation = "eager"
    model.save_pretrained(tmp_path)
    runner = from_pretrained(tmp_path, bind_params=True, build=lambda mod: tenet_byoc.build(
        tenet_byoc.quantize(mod, scheme)))
    tenet_byoc.set_phase(runner.vm, "prefill")
    logits, cache = runner.prefill(PROMPT[:-1])
    tenet_byoc.set_phase(runner.vm, "decode")
    step, _ = runner.decode(PROMPT[-1], cache)
    got = np.concatenate([logits, step[None]])

    with torch.no_grad():
        exact = model(torch.tensor([PROMPT])).logits[0].numpy()
        with fake_quantized_linears(scheme):
            out = model(torch.tensor([PROMPT]), output_router_logits=True)
    want = out.logits[0].numpy()
    # the scheme moves the logits far more than the tolerance: quantization is not skipped
    assert np.abs(want - exact).max() > 20 * 1e-3
    # TVM's float32 norms and torch's differ in the last bit: an activation just at a
    # rounding boundary may take the next int8 code (w8a8 differs by 5.6e-4, w4a16 by <1e-6)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)
    # every token's experts are the reference's (its router logits, fake-quantized too)
    for layer, router_logits in enumerate(out.router_logits):
        chosen = [np.sort(routes[1][layer].experts, axis=1) for routes in runner.routing]
        want_top = np.sort(torch.topk(router_logits, 2, dim=-1).indices.numpy(), axis=1)
        np.testing.assert_array_equal(np.concatenate(chosen), want_top)

    real = tenet_byoc.ledger(runner.vm)
    assert {e.scheme for e in real.entries if e.unit == "array"} == {scheme, "none"}
    assert_estimate_equals_run(real, runner.config, runner.tokens_per_expert(),
                               len(PROMPT) - 1, 1, scheme)


@pytest.mark.parametrize("scheme", ["none+kv8", pytest.param("per_token+kv4/head",
                                                          marks=pytest.mark.slow)])
def test_a_quantized_kv_cache_of_mixtral_is_charged_as_the_plan_charges_it(scheme, tmp_path):
    # Each layer's new keys and values quantized (one quantize entry each, one row per
    # scale) and written at the cache's width, in the run's ledger as in the estimate's.
    make_moe("mixtral").save_pretrained(tmp_path)
    runner = from_pretrained(tmp_path, bind_params=True, build=lambda mod: tenet_byoc.build(
        tenet_byoc.quantize(mod, scheme)))
    tenet_byoc.set_phase(runner.vm, "prefill")
    _, cache = runner.prefill(PROMPT[:-1])
    tenet_byoc.set_phase(runner.vm, "decode")
    runner.decode(PROMPT[-1], cache)
    real = tenet_byoc.ledger(runner.vm)
    bits = int(scheme.split("+kv")[1][0])
    layers = runner.config.num_hidden_layers
    writes = [e for e in real.entries if e.op == "kv_write"]
    assert len(writes) == 2 * 2 * layers and {e.bits_c for e in writes} == {bits}
    assert len([e for e in real.entries if e.op == "quantize" and e.bits_c == bits]) == 4 * layers
    assert_estimate_equals_run(real, runner.config, runner.tokens_per_expert(),
                               len(PROMPT) - 1, 1, scheme)
