"""Running mixture-of-experts decoders (Mixtral, Qwen-MoE, DeepSeek-V3, gpt-oss): Relax GEMMs, host routing.

A layer runs as two kinds of Relax calls: ``attention_prefill`` / ``attention_decode`` (RMSNorm,
attention with RoPE, the residual, the second RMSNorm, the shared experts (gated or not) and
the router GEMM, returning the router's logits) and ``expert`` (one expert's SwiGLU over the
rows routed to it, with a symbolic row count); layers with a dense MLP are one
``dense_prefill`` / ``dense_decode`` call. The host scores the router's logits (softmax, or
DeepSeek's sigmoid with its choice bias and group limit), takes each token's top-k experts
and their weights, groups the tokens by expert, calls ``expert`` once per chosen expert with
exactly its tokens (so each expert's GEMMs are charged with the rows it receives, as a
grouped-GEMM kernel would run them), and adds the weighted outputs to the residual. Every
call's routing is kept (:attr:`MoERunner.routing`) for estimates that charge the experts a
real run chose.

DeepSeek-V3's multi-head latent attention caches the compressed KV and the shared rotated
key per token (``kv_lora_rank + qk_rope_head_dim`` values). A prefill expands them to every
head's keys and values with ``kv_b_proj``; a decode step absorbs ``kv_b_proj`` instead (each
head's query into the latent space, all heads over the shared latents as one GEMM of
heads x tokens rows, the latent context out through each head's value matrix).

gpt-oss's sliding-window layers are ``sliding_prefill`` / ``sliding_decode`` calls (the latter
given the new token's position, as their cache keeps the last ``sliding_window`` tokens); its
attention adds each head's sink logit to the softmax, and its experts (stored stacked, gate
and up interleaved in one ``[d, 2 x inner]`` matrix) are split into each expert's three
biased projections when bound, their SwiGLU clamped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn

from .checkpoint import load_family
from .decoder import MASK_VALUE, DecoderLM, build_with_tvm, take_rows
from .llama import (
    LlamaAttention,
    LlamaConfig,
    LlamaDecoderLayer,
    LlamaMLP,
    Rotary,
    hf_layout,
    mlp_shapes,
)
from .moe import MoEConfig, attention_weights
from .runner import check_ids

__all__ = ["LayerRouting", "MoERunner", "load_checkpoint"]

_DTYPE = "float32"


class _LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V3): expanded in prefill, absorbed in decode.

    The cache holds per token the normed compressed KV ``[1, 1, L, kv_lora_rank]`` and the
    rotated shared key ``[1, 1, L, qk_rope_head_dim]`` (in the "K" and "V" slots).
    """

    def __init__(self, config: MoEConfig) -> None:
        a, m = config.attention, config.latent
        d, eps = a.hidden_size, a.rms_norm_eps
        self.m, self.heads = m, a.num_attention_heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            self.q_proj = nn.Linear(d, self.heads * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(d, m.q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(m.q_lora_rank, axes=-1, epsilon=eps, bias=False)
            self.q_b_proj = nn.Linear(m.q_lora_rank, self.heads * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(m.kv_lora_rank, axes=-1, epsilon=eps, bias=False)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank,
                                   self.heads * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * m.v_head_dim, d, bias=False)
        # YaRN's mscale enters the softmax scale squared (the DeepSeek-V2 paper's rule).
        scaling = qk ** -0.5
        r = a.rope_scaling
        if r is not None and r.rope_type == "yarn" and r.mscale_all_dim:
            mscale = 0.1 * r.mscale_all_dim * np.log(r.factor) + 1.0 if r.factor > 1 else 1.0
            scaling *= mscale * mscale
        self.scaling = float(scaling)

    def _rotate(self, t: nn.Tensor, rope: Any) -> nn.Tensor:
        # Interleaved pairs are de-interleaved first: q and k alike, so scores are unchanged.
        cos, sin = rope
        if self.m.rope_interleave:
            *lead, width = t.shape
            t = nn.op.reshape(t, [*lead, width // 2, 2])
            t = nn.op.reshape(nn.op.permute_dims(t, [0, 1, 2, 4, 3]), [*lead, width])
        first, second = nn.op.split(t, 2, axis=-1)
        return t * cos + nn.op.concat([nn.op.negative(second), first], dim=-1) * sin

    def forward(self, x: nn.Tensor, rope: Any, past: Any, batch: Any = None
                ) -> tuple[nn.Tensor, nn.Tensor, nn.Tensor]:
        """Attend over the cached latents and ``x``'s own; return output and the cache."""
        op, m, h = nn.op, self.m, self.heads
        b, s, _ = x.shape
        nope, rot = m.qk_nope_head_dim, m.qk_rope_head_dim
        q = (self.q_proj(x) if m.q_lora_rank is None
             else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))))
        q_pass, q_rot = op.split(op.reshape(q, [b, s, h, nope + rot]), [nope], axis=-1)
        q_rot = self._rotate(q_rot, rope)
        latent, k_rot = op.split(self.kv_a_proj_with_mqa(x), [m.kv_lora_rank], axis=-1)
        latent = op.reshape(self.kv_a_layernorm(latent), [b, 1, s, m.kv_lora_rank])
        k_rot = op.permute_dims(self._rotate(op.reshape(k_rot, [b, s, 1, rot]), rope),
                                [0, 2, 1, 3])  # [b, 1, s, rot]
        if past is not None:
            latent = op.concat([past[0], latent], dim=2)
            k_rot = op.concat([past[1], k_rot], dim=2)
            return self._absorbed(x, q_pass, q_rot, latent, k_rot), latent, k_rot
        keys = latent.shape[2]
        kv = self.kv_b_proj(op.reshape(latent, [b, keys, m.kv_lora_rank]))
        kv = op.permute_dims(op.reshape(kv, [b, keys, h, nope + m.v_head_dim]), [0, 2, 1, 3])
        k_nope, v = op.split(kv, [nope], axis=-1)
        k = op.concat([k_nope, op.broadcast_to(k_rot, [b, h, keys, rot])], dim=-1)
        q = op.permute_dims(op.concat([q_pass, q_rot], dim=-1), [0, 2, 1, 3])
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * self.scaling
        scores = scores + op.triu(op.full([s, s], MASK_VALUE, dtype=_DTYPE), diagonal=1)
        out = op.matmul(op.softmax(scores, axis=-1), v)  # [b, h, s, v]
        out = op.reshape(op.permute_dims(out, [0, 2, 1, 3]), [b, s, h * m.v_head_dim])
        return self.o_proj(out), latent, k_rot

    def _absorbed(self, x: nn.Tensor, q_pass: nn.Tensor, q_rot: nn.Tensor, latent: nn.Tensor,
                  k_rot: nn.Tensor) -> nn.Tensor:
        # Decode with kv_b_proj absorbed: each head's query is taken into the latent space
        # (q_nope W_UK), all heads attend to the shared latents and rotated keys as one
        # GEMM of heads x tokens rows, and the latent context leaves through W_UV; no
        # per-head key or value is ever expanded.
        op, m, h = nn.op, self.m, self.heads
        b, s, _ = x.shape
        nope, rank, rot, vd = m.qk_nope_head_dim, m.kv_lora_rank, m.qk_rope_head_dim, m.v_head_dim
        keys = latent.shape[2]
        w = op.reshape(self.kv_b_proj.weight, [h, nope + vd, rank])
        w_uk, w_uv = op.split(w, [nope], axis=1)  # [h, nope, rank], [h, v, rank]
        q = op.reshape(op.permute_dims(q_pass, [2, 0, 1, 3]), [h, b * s, nope])
        q_lat = op.matmul(q, w_uk)  # [h, b * s, rank]
        q_lat = op.reshape(op.permute_dims(op.reshape(q_lat, [h, b, s, rank]), [1, 0, 2, 3]),
                           [b, h * s, rank])
        q_rot = op.reshape(op.permute_dims(q_rot, [0, 2, 1, 3]), [b, h * s, rot])
        lat = op.reshape(latent, [b, keys, rank])
        rope_keys = op.reshape(k_rot, [b, keys, rot])
        scores = (op.matmul(q_lat, op.permute_dims(lat, [0, 2, 1]))
                  + op.matmul(q_rot, op.permute_dims(rope_keys, [0, 2, 1]))) * self.scaling
        context = op.matmul(op.softmax(scores, axis=-1), lat)  # [b, h * s, rank]
        context = op.reshape(op.permute_dims(op.reshape(context, [b, h, s, rank]),
                                             [1, 0, 2, 3]), [h, b * s, rank])
        out = op.matmul(context, op.permute_dims(w_uv, [0, 2, 1]))  # [h, b * s, v]
        out = op.permute_dims(op.reshape(out, [h, b, s, vd]), [1, 2, 0, 3])
        return self.o_proj(op.reshape(out, [b, s, h * vd]))


class _SinkAttention(LlamaAttention):
    """Grouped-query attention whose softmax also spans each head's learned sink logit
    (gpt-oss): the sink's column takes its share of the weights and is dropped."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__(config)
        self.sinks = nn.Parameter((config.num_attention_heads,), _DTYPE)

    def _probs(self, scores: nn.Tensor, b: Any, s: Any) -> nn.Tensor:
        kv, rows, keys = scores.shape[1], scores.shape[2], scores.shape[3]
        sink = nn.op.broadcast_to(nn.op.reshape(self.sinks, [1, kv, -1, 1, 1]),
                                  [b, kv, self.n_head // self.n_kv, s, 1])
        probs = nn.op.softmax(
            nn.op.concat([scores, nn.op.reshape(sink, [b, kv, rows, 1])], dim=-1), axis=-1)
        return nn.op.wrap_nested(relax.op.strided_slice(
            probs._expr, axes=[3], begin=[0], end=[keys], assume_inbound=True), name="probs")


class _Layer(Rotary):
    """A layer run as calls of its own: from position 0, or one token after its cache
    ``K, V [1, kv, past, hd]`` (at ``position`` where the cache keeps only the last tokens)."""

    def prefill(self, x: nn.Tensor) -> tuple[nn.Tensor, ...]:
        """``x [1, s, d]`` from position 0: the layer's outputs."""
        return self.forward(x, self._rope(0, x.shape[1]), None)

    def decode(self, x: nn.Tensor, k: nn.Tensor, v: nn.Tensor, position: Any = None
               ) -> tuple[nn.Tensor, ...]:
        """One token after the layer's cache."""
        return self.forward(x, self._rope(k.shape[2] if position is None else position, 1),
                            (k, v))


class _Block(_Layer, nn.Module):
    """One layer's attention, its residual, the second RMSNorm and the router GEMM: its
    calls return ``(h, normed h, router logits, K, V)``."""

    def __init__(self, config: MoEConfig, window: bool = False) -> None:
        # the dense part of a sliding-window layer, or of a full one (no window)
        a = config.attention
        if not window and config.sliding_layers is not None:
            a = replace(a, sliding_window=None)
        self.config = a
        d, eps = a.hidden_size, a.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.self_attn = (_LatentAttention(config) if config.latent is not None
                          else _SinkAttention(a) if config.sinks else LlamaAttention(a))
        self.post_attention_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        e = config.experts
        # DeepSeek's router bias only chooses (on the host); gpt-oss's is the GEMM's.
        self.gate = nn.Linear(d, e.num_experts, bias=e.biased)
        self.shared = e.shared_intermediate_size > 0
        if self.shared:
            self.shared_expert = LlamaMLP(replace(a, intermediate_size=e.shared_intermediate_size))
        self.gated = e.shared_gate
        if self.gated:
            self.shared_expert_gate = nn.Linear(d, 1, bias=False)

    def forward(self, x: nn.Tensor, rope: Any, past: Any) -> tuple[nn.Tensor, ...]:
        """The attention's residual, the norm, the shared experts and the router's logits."""
        # The residual plus the shared experts (gated by a sigmoid where there is a gate);
        # the routed experts are added on the host.
        attn, k, v = self.self_attn(self.input_layernorm(x), rope, past)
        h = x + attn
        normed = self.post_attention_layernorm(h)
        if self.shared:
            shared = self.shared_expert(normed)
            if self.gated:
                shared = nn.op.sigmoid(self.shared_expert_gate(normed)) * shared
            h = h + shared
        return h, normed, self.gate(normed), k, v

    attention_prefill = sliding_prefill = _Layer.prefill
    attention_decode = sliding_decode = _Layer.decode


class _Dense(_Layer, LlamaDecoderLayer):
    """A layer whose MLP is dense (DeepSeek's first layers, Qwen's ``mlp_only_layers``)."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__(config.attention)
        self.config = config.attention
        if config.latent is not None:
            self.self_attn = _LatentAttention(config)

    dense_prefill, dense_decode = _Layer.prefill, _Layer.decode


class _Expert(nn.Module):
    """One expert's SwiGLU over the rows routed to it (gpt-oss's clamped, biased one)."""

    def __init__(self, config: MoEConfig) -> None:
        e = config.experts
        self.mlp = LlamaMLP(replace(config.attention, intermediate_size=e.intermediate_size,
                                    mlp_bias=e.biased))
        self.limit, self.alpha = e.swiglu_limit, e.swiglu_alpha

    def expert(self, x: nn.Tensor) -> nn.Tensor:
        """``x [1, rows, d] -> [1, rows, d]``."""
        if self.limit is None:
            return self.mlp(x)
        op, m = nn.op, self.mlp
        limit, low = (op.wrap_nested(relax.const(v, _DTYPE), n)
                      for v, n in ((self.limit, "limit"), (-self.limit, "low")))
        # min / max, not clip: a clip is the mark of an activation quantization
        gate = op.minimum(m.gate_proj(x), limit)
        up = op.maximum(op.minimum(m.up_proj(x), limit), low)
        # g * sigmoid(alpha g) written as silu(alpha g) / alpha: the vector unit's SiLU
        glu = op.silu(gate * self.alpha) * (1.0 / self.alpha)
        return m.down_proj((up + 1.0) * glu)


class _Ends(DecoderLM):
    """The embedding lookup, and the final RMSNorm with the head (:meth:`DecoderLM.head`)."""

    def __init__(self, config: MoEConfig) -> None:
        a = config.attention
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.norm = nn.RMSNorm(a.hidden_size, axes=-1, epsilon=a.rms_norm_eps, bias=False)
        if not a.tie_word_embeddings:
            self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)

    def embed(self, ids: nn.Tensor) -> nn.Tensor:
        """``ids [1, s]`` int32 -> ``[1, s, d]``."""
        return take_rows(self.embed_tokens.weight, ids)


# Where a family's checkpoints keep a mixture layer's weights, where it differs from the
# others': the prefix of the router and the experts (``mlp.``), the shared experts' name
# (none), the router's (``gate.``), one expert's projections (the model's less ``mlp.``).
_MOE_PREFIX = {"mixtral": "block_sparse_moe."}
_SHARED = {"qwen2_moe": "shared_expert.", "deepseek_v3": "shared_experts."}
_ROUTER = {"gpt_oss": "router."}
_EXPERT_NAMES = {"mixtral": {"mlp.gate_proj.weight": "w1.weight",
                             "mlp.up_proj.weight": "w3.weight",
                             "mlp.down_proj.weight": "w2.weight"}}


def _expert_name(model_type: str, name: str) -> str:
    # The checkpoint's name of an expert's weight the model names ``name`` (mlp.gate_proj...).
    return _EXPERT_NAMES.get(model_type, {}).get(name, name.removeprefix("mlp."))


def _check_supported(config: MoEConfig) -> None:
    if config.window(0) is not None and all(
            config.window(i) for i in range(config.num_hidden_layers)):
        raise ValueError(
            f"{config.model_type} with sliding_window={config.attention.sliding_window} is "
            "not run yet"
        )


def export_moe(config: MoEConfig) -> tuple[IRModule, dict[str, list[str]]]:
    """The module of a mixture-of-experts decoder's calls, and each function's weight names.

    Functions: ``embed``, ``attention_prefill``, ``attention_decode``, ``expert``, ``head``
    and, where some layers' MLPs are dense, ``dense_prefill`` and ``dense_decode``;
    each takes its inputs, then the weights of one layer / one expert / the ends (named in
    the returned dict, as ``layers.{i}.`` / ``experts.{j}.`` less their prefix).
    """
    _check_supported(config)
    d, a = config.hidden_size, config.attention
    x = nn.spec.Tensor([1, "seq_len", d], _DTYPE)
    if config.latent is None:
        kv = nn.spec.Tensor([1, a.num_key_value_heads, "past_len", a.dim_per_head], _DTYPE)
        k_spec = v_spec = kv
    else:  # MLA's cache: the compressed KV and the shared rotated key
        k_spec = nn.spec.Tensor([1, 1, "past_len", config.latent.kv_lora_rank], _DTYPE)
        v_spec = nn.spec.Tensor([1, 1, "past_len", config.latent.qk_rope_head_dim], _DTYPE)
    step = {"x": nn.spec.Tensor([1, 1, d], _DTYPE), "k": k_spec, "v": v_spec}  # decode's
    parts = (
        (_Ends(config), {"embed": {"ids": nn.spec.Tensor([1, "seq_len"], "int32")},
                         "head": {"x": x}}),
        (_Block(config), {"attention_prefill": {"x": x}, "attention_decode": step}),
        (_Expert(config), {"expert": {"x": nn.spec.Tensor([1, "rows", d], _DTYPE)}}),
    )
    if config.sliding_layers:
        parts += ((_Block(config, window=True), {
            "sliding_prefill": {"x": x}, "sliding_decode": {**step, "position": nn.spec.Int()}}),)
    if len(config.experts.moe_layers) < config.num_hidden_layers:
        parts += ((_Dense(config), {"dense_prefill": {"x": x}, "dense_decode": step}),)
    functions: dict[str, Any] = {}
    names: dict[str, list[str]] = {}
    for module, spec in parts:
        mod, params = module.export_tvm(spec=spec)
        for gv, func in mod.functions_items():
            functions[gv.name_hint] = func
        for name in spec:
            names[name] = [n for n, _ in params]
    return IRModule(functions), names


@dataclass(frozen=True)
class LayerRouting:
    """One layer's routing in one call: ``experts`` ``[tokens, k]`` int, each token's chosen
    experts, best first, and ``weights`` ``[tokens, k]`` float32, theirs in the combine."""

    experts: np.ndarray
    weights: np.ndarray

    def tokens_per_expert(self, num_experts: int) -> np.ndarray:
        """``[num_experts]``: how many tokens each expert received."""
        return np.bincount(self.experts.ravel(), minlength=num_experts)


class MoERunner:
    """Build a mixture-of-experts model once; run prefill and decode, recording the routing.

    Parameters
    ----------
    config : MoEConfig
    params : mapping of str to numpy.ndarray
        By Hugging Face's names less ``model.`` (Mixtral's
        ``layers.0.block_sparse_moe.experts.1.w1.weight``, Qwen's ``layers.0.mlp.experts.1.
        gate_proj.weight``).
    build : callable, optional
        ``IRModule -> executable``; TVM's own CPU build by default.
    bind_params : bool
        Bind each call's weights into its own copy of its function (one per layer, one
        per expert: ``attention_prefill__layer0``, ``expert__layer0_expert3``, ...), so
        that ``build`` may rewrite them (``tenet_byoc.quantize``); by default the shared
        functions take the weights as parameters.

    Attributes
    ----------
    routing : list of (str, list of LayerRouting or None)
        Per call, its phase and each layer's routing (None for a dense layer), in call
        order.
    """

    def __init__(self, config: MoEConfig, params: dict[str, np.ndarray],
                 build: Callable[[IRModule], Any] | None = None, device: Any = None,
                 bind_params: bool = False) -> None:
        self.config = config
        self.mod, self._names = export_moe(config)
        self.device = tvm.cpu() if device is None else device
        self.routing: list[tuple[str, list[LayerRouting]]] = []
        missing = [n for n, _ in _expected(config) if n not in params]
        if missing:
            raise KeyError(f"{config.model_type} weights lack {missing[:5]}")
        params = _split_experts(config, params)
        moe = _MOE_PREFIX.get(config.model_type, "mlp.")
        # Each weight set: the functions that take it, and its arrays.
        sets: dict[str, tuple[tuple[str, ...], list[np.ndarray]]] = {
            "ends": (("embed", "head"), [params[n] for n in self._names["embed"]])}
        self._bias: list[np.ndarray] = []
        self._kind: list[str] = []  # per layer: dense_, attention_ or sliding_
        routed = set(config.experts.moe_layers)
        for i in range(config.num_hidden_layers):
            p = f"layers.{i}."
            if i not in routed:
                self._kind.append("dense_")
                sets[f"layer{i}"] = (("dense_prefill", "dense_decode"),
                                     [params[p + n] for n in self._names["dense_prefill"]])
                self._bias.append(None)
                continue
            shared = _SHARED.get(config.model_type, "")
            router = _ROUTER.get(config.model_type, "gate.")
            kind = "sliding_" if config.sliding_layers is not None and config.window(i) \
                else "attention_"
            self._kind.append(kind)
            sets[f"layer{i}"] = ((kind + "prefill", kind + "decode"), [
                params[p + moe + router + n[5:] if n.startswith("gate.")
                       else p + moe + n if n.startswith("shared_expert_gate")
                       else p + moe + shared + n.split(".", 1)[1]
                       if n.startswith("shared_expert.") else p + n]
                for n in self._names["attention_prefill"]])
            self._bias.append(params[p + moe + "gate.e_score_correction_bias"]
                              if config.experts.router_bias else None)
            for j in range(config.experts.num_experts):
                sets[f"layer{i}_expert{j}"] = (("expert",), [
                    params[f"{p}{moe}experts.{j}.{_expert_name(config.model_type, n)}"]
                    for n in self._names["expert"]])
        if bind_params:
            self.mod = _bind_copies(config, self._names, sets)
            self._weights: dict[str, list[Any]] = dict.fromkeys(sets, [])
        else:
            self._weights = {key: [self._tensor(np.ascontiguousarray(w, dtype=np.float32))
                                   for w in arrays]
                             for key, (_, arrays) in sets.items()}
        self._bound = bind_params
        self.executable = (build or build_with_tvm)(self.mod)
        self.vm = relax.VirtualMachine(self.executable, self.device)

    def _call(self, function: str, key: str, *inputs: Any) -> Any:
        # ``function`` on ``inputs`` with the weight set ``key``: its bound copy, or the
        # shared function given the weights.
        if self._bound:
            return self.vm[f"{function}__{key}"](*inputs)
        return self.vm[function](*inputs, *self._weights[key])

    def tokens_per_expert(self) -> list[list[np.ndarray]]:
        """Per call so far, per mixture layer, the tokens each expert received: the
        ``routing`` ``tenet_byoc.estimate`` takes to charge the experts this run chose."""
        e = self.config.experts.num_experts
        return [[route.tokens_per_expert(e) for route in layers if route is not None]
                for _, layers in self.routing]

    def _tensor(self, value: np.ndarray) -> tvm.runtime.Tensor:
        return tvm.runtime.tensor(value, self.device)

    def _route(self, logits: np.ndarray, bias: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
        # Each token's top-k experts and their weights, as the family's router picks them.
        e = self.config.experts
        if e.scoring == "softmax":  # Mixtral, Qwen: over all experts
            scores = np.exp(logits.astype(np.float64) - logits.max(axis=-1, keepdims=True))
            probs = (scores / scores.sum(axis=-1, keepdims=True)).astype(np.float32)
            choice = probs
        else:  # DeepSeek-V3: sigmoid; the bias and the best groups only choose
            probs = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
            choice = probs + (0 if bias is None else bias)
            if e.groups > 1:
                grouped = choice.reshape(len(choice), e.groups, -1)
                best_two = -np.sort(-grouped, axis=-1)[..., :2].sum(axis=-1)
                keep = np.argsort(-best_two, axis=-1, kind="stable")[:, :e.top_groups]
                mask = np.zeros_like(best_two, dtype=bool)
                np.put_along_axis(mask, keep, True, axis=-1)
                choice = np.where(np.repeat(mask, e.num_experts // e.groups, axis=-1),
                                  choice, -np.inf)
        chosen = np.argsort(-choice, axis=-1, kind="stable")[:, :e.experts_per_token]
        weights = np.take_along_axis(probs, chosen, axis=-1)
        if e.normalize_top_k:
            weights = weights / (weights.sum(axis=-1, keepdims=True)
                                 + (1e-20 if e.scoring == "sigmoid" else 0))
        return chosen, (weights * np.float32(e.scale)).astype(np.float32)

    def _moe(self, h: np.ndarray, normed: Any, logits: Any, layer: int,
             bias: np.ndarray | None) -> tuple[np.ndarray, LayerRouting]:
        # Softmax over all experts, the top k, their weights renormalized (Mixtral's rule),
        # then each chosen expert once over the tokens routed to it.
        chosen, weights = self._route(logits.numpy()[0], bias)
        x = normed.numpy()[0]
        out = np.zeros_like(x)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            y = self._call("expert", f"layer{layer}_expert{expert}",
                           self._tensor(x[rows][None]))
            out[rows] += weights[rows, slot, None] * y.numpy()[0]
        return h + out, LayerRouting(chosen, weights)

    def _forward(self, ids: np.ndarray, cache: Sequence[Any] | None, phase: str
                 ) -> tuple[np.ndarray, list[Any]]:
        x = self._call("embed", "ends", self._tensor(ids)).numpy()
        new_cache: list[Any] = []
        routing = []
        position = None if cache is None else max(int(c.shape[2]) for c in cache[::2])
        for i, kind in enumerate(self._kind):
            inputs = [self._tensor(x)]
            if cache is not None:
                inputs += [cache[2 * i], cache[2 * i + 1]]
                if kind == "sliding_":
                    inputs.append(tvm.runtime.ShapeTuple([position]))
            out = self._call(kind + ("prefill" if cache is None else "decode"), f"layer{i}",
                             *inputs)
            if kind == "dense_":
                (x, k, v), route = out, None
                x = x.numpy()
            else:
                h, normed, logits, k, v = out
                x, route = self._moe(h.numpy()[0], normed, logits, i, self._bias[i])
                x = x[None]
            routing.append(route)
            new_cache += [k, v]
        self.routing.append((phase, routing))
        logits = self._call("head", "ends", self._tensor(x.astype(np.float32)))
        return logits.numpy()[0], new_cache

    def prefill(self, token_ids: Sequence[int]) -> tuple[np.ndarray, list[Any]]:
        """Run a prompt from position 0: logits ``[P, vocab]`` and the cache (K, V a layer)."""
        a = self.config.attention
        ids = check_ids(token_ids, a.vocab_size, a.max_position_embeddings,
                        "max_position_embeddings")
        return self._forward(ids, None, "prefill")

    def decode(self, token_id: int, cache: list[Any]) -> tuple[np.ndarray, list[Any]]:
        """Run one token after ``cache``: its logits ``[vocab]`` and the cache one longer."""
        a = self.config.attention
        past = max(int(c.shape[2]) for c in cache[::2])  # a full layer's, where some slide
        ids = check_ids([token_id], a.vocab_size, a.max_position_embeddings,
                        "max_position_embeddings", past)
        logits, new = self._forward(ids, cache, "decode")
        return logits[0], new


def _expected(config: MoEConfig):
    # The checkpoint's tensors (less "model.") and shapes, layer by layer.
    a, e = config.attention, config.experts
    d = a.hidden_size
    moe = _MOE_PREFIX.get(config.model_type, "mlp.")
    routed = set(e.moe_layers)
    yield "embed_tokens.weight", (a.vocab_size, d)
    for i in range(a.num_hidden_layers):
        p = f"layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        yield from attention_weights(config, p + "self_attn.")
        yield p + "post_attention_layernorm.weight", (d,)
        if i not in routed:
            yield from mlp_shapes(p + "mlp.", d, a.intermediate_size)
            continue
        router = p + moe + _ROUTER.get(config.model_type, "gate.")
        yield router + "weight", (e.num_experts, d)
        if e.router_bias:
            yield router + "e_score_correction_bias", (e.num_experts,)
        if e.biased:
            yield router + "bias", (e.num_experts,)
        if config.model_type == "gpt_oss":  # stacked, gate and up interleaved
            m, inner = f"{p}{moe}experts.", e.intermediate_size
            yield m + "gate_up_proj", (e.num_experts, d, 2 * inner)
            yield m + "gate_up_proj_bias", (e.num_experts, 2 * inner)
            yield m + "down_proj", (e.num_experts, inner, d)
            yield m + "down_proj_bias", (e.num_experts, d)
            continue
        for j in range(e.num_experts):
            for n, shape in mlp_shapes("mlp.", d, e.intermediate_size):
                yield f"{p}{moe}experts.{j}.{_expert_name(config.model_type, n)}", shape
        if e.shared_intermediate_size:
            yield from mlp_shapes(p + moe + _SHARED[config.model_type], d,
                                  e.shared_intermediate_size)
        if e.shared_gate:
            yield p + moe + "shared_expert_gate.weight", (1, d)
    yield "norm.weight", (d,)
    if not a.tie_word_embeddings:
        yield "lm_head.weight", (a.vocab_size, d)


def _bind_copies(config: MoEConfig, names: dict[str, list[str]],
                 sets: dict[str, tuple[tuple[str, ...], list[np.ndarray]]]) -> IRModule:
    # One copy of each function per weight set that calls it, its weights bound as
    # constants (``{function}__{set}``); each set's copies come from an export of their
    # own, as no object (a variable, a constant) may sit in two functions.
    out = IRModule({})
    for key, (functions, arrays) in sets.items():
        mod, _ = export_moe(config)
        for function in functions:
            if function not in names:
                continue
            copy = f"{function}__{key}"
            out[copy] = mod[function].with_attr("global_symbol", copy)
            values = {n: np.ascontiguousarray(a, dtype=np.float32)
                      for n, a in zip(names[function], arrays, strict=True)}
            out = relax.transform.BindParams(copy, values)(out)
    return out


def _split_experts(config: MoEConfig, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # gpt-oss's stacked experts as each expert's gate, up and down projections ([out, in]
    # weights and biases, as the other families store them); other families as they are.
    if config.model_type != "gpt_oss":
        return params
    out = dict(params)
    for i in config.experts.moe_layers:
        m = f"layers.{i}.mlp.experts."
        gate_up, bias = params[m + "gate_up_proj"], params[m + "gate_up_proj_bias"]
        for j in range(config.experts.num_experts):
            q = f"{m}{j}."
            out[q + "gate_proj.weight"] = gate_up[j][:, ::2].T
            out[q + "gate_proj.bias"] = bias[j][::2]
            out[q + "up_proj.weight"] = gate_up[j][:, 1::2].T
            out[q + "up_proj.bias"] = bias[j][1::2]
            out[q + "down_proj.weight"] = params[m + "down_proj"][j].T
            out[q + "down_proj.bias"] = params[m + "down_proj_bias"][j]
    return out


def load_checkpoint(folder: str | os.PathLike[str], config: MoEConfig | None = None
                    ) -> tuple[MoEConfig, dict[str, np.ndarray]]:
    """Read a local Mixtral, Qwen2/3-MoE or DeepSeek-V3 checkpoint folder (config + safetensors).

    Shapes are checked against the config from the headers before anything is read; errors
    name the file and tensor (see :func:`tenet_byoc.models.checkpoint.load_family`).
    """
    def expected(config: MoEConfig):
        _check_supported(config)
        return _expected(config)

    return load_family(folder, config, MoEConfig.from_hf_dict, hf_layout, expected)
