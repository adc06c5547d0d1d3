"""Running mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE): Relax GEMMs, host routing.

A layer runs as two kinds of Relax calls: ``attention_prefill`` / ``attention_decode`` (RMSNorm,
grouped-query attention with RoPE, the residual, the second RMSNorm and the router GEMM,
returning the router's logits; shared experts, gated or not, are added there too) and ``expert`` (one expert's SwiGLU over the rows routed to
it, with a symbolic row count). The host takes the softmax of the router's logits, each
token's top-k experts and their renormalized weights, groups the tokens by expert, calls
``expert`` once per chosen expert with exactly its tokens (so each expert's GEMMs are charged
with the rows it receives, as a grouped-GEMM kernel would run them), and adds the weighted
outputs to the residual. Every call's routing is kept (:attr:`MoERunner.routing`) for
estimates that charge the experts a real run chose.
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

from .checkpoint import Layout, load_weights, read_config
from .decoder import build_with_tvm, take_rows
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
from .moe import MoEConfig
from .runner import check_ids

__all__ = ["LayerRouting", "MoERunner", "load_checkpoint"]

_DTYPE = "float32"


class _Block(nn.Module):
    """One layer's attention, its residual, the second RMSNorm and the router GEMM."""

    # The rotary tables are computed as the Llama model computes them (from ``config``).
    _rope = LlamaForCausalLM._rope
    _inv_freq = LlamaForCausalLM._inv_freq
    _cos_sin = LlamaForCausalLM._cos_sin

    def __init__(self, config: MoEConfig) -> None:
        a = config.attention
        self.config = a
        d, eps = a.hidden_size, a.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.self_attn = LlamaAttention(a)
        self.post_attention_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        e = config.experts
        self.gate = nn.Linear(d, e.num_experts, bias=False)
        self.shared = e.shared_intermediate_size > 0
        if self.shared:
            self.shared_expert = LlamaMLP(replace(a, intermediate_size=e.shared_intermediate_size))
        self.gated = e.shared_gate
        if self.gated:
            self.shared_expert_gate = nn.Linear(d, 1, bias=False)

    def _run(self, x: nn.Tensor, rope: Any, past: Any) -> tuple[nn.Tensor, ...]:
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

    def attention_prefill(self, x: nn.Tensor) -> tuple[nn.Tensor, ...]:
        """``x [1, s, d]`` from position 0: ``(h, normed h, router logits, K, V)``."""
        return self._run(x, self._rope(0, x.shape[1]), None)

    def attention_decode(self, x: nn.Tensor, k: nn.Tensor, v: nn.Tensor) -> tuple[nn.Tensor, ...]:
        """One token after the layer's cache ``K, V [1, kv, past, hd]``."""
        return self._run(x, self._rope(k.shape[2], 1), (k, v))


class _Dense(LlamaDecoderLayer):
    """A layer whose MLP is dense (DeepSeek's first layers, Qwen's ``mlp_only_layers``)."""

    _rope = LlamaForCausalLM._rope
    _inv_freq = LlamaForCausalLM._inv_freq
    _cos_sin = LlamaForCausalLM._cos_sin

    def __init__(self, config: MoEConfig) -> None:
        super().__init__(config.attention)
        self.config = config.attention

    def dense_prefill(self, x: nn.Tensor) -> tuple[nn.Tensor, ...]:
        """``x [1, s, d]`` from position 0: ``(x out, K, V)``."""
        return self.forward(x, self._rope(0, x.shape[1]), None)

    def dense_decode(self, x: nn.Tensor, k: nn.Tensor, v: nn.Tensor) -> tuple[nn.Tensor, ...]:
        """One token after the layer's cache."""
        return self.forward(x, self._rope(k.shape[2], 1), (k, v))


class _Expert(nn.Module):
    """One expert's SwiGLU over the rows routed to it."""

    def __init__(self, config: MoEConfig) -> None:
        self.mlp = LlamaMLP(replace(config.attention,
                                    intermediate_size=config.experts.intermediate_size))

    def expert(self, x: nn.Tensor) -> nn.Tensor:
        """``x [1, rows, d] -> [1, rows, d]``."""
        return self.mlp(x)


class _Ends(nn.Module):
    """The embedding lookup and the final RMSNorm with the head."""

    def __init__(self, config: MoEConfig) -> None:
        a = config.attention
        self.tied = a.tie_word_embeddings
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.norm = nn.RMSNorm(a.hidden_size, axes=-1, epsilon=a.rms_norm_eps, bias=False)
        if not self.tied:
            self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)

    def embed(self, ids: nn.Tensor) -> nn.Tensor:
        """``ids [1, s]`` int32 -> ``[1, s, d]``."""
        return take_rows(self.embed_tokens.weight, ids)

    def head(self, x: nn.Tensor) -> nn.Tensor:
        """``x [1, s, d]`` -> logits ``[1, s, vocab]``."""
        x = self.norm(x)
        if self.tied:
            return nn.op.matmul(x, nn.op.permute_dims(self.embed_tokens.weight))
        return self.lm_head(x)


