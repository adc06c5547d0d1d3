"""Tiny mixture-of-experts checkpoints made by transformers for the tests (models, estimate)."""

from __future__ import annotations

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
    # attention sinks, biases everywhere, a SwiGLU clamped at 1 (so the clamps bite),
    # sliding-window layers (window 4) around a full one, YaRN
    "gpt_oss": ("GptOss", {
        **TINY, "num_hidden_layers": 3, "head_dim": 8, "sliding_window": 4,
        "swiglu_limit": 1.0, "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 8}}, 40),
}




def make_moe(family: str):
    """transformers' model of ``family`` (eager attention), with weights large enough that
    every one shows in the logits, and DeepSeek's router bias set."""
    import torch
    import transformers

    kind, values, _ = FAMILIES[family]
    config = getattr(transformers, kind + "Config")(**values, attn_implementation="eager")
    model = getattr(transformers, kind + "ForCausalLM")(config).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if p.ndim == 1
                    else torch.randn_like(p) * p.shape[-1] ** -0.5)
        for name, b in model.named_buffers():  # DeepSeek's router bias, saved with the weights
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return model


def assert_estimate_equals_run(real, config, routing, prompt_len: int, decode_steps: int,
                               scheme: str = "none"):
    """``tenet_byoc.estimate`` of ``config`` given a run's ``routing`` charges what the run's
    ledger ``real`` charged, entry for entry, less the routing work a run does on the host
    (``plan.HOST_CALLS``: four calls per mixture layer and call), which only an estimate
    charges."""
    import tenet_byoc
    from tenet_byoc.ledger import _CHARGE_FIELDS
    from tenet_byoc.plan import HOST_CALLS

    est = tenet_byoc.estimate(config, scheme, real.accelerator, prompt_len=prompt_len,
                              decode_steps=decode_steps, routing=routing)
    host = [e for e in est.entries if e.name.endswith(HOST_CALLS)]
    assert len(host) == 4 * sum(len(step) for step in routing)
    kept = [e for e in est.entries if not e.name.endswith(HOST_CALLS)]
    assert len(kept) == len(real.entries)
    for i, (r, e) in enumerate(zip(real.entries, kept, strict=True)):
        # each entry's own fields (a GEMM's, a vector call's: its type's), and the same type
        assert type(e) is type(r), (i, r.name, e.name)
        fields = ["phase", "scheme", *sorted(f for f in _CHARGE_FIELDS if f in r._fields)]
        want = {f: getattr(r, f) for f in fields}
        got = {f: getattr(e, f) for f in fields}
        assert got == want, (i, r.name, e.name, {f for f in want if got[f] != want[f]})
    return est


def fake_quant(v, bits: int, block: int | None, stored: bool):
    """``v`` rounded to symmetric ``bits``-bit integers and back, by definition: one scale
    per row (``block`` None) or per ``block`` values along the last axis (zero-padded to a
    multiple of it), ``amax / (2^(bits-1) - 1)``; a stored (weight) scale is rounded to
    float16, a zero one taken as 1; an activation's is kept in float32, at least 1e-12."""
    import numpy as np

    v = np.asarray(v, dtype=np.float32)
    k = v.shape[-1]
    if block:
        pad = (-k) % block
        v = np.concatenate([v, np.zeros((*v.shape[:-1], pad), np.float32)], axis=-1)
        b = v.reshape(*v.shape[:-1], v.shape[-1] // block, block)
    else:
        b = v
    top = 2 ** (bits - 1) - 1
    amax = np.abs(b).max(axis=-1, keepdims=True)
    if stored:
        scale = (amax / np.float32(top)).astype(np.float16).astype(np.float32)
        scale = np.where(scale > 0, scale, np.float32(1))
    else:
        scale = np.maximum(amax, np.float32(1e-12)) / np.float32(top)
    q = np.clip(np.rint(b / scale), -top if bits == 8 else -top - 1, top)
    return (q * scale).astype(np.float32).reshape(v.shape)[..., :k]


def fake_quantized_linears(scheme: str):
    """A context in which ``torch.nn.functional.linear`` (every linear layer of a
    transformers model: attention's projections, the router, each expert's, the head) is
    ``scheme`` by definition (:func:`fake_quant`): weights per channel or per group,
    activations per token in int8 or rounded to float16, the product in float64."""
    from unittest import mock

    import numpy as np
    import torch

    from tenet_byoc.quantization import get_scheme

    s = get_scheme(scheme)
    block = s.group_size if s.weight_granularity == "group" else None
    assert s.weight_format == s.activation_format == "int" or s.activation_bits == 16, scheme

    def linear(x, w, b=None):
        rows = x.detach().numpy().reshape(-1, x.shape[-1])
        if s.activation_bits == 16:
            xq = rows.astype(np.float16).astype(np.float32)
        else:
            xq = fake_quant(rows, s.activation_bits, None, stored=False)
        wq = fake_quant(w.detach().numpy(), s.weight_bits, block, stored=True)
        y = torch.from_numpy((xq.astype(np.float64) @ wq.T.astype(np.float64))
                             .astype(np.float32)).reshape(*x.shape[:-1], w.shape[0])
        return y if b is None else y + b

    return mock.patch.object(torch.nn.functional, "linear", linear)
