"""Llama-family decoders (Llama, Mistral, Qwen2) in ``tvm.relax.frontend.nn``, with a runner.

RMSNorm, rotary position embeddings (plain or scaled, :mod:`tenet_byoc.models.rope`), grouped-query attention and a SwiGLU MLP,
configured from a Hugging Face ``config.json``; prefill and decode with a key/value cache,
as :mod:`tenet_byoc.models.gpt2`. Every matmul stays an ``R.matmul`` (the projections as
``R.matmul(x, R.permute_dims(W))``), so ``tenet_byoc.build`` offloads all of them and
``tenet_byoc.quantize`` rewrites the projections and the head.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from ._params import check_named_arrays
from .checkpoint import Layout, load_weights, read_config
from .decoder import (
    LAYER_TYPES,
    MASK_VALUE,
    BatchLayout,
    MatmulShape,
    call_rows_and_keys,
    decode_layout,
    export_decoder,
    prefill_layout,
    read_layer_types,
    take_rows,
)
from .rope import RopeScaling, rope_from_config
from .runner import DecoderRunner, KVCache, check_ids

__all__ = [
    "FAMILIES",
    "MAX_LAYERS",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaRunner",
    "check_params",
    "export_llama",
    "llama_matmuls",
    "load_checkpoint",
    "param_count",
    "param_shapes",
    "random_params",
]

_DTYPE = "float32"

#: The ``model_type`` values of ``config.json`` this module reads.
FAMILIES = ("llama", "mistral", "qwen2", "gemma2", "gemma3_text")
#: The Gemma families (see ``LlamaConfig.model_type``), and the MLP's gate activations.
GEMMAS = ("gemma2", "gemma3_text")
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")

# A dimension this large is a typo or an attack, not a model; refused before anything else.
_MAX_DIM = 1 << 24

#: The most decoder layers a config may have. The deepest published Llama-family models have
#: about 128 (Llama-3.1-405B: 126); a larger count is refused when the config is read, as
#: estimating or loading one costs time and memory in proportion to it.
MAX_LAYERS = 1024


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-family decoder, with Hugging Face's ``config.json`` field names.

    Family differences are fields: Qwen2 is ``qkv_bias`` with tied embeddings, Mistral a
    ``sliding_window``; :meth:`from_hf_dict` sets them from ``model_type``.

    Parameters
    ----------
    hidden_size : int
        Model width d.
    num_hidden_layers : int
        Number of decoder layers.
    num_attention_heads : int
        Query heads.
    num_key_value_heads : int
        Key/value heads; must divide ``num_attention_heads`` (grouped-query attention).
    intermediate_size : int
        Width of the SwiGLU MLP's hidden layer.
    vocab_size : int
        Number of tokens.
    max_position_embeddings : int
        Context length the model was trained for: the most tokens a sequence may hold.
    head_dim : int or None
        Width of one head; ``None`` means ``hidden_size // num_attention_heads``.
    rms_norm_eps : float
        Epsilon of every RMSNorm.
    rope_theta : float
        Base of the rotary embedding's frequencies.
    rope_scaling : RopeScaling or None
        How the frequencies are scaled for a longer context (Llama 3.1's ``llama3``, YaRN,
        ...); None for plain RoPE.
    qkv_bias : bool
        The q, k and v projections have biases (Qwen2; Llama's ``attention_bias``).
    o_bias : bool
        The output projection has a bias (Llama's ``attention_bias``).
    mlp_bias : bool
        The MLP's projections have biases (Llama's ``mlp_bias``).
    tie_word_embeddings : bool
        The head reuses the embedding matrix (no ``lm_head.weight``).
    qk_norm : bool
        An RMSNorm over each query and key head before RoPE (Qwen3's ``q_norm`` /
        ``k_norm``); set by the mixture-of-experts configs that have it.
    sliding_window : int or None
        The attention window W: a token attends to itself and the W - 1 tokens before it.
        When every layer has it (Mistral) the cache keeps only the last W tokens (a
        rolling buffer); beside full layers it keeps them all.
    layer_types : tuple of str or None
        Per layer ``"sliding_attention"`` or ``"full_attention"`` (Gemma); None: all alike.
    hidden_act : str
        The MLP's gate: ``"silu"`` (SwiGLU) or ``"gelu_pytorch_tanh"`` (GeGLU).
    attn_logit_softcapping, final_logit_softcapping : float or None
        Gemma-2's ``c * tanh(x / c)`` of the scaled scores (before the mask), of the logits.
    query_pre_attn_scalar : float or None
        The scores are scaled by its inverse square root, not head_dim's (Gemma).
    rope_local_theta : float or None
        Gemma-3's rotary base of the sliding layers, unscaled (``rope_local_base_freq``).
    model_type : str
        One of :data:`FAMILIES`; Gemma's (:data:`GEMMAS`) have four norms per layer whose
        weight is the scale (Hugging Face's ``w`` loaded as ``1 + w``), the embedding
        scaled by sqrt(hidden_size).
    name : str
        A label for reports.
    """

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 2048
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    hidden_act: str = "silu"
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    query_pre_attn_scalar: float | None = None
    rope_local_theta: float | None = None
    model_type: str = "llama"
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            _check_dim(field, getattr(self, field))
        for field in ("head_dim", "sliding_window"):
            if getattr(self, field) is not None:
                _check_dim(field, getattr(self, field))
        if self.num_hidden_layers > MAX_LAYERS:
            raise ValueError(
                f"LlamaConfig.num_hidden_layers={self.num_hidden_layers} is above the limit "
                f"{MAX_LAYERS} (the deepest published Llama-family models have about 128)"
            )
        if self.sliding_window is not None and self.sliding_window < 2:
            raise ValueError(f"LlamaConfig.sliding_window={self.sliding_window} must be >= 2")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"LlamaConfig.num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"LlamaConfig.num_attention_heads={self.num_attention_heads} must divide "
                f"hidden_size={self.hidden_size} when head_dim is not given"
            )
        if self.dim_per_head % 2:
            raise ValueError(f"LlamaConfig.head_dim={self.dim_per_head} must be even (RoPE)")
        optional = ("attn_logit_softcapping", "final_logit_softcapping",
                    "query_pre_attn_scalar", "rope_local_theta")
        for field in ("rms_norm_eps", "rope_theta", *optional):
            value = getattr(self, field)
            if value is None and field in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 < value < math.inf):
                raise ValueError(f"LlamaConfig.{field}={value!r} must be a positive number")
        if not self.rms_norm_eps < 1:
            raise ValueError(f"LlamaConfig.rms_norm_eps={self.rms_norm_eps!r} must be < 1")
        for field in ("qkv_bias", "o_bias", "mlp_bias", "tie_word_embeddings", "qk_norm"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"LlamaConfig.{field}={getattr(self, field)!r} must be a bool")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise TypeError(
                f"LlamaConfig.rope_scaling={self.rope_scaling!r} must be a RopeScaling or None"
            )
        if self.model_type not in FAMILIES:
            raise ValueError(f"LlamaConfig.model_type={self.model_type!r}; known: {FAMILIES}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"LlamaConfig.hidden_act={self.hidden_act!r}; known: {ACTIVATIONS}")
        types = self.layer_types
        if types is not None and (not isinstance(types, tuple) or len(types) !=
                                  self.num_hidden_layers or not set(types) <= set(LAYER_TYPES)):
            raise ValueError(f"LlamaConfig.layer_types={types!r} must be a tuple of "
                             f"num_hidden_layers={self.num_hidden_layers} values of {LAYER_TYPES}")
        if not isinstance(self.name, str):
            raise TypeError(f"LlamaConfig.name={self.name!r} must be a string")

    @property
    def dim_per_head(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads if self.head_dim is None else self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def gemma(self) -> bool:
        """Gemma-2 / 3: sandwich (1 + w) norms, a scaled embedding (see ``model_type``)."""
        return self.model_type in GEMMAS

    @property
    def window(self) -> int | None:
        """The window of every layer (the cache a rolling buffer of it), or None where some
        layer attends to every token."""
        if self.layer_types is not None and "full_attention" in self.layer_types:
            return None
        return self.layer_window(0)

    def layer_window(self, layer: int) -> int | None:
        """The attention window of decoder layer ``layer``, or None where it sees every
        token (a full layer, or a window no shorter than the context)."""
        w = self.sliding_window
        if self.layer_types is not None and self.layer_types[layer] != "sliding_attention":
            return None
        return w if w is not None and w < self.max_position_embeddings else None

    @property
    def uniform_layers(self) -> bool:
        """Whether every decoder layer runs the same calls (the plan walks two of them)."""
        return len({self.layer_window(i) for i in range(self.num_hidden_layers)}) == 1

    def cache_length(self, tokens: int) -> int:
        """Tokens the cache holds after ``tokens`` tokens: all, or the last ``window``."""
        return tokens if self.window is None else min(tokens, self.window)

    @classmethod
    def from_hf_dict(cls, values: Mapping[str, Any], name: str = "custom") -> LlamaConfig:
        """Build a configuration from the contents of a Hugging Face ``config.json``.

        Reads ``rope_parameters`` (transformers 5) or the older top-level ``rope_theta``
        and ``rope_scaling`` (:func:`tenet_byoc.models.rope.rope_from_config`: plain RoPE,
        ``linear``, ``dynamic``, ``llama3`` and ``yarn``). Unknown keys are ignored.

        Raises
        ------
        ValueError
            If ``model_type`` is not a Llama family, a required field is missing, or an
            option this implementation lacks is set (the message names the field).
        """
        model_type = values.get("model_type", "llama")
        if model_type not in FAMILIES:
            raise ValueError(f"config.json model_type={model_type!r} is not one of {FAMILIES}")
        required = (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "vocab_size",
        )
        missing = [k for k in required if values.get(k) is None]
        if missing:
            raise ValueError(f"config.json ({model_type}) lacks {missing}")
        gemma = model_type in GEMMAS
        # Gemma writes hidden_activation (and may keep an older hidden_act beside it).
        act = values.get("hidden_activation") if gemma else None
        act = act or values.get("hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")
        if act not in ACTIVATIONS:
            raise ValueError(f"config.json hidden_act={act!r} is not supported; known: "
                             f"{list(ACTIVATIONS)}")
        # JSON gives any type; a count written as a string ("96") is refused by name here.
        for key in (*required, "num_key_value_heads", "max_position_embeddings", "head_dim",
                    "sliding_window", "sliding_window_pattern"):
            value = values.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(
                    f"config.json {key}={value!r} must be an integer, not a "
                    f"{type(value).__name__}"
                )
        kwargs: dict[str, Any] = {k: values[k] for k in required}
        kwargs["hidden_act"] = act
        if gemma:  # transformers' defaults for fields a Gemma config.json may leave out
            kwargs.update(head_dim=256, tie_word_embeddings=True,
                          max_position_embeddings=8192 if model_type == "gemma2" else 131072)
        # Absent (or null) means one key/value head per query head; 0 is an error, not absent.
        kv_heads = values.get("num_key_value_heads")
        kwargs["num_key_value_heads"] = values["num_attention_heads"] if kv_heads is None else kv_heads
        for key in ("max_position_embeddings", "head_dim", "rms_norm_eps", "tie_word_embeddings"):
            if values.get(key) is not None:
                kwargs[key] = values[key]
        if model_type == "gemma3_text":
            kwargs.update(_gemma3_rope(values))
        else:
            kwargs["rope_theta"], kwargs["rope_scaling"] = rope_from_config(values)
        if model_type == "qwen2":
            kwargs["qkv_bias"] = True
            if values.get("use_sliding_window"):
                raise ValueError(
                    "config.json use_sliding_window=true is not supported for qwen2 "
                    "(its window applies to some layers only)"
                )
        else:
            kwargs["qkv_bias"] = kwargs["o_bias"] = values.get("attention_bias", False)
            kwargs["mlp_bias"] = values.get("mlp_bias", False)
            if model_type != "llama":
                kwargs["sliding_window"] = values.get("sliding_window")
        if gemma:
            if values.get("use_bidirectional_attention"):
                raise ValueError("config.json use_bidirectional_attention=true is not "
                                 "supported (a causal decoder only)")
            # Gemma-2's default is every second layer full, Gemma-3's every sixth.
            period = 2 if model_type == "gemma2" else values.get("sliding_window_pattern", 6)
            if period is None or period < 1:
                raise ValueError(f"config.json sliding_window_pattern={period!r} must be a "
                                 "positive integer (every how many layers one is full)")
            kwargs["layer_types"] = read_layer_types(values, period)
            kwargs["qk_norm"] = model_type == "gemma3_text"
            # transformers' defaults when absent (null: none); Gemma-3's attention takes no
            # soft-capping, whatever its config says.
            caps = {"final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0} \
                if model_type == "gemma2" else {"final_logit_softcapping": None}
            for key, default in (*caps.items(), ("query_pre_attn_scalar", 256)):
                kwargs[key] = values.get(key, default)
        return cls(model_type=model_type, name=name, **kwargs)


def _gemma3_rope(values: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma-3's two rotary embeddings: the full layers' base and scaling, the sliding
    layers' plain base; from ``rope_parameters`` by layer type (transformers 5) or the
    older ``rope_theta`` / ``rope_scaling`` / ``rope_local_base_freq``."""
    by_type = values.get("rope_parameters")
    if isinstance(by_type, Mapping) and "full_attention" in by_type:
        full, local = by_type.get("full_attention"), by_type.get("sliding_attention") or {}
        if not isinstance(full, Mapping) or not isinstance(local, Mapping):
            raise ValueError(f"config.json rope_parameters={by_type!r}: the full_attention and "
                             "sliding_attention entries must be objects")
        theta, scaling = rope_from_config({"rope_parameters": {"rope_theta": 1e6, **full}})
        local_theta, local_scaling = rope_from_config(
            {"rope_parameters": {"rope_theta": 1e4, **local}})
        if local_scaling is not None:
            raise ValueError("config.json rope_parameters.sliding_attention: a scaled rotary "
                             "embedding on the sliding layers is not supported")
    else:
        theta, scaling = rope_from_config({"rope_theta": 1e6, **values})
        local_theta = values.get("rope_local_base_freq", 1e4)
    return {"rope_theta": theta, "rope_scaling": scaling, "rope_local_theta": local_theta}


def _check_dim(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"LlamaConfig.{field}={value!r} must be a positive integer")
    if not 0 < value <= _MAX_DIM:
        raise ValueError(f"LlamaConfig.{field}={value} must be in [1, {_MAX_DIM}]")


# ----------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------


_Pair = tuple[nn.Tensor, nn.Tensor]  # (cos, sin) tables, or a layer's (K, V) cache
_Triple = tuple[nn.Tensor, nn.Tensor, nn.Tensor]  # (output, K, V)


def _rotate_half(x: nn.Tensor) -> nn.Tensor:
    first, second = op.split(x, 2, axis=-1)
    return op.concat([op.negative(second), first], dim=-1)


class LlamaAttention(nn.Module):
    """Causal grouped-query self-attention with rotary embeddings on queries and keys.

    The ``group_size`` query heads that share a key/value head are stacked into the rows
    of one GEMM per key/value head: scores are ``R.matmul(Q[1, kv, g * s, hd],
    K^T[1, kv, hd, L])``, the context ``R.matmul(P[1, kv, g * s, L], V[1, kv, L, hd])``.
    Keys and values are never repeated, as a GQA kernel would not repeat them.
    """

    def __init__(self, config: LlamaConfig, layer: int = 0) -> None:
        d, hd = config.hidden_size, config.dim_per_head
        self.window = config.layer_window(layer)
        self.rolling = config.window  # the cache keeps only the last W tokens
        scalar = config.query_pre_attn_scalar or hd
        self.cap = config.attn_logit_softcapping
        # With soft-capping, the score scale and the 1 / cap before tanh are one multiply.
        self.scale = scalar**-0.5 / (self.cap or 1.0)
        self.n_head = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = hd
        self.q_proj = nn.Linear(d, self.n_head * hd, bias=config.qkv_bias)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=config.qkv_bias)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.n_head * hd, d, bias=config.o_bias)
        if config.qk_norm:
            eps = config.rms_norm_eps
            self.q_norm = nn.RMSNorm(hd, axes=-1, epsilon=eps, bias=False)
            self.k_norm = nn.RMSNorm(hd, axes=-1, epsilon=eps, bias=False)
        self.qk_norm = config.qk_norm

    def forward(self, x: nn.Tensor, rope: _Pair, past: _Pair | None,
                batch: BatchLayout | None = None) -> _Triple:
        """Attend over the past keys/values (if any) and ``x``'s own; return output, K, V.

        ``rope`` is ``(cos, sin)``, each ``[1, s, 1, head_dim]`` for ``x``'s positions.
        Without ``past`` (prefill) a causal mask hides later positions (and, with a window
        W, those W or more before); with it (decode, one query at the end of the sequence)
        every key is visible, the past cut to its last W - 1 tokens. The returned K and V
        are the cache to keep: with a window, its last W tokens. With ``batch`` the rows
        of ``x`` are ``batch.size`` sequences of ``batch.length`` tokens, ``rope`` is
        ``[size, length, 1, head_dim]`` (each sequence's own positions) and
        ``batch.mask`` (padding, causality, window) replaces the masks above.
        """
        if batch is None:
            b, s, _ = x.shape
        else:
            b, s = batch.size, batch.length
        hd, g = self.head_dim, self.n_head // self.n_kv
        cos, sin = rope

        def heads(t: nn.Tensor, n: int, rotate: bool, norm: Any = None) -> nn.Tensor:
            # [b, s, n * hd] (or [1, b * s, n * hd]) -> [b, n, s, hd], normed and rotated
            t = op.reshape(t, [b, s, n, hd])
            if norm is not None:
                t = norm(t)
            if rotate:
                t = t * cos + _rotate_half(t) * sin
            return op.permute_dims(t, [0, 2, 1, 3])

        q = heads(self.q_proj(x), self.n_head, True, self.q_norm if self.qk_norm else None)
        k = heads(self.k_proj(x), self.n_kv, True, self.k_norm if self.qk_norm else None)
        v = heads(self.v_proj(x), self.n_kv, False)
        if past is not None:  # with a window, the new token sees the W - 1 before it
            keep = None if self.rolling is None else self.rolling - 1
            k = op.concat([self._last(past[0], keep), k], dim=2)
            v = op.concat([self._last(past[1], keep), v], dim=2)
        cache = k, v  # with a rolling buffer, its last W tokens (cut after the attention)
        if past is not None and self.rolling is None and self.window is not None:
            k, v = self._last(k, self.window), self._last(v, self.window)  # a view of the cache
        keys = k.shape[2]
        q = op.reshape(q, [b, self.n_kv, g * s, hd])
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * self.scale
        if self.cap:  # soft-capping: cap * tanh(scaled score / cap), before the mask
            scores = op.tanh(scores) * self.cap
        if batch is not None:
            mask = op.reshape(batch.mask(keys), [b, 1, 1, s, keys])
            scores = op.reshape(op.reshape(scores, [b, self.n_kv, g, s, keys]) + mask,
                                [b, self.n_kv, g * s, keys])
        elif past is None:
            mask = op.triu(op.full([s, s], MASK_VALUE, dtype=_DTYPE), diagonal=1)
            if self.window:  # and the keys W or more tokens back
                band = relax.op.tril(op.full([s, s], MASK_VALUE, dtype=_DTYPE)._expr,
                                     -self.window)
                mask = mask + op.wrap_nested(band, name="window_mask")
            scores = op.reshape(op.reshape(scores, [b, self.n_kv, g, s, keys]) + mask,
                                [b, self.n_kv, g * s, keys])
        out = op.matmul(self._probs(scores, b, s), v)  # [b, kv, g * s, hd]
        out = op.permute_dims(op.reshape(out, [b, self.n_head, s, hd]), [0, 2, 1, 3])
        rows = [b, s, self.n_head * hd] if batch is None else [1, b * s, self.n_head * hd]
        out = self.o_proj(op.reshape(out, rows))
        return out, self._last(cache[0], self.rolling), self._last(cache[1], self.rolling)

    def _probs(self, scores: nn.Tensor, b: Any, s: Any) -> nn.Tensor:
        # The attention weights of scores [b, kv, g * s, keys] (a sink's column in gpt-oss).
        return op.softmax(scores, axis=-1)

    @staticmethod
    def _last(t: nn.Tensor, n: int | None) -> nn.Tensor:
        # The last n tokens (axis 2) of a cache tensor; all of them when n is None.
        if n is None:
            return t
        length = t.shape[2]
        begin = tirx.max(length - n, 0)
        rows = relax.op.strided_slice(
            t._expr, axes=[2], begin=[begin], end=[length], assume_inbound=True
        )
        return op.wrap_nested(rows, name="cache_window")


class LlamaMLP(nn.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``; GeGLU with GELU (tanh)."""

    def __init__(self, config: LlamaConfig) -> None:
        d, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.geglu = config.hidden_act == "gelu_pytorch_tanh"
        self.gate_proj = nn.Linear(d, inner, bias=bias)
        self.up_proj = nn.Linear(d, inner, bias=bias)
        self.down_proj = nn.Linear(inner, d, bias=bias)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """Apply the MLP."""
        gate = self.gate_proj(x)
        gate = op.gelu(gate, approximate="tanh") if self.geglu else op.silu(gate)
        return self.down_proj(gate * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """A pre-RMSNorm decoder layer; Gemma's also norms the attention's and the MLP's outputs
    (its ``post_attention_layernorm`` is the attention's, ``pre_feedforward_layernorm``
    the MLP's input norm)."""

    def __init__(self, config: LlamaConfig, layer: int = 0) -> None:
        d, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.self_attn = LlamaAttention(config, layer)
        self.post_attention_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.gemma = config.gemma
        if self.gemma:
            self.pre_feedforward_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
            self.post_feedforward_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.mlp = LlamaMLP(config)

    def forward(self, x: nn.Tensor, rope: _Pair, past: _Pair | None,
                batch: BatchLayout | None = None) -> _Triple:
        """Apply the layer; return the new hidden state and this layer's K and V."""
        attn, k, v = self.self_attn(self.input_layernorm(x), rope, past, batch)
        if self.gemma:
            x = x + self.post_attention_layernorm(attn)
            return x + self.post_feedforward_layernorm(
                self.mlp(self.pre_feedforward_layernorm(x))), k, v
        x = x + attn
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, k, v


class LlamaForCausalLM(nn.Module):
    """A Llama-family decoder with two entry points, prefill and decode.

    Parameter names are those of Hugging Face's checkpoints without the ``model.`` prefix
    (``embed_tokens.weight``, ``layers.0.self_attn.q_proj.weight``, ``norm.weight``,
    ``lm_head.weight`` unless the head is tied); linear weights are ``[out, in]``.
    """

    def __init__(self, config: LlamaConfig) -> None:
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = nn.RMSNorm(config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def _rope(self, begin: Any, length: Any, local: bool = False
              ) -> tuple[nn.Tensor, nn.Tensor]:
        # cos/sin of positions [begin, begin + length), computed in float32 as HF does:
        # angle = position * inv_freq, the half-width table repeated twice.
        hd = self.config.dim_per_head
        pos = op.wrap_nested(
            relax.op.arange(begin, begin + length, 1, dtype=_DTYPE), name="rope_positions"
        )
        angle = op.reshape(pos, [length, 1]) * op.reshape(self._inv_freq(local), [1, hd // 2])
        return self._cos_sin(op.reshape(op.concat([angle, angle], dim=-1), [1, length, 1, hd]),
                             local)

    def _inv_freq(self, local: bool = False) -> nn.Tensor:
        # The frequencies, scaled as the config says, rounded to float32 as HF keeps them
        # (Gemma-3's sliding layers: their own base, unscaled).
        c = self.config
        scaling = RopeScaling() if local else c.rope_scaling or RopeScaling()
        theta = c.rope_local_theta if local else c.rope_theta
        inv_freq = scaling.inv_freq(c.dim_per_head, float(theta))
        return op.wrap_nested(relax.const(inv_freq.astype(np.float32)), name="rope_inv_freq")

    def _cos_sin(self, angle: nn.Tensor, local: bool = False) -> tuple[nn.Tensor, nn.Tensor]:
        # cos and sin of the angles, times YaRN's attention factor where there is one.
        cos = op.wrap_nested(relax.op.cos(angle._expr), name="rope_cos")
        sin = op.wrap_nested(relax.op.sin(angle._expr), name="rope_sin")
        scaling = None if local else self.config.rope_scaling
        scale = 1.0 if scaling is None else scaling.attention_scale()
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        return cos, sin

    def _rope_batch(self, positions: nn.Tensor) -> tuple[nn.Tensor, nn.Tensor]:
        # As _rope, for each sequence's own positions: [B, S] int32 -> [B, S, 1, hd] tables.
        b, s = positions.shape
        hd = self.config.dim_per_head
        pos = op.wrap_nested(relax.op.astype(positions._expr, _DTYPE), name="rope_positions")
        angle = op.reshape(pos, [b, s, 1]) * op.reshape(self._inv_freq(), [1, 1, hd // 2])
        return self._cos_sin(op.reshape(op.concat([angle, angle], dim=-1), [b, s, 1, hd]))

    def _run(
        self, ids: nn.Tensor, begin: Any, past: Sequence[nn.Tensor] | None,
        batch: BatchLayout | None = None,
    ) -> tuple[nn.Tensor, tuple[nn.Tensor, ...]]:
        c = self.config
        x = take_rows(self.embed_tokens.weight, ids)
        if c.gemma:  # sqrt(d) rounded to float32, as Hugging Face scales it
            x = x * float(np.float32(math.sqrt(c.hidden_size)))
        if batch is None:
            rope = self._rope(begin, ids.shape[1])
        else:  # one row axis: each linear layer is one GEMM of B * S rows
            rope = self._rope_batch(batch.positions)
            x = op.reshape(x, [1, batch.size * batch.length, c.hidden_size])
        local = rope
        if c.rope_local_theta is not None:  # Gemma-3's sliding layers rotate by their own base
            local = self._rope(begin, ids.shape[1], local=True)
        cache: list[nn.Tensor] = []
        for i, layer in enumerate(self.layers):
            layer_past = None if past is None else (past[2 * i], past[2 * i + 1])
            sliding = c.layer_types is not None and c.layer_types[i] == "sliding_attention"
            x, k, v = layer(x, local if sliding else rope, layer_past, batch)
            cache += [k, v]
        x = self.norm(x)
        if c.tie_word_embeddings:
            logits = op.matmul(x, op.permute_dims(self.embed_tokens.weight))
        else:
            logits = self.lm_head(x)
        if c.final_logit_softcapping:  # cap * tanh(logits / cap)
            cap = c.final_logit_softcapping
            logits = op.tanh(logits * (1.0 / cap)) * cap
        if batch is not None:
            logits = op.reshape(logits, [batch.size, batch.length, self.config.vocab_size])
        return logits, tuple(cache)

    def prefill(self, input_ids: nn.Tensor) -> tuple[nn.Tensor, tuple[nn.Tensor, ...]]:
        """Run a prompt of ``seq_len`` tokens from position 0.

        Returns ``[1, seq_len, vocab_size]`` logits and ``2 * num_hidden_layers`` cache
        tensors ``K_0, V_0, ...``, each ``[1, num_key_value_heads, seq_len, head_dim]``
        (keys after RoPE).
        """
        return self._run(input_ids, 0, None)

    def decode(
        self, input_id: nn.Tensor, past: Sequence[nn.Tensor], position: Any = None
    ) -> tuple[nn.Tensor, tuple[nn.Tensor, ...]]:
        """Run one token at position ``past_len`` given the cache of the ones before it.

        ``past`` holds ``2 * num_hidden_layers`` tensors, each ``[1, num_key_value_heads,
        past_len, head_dim]``; returns ``[1, 1, vocab_size]`` logits and the cache extended
        by this token. With a sliding window the cache holds only the last tokens, so the
        new token's ``position`` is an input (a ``R.Shape([position])``).
        """
        return self._run(input_id, past[0].shape[2] if position is None else position, past)

    def prefill_batch(
        self, input_ids: nn.Tensor, pad: nn.Tensor
    ) -> tuple[nn.Tensor, tuple[nn.Tensor, ...]]:
        """Run ``batch`` left-padded prompts of ``seq_len`` slots at once.

        ``input_ids`` is ``[batch, seq_len]`` int32, ``pad`` ``[batch]`` int32 the pad slots
        before each sequence's first token. Returns ``[batch, seq_len, vocab_size]`` logits
        (rows of pad slots are meaningless) and the cache tensors, each ``[batch,
        num_key_value_heads, seq_len (or the last window), head_dim]``.
        """
        return self._run(input_ids, 0, None, prefill_layout(input_ids, pad, self.config.window))

    def decode_batch(
        self, input_id: nn.Tensor, past: Sequence[nn.Tensor], position: nn.Tensor,
        first_key: nn.Tensor,
    ) -> tuple[nn.Tensor, tuple[nn.Tensor, ...]]:
        """Run one token per sequence after a batch's cache.

        ``input_id`` is ``[batch, 1]``, ``past`` the cache tensors ``[batch,
        num_key_value_heads, past_len, head_dim]`` (with a sliding window, the last W - 1
        of them are attended to); ``position`` ``[batch]`` int32 is each new token's
        position and ``first_key`` ``[batch]`` int32 each sequence's first attended key
        that is not a pad slot. Returns ``[batch, 1, vocab_size]`` logits and the cache one
        slot longer (or rolled by one).
        """
        return self._run(input_id, 0, past, decode_layout(input_id, position, first_key))


def export_llama(
    config: LlamaConfig, params: Mapping[str, np.ndarray] | None = None, batched: bool = False
) -> IRModule:
    """Export the model to a Relax IRModule with the functions ``prefill`` and ``decode``.

    Every matmul is an ``R.matmul`` (projections and an untied head as
    ``R.matmul(x, R.permute_dims(W))``), so all of them can be offloaded.

    Parameters
    ----------
    config : LlamaConfig
    params : mapping of str to numpy.ndarray, optional
        Weights bound into both functions as constants. Without them the functions take
        the weights as parameters after their inputs, in :func:`param_shapes` order.
    batched : bool
        Also export ``prefill_batch`` and ``decode_batch``, which run several left-padded
        sequences at once (see :func:`tenet_byoc.models.decoder.export_decoder`).

    Returns
    -------
    IRModule
        ``prefill(input_ids: [1, seq_len] int32, *weights)`` returns ``(logits [1, seq_len,
        vocab], (K_0, V_0, ...))``; ``decode(input_id: [1, 1] int32, past, *weights)``
        returns ``(logits [1, 1, vocab], cache)`` with each cache tensor one longer. The
        functions carry the attribute ``num_input`` (1 and 2).
    """
    checked = None if params is None else check_params(config, params)
    c = config
    if batched and not c.uniform_layers:
        raise ValueError(f"{c.name}: the batched functions are not built for a model whose "
                         "layers have different attention windows (layer_types)")
    model = LlamaForCausalLM(c)
    return export_decoder(model, c.num_hidden_layers, c.num_key_value_heads, c.dim_per_head,
                          checked, position=c.window is not None, batched=batched)


def param_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Return each weight's name and shape, in the order the exported functions take them.

    Computed from the config alone (no module is built); see :func:`param_count` for the
    totals in closed form.
    """
    return dict(_iter_param_shapes(config))


def _iter_param_shapes(config: LlamaConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    d, v, inner = config.hidden_size, config.vocab_size, config.intermediate_size
    q, kv = config.num_attention_heads * config.dim_per_head, (
        config.num_key_value_heads * config.dim_per_head
    )
    yield "embed_tokens.weight", (v, d)
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        for proj, rows, bias in (
            ("q_proj", q, config.qkv_bias),
            ("k_proj", kv, config.qkv_bias),
            ("v_proj", kv, config.qkv_bias),
            ("o_proj", d, config.o_bias),
        ):
            yield f"{p}self_attn.{proj}.weight", (rows, q if proj == "o_proj" else d)
            if bias:
                yield f"{p}self_attn.{proj}.bias", (rows,)
        if config.qk_norm:
            yield p + "self_attn.q_norm.weight", (config.dim_per_head,)
            yield p + "self_attn.k_norm.weight", (config.dim_per_head,)
        yield p + "post_attention_layernorm.weight", (d,)
        if config.gemma:
            yield p + "pre_feedforward_layernorm.weight", (d,)
            yield p + "post_feedforward_layernorm.weight", (d,)
        for proj, shape in (("gate_proj", (inner, d)), ("up_proj", (inner, d)),
                            ("down_proj", (d, inner))):
            yield f"{p}mlp.{proj}.weight", shape
            if config.mlp_bias:
                yield f"{p}mlp.{proj}.bias", (shape[0],)
    yield "norm.weight", (d,)
    if not config.tie_word_embeddings:
        yield "lm_head.weight", (v, d)


def param_count(config: LlamaConfig) -> tuple[int, int]:
    """Return ``(tensors, elements)`` of the model's weights, in closed form.

    Cheap for any config (no names are listed).
    """
    d, v, inner = config.hidden_size, config.vocab_size, config.intermediate_size
    q = config.num_attention_heads * config.dim_per_head
    kv = config.num_key_value_heads * config.dim_per_head
    per_layer = (2 + 2 * config.gemma) * d + 2 * d * q + 2 * d * kv + 3 * d * inner
    per_layer += (q + 2 * kv) * config.qkv_bias + d * config.o_bias
    per_layer += (2 * inner + d) * config.mlp_bias + 2 * config.dim_per_head * config.qk_norm
    tensors_per_layer = (9 + 2 * config.gemma + 3 * config.qkv_bias + config.o_bias + 3 * config.mlp_bias
                         + 2 * config.qk_norm)
    head = 0 if config.tie_word_embeddings else 1
    n = config.num_hidden_layers
    return n * tensors_per_layer + 2 + head, n * per_layer + v * d * (1 + head) + d


def check_params(config: LlamaConfig, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as contiguous float32 in :func:`param_shapes` order, after checking them.

    A missing weight raises KeyError, a misshaped one ValueError, each naming it.
    """
    return check_named_arrays(config.model_type, param_shapes(config), params)


def random_params(config: LlamaConfig, seed: int = 0, std: float = 0.02) -> dict[str, np.ndarray]:
    """Return seeded random weights: matrices N(0, std), biases zero, RMSNorm scales one."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in param_shapes(config).items():
        if name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        elif len(shape) == 1:
            out[name] = np.ones(shape, np.float32)
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return out


# ----------------------------------------------------------------------------------------
# Hugging Face checkpoints
# ----------------------------------------------------------------------------------------


def load_checkpoint(
    folder: str | os.PathLike[str], config: LlamaConfig | None = None
) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Read a local Hugging Face Llama, Mistral or Qwen2 checkpoint folder.

    ``config.json`` plus ``model.safetensors`` or a sharded set with
    ``model.safetensors.index.json``; float16 and bfloat16 weights are widened to float32,
    float64 ones narrowed to it. Names lose their ``model.`` prefix. The layer count and
    every tensor's shape are checked against the stored headers before any data is read
    (:func:`tenet_byoc.models.checkpoint.load_weights`); tensors the model does not use
    (e.g. a ``lm_head.weight`` next to tied embeddings, rotary buffers) are ignored.

    Parameters
    ----------
    folder : str or PathLike
        Holds ``config.json`` and the weights.
    config : LlamaConfig, optional
        The shape to expect, instead of ``config.json``'s.

    Returns
    -------
    config : LlamaConfig
    params : dict of str to numpy.ndarray
        The weights as float32, by :func:`param_shapes` name and in its order.

    Raises
    ------
    FileNotFoundError
        If the folder, ``config.json`` or the weights are missing (naming the file).
    KeyError
        If tensors are missing (naming them as Hugging Face writes them, e.g.
        ``lm_head.weight``).
    tenet_byoc.models.checkpoint.CheckpointError
        If a file is corrupt or truncated, holds another number of layers, or a tensor's
        shape is wrong (naming it).
    """
    if config is None:
        values = read_config(folder)
        name = os.path.basename(os.path.normpath(os.fspath(folder)))
        config = LlamaConfig.from_hf_dict(values, name=name)
    # Hugging Face writes the untied head at the top level, beside the "model." prefix.
    layout = Layout(config.model_type, "model.", "layers.", "num_hidden_layers",
                    unprefixed=("lm_head.weight",))
    tensors, _ = param_count(config)
    params = load_weights(folder, layout, config.num_hidden_layers, _iter_param_shapes(config),
                          note=f"the config needs {tensors} tensors")
    if config.gemma:  # Gemma stores w of the scale 1 + w, added in float32 as it does
        params = {n: np.float32(1) + w if n.endswith("norm.weight") else w
                  for n, w in params.items()}
    return config, params


# ----------------------------------------------------------------------------------------
# GEMMs and running
# ----------------------------------------------------------------------------------------


def llama_matmuls(config: LlamaConfig, seq_len: int, phase: str = "prefill") -> list[MatmulShape]:
    """The matmuls of one call, in execution order (as :func:`gpt2_matmuls` for GPT-2).

    ``seq_len`` is the prompt length P of a ``prefill``, or the cache length L before a
    ``decode`` step (whose token attends to L + 1 keys). Per layer: ``q_proj``, ``k_proj``,
    ``v_proj``, ``attn.qk`` and ``attn.pv`` (batch = key/value heads, rows = query heads
    per group x tokens), ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``; then
    ``lm_head``. With a sliding window W a decode step attends to at most W keys; a
    prefill computes all P x P scores and masks those outside the window.
    """
    rows, keys = call_rows_and_keys(
        phase, seq_len, config.max_position_embeddings, "max_position_embeddings"
    )
    d, hd, inner = config.hidden_size, config.dim_per_head, config.intermediate_size
    h, kv, g = config.num_attention_heads, config.num_key_value_heads, config.group_size
    out: list[MatmulShape] = []
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        window = config.layer_window(i)
        if phase == "decode":  # the new token attends to the cache and itself
            keys = seq_len + 1 if window is None else min(seq_len + 1, window)
        out += [
            MatmulShape(p + "self_attn.q_proj", 1, rows, h * hd, d),
            MatmulShape(p + "self_attn.k_proj", 1, rows, kv * hd, d),
            MatmulShape(p + "self_attn.v_proj", 1, rows, kv * hd, d),
            MatmulShape(p + "attn.qk", kv, g * rows, keys, hd),
            MatmulShape(p + "attn.pv", kv, g * rows, hd, keys),
            MatmulShape(p + "self_attn.o_proj", 1, rows, d, h * hd),
            MatmulShape(p + "mlp.gate_proj", 1, rows, inner, d),
            MatmulShape(p + "mlp.up_proj", 1, rows, inner, d),
            MatmulShape(p + "mlp.down_proj", 1, rows, d, inner),
        ]
    out.append(MatmulShape("lm_head", 1, rows, config.vocab_size, d))
    return out


class LlamaRunner(DecoderRunner):
    """Build a Llama-family model once and run prefill, decode and generation on the VM.

    See :class:`tenet_byoc.models.runner.DecoderRunner` for the parameters; ``params`` as
    returned by :func:`random_params` or :func:`load_checkpoint`, ``build`` receives
    :func:`export_llama`'s module.
    """

    check_params = staticmethod(check_params)
    export = staticmethod(export_llama)

    def check_ids(self, ids: Sequence[int], past_len: int = 0) -> np.ndarray:
        """``ids`` as ``[1, n]`` int32, checked against the vocabulary and the context."""
        c = self.config
        context = c.max_position_embeddings
        return check_ids(ids, c.vocab_size, context, "max_position_embeddings", past_len)

    def cache_shape(self, length: int) -> tuple[int, ...]:
        """``[1, num_key_value_heads, cached tokens, head_dim]`` after ``length`` tokens."""
        c = self.config
        return (1, c.num_key_value_heads, c.cache_length(length), c.dim_per_head)

    def decode_inputs(self, cache: KVCache) -> list[Any]:
        """With a sliding window, the new token's position (the cache holds fewer)."""
        return [] if self.config.window is None else [tvm.runtime.ShapeTuple([cache.length])]

    def decode_keys(self, length: int) -> int:
        """Keys a decode step attends to after ``length`` tokens: with a window, at most W."""
        return self.config.cache_length(length + 1)
