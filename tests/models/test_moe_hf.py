"""Tiny Mixtral, Qwen2-MoE, Qwen3-MoE and DeepSeek-V3 made and saved by transformers run through tenet.

Prefill and decode logits must equal transformers' within 1e-4, each layer's chosen experts
those of transformers' router, each expert's GEMMs must be charged with exactly the rows
(tokens) routed to it, and the ledger's GEMMs must be those ``moe_matmuls`` lists from the
config and the run's routing, entry for entry.
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
    # multi-head latent attention (expanded in prefill, absorbed in decode; interleaved RoPE,
    # YaRN with mscale), sigmoid routing with
    # a bias, 2 of 4 expert groups, two shared experts, a dense first layer
    "deepseek_v3": ("DeepseekV3", {
        **{k: v for k, v in _QWEN.items() if k not in ("num_experts", "mlp_only_layers")},
        "num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 2,
        "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "q_lora_rank": 20,
        "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 5,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0,
                            "original_max_position_embeddings": 8, "mscale": 1.0,
                            "mscale_all_dim": 1.0}}, 24),
}


@pytest.fixture(scope="module", params=["mixtral",
                                        pytest.param("qwen2_moe", marks=pytest.mark.slow),
                                        pytest.param("qwen3_moe", marks=pytest.mark.slow),
                                        pytest.param("deepseek_v3", marks=pytest.mark.slow)])
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
        for name, b in model.named_buffers():  # DeepSeek's router bias, saved with the weights
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
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


def test_unsupported_moe_runs_are_refused(tmp_path):
    import json

    config = {**TINY, "model_type": "mixtral", "sliding_window": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"mixtral with sliding_window=8 is not run yet"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "mixtral"}))
    with pytest.raises(ValueError, match=r"runs unbatched"):
        from_pretrained(tmp_path, batched=True)
