"""How many bytes a model needs on each chip: weights, KV cache and activations, and whether they fit.

Weights are counted at their stored widths under a quantization scheme: every GEMM weight
(projections, experts, routers, an untied head) at ``weight_bits`` with its side data (one
scale of ``scale_dtype`` per tensor, output channel or group; with ``uint`` weights a zero
point per scale at the weight's width), K padded as ``quantize`` pads it, everything else
(embeddings, norms, biases) in float32, as the Relax models hold them. A tied head under a
weight-quantizing scheme is a quantized copy beside the float embedding table.
:func:`weight_bytes` is this count, the one the serving KV cache also sizes with (there in a
serving engine's convention, ``engine=True``: a 16-bit table, no norms or biases). The KV cache holds each sequence's keys and
values at ``kv_bits`` with fp16 scales as the scheme's KV granularity says. Activations'
peak is the residual stream plus the largest set of intermediates one layer holds at once
(q/k/v, attention scores and probabilities, the MLP's gate, up and product, the logits), at
16 bits when the scheme's activations are 16 bits or fewer (quantized activations are made
from a 16-bit stream), else float32. Under tensor parallelism ``tp`` GEMM weights, heads and
the MLP width are split over the chips (key/value heads replicated when fewer than ``tp``),
under pipeline parallelism ``pp`` the layers; the embedding table sits on the first stage,
the head on the last (the larger of the two stages is counted).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Fit", "Footprint", "fit", "footprint", "kv_bytes_per_token", "weight_bytes"]


@dataclass(frozen=True)
class Footprint:
    """Bytes one chip holds, by kind: ``weights``, ``kv_cache`` and ``activations``."""

    weights: int
    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        """All three, in bytes."""
        return self.weights + self.kv_cache + self.activations

    def fits(self, capacity: float) -> bool:
        """Whether the footprint fits ``capacity`` bytes."""
        return self.total <= capacity

    def shortfall(self, capacity: float) -> str:
        """Why the footprint does not fit ``capacity`` bytes; empty where it fits."""
        if self.fits(capacity):
            return ""
        return (
            f"needs {_gb(self.total)} per chip (weights {_gb(self.weights)}, KV cache "
            f"{_gb(self.kv_cache)}, activations {_gb(self.activations)}), more than its "
            f"{_gb(capacity)} of DRAM"
        )


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def _count(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"footprint: {name}={value!r} must be an integer >= {low}")


def _gemm_weights(config: Any, layers: int, tp: int, ep: int = 1
                  ) -> Iterator[tuple[int, int, int]]:
    # (count, rows, columns) of each GEMM weight of ``layers`` layers, split over tp chips.
    from .gpt2 import GPT2Config
    from .moe import MoEConfig

    if isinstance(config, GPT2Config):
        d, inner = config.n_embd, config.inner_dim
        yield layers, 3 * d // tp, d
        yield layers, d, d // tp
        yield layers, inner // tp, d
        yield layers, d, inner // tp
        return
    moe = config if isinstance(config, MoEConfig) else None
    a = config.attention if moe else config
    d, heads = a.hidden_size, a.num_attention_heads
    h = math.ceil(heads / tp)
    latent = moe.latent if moe else None
    if latent is None:
        hd = a.dim_per_head
        kv = math.ceil(a.num_key_value_heads / tp)
        yield layers, h * hd, d
        yield 2 * layers, kv * hd, d
        yield layers, d, h * hd
    else:  # the down-projections are replicated, the per-head up-projections split
        qk = latent.qk_nope_head_dim + latent.qk_rope_head_dim
        if latent.q_lora_rank is None:
            yield layers, h * qk, d
        else:
            yield layers, latent.q_lora_rank, d
            yield layers, h * qk, latent.q_lora_rank
        yield layers, latent.kv_lora_rank + latent.qk_rope_head_dim, d
        yield layers, h * (latent.qk_nope_head_dim + latent.v_head_dim), latent.kv_lora_rank
        yield layers, d, h * latent.v_head_dim

    def swiglu(count: int, width: int) -> Iterator[tuple[int, int, int]]:
        # ``count`` gated MLPs of ``width``: gate and up, then down
        yield 2 * count, width // tp, d
        yield count, d, width // tp

    # The mixture layers among this stage's (its part of the layers, either kind).
    experts_layers = 0 if moe is None else round(
        len(moe.experts.moe_layers) * (layers / moe.num_hidden_layers))
    yield from swiglu(layers - experts_layers, a.intermediate_size)
    if moe is None:
        return
    e = moe.experts
    yield experts_layers, e.num_experts, d  # the router
    held = e.num_experts // ep  # expert parallelism: the chip's share of the experts
    yield from swiglu(experts_layers * held, e.intermediate_size)
    if e.shared_intermediate_size:
        yield from swiglu(experts_layers, e.shared_intermediate_size)


def _gemm_bytes(rows: int, cols: int, scheme: Any) -> float:
    # A [rows, cols] weight at its stored width, K (cols) padded as ``quantize`` pads it.
    bits = scheme.weight_bits
    multiple = scheme.k_multiple()
    cols = -(-cols // multiple) * multiple
    if bits >= 32 or scheme.weight_granularity == "none":
        return rows * cols * bits / 8
    scales = {"tensor": 1, "channel": rows,
              "group": rows * math.ceil(cols / max(scheme.group_size, 1))}[
        scheme.weight_granularity]
    from ..quantization.scheme import SCALE_DTYPES

    side = scales * SCALE_DTYPES[scheme.scale_dtype]
    if scheme.weight_format == "uint":
        side += scales * bits
    return (rows * cols * bits + side) / 8


def _shape(config: Any) -> dict[str, Any]:
    # The fields the cache and activations need, for every family.
    from .gpt2 import GPT2Config
    from .moe import MoEConfig

    if isinstance(config, GPT2Config):
        hd = config.head_dim
        return {"d": config.n_embd, "layers": config.n_layer, "heads": config.n_head,
                "kv": config.n_head, "k_width": hd, "v_width": hd, "inner": config.inner_dim,
                "vocab": config.vocab_size, "tied": True, "context": config.n_positions}
    moe = config if isinstance(config, MoEConfig) else None
    a = config.attention if moe else config
    d = a.hidden_size
    inner = a.intermediate_size
    if moe is not None:
        inner = max(inner, moe.experts.experts_per_token * moe.experts.intermediate_size
                    + moe.experts.shared_intermediate_size)
    if moe is not None and moe.latent is not None:
        # MLA caches the compressed KV and the shared rope key per token, for all heads.
        m = moe.latent
        k_width, v_width, kv = m.kv_lora_rank + m.qk_rope_head_dim, 0, 1
    else:
        k_width = v_width = a.dim_per_head
        kv = a.num_key_value_heads
    return {"d": d, "layers": a.num_hidden_layers, "heads": a.num_attention_heads, "kv": kv,
            "k_width": k_width, "v_width": v_width, "inner": inner, "vocab": a.vocab_size,
            "tied": a.tie_word_embeddings, "context": a.max_position_embeddings}


def _elements(config: Any) -> int:
    # All weights of the model, by its family's own count.
    from .gpt2 import GPT2Config, param_shapes
    from .llama import LlamaConfig, param_count
    from .moe import param_counts

    if isinstance(config, GPT2Config):
        return sum(math.prod(shape) for shape in param_shapes(config).values())
    return param_count(config)[1] if isinstance(config, LlamaConfig) else param_counts(config)[0]


def _layers_per_stage(s: dict[str, Any], pp: int) -> int:
    # The largest pipeline stage's layers (tenet_byoc.plan.stage_layers gives the first
    # stages one more).
    if pp > s["layers"]:
        raise ValueError(f"footprint: pp={pp} exceeds the {s['layers']} layers")
    return math.ceil(s["layers"] / pp)


def _kv_heads(s: dict[str, Any], tp: int) -> int:
    # Key/value heads per chip: split over tp, replicated when fewer; MLA's one latent whole.
    return math.ceil(s["kv"] / tp) if s["v_width"] else s["kv"]


def weight_bytes(config: Any, scheme: Any = "none", tp: int = 1, pp: int = 1, ep: int = 1,
                 engine: bool = False) -> float:
    """Bytes of the weights one chip holds, stored under ``scheme``: the one count of a
    model's weights (:func:`footprint` and serving's KV cache both use it).

    Every GEMM weight at the scheme's width with its side data (the module's rule), K padded
    to ``QuantScheme.k_multiple`` as ``quantize`` pads it; under ``tp`` the GEMMs, the
    embedding table and the head split over the chips, under ``pp`` the layers (the largest
    stage's) with the embedding on the first stage and the head on the last (the larger of
    the two counted), under ``ep`` the routed experts.

    ``tp``, ``pp`` and ``ep`` are the tensor-, pipeline- and expert-parallel degrees;
    ``engine`` says how the weights outside the GEMMs are held. False (the Relax models):
    the embedding table, norms, biases and position table in float32. True (a serving
    engine): the embedding table at 16 bits (32 under a float32 scheme), norms and biases
    left out (under 0.1% of a 7B model). Either way a tied head reads the embedding table
    when the scheme's weights are as wide as the table, else a quantized copy of it sits
    beside the table.
    """
    from ..quantization import get_scheme

    quant = get_scheme(scheme)
    s = _shape(config)
    layers = _layers_per_stage(s, pp)
    d, vocab = s["d"], s["vocab"]
    gemm = sum(n * _gemm_bytes(rows, cols, quant)
               for n, rows, cols in _gemm_weights(config, layers, tp, ep) if n and rows and cols)
    table_bits = 16 if engine and quant.weight_bits < 32 else 32
    embed = vocab * d * table_bits / 8 / tp
    head = 0.0 if s["tied"] and quant.weight_bits >= table_bits else _gemm_bytes(
        vocab // tp, d, quant)
    small = 0.0
    if not engine:
        # Everything else (norms, biases, position table, router biases): float32,
        # replicated, the layers' part split over the stages.
        gemm_all = sum(n * rows * cols for n, rows, cols in
                       _gemm_weights(config, s["layers"], 1))
        small = (_elements(config) - gemm_all - vocab * d * (2 - s["tied"])) * 4 / pp
    return gemm + small + (embed + head if pp == 1 else max(embed, head))


def kv_bytes_per_token(config: Any, scheme: Any = "none", tp: int = 1, pp: int = 1) -> float:
    """Bytes one token's keys and values take in one chip's cache under ``scheme``: codes
    at ``kv_bits`` and, for an int cache, the fp16 scales written with them (one per
    token, layer and K / V; per head; or per group of a head's channels), for the largest
    stage's layers and the chip's key/value heads (split over ``tp``, replicated when
    fewer; multi-head latent attention's latent whole on every chip)."""
    from ..quantization import SCALE_DTYPES, get_scheme

    quant = get_scheme(scheme)
    s = _shape(config)
    kv_heads = _kv_heads(s, tp)
    width = kv_heads * (s["k_width"] + s["v_width"])
    bits = width * quant.kv_bits
    if quant.kv_bits < 16:
        scales = {"token": 2, "head": 2 * kv_heads,
                  "group": width // max(quant.kv_group, 1)}[quant.kv_granularity]
        bits += scales * SCALE_DTYPES["fp16"]
    return _layers_per_stage(s, pp) * bits / 8


def footprint(config: Any, scheme: Any = "none", sequences: int = 1, context: int = 0,
              step_tokens: int | None = None, tp: int = 1, pp: int = 1, ep: int = 1
              ) -> Footprint:
    """Bytes one chip holds to run ``sequences`` sequences of ``context`` tokens each.

    ``config`` may be a built-in name or a path (resolved); ``scheme`` sets the weights',
    KV cache's and activations' widths; ``context`` is at most the model's. ``step_tokens``,
    the tokens one step computes, sets the activations' peak: a prefill's prompt tokens, or
    a decode step's batch; by default ``sequences`` (a decode step). ``tp`` and ``pp`` are
    the tensor- and pipeline-parallel degrees; each of ``ep`` expert-parallel chips holds
    ``1 / ep`` of the routed experts and of the sequences (and of the step's tokens).

    Raises
    ------
    ValueError
        Naming the argument: a count out of range, a context beyond the model's, or an
        unknown scheme.
    """
    from ..quantization import get_scheme
    from .configs import resolve_config

    if isinstance(config, str):
        config = resolve_config(config)
    quant = get_scheme(scheme)
    for name, value, low in (("sequences", sequences, 0), ("context", context, 0),
                             ("tp", tp, 1), ("pp", pp, 1), ("ep", ep, 1)):
        _count(name, value, low)
    tokens = sequences if step_tokens is None else step_tokens
    _count("step_tokens", tokens, 0)
    sequences, tokens = -(-sequences // ep), -(-tokens // ep)
    s = _shape(config)
    if context > s["context"]:
        raise ValueError(f"footprint: context={context} is longer than the model's "
                         f"{s['context']}")
    weights = weight_bytes(config, quant, tp, pp, ep)
    cache = kv_bytes_per_token(config, quant, tp, pp) * context * sequences
    d, vocab = s["d"], s["vocab"]
    kv_heads = _kv_heads(s, tp)

    width = 4 if quant.activation_bits > 16 else 2
    heads = math.ceil(s["heads"] / tp)
    keys = context + tokens  # the step's tokens attend to the cache and to themselves
    widest = max(
        tokens * (heads + 2 * kv_heads) * max(s["k_width"], 1),  # q, k, v
        2 * heads * tokens * keys,  # scores and probabilities
        3 * tokens * math.ceil(s["inner"] / tp),  # gate, up and their product
        tokens * math.ceil(vocab / tp),  # logits
    )
    activations = (2 * tokens * d + widest) * width
    return Footprint(int(math.ceil(weights)), int(math.ceil(cache)), int(activations))


@dataclass(frozen=True)
class Fit:
    """Whether a model's estimate fits each chip's DRAM.

    Attributes
    ----------
    footprint : Footprint
        The larger of the prefill's (the prompt's KV written, its tokens' activations) and
        the last decode step's (the longest cache).
    capacity : float or None
        The chip's DRAM in bytes (``Accelerator.dram_capacity_bytes``); None: unknown.
    chip : str
        The accelerator's name, for messages.
    """

    footprint: Footprint
    capacity: float | None
    chip: str

    @property
    def fits(self) -> bool | None:
        """True or False; None when the chip's capacity is unknown."""
        return None if self.capacity is None else self.footprint.fits(self.capacity)

    @property
    def message(self) -> str:
        """One line: the footprint per chip and whether it fits."""
        f = self.footprint
        line = (f"weights {_gb(f.weights)} + KV cache {_gb(f.kv_cache)} + activations "
                f"{_gb(f.activations)} = {_gb(f.total)} per chip")
        if self.capacity is None:
            return f"{line} ({self.chip}'s DRAM capacity is not known)"
        verdict = "fits" if self.fits else "does NOT fit"
        return f"{line}: {verdict} {self.chip}'s {_gb(self.capacity)} of DRAM"


def fit(config: Any, scheme: Any, accelerator: Any, prompt_len: int, context_len: int,
        decode_steps: int, batch: int = 1, tp: int = 1, pp: int = 1, ep: int = 1) -> Fit:
    """Whether ``estimate``'s run of ``config`` fits the DRAM of each chip of ``accelerator``
    (the arguments as :func:`tenet_byoc.estimate` takes them; ``tp``, ``pp`` and ``ep`` a
    system's)."""
    from ..accelerators import resolve

    acc = resolve(accelerator)
    phases = []
    if prompt_len:
        phases.append(footprint(config, scheme, batch, prompt_len, batch * prompt_len, tp, pp,
                                ep))
    if decode_steps:
        phases.append(footprint(config, scheme, batch, context_len + decode_steps, batch,
                                tp, pp, ep))
    worst = max(phases, key=lambda f: f.total)
    return Fit(worst, acc.dram_capacity_bytes, acc.name)
