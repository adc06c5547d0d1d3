"""Mixture-of-experts decoders' shapes (Mixtral, Qwen2/3-MoE, DeepSeek-V3, gpt-oss) from config.json.

A mixture-of-experts decoder is a Llama-family decoder whose MLP, in some or all layers, is
a router (a ``[experts, d]`` GEMM), the top-k experts of each token (each a SwiGLU MLP of
its own width) and, in some families, shared experts every token passes through; DeepSeek-V3
also replaces attention by multi-head latent attention (MLA: queries and keys/values
compressed to low ranks, then expanded per head); gpt-oss has biases everywhere, a clamped
SwiGLU, a learned sink logit per attention head and sliding-window layers between full ones. :class:`MoEConfig` holds the dense part as
a :class:`~tenet_byoc.models.llama.LlamaConfig` (``attention``) beside the experts
(:class:`Experts`) and, for MLA, its ranks (:class:`LatentAttention`); :func:`param_counts`
counts total and active parameters from them in closed form, :func:`touched_experts` the
distinct experts a batch reaches (so the weights a step reads, :func:`weights_read`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ._params import check_positive_numbers
from .decoder import MatmulShape, attended_keys, call_rows_and_keys, read_layer_types
from .llama import LlamaConfig, attention_shapes
from .vector_ops import KVCache, VectorOpShape

__all__ = [
    "MOE_FAMILIES",
    "ExpertLoad",
    "Experts",
    "LatentAttention",
    "MoECallGroup",
    "MoEConfig",
    "expected_routing",
    "moe_call_groups",
    "moe_matmuls",
    "param_counts",
    "touched_experts",
    "weights_read",
]

#: The ``model_type`` values of mixture-of-experts ``config.json`` files this module reads,
#: and the Llama family each one's attention and norms follow.
MOE_FAMILIES = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "llama",
                "deepseek_v3": "llama", "gpt_oss": "llama"}

_SCORINGS = ("softmax", "sigmoid")


def _positive(owner: str, name: str, value: Any, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1 << 24:
        raise ValueError(f"{owner}.{name}={value!r} must be an integer in [{low}, {1 << 24}]")


@dataclass(frozen=True)
class Experts:
    """The mixture-of-experts MLP of a layer.

    Parameters
    ----------
    num_experts : int
        Routed experts E.
    experts_per_token : int
        k: the experts each token is sent to (top-k of the router's scores).
    intermediate_size : int
        Width of one routed expert's SwiGLU hidden layer.
    shared_intermediate_size : int
        Width of the shared experts' SwiGLU (all of them as one MLP; DeepSeek's
        ``n_shared_experts x moe_intermediate_size``); 0 without shared experts.
    shared_gate : bool
        A sigmoid gate ``[1, d]`` scales the shared experts' output (Qwen2-MoE).
    scoring : str
        ``softmax`` (Mixtral, Qwen) or ``sigmoid`` (DeepSeek-V3) over the router's logits.
    normalize_top_k, router_bias : bool
        The chosen experts' weights are renormalized to sum to one; the router has a
        per-expert bias used only to choose (DeepSeek-V3's ``e_score_correction_bias``).
    groups, top_groups : int
        DeepSeek-V3's group-limited routing: experts in ``groups`` groups, a token's
        experts taken from its best ``top_groups`` groups (1 and 1: no limit).
    scale : float
        The routed experts' output is multiplied by it (``routed_scaling_factor``).
    biased : bool
        The router and every expert projection have biases (gpt-oss).
    swiglu_limit : float or None
        gpt-oss's clamped SwiGLU: ``(clip(up, -L, L) + 1) * g * sigmoid(alpha * g)`` with
        ``g = min(gate, L)``; None for the plain ``silu(gate) * up``.
    swiglu_alpha : float
        alpha of the clamped SwiGLU.
    moe_layers : tuple of int
        The layers whose MLP is the mixture; the others are dense SwiGLU MLPs of the
        config's ``intermediate_size``.
    """

    num_experts: int
    experts_per_token: int
    intermediate_size: int
    moe_layers: tuple[int, ...]
    shared_intermediate_size: int = 0
    shared_gate: bool = False
    scoring: str = "softmax"
    normalize_top_k: bool = True
    router_bias: bool = False
    groups: int = 1
    top_groups: int = 1
    scale: float = 1.0
    biased: bool = False
    swiglu_limit: float | None = None
    swiglu_alpha: float = 1.702

    def __post_init__(self) -> None:
        for name in ("num_experts", "experts_per_token", "intermediate_size", "groups",
                     "top_groups"):
            _positive("Experts", name, getattr(self, name))
        _positive("Experts", "shared_intermediate_size", self.shared_intermediate_size, 0)
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"Experts.experts_per_token={self.experts_per_token} exceeds "
                f"num_experts={self.num_experts}"
            )
        if self.num_experts % self.groups or self.top_groups > self.groups:
            raise ValueError(
                f"Experts.groups={self.groups} must divide num_experts={self.num_experts} and "
                f"be at least top_groups={self.top_groups}"
            )
        if self.scoring not in _SCORINGS:
            raise ValueError(f"Experts.scoring={self.scoring!r}; known: {_SCORINGS}")
        check_positive_numbers(self, ("scale", "swiglu_alpha"), ("swiglu_limit",))
        if not isinstance(self.biased, bool):
            raise ValueError(f"Experts.biased={self.biased!r} must be a bool")
        if not isinstance(self.moe_layers, tuple) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in self.moe_layers):
            raise ValueError(f"Experts.moe_layers={self.moe_layers!r} must be a tuple of layers")


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention's ranks and head widths (DeepSeek-V2 / V3).

    Queries are ``x -> [q_lora_rank] -> RMSNorm -> heads x (nope + rope)`` (or one
    ``[d, heads x (nope + rope)]`` GEMM when ``q_lora_rank`` is None); keys and values are
    ``x -> [kv_lora_rank + rope]``, the first part normed and expanded to ``heads x (nope +
    v_head_dim)``, the rope part one key shared by all heads.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    rope_interleave: bool = True  #: rotary pairs are (x0, x1), (x2, x3), ... not halves

    def __post_init__(self) -> None:
        if not isinstance(self.rope_interleave, bool):
            raise ValueError(f"LatentAttention.rope_interleave={self.rope_interleave!r} must be "
                             "a bool")
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive("LatentAttention", name, getattr(self, name))
        if self.q_lora_rank is not None:
            _positive("LatentAttention", "q_lora_rank", self.q_lora_rank)


@dataclass(frozen=True)
class MoEConfig:
    """A mixture-of-experts decoder: its dense part, its experts and, for MLA, its ranks.

    Parameters
    ----------
    attention : LlamaConfig
        Everything but the experts: width, layers, heads, vocabulary, RoPE, norms, the
        dense layers' ``intermediate_size`` (for MLA models the heads' fields only count
        heads; :class:`LatentAttention` gives their widths).
    experts : Experts
    latent : LatentAttention or None
        Multi-head latent attention in place of grouped-query attention.
    model_type : str
        One of :data:`MOE_FAMILIES`.
    name : str
        A label for reports.
    sinks : bool
        Each attention head has a learned sink logit: a score column its softmax
        normalizes over and drops (gpt-oss).
    sliding_layers : tuple of int or None
        The layers whose attention keeps to ``attention.sliding_window``, the others
        seeing every key (gpt-oss's ``layer_types``); None: every layer as ``attention``
        says.
    """

    attention: LlamaConfig
    experts: Experts
    latent: LatentAttention | None = None
    model_type: str = "mixtral"
    name: str = field(default="custom")
    sinks: bool = False
    sliding_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.model_type not in MOE_FAMILIES:
            raise ValueError(
                f"MoEConfig.model_type={self.model_type!r}; known: {sorted(MOE_FAMILIES)}"
            )
        layers = self.attention.num_hidden_layers
        for what, listed in (("expert", self.experts.moe_layers),
                             ("sliding", self.sliding_layers or ())):
            bad = [i for i in listed if isinstance(i, bool) or not isinstance(i, int)
                   or not 0 <= i < layers]
            if bad:
                raise ValueError(
                    f"MoEConfig: {what} layers {bad} are not layers of num_hidden_layers={layers}"
                )
        if not isinstance(self.sinks, bool):
            raise ValueError(f"MoEConfig.sinks={self.sinks!r} must be a bool")

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s attention window, or None where it sees every key."""
        if self.sliding_layers is None or layer in self.sliding_layers:
            return self.attention.window
        return None

    @property
    def num_hidden_layers(self) -> int:
        """Decoder layers."""
        return self.attention.num_hidden_layers

    @property
    def hidden_size(self) -> int:
        """Model width d."""
        return self.attention.hidden_size

    @property
    def max_position_embeddings(self) -> int:
        """The most tokens a sequence may hold."""
        return self.attention.max_position_embeddings

    @property
    def vocab_size(self) -> int:
        """Number of tokens."""
        return self.attention.vocab_size

    @classmethod
    def from_hf_dict(cls, values: Mapping[str, Any], name: str = "custom") -> MoEConfig:
        """Build a configuration from the contents of a Hugging Face ``config.json``.

        Raises
        ------
        ValueError
            If ``model_type`` is not one of :data:`MOE_FAMILIES`, a field is missing or of
            the wrong type, or an option this package lacks is set (naming the field).
        """
        model_type = values.get("model_type")
        if model_type not in MOE_FAMILIES:
            raise ValueError(
                f"config.json model_type={model_type!r} is not one of {sorted(MOE_FAMILIES)}"
            )
        layers = values.get("num_hidden_layers")

        def need(*keys: str) -> Any:
            for key in keys:
                if values.get(key) is not None:
                    return values[key]
            raise ValueError(f"config.json ({model_type}) lacks {keys[0]!r}")

        def layer_list(key: str) -> list[int]:
            got = values.get(key) or []
            if not isinstance(got, list) or any(
                    isinstance(i, bool) or not isinstance(i, int) for i in got):
                raise ValueError(f"config.json {key}={got!r} must be a list of layer indices")
            return got

        dense, latent, qk_norm = dict(values), None, False
        kw: dict[str, Any] = {}  # the Experts fields the family sets (the others default)
        extra: dict[str, Any] = {}
        if model_type in ("mixtral", "gpt_oss"):  # every layer a mixture
            experts, inner = need("num_local_experts"), need("intermediate_size")
            moe_layers = list(range(layers)) if isinstance(layers, int) else []
            normalize = True  # gpt-oss: a softmax over the top k logits, renormalized
            if model_type == "mixtral":
                dense["intermediate_size"] = inner  # no dense layer: nothing else uses it
            else:
                dense["attention_bias"] = values.get("attention_bias", True)
                kinds = read_layer_types(values, period=2)  # even layers slide by default
                extra = {"sinks": True, "sliding_layers": tuple(
                    i for i, k in enumerate(kinds) if k == "sliding_attention")}
                kw.update(swiglu_limit=values.get("swiglu_limit", 7.0),
                          swiglu_alpha=values.get("swiglu_alpha", 1.702))
        elif model_type in ("qwen2_moe", "qwen3_moe"):
            experts = need("num_experts", "num_local_experts")
            inner = need("moe_intermediate_size")
            step = values.get("decoder_sparse_step", 1)
            if isinstance(step, bool) or not isinstance(step, int) or step < 1:
                raise ValueError(f"config.json decoder_sparse_step={step!r} must be >= 1")
            skip = set(layer_list("mlp_only_layers"))
            moe_layers = [i for i in range(layers if isinstance(layers, int) else 0)
                          if i not in skip and (i + 1) % step == 0]
            normalize = bool(values.get("norm_topk_prob", model_type == "qwen3_moe"))
            if model_type == "qwen2_moe":
                shared = values.get("shared_expert_intermediate_size") or 0
                kw.update(shared_intermediate_size=shared,
                          shared_gate=isinstance(shared, int) and shared > 0)
            else:
                qk_norm = True
            if values.get("use_sliding_window"):
                raise ValueError(f"config.json use_sliding_window=true is not supported for "
                                 f"{model_type}")
        else:  # deepseek_v3
            experts = need("n_routed_experts")
            inner = need("moe_intermediate_size")
            first = values.get("first_k_dense_replace", 0)
            freq = values.get("moe_layer_freq", 1)
            for key, value in (("first_k_dense_replace", first), ("moe_layer_freq", freq)):
                if isinstance(value, bool) or not isinstance(value, int) or value < (key[0] == "m"):
                    raise ValueError(f"config.json {key}={value!r} must be a count")
            moe_layers = [i for i in range(layers if isinstance(layers, int) else 0)
                          if i >= first and i % freq == 0]
            shared_count = values.get("n_shared_experts") or 0
            normalize = bool(values.get("norm_topk_prob", True))
            # transformers writes null for both: its model is always sigmoid and noaux_tc.
            kw.update(
                shared_intermediate_size=shared_count * inner if isinstance(shared_count, int)
                else shared_count, scoring=values.get("scoring_func") or "sigmoid",
                router_bias=(values.get("topk_method") or "noaux_tc") == "noaux_tc",
                groups=values.get("n_group", 1), top_groups=values.get("topk_group", 1),
                scale=values.get("routed_scaling_factor", 1.0))
            latent = LatentAttention(
                kv_lora_rank=need("kv_lora_rank"),
                qk_nope_head_dim=need("qk_nope_head_dim"),
                qk_rope_head_dim=need("qk_rope_head_dim"),
                v_head_dim=need("v_head_dim"),
                q_lora_rank=values.get("q_lora_rank"),
                rope_interleave=values.get("rope_interleave", True),
            )
            # The dense part's head_dim is the rotated width (what RoPE scales).
            dense["head_dim"] = latent.qk_rope_head_dim
            dense["num_key_value_heads"] = values.get("num_attention_heads")
        dense["model_type"] = MOE_FAMILIES[model_type]
        base = LlamaConfig.from_hf_dict(dense, name=name)
        if qk_norm:
            base = replace(base, qk_norm=True)
        if model_type == "gpt_oss":
            base = replace(base, sliding_window=values.get("sliding_window"))
        try:
            parts = Experts(
                num_experts=experts, experts_per_token=need("num_experts_per_tok"),
                intermediate_size=inner, moe_layers=tuple(moe_layers), normalize_top_k=normalize,
                biased=model_type == "gpt_oss", **kw)
        except ValueError as err:
            raise ValueError(f"config.json ({model_type}): {err}") from None
        return cls(base, parts, latent, model_type, name, **extra)


def attention_weights(config: MoEConfig, p: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    """One layer's attention weights named from prefix ``p``, as the checkpoints name them:
    the q, k, v and o projections (gpt-oss with its sinks) or MLA's, then the QK norms."""
    a, d, h = config.attention, config.hidden_size, config.attention.num_attention_heads
    m = config.latent
    if m is None:
        yield from attention_shapes(a, p)
        if config.sinks:
            yield p + "sinks", (h,)
    else:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            yield p + "q_proj.weight", (h * qk, d)
        else:  # down, its RMSNorm, up
            yield p + "q_a_proj.weight", (m.q_lora_rank, d)
            yield p + "q_a_layernorm.weight", (m.q_lora_rank,)
            yield p + "q_b_proj.weight", (h * qk, m.q_lora_rank)
        yield p + "kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, d)
        yield p + "kv_a_layernorm.weight", (m.kv_lora_rank,)
        yield p + "kv_b_proj.weight", (h * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)
        yield p + "o_proj.weight", (d, h * m.v_head_dim)
    if a.qk_norm:
        yield p + "q_norm.weight", (a.dim_per_head,)
        yield p + "k_norm.weight", (a.dim_per_head,)


def param_counts(config: MoEConfig) -> tuple[int, int]:
    """``(total, active)`` weights: all of them, and those one token's forward pass reads.

    Active counts the router, the ``experts_per_token`` chosen experts and the shared ones
    in each mixture layer, and everything else (embeddings and head included, as the
    published counts of Mixtral and DeepSeek-V3 do). DeepSeek-V3's multi-token-prediction
    module (``num_nextn_predict_layers``), used for training and speculative decoding, is
    not part of the model counted.
    """
    a, e, d = config.attention, config.experts, config.hidden_size
    moe = len(e.moe_layers)
    dense = config.num_hidden_layers - moe
    # each layer's attention weights, with its norms (input and post-attention RMSNorm)
    attention = config.num_hidden_layers * (
        sum(math.prod(shape) for _, shape in attention_weights(config, "")) + 2 * d)
    router = e.num_experts * (d + e.router_bias + e.biased)
    expert = _expert_params(e, d)
    shared = 3 * d * e.shared_intermediate_size + d * e.shared_gate
    dense_mlp = dense * 3 * d * a.intermediate_size
    outside = a.vocab_size * d * (1 + (not a.tie_word_embeddings)) + d  # embeddings, head, norm
    common = attention + dense_mlp + outside + moe * (router + shared)
    return (common + moe * e.num_experts * expert,
            common + moe * e.experts_per_token * expert)


def _expert_params(e: Experts, d: int) -> int:
    # One routed expert's weights: gate, up and down (with their biases where biased).
    return 3 * d * e.intermediate_size + (2 * e.intermediate_size + d) * e.biased


def touched_experts(num_experts: int, experts_per_token: int, tokens: int,
                    load: Sequence[float] | None = None) -> float:
    """The expected number of distinct experts ``tokens`` tokens are routed to.

    Each token is sent to ``k = experts_per_token`` distinct experts, tokens independently.
    Under uniform routing each expert is among a token's k with probability k / E, so the
    expected count is ``E x (1 - (1 - k/E) ** tokens)``. With a skew, ``load`` gives each
    expert's share of the routed tokens (any non-negative weights, scaled to sum to k):
    expert e is among a token's k with probability ``p_e = k x load_e / sum(load)``, and the
    count is ``sum_e (1 - (1 - p_e) ** tokens)``. ``tokens`` are those routed in one step
    (a decode step's batch; a prefill's prompt tokens).

    Raises
    ------
    ValueError
        If a count is out of range, ``load`` has another length than E, a weight is
        negative or not finite, or a share exceeds one token's worth (``p_e > 1``: an
        expert cannot be chosen twice by one token).
    """
    p = _inclusion(num_experts, experts_per_token, load)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"touched_experts: tokens={tokens!r} must be an integer >= 0")
    return float(np.sum(1.0 - (1.0 - p) ** tokens))


def _inclusion(num_experts: int, experts_per_token: int,
               load: Sequence[float] | None) -> np.ndarray:
    # p_e: the chance expert e is among one token's k (k x its share of the load).
    _positive("touched_experts", "num_experts", num_experts)
    _positive("touched_experts", "experts_per_token", experts_per_token)
    e, k = num_experts, experts_per_token
    if k > e:
        raise ValueError(f"touched_experts: experts_per_token={k} exceeds num_experts={e}")
    if load is None:
        return np.full(e, k / e)
    weights = np.asarray(load, dtype=np.float64)
    if weights.shape != (e,):
        raise ValueError(f"touched_experts: load has {weights.size} weights, expected {e}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError("touched_experts: load must be finite, non-negative, not all zero")
    p = k * weights / weights.sum()
    if p.max() > 1 + 1e-12:
        raise ValueError(
            f"touched_experts: expert {int(p.argmax())} would take {p.max():.3g} of a token's "
            f"{k} choices; a token picks an expert at most once, so no share may exceed "
            f"1/{k} of the load"
        )
    return np.minimum(p, 1.0)


@dataclass(frozen=True)
class ExpertLoad:
    """A user's expert popularity, for estimates of skewed routing.

    Either ``weights`` (one non-negative weight per expert, any scale: each expert's share
    of the routed tokens) or ``zipf`` s (expert j's weight ``1 / (j + 1) ** s``: expert 0
    the busiest; 0 is uniform).
    """

    weights: tuple[float, ...] | None = None
    zipf: float | None = None

    def __post_init__(self) -> None:
        if (self.weights is None) == (self.zipf is None):
            raise ValueError("ExpertLoad takes weights or zipf, one of them")
        z = self.zipf
        if z is not None and (isinstance(z, bool) or not isinstance(z, (int, float))
                              or not 0 <= z < float("inf")):
            raise ValueError(f"ExpertLoad.zipf={z!r} must be a finite number >= 0")

    def shares(self, num_experts: int) -> np.ndarray:
        """The ``num_experts`` weights (checked by :func:`touched_experts`'s rules)."""
        if self.zipf is not None:
            return 1.0 / np.arange(1, num_experts + 1, dtype=np.float64) ** self.zipf
        return np.asarray(self.weights, dtype=np.float64)


def weights_read(config: MoEConfig, tokens: int, load: Sequence[float] | None = None) -> float:
    """Expected weights (elements) one step of ``tokens`` routed tokens reads.

    Everything but the routed experts, plus, in each mixture layer, the expected number of
    distinct experts the tokens touch (:func:`touched_experts`) times one expert's weights.
    One token reads the active weights of :func:`param_counts`; many read close to all.
    """
    e, d = config.experts, config.hidden_size
    total, active = param_counts(config)
    expert = _expert_params(e, d)
    moe = len(e.moe_layers)
    outside = active - moe * e.experts_per_token * expert
    touched = touched_experts(e.num_experts, e.experts_per_token, tokens, load)
    return outside + moe * touched * expert


def expected_routing(num_experts: int, experts_per_token: int, tokens: int,
                     load: Sequence[float] | None = None) -> list[int]:
    """Tokens per expert under uniform routing (or the popularity ``load``), as a plan
    charges it by default.

    ``tokens x k`` rows go to the expected number of distinct experts of
    :func:`touched_experts` (rounded, at least ``k`` and at most ``min(E, tokens x k)``),
    the most popular ones (in order under uniform routing), in proportion to their
    popularity (as evenly as possible under uniform routing), each at least one row and at
    most ``tokens``, the rounding by the largest remainder: one token reaches exactly its k
    experts, a large uniform batch nearly all E, each with ``tokens x k / E`` rows.
    """
    e, k = num_experts, experts_per_token
    p = _inclusion(e, k, load)
    if tokens == 0:
        return [0] * e
    touched = max(k, min(e, tokens * k, round(touched_experts(e, k, tokens, load))))
    top = np.argsort(-p, kind="stable")[:touched]
    want = tokens * k * p[top] / p[top].sum()
    counts = np.clip(np.floor(want), 1, tokens).astype(int)
    rest = tokens * k - int(counts.sum())
    while rest:  # one row at a time where the remainder is largest (or smallest)
        step = 1 if rest > 0 else -1
        room = (counts < tokens) if step > 0 else (counts > 1)
        gap = np.where(room, (want - counts) * step, -np.inf)
        counts[int(np.argmax(gap))] += step
        rest -= step
    out = np.zeros(e, int)
    out[top] = counts
    return out.tolist()


class MoECallGroup(NamedTuple):
    """The calls of one Relax function call of a run (or the host's routing work).

    ``gemms`` in the order the function runs them, each with ``role``: ``"weight"`` (a
    linear layer's weight as the rhs), ``"key"`` / ``"value"`` (attention over the cache),
    or ``"absorbed"`` (MLA's per-head product with a slice of ``kv_b_proj``, a plain float
    matmul the quantize pass leaves alone); ``epilogues`` the vector kinds fused behind
    each GEMM, by name; ``vectors`` the function's other charged operators, after its
    GEMMs (the runtime charges a function's vector work after its offloaded calls).
    ``host`` marks the routing work a run does on the host (scores, top-k, the weighted
    combine): charged by an estimate, absent from a run's ledger.
    """

    function: str
    gemms: list[tuple[MatmulShape, str]]
    epilogues: dict[str, list[str]]
    vectors: list[VectorOpShape]
    host: bool = False


def moe_call_groups(config: MoEConfig, seq_len: int, phase: str = "prefill",
                    tokens_per_expert: Sequence[Sequence[int]] | None = None, batch: int = 1,
                    activation_bits: int = 32, k_multiple: int = 1,
                    float_gemm: bool = True, context: int = 0,
                    logit_rows: int | None = None, kv_cache: KVCache = KVCache()
                    ) -> list[MoECallGroup]:
    """Every call of one prefill or decode step of ``batch`` equal sequences, grouped by
    the function of a run (:mod:`tenet_byoc.models.moe_model`) that makes it.

    Groups, in order: ``embed``; per layer the attention function (attention, for a
    mixture layer the shared experts and the router GEMM, for a dense layer its MLP), then
    for a mixture layer the host's routing (``router.scores``: the softmax, or DeepSeek's
    sigmoid, over ``[tokens, E]`` logits, charged as a softmax; ``router.top_k``: k passes
    of compare-and-keep over the E scores against each token's best so far, charged as an
    add of ``tokens x k x E`` elements, the vector unit having no comparison of its own), each expert that receives
    tokens (its SwiGLU over exactly those rows), and the combine (each chosen expert's
    output scaled by its weight, ``tokens x k x d`` products, and summed into the residual,
    as many adds); then ``head``.

    Parameters
    ----------
    config : MoEConfig
    seq_len : int
        The new tokens of a prefill, or the cache length before a decode step.
    phase : str
        ``prefill`` or ``decode``.
    tokens_per_expert : sequence of sequences of int, or ExpertLoad, optional
        Per mixture layer, the tokens each expert received (a run's routing); default
        :func:`expected_routing` of the step's tokens in every layer (under the
        :class:`ExpertLoad` given in its place, if one is).
    batch : int
        Equal sequences in the step: the linear layers and experts take all their tokens,
        attention stays per sequence.
    activation_bits, k_multiple, float_gemm
        The scheme's activation width (< 32: a quantize entry before each linear layer,
        its K padded to ``k_multiple``) and whether the linear layers run as float GEMMs
        (a decode step of one sequence then fuses a residual add into ``o_proj`` and a
        dense or ungated shared ``down_proj``).
    context : int
        Tokens already cached before a prefill: > 0 makes it a later chunk of a prompt,
        whose rows attend to those keys too (a window's last W - 1 of them), as
        ``vector_ops.decoder_calls`` plans a dense chunk: ``attn.qk``, ``attn.pv``, the
        scale, masks and softmax, and MLA's ``kv_b_proj`` (which expands every key's latent)
        widen to them; everything else stays over the new rows.
    logit_rows : int, optional
        The rows of each sequence the head runs over (default all its new tokens; 0: no
        ``lm_head`` at all, as a chunk that samples nothing).
    kv_cache : KVCache
        How the cache stores keys and values: each layer's cache writes at that width and,
        for an int cache, the quantization of its new keys and values (grouped-query
        attention), as ``models.vector_ops.decoder_calls`` charges them.

    Raises
    ------
    ValueError
        If ``phase`` is unknown, ``seq_len`` or ``context`` out of range (a context only
        before a prefill, the two within the model's positions), or ``tokens_per_expert`` has
        another number of layers or experts, or rows that are not ``tokens x k``.
    """
    limit = config.max_position_embeddings
    rows, _ = call_rows_and_keys(phase, seq_len, limit, "max_position_embeddings")
    if isinstance(context, bool) or not isinstance(context, int) or not (
            0 <= context <= (limit - seq_len if phase == "prefill" else 0)):
        raise ValueError(f"context={context!r} must be an integer in [0, {limit} - seq_len] "
                         "before a prefill (0 before a decode step: seq_len is its cache)")
    head = rows if logit_rows is None else logit_rows
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head <= rows:
        raise ValueError(f"logit_rows={logit_rows!r} must be an integer in [0, {rows}] "
                         "(the call's new tokens)")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r} must be an integer >= 1")
    a, e, d = config.attention, config.experts, config.hidden_size
    b, m, prefill = batch, config.latent, phase == "prefill"
    tokens = b * rows
    layers = e.moe_layers
    if tokens_per_expert is None or isinstance(tokens_per_expert, ExpertLoad):
        load = None if tokens_per_expert is None else tokens_per_expert.shares(e.num_experts)
        even = expected_routing(e.num_experts, e.experts_per_token, tokens, load)
        tokens_per_expert = [even] * len(layers)
    counts = [[int(n) for n in c] for c in tokens_per_expert]
    if len(counts) != len(layers) or any(
            len(c) != e.num_experts or sum(c) != tokens * e.experts_per_token or min(c) < 0
            or max(c) > tokens for c in counts):
        raise ValueError(
            f"tokens_per_expert must give {len(layers)} layers of {e.num_experts} counts, each "
            f"summing to {tokens} tokens x {e.experts_per_token} experts (none above {tokens})"
        )
    by_layer = dict(zip(layers, counts, strict=True))
    fuse = phase == "decode" and b == 1 and float_gemm and activation_bits == 32
    act = (b, rows, d)
    gemms: list[tuple[MatmulShape, str]] = []
    epi: dict[str, list[str]] = {}
    vec = [VectorOpShape("embed_tokens", "take", act)]
    groups: list[MoECallGroup] = []

    def add(name: str, op: str, shape: tuple[int, ...], operand: int = 0) -> None:
        vec.append(VectorOpShape(name, op, shape, operand))

    def linear(name: str, mm: int, n: int, k: int) -> None:
        if activation_bits < 32:
            kp = -(-k // k_multiple) * k_multiple
            vec.append(VectorOpShape(name + ".quantize", "quantize", (1, mm, kp), 0,
                                     activation_bits, True))
        gemms.append((MatmulShape(name, 1, mm, n, k), "weight"))

    def close(function: str, host: bool = False) -> None:  # the calls so far: one group
        nonlocal gemms, epi, vec
        groups.append(MoECallGroup(function, gemms, epi, vec, host))
        gemms, epi, vec = [], {}, []

    close("embed")
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        add(p + "input_layernorm", "rms_norm", act)
        window = config.window(i)
        keys = attended_keys(phase, seq_len, window, context)
        if m is None:
            hd, h, kv, g = a.dim_per_head, a.num_attention_heads, a.num_key_value_heads, \
                a.group_size
            rope = 2 * rows * hd * b
            # in binding order: each projection's quantize, then its head's norm and rotary
            for proj, n, heads in (("q", h * hd, h), ("k", kv * hd, kv), ("v", kv * hd, 0)):
                linear(p + f"self_attn.{proj}_proj", tokens, n, d)
                if a.qkv_bias:
                    epi[p + f"self_attn.{proj}_proj"] = ["add"]
                if heads and a.qk_norm:
                    add(p + f"self_attn.{proj}_norm", "rms_norm", (b, rows, heads, hd))
                if heads:
                    add(p + f"self_attn.{proj}_rotary", "rotary", (b, rows, heads, hd), rope)
                cache = p + f"self_attn.{proj}_cache"
                if proj != "q":  # the new keys (values) as stored; a prefill's are its cache
                    vec.extend(kv_cache.quantize(cache, b, kv, rows, hd))
                    if prefill and not window:
                        vec.append(kv_cache.write(cache, b, kv, rows, hd))
            for proj in () if prefill else ("k", "v"):  # a decode step's, appended to it
                vec.append(kv_cache.write(p + f"self_attn.{proj}_cache", b, kv, rows, hd))
            gemms += [(MatmulShape(p + "attn.qk", b * kv, g * rows, keys, hd), "key"),
                      (MatmulShape(p + "attn.pv", b * kv, g * rows, hd, keys), "value")]
            add(p + "self_attn.scale", "multiply", (b, kv, g * rows, keys), 1)
            if prefill:
                add(p + "self_attn.mask", "mask", (rows, keys))
                if window:
                    add(p + "self_attn.window_mask", "mask", (rows, keys))
                add(p + "self_attn.masked", "add", (b, kv, g, rows, keys), rows * keys)
            # gpt-oss's sinks: one more score column per row, normalized over and dropped
            add(p + "self_attn.softmax", "softmax", (b, kv, g * rows, keys + config.sinks))
            linear(p + "self_attn.o_proj", tokens, d, h * hd)
            if a.o_bias:
                epi[p + "self_attn.o_proj"] = ["add"]
            for proj in ("k", "v") if prefill and window else ():  # the window's rows kept
                vec.append(kv_cache.write(p + f"self_attn.{proj}_cache", b, kv,
                                          min(window, rows), hd))
        else:
            h, rank, rot = a.num_attention_heads, m.kv_lora_rank, m.qk_rope_head_dim
            nope, vd = m.qk_nope_head_dim, m.v_head_dim
            qk = nope + rot
            if m.q_lora_rank is None:
                linear(p + "self_attn.q_proj", tokens, h * qk, d)
            else:
                linear(p + "self_attn.q_a_proj", tokens, m.q_lora_rank, d)
                linear(p + "self_attn.q_b_proj", tokens, h * qk, m.q_lora_rank)
            linear(p + "self_attn.kv_a_proj_with_mqa", tokens, rank + rot, d)
            if prefill:
                linear(p + "self_attn.kv_b_proj", b * keys, h * (nope + vd), rank)
                gemms += [(MatmulShape(p + "attn.qk", b * h, rows, keys, qk), "key"),
                          (MatmulShape(p + "attn.pv", b * h, rows, vd, keys), "value")]
            else:
                gemms += [
                    (MatmulShape(p + "attn.q_absorb", h, b * rows, rank, nope), "absorbed"),
                    (MatmulShape(p + "attn.qk_latent", b, h * rows, keys, rank), "key"),
                    (MatmulShape(p + "attn.qk_rope", b, h * rows, keys, rot), "key"),
                    (MatmulShape(p + "attn.pv_latent", b, h * rows, rank, keys), "value"),
                    (MatmulShape(p + "attn.v_absorb", h, b * rows, vd, rank), "absorbed")]
            linear(p + "self_attn.o_proj", tokens, d, h * vd)
            rope = 2 * rows * rot * b
            if m.q_lora_rank is not None:
                add(p + "self_attn.q_a_layernorm", "rms_norm", (b, rows, m.q_lora_rank))
            add(p + "self_attn.q_rotary", "rotary", (b, rows, h, rot), rope)
            # the cache: per token the normed latent and the shared rotated key
            latent = kv_cache.write(p + "self_attn.latent_cache", b, 1, rows, rank)
            rope_key = kv_cache.write(p + "self_attn.k_rope_cache", b, 1, rows, rot)
            add(p + "self_attn.kv_a_layernorm", "rms_norm", (b, rows, rank))
            vec.extend([latent] if prefill else [])
            add(p + "self_attn.k_rotary", "rotary", (b, rows, 1, rot), rope)
            vec.extend([rope_key] if prefill else [latent, rope_key])
            if prefill:
                add(p + "self_attn.scale", "multiply", (b, h, rows, keys), 1)
                add(p + "self_attn.mask", "mask", (rows, keys))
                add(p + "self_attn.masked", "add", (b, h, rows, keys), rows * keys)
                add(p + "self_attn.softmax", "softmax", (b, h, rows, keys))
            else:  # the latent and rotary scores summed, scaled, normalized
                scores = (b, h * rows, keys)
                add(p + "self_attn.scores", "add", scores, b * h * rows * keys)
                add(p + "self_attn.scale", "multiply", scores, 1)
                add(p + "self_attn.softmax", "softmax", scores)
        if fuse and not a.o_bias:
            epi.setdefault(p + "self_attn.o_proj", []).append("add")
        else:
            add(p + "attn_residual", "add", act, b * rows * d)
        add(p + "post_attention_layernorm", "rms_norm", act)

        def swiglu(prefix: str, width: int, residual: bool, gated: bool = False,
                   lead: tuple[int, int] = (b, rows), clamped: bool = False) -> None:
            # gate, up, down over the lead's tokens, SiLU and the product (clamped, gpt-oss's
            # experts: silu(alpha min(gate, L)) / alpha x (clip(up) + 1), the clamps
            # uncharged); the residual add fused into down in a float decode step of one
            # sequence, else after it
            n, shape = lead[0] * lead[1], (*lead, width)
            linear(prefix + "gate_proj", n, width, d)
            if clamped:
                add(prefix + "alpha", "multiply", shape, 1)
            add(prefix + "silu", "silu", shape)
            if clamped:
                add(prefix + "over_alpha", "multiply", shape, 1)
            linear(prefix + "up_proj", n, width, d)
            if clamped:
                add(prefix + "up_plus_one", "add", shape, 1)
            add(prefix + "gate_x_up", "multiply", shape, n * width)
            linear(prefix + "down_proj", n, d, width)
            if gated:
                linear(prefix + "gate", tokens, 1, d)
                add(prefix + "gated", "multiply", act, b * rows)
            if residual:
                if fuse and not gated:
                    epi[prefix + "down_proj"] = ["add"]
                else:
                    add(prefix + "residual", "add", act, b * rows * d)

        if i not in by_layer:
            swiglu(p + "mlp.", a.intermediate_size, True)
            close(f"layers.{i}.dense")
            continue
        if e.shared_intermediate_size:
            swiglu(p + "shared.", e.shared_intermediate_size, True, e.shared_gate)
        linear(p + "router", tokens, e.num_experts, d)
        if e.biased:
            epi[p + "router"] = ["add"]
        close(f"layers.{i}.attention")
        k = e.experts_per_token
        add(p + "router.scores", "softmax", (1, tokens, e.num_experts))
        add(p + "router.top_k", "add", (1, tokens, k, e.num_experts), tokens * k)
        close(f"layers.{i}.route", True)
        for j, n in enumerate(by_layer[i]):
            if not n:
                continue
            q = f"{p}experts.{j}."
            swiglu(q, e.intermediate_size, False, lead=(1, n), clamped=e.swiglu_limit is not None)
            if e.biased:
                epi.update({g.name: ["add"] for g, _ in gemms})
            close(f"{q}expert")
        add(p + "experts.scale", "multiply", (1, tokens * k, d), tokens * k)
        add(p + "experts.combine", "add", (1, tokens * k, d), tokens * k * d)
        close(f"layers.{i}.combine", True)
    add("norm", "rms_norm", act)
    if head:
        linear("lm_head", b * head, a.vocab_size, d)
    close("head")
    return groups


def moe_matmuls(config: MoEConfig, seq_len: int, phase: str = "prefill",
                tokens_per_expert: Sequence[Sequence[int]] | None = None) -> list[MatmulShape]:
    """The matmuls of one call of one sequence, in the order a run executes them.

    Per layer: the attention's (grouped-query: ``q_proj``, ``k_proj``, ``v_proj``,
    ``attn.qk``, ``attn.pv``, ``o_proj``; latent: ``q_a_proj``, ``q_b_proj`` (or
    ``q_proj``), ``kv_a_proj_with_mqa``, then in a prefill ``kv_b_proj`` over every token
    and ``attn.qk`` and ``attn.pv`` per head, in a decode step the absorbed form
    (``attn.q_absorb`` and ``attn.v_absorb`` per head, ``attn.qk_latent``, ``attn.qk_rope``
    and ``attn.pv_latent`` with all heads' rows over the shared latents), ``o_proj``); then
    a dense layer's ``gate_proj``, ``up_proj``, ``down_proj``, or a mixture layer's shared
    experts (``shared.*``), its router (``router``) and each expert that received tokens,
    in expert order, with as many rows as tokens it received (``experts.{j}.gate_proj``,
    ...); then ``lm_head``. The GEMMs of :func:`moe_call_groups` (which see for the
    parameters and the default routing, :func:`expected_routing`).
    """
    return [g for group in moe_call_groups(config, seq_len, phase, tokens_per_expert)
            for g, _ in group.gemms]