# Where each family keeps a mixture layer's weights: the prefix of the router and the
# experts, and the names of one expert's gate, up and down projections.
_MOE_PREFIX = {"mixtral": "block_sparse_moe.", "qwen2_moe": "mlp.", "qwen3_moe": "mlp."}
_EXPERT_NAMES = {
    "mixtral": {"mlp.gate_proj.weight": "w1.weight", "mlp.up_proj.weight": "w3.weight",
                "mlp.down_proj.weight": "w2.weight"},
    "qwen2_moe": {f"mlp.{n}.weight": f"{n}.weight" for n in ("gate_proj", "up_proj",
                                                             "down_proj")},
}
_EXPERT_NAMES["qwen3_moe"] = _EXPERT_NAMES["qwen2_moe"]


def _check_supported(config: MoEConfig) -> None:
    if config.model_type not in _MOE_PREFIX:
        raise ValueError(
            f"running {config.model_type} is not implemented yet (only {sorted(_MOE_PREFIX)}); "
            "its config is read and counted, see tenet_byoc.models.moe"
        )
    if config.experts.scoring != "softmax":
        raise ValueError(f"{config.model_type}: routing by {config.experts.scoring} is not run")
    if config.attention.window is not None:
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
    kv = nn.spec.Tensor([1, a.num_key_value_heads, "past_len", a.dim_per_head], _DTYPE)
    parts = (
        (_Ends(config), {"embed": {"ids": nn.spec.Tensor([1, "seq_len"], "int32")},
                         "head": {"x": x}}),
        (_Block(config), {"attention_prefill": {"x": x},
                          "attention_decode": {"x": nn.spec.Tensor([1, 1, d], _DTYPE),
                                               "k": kv, "v": kv}}),
        (_Expert(config), {"expert": {"x": nn.spec.Tensor([1, "rows", d], _DTYPE)}}),
    )
    if len(config.experts.moe_layers) < config.num_hidden_layers:
        parts += ((_Dense(config), {"dense_prefill": {"x": x},
                                    "dense_decode": {"x": nn.spec.Tensor([1, 1, d], _DTYPE),
                                                     "k": kv, "v": kv}}),)
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
    """One layer's routing in one call.

    Attributes
    ----------
    experts : numpy.ndarray
        ``[tokens, k]`` int: each token's chosen experts, best first.
    weights : numpy.ndarray
        ``[tokens, k]`` float32: their weights in the combine.
    """

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

    Attributes
    ----------
    routing : list of (str, list of LayerRouting or None)
        Per call, its phase and each layer's routing (None for a dense layer), in call
        order.
    """

    def __init__(self, config: MoEConfig, params: dict[str, np.ndarray],
                 build: Callable[[IRModule], Any] | None = None, device: Any = None) -> None:
        self.config = config
        self.mod, self._names = export_moe(config)
        self.device = tvm.cpu() if device is None else device
        self.executable = (build or build_with_tvm)(self.mod)
        self.vm = relax.VirtualMachine(self.executable, self.device)
        self.routing: list[tuple[str, list[LayerRouting]]] = []
        put = self._put
        missing = [n for n, _ in _expected(config) if n not in params]
        if missing:
            raise KeyError(f"{config.model_type} weights lack {missing[:5]}")
        moe, expert_names = _MOE_PREFIX[config.model_type], _EXPERT_NAMES[config.model_type]
        self._ends = [put(params[n]) for n in self._names["embed"]]
        self._layers = []
        self._experts: list[list[list[Any]]] = []
        routed = set(config.experts.moe_layers)
        for i in range(config.num_hidden_layers):
            p = f"layers.{i}."
            if i not in routed:
                self._layers.append([put(params[p + n]) for n in self._names["dense_prefill"]])
                self._experts.append([])
                continue
            self._layers.append([
                put(params[p + (moe + n if n.startswith(("gate.", "shared_expert")) else n)])
                for n in self._names["attention_prefill"]])
            self._experts.append([
                [put(params[f"{p}{moe}experts.{j}.{expert_names[n]}"])
                 for n in self._names["expert"]]
                for j in range(config.experts.num_experts)])

    def _put(self, value: np.ndarray) -> tvm.runtime.Tensor:
        return tvm.runtime.tensor(np.ascontiguousarray(value, dtype=np.float32), self.device)

    def _tensor(self, value: np.ndarray) -> tvm.runtime.Tensor:
        return tvm.runtime.tensor(value, self.device)

    def _moe(self, h: np.ndarray, normed: Any, logits: Any, experts: list[list[Any]]
             ) -> tuple[np.ndarray, LayerRouting]:
        # Softmax over all experts, the top k, their weights renormalized (Mixtral's rule),
        # then each chosen expert once over the tokens routed to it.
        e = self.config.experts
        scores = logits.numpy()[0].astype(np.float64)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = (scores / scores.sum(axis=-1, keepdims=True)).astype(np.float32)
        chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :e.experts_per_token]
        weights = np.take_along_axis(probs, chosen, axis=-1)
        if e.normalize_top_k:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        x = normed.numpy()[0]
        out = np.zeros_like(x)
        for expert in np.unique(chosen):
            rows, slot = np.nonzero(chosen == expert)
            y = self.vm["expert"](self._tensor(x[rows][None]), *experts[expert])
            out[rows] += weights[rows, slot, None] * y.numpy()[0]
        return h + out, LayerRouting(chosen, weights)

    def _forward(self, ids: np.ndarray, cache: Sequence[Any] | None, phase: str
                 ) -> tuple[np.ndarray, list[Any]]:
        x = self.vm["embed"](self._tensor(ids), *self._ends).numpy()
        new_cache: list[Any] = []
        routing = []
        for i in range(self.config.num_hidden_layers):
            if not self._experts[i]:  # a dense layer
                if cache is None:
                    out, k, v = self.vm["dense_prefill"](self._tensor(x), *self._layers[i])
                else:
                    out, k, v = self.vm["dense_decode"](
                        self._tensor(x), cache[2 * i], cache[2 * i + 1], *self._layers[i])
                x = out.numpy()
                routing.append(None)
                new_cache += [k, v]
                continue
            if cache is None:
                h, normed, logits, k, v = self.vm["attention_prefill"](
                    self._tensor(x), *self._layers[i])
            else:
                h, normed, logits, k, v = self.vm["attention_decode"](
                    self._tensor(x), cache[2 * i], cache[2 * i + 1], *self._layers[i])
            x, route = self._moe(h.numpy()[0], normed, logits, self._experts[i])
            x = x[None]
            routing.append(route)
            new_cache += [k, v]
        self.routing.append((phase, routing))
        logits = self.vm["head"](self._tensor(x.astype(np.float32)), *self._ends)
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
        past = int(cache[0].shape[2])
        ids = check_ids([token_id], a.vocab_size, a.max_position_embeddings,
                        "max_position_embeddings", past)
        logits, new = self._forward(ids, cache, "decode")
        return logits[0], new


def _expected(config: MoEConfig):
    # The checkpoint's tensors (less "model.") and shapes, layer by layer.
    a, e = config.attention, config.experts
    d, hd = a.hidden_size, a.dim_per_head
    q, kv = a.num_attention_heads * hd, a.num_key_value_heads * hd
    moe, names = _MOE_PREFIX[config.model_type], _EXPERT_NAMES[config.model_type]
    gate, up, down = (names[f"mlp.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj"))
    routed = set(e.moe_layers)
    yield "embed_tokens.weight", (a.vocab_size, d)
    for i in range(a.num_hidden_layers):
        p = f"layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        for proj, shape in (("q_proj", (q, d)), ("k_proj", (kv, d)), ("v_proj", (kv, d))):
            yield f"{p}self_attn.{proj}.weight", shape
            if a.qkv_bias:
                yield f"{p}self_attn.{proj}.bias", shape[:1]
        yield p + "self_attn.o_proj.weight", (d, q)
        if a.qk_norm:
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
        yield p + "post_attention_layernorm.weight", (d,)
        if i not in routed:
            for name, shape in (("gate_proj", (a.intermediate_size, d)),
                                ("up_proj", (a.intermediate_size, d)),
                                ("down_proj", (d, a.intermediate_size))):
                yield f"{p}mlp.{name}.weight", shape
            continue
        yield p + moe + "gate.weight", (e.num_experts, d)
        for j in range(e.num_experts):
            m = f"{p}{moe}experts.{j}."
            yield m + gate, (e.intermediate_size, d)
            yield m + up, (e.intermediate_size, d)
            yield m + down, (d, e.intermediate_size)
        if e.shared_intermediate_size:
            width = e.shared_intermediate_size
            for name, shape in (("gate_proj", (width, d)), ("up_proj", (width, d)),
                                ("down_proj", (d, width))):
                yield f"{p}{moe}shared_expert.{name}.weight", shape
        if e.shared_gate:
            yield p + moe + "shared_expert_gate.weight", (1, d)
    yield "norm.weight", (d,)
    if not a.tie_word_embeddings:
        yield "lm_head.weight", (a.vocab_size, d)


def load_checkpoint(folder: str | os.PathLike[str], config: MoEConfig | None = None
                    ) -> tuple[MoEConfig, dict[str, np.ndarray]]:
    """Read a local Mixtral, Qwen2-MoE or Qwen3-MoE checkpoint folder (config.json + safetensors).

    Shapes are checked against the config from the headers before anything is read; errors
    name the file and tensor (see :func:`tenet_byoc.models.checkpoint.load_weights`).
    """
    if config is None:
        values = read_config(folder)
        config = MoEConfig.from_hf_dict(values,
                                        name=os.path.basename(os.path.normpath(folder)))
    _check_supported(config)
    layout = Layout(config.model_type, "model.", "layers.", "num_hidden_layers",
                    unprefixed=("lm_head.weight",))
    params = load_weights(folder, layout, config.num_hidden_layers, _expected(config))
    return config, params
