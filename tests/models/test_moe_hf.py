"""Tiny Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3 and gpt-oss made and saved by transformers run through tenet.

Prefill and decode logits must equal transformers' within 1e-4, each layer's chosen experts
those of transformers' router, each expert's GEMMs must be charged with exactly the rows
(tokens) routed to it, the ledger's GEMMs must be those ``moe_matmuls`` lists from the
config and the run's routing, and ``tenet_byoc.estimate`` given the run's routing must
charge what the run charged, entry for entry (the host's routing work aside).
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.moe import moe_matmuls
from tenet_byoc.models.moe_model import MoERunner
from moe_testing import FAMILIES, PROMPT, TINY, assert_estimate_equals_run, make_moe

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)

ATOL = 1e-4


@pytest.fixture(scope="module", params=["mixtral",
                                        pytest.param("qwen2_moe", marks=pytest.mark.slow),
                                        pytest.param("qwen3_moe", marks=pytest.mark.slow),
                                        pytest.param("deepseek_v3", marks=pytest.mark.slow),
                                        pytest.param("gpt_oss", marks=pytest.mark.slow)])
def moe(request, tmp_path_factory):
    """``(family, transformers' model, tenet's runner of its saved checkpoint)``."""
    model = make_moe(request.param)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return request.param, model, from_pretrained(folder, build=tenet_byoc.build)


def test_logits_routing_and_expert_rows_match_transformers(moe):
    import torch

    family, model, runner = moe
    _, values, width = FAMILIES[family]
    experts = runner.config.experts.num_experts
    assert isinstance(runner, MoERunner)
    with torch.no_grad():
        out = model(torch.tensor([PROMPT[:-1]]), use_cache=True, output_router_logits=True)
        step = model(torch.tensor([PROMPT[-1:]]), past_key_values=out.past_key_values,
                     use_cache=True, output_router_logits=True)
    want_prefill, want_step = out.logits[0].numpy(), step.logits[0, -1].numpy()
    assert np.abs(want_prefill).max() > 1.0  # not a comparison of near-zeros

    tenet_byoc.set_phase(runner.vm, "prefill")
    logits, cache = runner.prefill(PROMPT[:-1])
    tenet_byoc.set_phase(runner.vm, "decode")
    logits_step, cache = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(logits, want_prefill, rtol=0, atol=ATOL)
    np.testing.assert_allclose(logits_step, want_step, rtol=0, atol=ATOL)
    # a full layer's cache holds every token, a sliding one's (gpt-oss) the last window
    for i in range(runner.config.num_hidden_layers):
        window = runner.config.window(i) or len(PROMPT)
        assert int(cache[2 * i].shape[2]) == min(window, len(PROMPT))

    # The experts each token was sent to: transformers' router's top 2, layer by layer
    # (transformers reports the layers with experts only).
    for (phase, layers), hf in zip(runner.routing, (out, step), strict=True):
        routed = [route for route in layers if route is not None]
        assert len(routed) == len(runner.config.experts.moe_layers)
        if family == "deepseek_v3":  # transformers does not report its router's logits
            continue
        assert len(hf.router_logits) == len(routed)
        for route, router_logits in zip(routed, hf.router_logits, strict=True):
            want = torch.topk(router_logits.float(), 2, dim=-1).indices.numpy()
            np.testing.assert_array_equal(np.sort(route.experts, axis=1),
                                          np.sort(want, axis=1), err_msg=phase)
    prefill_counts = [n for route in runner.routing[0][1] if route is not None
                      for n in route.tokens_per_expert(experts)]
    assert sum(prefill_counts) == len(routed) * 2 * (len(PROMPT) - 1)
    assert len(set(prefill_counts)) > 1  # tokens are not spread evenly: grouping matters

    # Each chosen expert's down projection (the configs make it the only GEMM of its N and
    # K; the ledger's names are shared by calls TVM compiles to one function, so shapes
    # pick it) ran once over exactly its tokens, in both calls.
    rows = Counter(e.m for e in tenet_byoc.ledger(runner.vm).entries
                   if "matmul" in e.pattern and (e.n, e.k) == (values["hidden_size"], width))
    want_rows = Counter(int(n) for _, layers in runner.routing for route in layers
                        if route is not None for n in route.tokens_per_expert(experts) if n)
    assert rows == want_rows

    # The calls an estimate lists from the config and the run's routing are the run's GEMMs,
    # entry for entry, in order.
    counts = [[route.tokens_per_expert(experts) for route in layers if route is not None]
              for _, layers in runner.routing]
    listed = (moe_matmuls(runner.config, len(PROMPT) - 1, "prefill", counts[0])
              + moe_matmuls(runner.config, len(PROMPT) - 1, "decode", counts[1]))
    ran = [(e.batch, e.m, e.n, e.k) for e in tenet_byoc.ledger(runner.vm).entries
           if "matmul" in e.pattern]
    assert ran == [(g.batch, g.m, g.n, g.k) for g in listed]

    # estimate() given the run's routing charges every call of the run (vector work too).
    real = tenet_byoc.ledger(runner.vm)
    assert_estimate_equals_run(real, runner.config, runner.tokens_per_expert(),
                               len(PROMPT) - 1, 1)
    # The experts' rows are the run's: the expected uniform routing charges other GEMMs.
    uniform = tenet_byoc.estimate(runner.config, "none", real.accelerator,
                                  prompt_len=len(PROMPT) - 1, decode_steps=1)
    assert [e.m for e in uniform.entries if e.unit == "array"] != ran_rows(real)


def ran_rows(ledger) -> list[int]:
    """The rows of each GEMM a ledger charged."""
    return [e.m for e in ledger.entries if e.unit == "array"]


def test_unsupported_moe_runs_are_refused(tmp_path):
    import json

    config = {**TINY, "model_type": "mixtral", "sliding_window": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"mixtral with sliding_window=8 is not run yet"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "mixtral"}))
    with pytest.raises(ValueError, match=r"runs unbatched"):
        from_pretrained(tmp_path, batched=True)


@pytest.mark.slow
def test_gpt_oss_particulars_change_transformers_logits():
    """The tiny gpt-oss of these tests exercises its clamps, sinks and window: transformers'
    own logits move when each is lifted (so matching them checks each)."""
    import torch

    model = make_moe("gpt_oss")
    prompt = torch.tensor([PROMPT])
    with torch.no_grad():
        want = model(prompt).logits
        layers = model.model.layers
        for lift in ("limit", "sinks", "window"):
            saved = [(m.mlp.experts.limit, m.self_attn.sinks.clone()) for m in layers]
            for m in layers:
                if lift == "limit":
                    m.mlp.experts.limit = 1e9
                elif lift == "sinks":
                    m.self_attn.sinks.fill_(-1e9)
            if lift == "window":
                model.config.sliding_window = len(PROMPT)
            got = model(prompt).logits
            assert (got - want).abs().max() > 1e-2, lift
            model.config.sliding_window = FAMILIES["gpt_oss"][1]["sliding_window"]
            for m, (limit, sinks) in zip(layers, saved, strict=True):
                m.mlp.experts.limit = limit
                m.self_attn.sinks.copy_(sinks)


@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3", "gpt_oss"])
def test_a_chunks_attention_spans_the_keys_transformers_attends_to(family):
    # transformers' eager attention of a 6-token chunk after 20 cached tokens: the last axis
    # of each layer's weights is the keys its rows attend to (all 26; in gpt-oss's sliding
    # layers the 3 cached keys a window of 4 lets the first row see, and the 6 new ones).
    # The plan's attn.qk of the same chunk spans as many keys in each layer.
    from llama_testing import chunk_keys

    from tenet_byoc.models.moe import MoEConfig

    model = make_moe(family)
    config = MoEConfig.from_hf_dict(model.config.to_dict(), name=family)
    want, planned = chunk_keys(model, config, (PROMPT * 3)[:26], 20)
    assert want == ([9, 26, 9] if family == "gpt_oss" else [26] * config.num_hidden_layers)
    assert planned == want
