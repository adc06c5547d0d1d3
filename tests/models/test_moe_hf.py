"""Tiny Mixtral, Qwen2-MoE and Qwen3-MoE made and saved by transformers run through tenet.

Prefill and decode logits must equal transformers' within 1e-4, each layer's chosen experts
those of transformers' router, and each expert's GEMMs must be charged with exactly the rows
(tokens) routed to it.
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.moe_model import MoERunner

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)

ATOL = 1e-4
PROMPT = [3, 17, 0, 8, 42, 42, 9, 33, 1, 50, 11, 4]
TINY = {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 64, "rope_theta": 1000.0}
_QWEN = {**{k: v for k, v in TINY.items() if k != "num_local_experts"}, "num_hidden_layers": 3,
         "num_experts": 6, "moe_intermediate_size": 24, "mlp_only_layers": [1]}
# family: (transformers' class prefix, config, the routed experts' width)
FAMILIES = {
    "mixtral": ("Mixtral", TINY, 40),
    # shared expert with its sigmoid gate, q/k/v biases, top-k weights not renormalized,
    # a dense layer between two mixture ones
    "qwen2_moe": ("Qwen2Moe", {**_QWEN, "shared_expert_intermediate_size": 56,
                               "norm_topk_prob": False}, 24),
    # QK norm, an explicit head_dim, renormalized top-k
    "qwen3_moe": ("Qwen3Moe", {**_QWEN, "head_dim": 16, "norm_topk_prob": True}, 24),
}


@pytest.fixture(scope="module", params=["mixtral",
                                        pytest.param("qwen2_moe", marks=pytest.mark.slow),
                                        pytest.param("qwen3_moe", marks=pytest.mark.slow)])
def moe(request, tmp_path_factory):
    """``(family, transformers' model, tenet's runner of its saved checkpoint)``."""
    import torch
    import transformers

    kind, values, _ = FAMILIES[request.param]
    config = getattr(transformers, kind + "Config")(**values, attn_implementation="eager")
    model = getattr(transformers, kind + "ForCausalLM")(config).eval()
    torch.manual_seed(0)
    with torch.no_grad():  # weights large enough that every one shows in the logits
        for _, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if p.ndim == 1
                    else torch.randn_like(p) * p.shape[-1] ** -0.5)
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

    logits, cache = runner.prefill(PROMPT[:-1])
    logits_step, cache = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(logits, want_prefill, rtol=0, atol=ATOL)
    np.testing.assert_allclose(logits_step, want_step, rtol=0, atol=ATOL)
    assert int(cache[0].shape[2]) == len(PROMPT)

    # The experts each token was sent to: transformers' router's top 2, layer by layer
    # (transformers reports the layers with experts only).
    for (phase, layers), hf in zip(runner.routing, (out, step), strict=True):
        routed = [route for route in layers if route is not None]
        assert len(routed) == len(hf.router_logits) == len(runner.config.experts.moe_layers)
        for route, router_logits in zip(routed, hf.router_logits, strict=True):
            want = torch.topk(router_logits.float(), 2, dim=-1).indices.numpy()
            np.testing.assert_array_equal(np.sort(route.experts, axis=1),
                                          np.sort(want, axis=1), err_msg=phase)
    prefill_counts = [n for route in runner.routing[0][1] if route is not None
                      for n in route.tokens_per_expert(experts)]
    assert sum(prefill_counts) == len(routed) * 2 * (len(PROMPT) - 1)
    assert len(set(prefill_counts)) > 1  # tokens are not spread evenly: grouping matters

    # Each chosen expert's down projection ran once over exactly its tokens, in both calls.
    entries = [e for e in tenet_byoc.ledger(runner.vm).entries
               if e.name == "mlp.down_proj" and e.k == width]
    assert {(e.n, e.k) for e in entries} == {(values["hidden_size"], width)}
    rows = Counter(e.m for e in entries)
    want_rows = Counter(int(n) for _, layers in runner.routing for route in layers
                        if route is not None for n in route.tokens_per_expert(experts) if n)
    assert rows == want_rows


def test_unsupported_moe_runs_are_refused(tmp_path):
    import json

    config = {**TINY, "model_type": "deepseek_v3", "n_routed_experts": 4,
              "moe_intermediate_size": 8, "kv_lora_rank": 8, "qk_nope_head_dim": 4,
              "qk_rope_head_dim": 4, "v_head_dim": 4, "hidden_act": "silu"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"running deepseek_v3 is not implemented yet"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "mixtral"}))
    with pytest.raises(ValueError, match=r"runs unbatched"):
        from_pretrained(tmp_path, batched=True)
