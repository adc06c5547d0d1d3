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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from ._params import check_named_arrays, check_positive_numbers
from .checkpoint import Layout, load_family
from .decoder import (
    LAYER_TYPES,
    Attention,
    BatchLayout,
    Block,
    DecoderLM,
    export_decoder,
    read_layer_types,
    take_rows,
)
from .rope import RopeScaling, rope_from_config
from .runner import DecoderRunner

__all__ = [
    "FAMILIES",
    "MAX_LAYERS",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaRunner",
    "check_params",
    "export_llama",
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
    hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size : int
        Model width d, decoder layers, query heads, the SwiGLU MLP's hidden width, tokens.
    num_key_value_heads : int
        Key/value heads; must divide ``num_attention_heads`` (grouped-query attention).
    max_position_embeddings : int
        Context length the model was trained for: the most tokens a sequence may hold.
    head_dim : int or None
        Width of one head; ``None`` means ``hidden_size // num_attention_heads``.
    rms_norm_eps, rope_theta : float
        Epsilon of every RMSNorm; base of the rotary embedding's frequencies.
    rope_scaling : RopeScaling or None
        How the frequencies are scaled for a longer context (Llama 3.1's ``llama3``, YaRN,
        ...); None for plain RoPE.
    qkv_bias, o_bias, mlp_bias : bool
        The q, k and v projections have biases (Qwen2; Llama's ``attention_bias``), the
        output projection (Llama's ``attention_bias``), the MLP's (Llama's ``mlp_bias``).
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
        check_positive_numbers(self, ("rms_norm_eps", "rope_theta"), (
            "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
            "rope_local_theta"))
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


_Pair = tuple[nn.Tensor, nn.Tensor]  # (cos, sin)


class Rotary:
    """The rotary tables (cos, sin) of a module whose ``config`` is a :class:`LlamaConfig`:
    computed in float32 as Hugging Face does, angle = position * inv_freq, the half-width
    table repeated twice, times YaRN's attention factor where there is one."""

    config: LlamaConfig

    def _rope(self, begin: Any, length: Any, local: bool = False) -> _Pair:
        # The tables [1, length, 1, hd] of positions [begin, begin + length) (local: Gemma-3's
        # sliding layers, their own base, unscaled).
        pos = op.wrap_nested(
            relax.op.arange(begin, begin + length, 1, dtype=_DTYPE), name="rope_positions"
        )
        return self._tables(pos, [length], local)

    def _rope_batch(self, positions: nn.Tensor) -> _Pair:
        # As _rope, for each sequence's own positions: [B, S] int32 -> [B, S, 1, hd] tables.
        pos = op.wrap_nested(relax.op.astype(positions._expr, _DTYPE), name="rope_positions")
        return self._tables(pos, list(positions.shape))

    def _tables(self, pos: nn.Tensor, lead: list[Any], local: bool = False) -> _Pair:
        c, ones = self.config, [1] * len(lead)
        hd = c.dim_per_head
        # The frequencies, scaled as the config says, rounded to float32 as HF keeps them.
        scaling = RopeScaling() if local else c.rope_scaling or RopeScaling()
        inv_freq = scaling.inv_freq(hd, float(c.rope_local_theta if local else c.rope_theta))
        angle = op.reshape(pos, [*lead, 1]) * op.reshape(op.wrap_nested(
            relax.const(inv_freq.astype(np.float32)), name="rope_inv_freq"), [*ones, hd // 2])
        angle = op.reshape(op.concat([angle, angle], dim=-1), [1] * (2 - len(lead)) + [*lead, 1, hd])
        cos = op.wrap_nested(relax.op.cos(angle._expr), name="rope_cos")
        sin = op.wrap_nested(relax.op.sin(angle._expr), name="rope_sin")
        scale = 1.0 if local or c.rope_scaling is None else c.rope_scaling.attention_scale()
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        return cos, sin


class LlamaAttention(Attention):
    """Grouped-query attention with rotary embeddings on queries and keys (see
    :class:`tenet_byoc.models.decoder.Attention`), set from the config for layer ``layer``."""

    def __init__(self, config: LlamaConfig, layer: int = 0) -> None:
        hd = config.dim_per_head
        super().__init__(
            config.hidden_size, config.num_attention_heads, config.num_key_value_heads, hd,
            scale=(config.query_pre_attn_scalar or hd) ** -0.5, qkv_bias=config.qkv_bias,
            o_bias=config.o_bias, qk_norm_eps=config.rms_norm_eps if config.qk_norm else None,
            window=config.layer_window(layer), rolling=config.window,
            cap=config.attn_logit_softcapping)


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


class LlamaDecoderLayer(Block):
    """A pre-RMSNorm decoder layer; Gemma's also norms the attention's and the MLP's outputs
    (its ``post_attention_layernorm`` is the attention's, ``pre_feedforward_layernorm``
    the MLP's input norm)."""

    def __init__(self, config: LlamaConfig, layer: int = 0) -> None:
        d, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.self_attn = LlamaAttention(config, layer)
        self.post_attention_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
        self.parts = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp",
                      None, None)
        if config.gemma:
            self.pre_feedforward_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
            self.post_feedforward_layernorm = nn.RMSNorm(d, axes=-1, epsilon=eps, bias=False)
            self.parts = ("input_layernorm", "self_attn", "pre_feedforward_layernorm", "mlp",
                          "post_attention_layernorm", "post_feedforward_layernorm")
        self.mlp = LlamaMLP(config)


class LlamaForCausalLM(Rotary, DecoderLM):
    """A Llama-family decoder on :class:`~tenet_byoc.models.decoder.DecoderLM`'s entry points.

    Parameter names are those of Hugging Face's checkpoints without the ``model.`` prefix
    (``embed_tokens.weight``, ``layers.0.self_attn.q_proj.weight``, ``norm.weight``,
    ``lm_head.weight`` unless the head is tied); linear weights are ``[out, in]``.
    """

    def __init__(self, config: LlamaConfig) -> None:
        self.config = config
        self.window, self.final_cap = config.window, config.final_logit_softcapping
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = nn.RMSNorm(config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def _embed(self, ids: nn.Tensor, begin: Any, batch: BatchLayout | None
               ) -> tuple[nn.Tensor, list[tuple[nn.Tensor, nn.Tensor]]]:
        c = self.config
        x = take_rows(self.embed_tokens.weight, ids)
        if c.gemma:  # sqrt(d) rounded to float32, as Hugging Face scales it
            x = x * float(np.float32(math.sqrt(c.hidden_size)))
        rope = self._rope(begin, ids.shape[1]) if batch is None else self._rope_batch(
            batch.positions)
        local = rope
        if c.rope_local_theta is not None:  # Gemma-3's sliding layers rotate by their own base
            local = self._rope(begin, ids.shape[1], local=True)
        types = c.layer_types or ("full_attention",) * c.num_hidden_layers
        return x, [local if t == "sliding_attention" else rope for t in types]


def export_llama(
    config: LlamaConfig, params: Mapping[str, np.ndarray] | None = None, batched: bool = False
) -> IRModule:
    """Export the model to a Relax IRModule with the functions ``prefill`` and ``decode``.

    Every matmul is an ``R.matmul`` (projections and an untied head as
    ``R.matmul(x, R.permute_dims(W))``), so all of them can be offloaded. The functions'
    inputs and outputs are :func:`tenet_byoc.models.decoder.export_decoder`'s; ``params``
    binds the weights as constants, otherwise they follow the inputs in
    :func:`param_shapes` order; ``batched`` adds ``prefill_batch`` and ``decode_batch``.
    """
    checked = None if params is None else check_params(config, params)
    if batched and not config.uniform_layers:
        raise ValueError(f"{config.name}: the batched functions are not built for a model "
                         "whose layers have different attention windows (layer_types)")
    return export_decoder(LlamaForCausalLM(config), checked, batched=batched)


def param_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Return each weight's name and shape, in the order the exported functions take them.

    Computed from the config alone (no module is built); see :func:`param_count` for the
    totals in closed form.
    """
    return dict(_iter_param_shapes(config))


def _iter_param_shapes(config: LlamaConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    d, v = config.hidden_size, config.vocab_size
    yield "embed_tokens.weight", (v, d)
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        yield from attention_shapes(config, p + "self_attn.")
        if config.qk_norm:
            yield p + "self_attn.q_norm.weight", (config.dim_per_head,)
            yield p + "self_attn.k_norm.weight", (config.dim_per_head,)
        yield p + "post_attention_layernorm.weight", (d,)
        if config.gemma:
            yield p + "pre_feedforward_layernorm.weight", (d,)
            yield p + "post_feedforward_layernorm.weight", (d,)
        yield from mlp_shapes(p + "mlp.", d, config.intermediate_size, config.mlp_bias)
    yield "norm.weight", (d,)
    if not config.tie_word_embeddings:
        yield "lm_head.weight", (v, d)


def attention_shapes(config: LlamaConfig, p: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    """The q, k, v and o projections' weights (and biases) named from prefix ``p``."""
    d = config.hidden_size
    q, kv = (n * config.dim_per_head for n in (config.num_attention_heads,
                                               config.num_key_value_heads))
    for proj, rows, bias in (("q_proj", q, config.qkv_bias), ("k_proj", kv, config.qkv_bias),
                             ("v_proj", kv, config.qkv_bias), ("o_proj", d, config.o_bias)):
        yield f"{p}{proj}.weight", (rows, q if proj == "o_proj" else d)
        if bias:
            yield f"{p}{proj}.bias", (rows,)


def mlp_shapes(p: str, d: int, inner: int, bias: bool = False
               ) -> Iterator[tuple[str, tuple[int, ...]]]:
    """A gated MLP's ``gate_proj``, ``up_proj`` and ``down_proj`` (and biases) from ``p``."""
    for proj, shape in (("gate_proj", (inner, d)), ("up_proj", (inner, d)),
                        ("down_proj", (d, inner))):
        yield f"{p}{proj}.weight", shape
        if bias:
            yield f"{p}{proj}.bias", (shape[0],)


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


def hf_layout(config: Any) -> Layout:
    """Where a Llama-family (or mixture-of-experts) decoder's weights sit in its checkpoints."""
    return Layout(config.model_type, "model.", "layers.", "num_hidden_layers",
                  unprefixed=("lm_head.weight",))


def load_checkpoint(
    folder: str | os.PathLike[str], config: LlamaConfig | None = None
) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Read a local Hugging Face Llama-family checkpoint folder: its config and float32 weights.

    ``config.json`` plus ``model.safetensors`` or a sharded set with
    ``model.safetensors.index.json``; float16 and bfloat16 weights are widened to float32,
    float64 ones narrowed to it. Names lose their ``model.`` prefix; ``config`` (optional)
    is the shape to expect instead of ``config.json``'s. The layer count and every tensor's
    shape are checked against the stored headers before any data is read
    (:func:`tenet_byoc.models.checkpoint.load_family`, whose errors name the file and the
    tensor as Hugging Face writes it); tensors the model does not use (e.g. a
    ``lm_head.weight`` next to tied embeddings, rotary buffers) are ignored. The weights
    come by :func:`param_shapes` name and in its order.

    Raises
    ------
    FileNotFoundError, KeyError, tenet_byoc.models.checkpoint.CheckpointError
        A missing file, missing tensors, or a corrupt or truncated file, another layer
        count or a wrong shape (each naming the file and the tensor).
    """
    # Hugging Face writes the untied head at the top level, beside the "model." prefix.
    config, params = load_family(
        folder, config, LlamaConfig.from_hf_dict, hf_layout, _iter_param_shapes,
        note=lambda config: f"the config needs {param_count(config)[0]} tensors")
    if config.gemma:  # Gemma stores w of the scale 1 + w, added in float32 as it does
        params = {n: np.float32(1) + w if n.endswith("norm.weight") else w
                  for n, w in params.items()}
    return config, params


# ----------------------------------------------------------------------------------------
# GEMMs and running
# ----------------------------------------------------------------------------------------


class LlamaRunner(DecoderRunner):
    """Build a Llama-family model once and run prefill, decode and generation on the VM.

    See :class:`tenet_byoc.models.runner.DecoderRunner` for the parameters; ``params`` as
    returned by :func:`random_params` or :func:`load_checkpoint`, ``build`` receives
    :func:`export_llama`'s module.
    """

    model = LlamaForCausalLM
    check_params = staticmethod(check_params)
    export = staticmethod(export_llama)
