"""Several chips running one model: the System value, Megatron-LM sharding and collectives.

A :class:`System` is an accelerator repeated over ``chips = tensor_parallel x
pipeline_parallel`` chips joined by one kind of :class:`Link`. ``estimate(..., system=...)``
shards every GEMM of the model as Megatron-LM shards it (:func:`shard_gemm`), charges each
chip's share on the accelerator, adds the collectives the sharding needs as ledger entries of
``unit="link"`` (:func:`collective_seconds`) and takes the step latency as the critical path
over chips and pipeline stages (:func:`pipeline_seconds`), not a sum.

Collective formulas (``S`` bytes of the tensor each chip holds, ``T`` chips taking part, link
bandwidth ``bw`` bytes/s per chip and direction, per-hop latency ``a`` s):

* ring all-reduce (reduce-scatter then all-gather around the ring):
  ``2 (T-1)/T x S / bw + 2 (T-1) x a``;
* 2-D torus all-reduce, ``T = r x c`` with ``r`` the largest divisor of ``T`` not above
  ``sqrt(T)``: reduce-scatter along rows, all-reduce of the ``S/r`` left along columns,
  all-gather along rows: ``2 (r-1)/r x S / bw + 2 (c-1)/c x S / (r bw) + 2 (r-1 + c-1) x a``;
* switch all-reduce (every chip one port of ``bw`` on a non-blocking switch): reduce-scatter
  and all-gather through it, ``2 (T-1)/T x S / bw + 2 a``;
* all-gather of a result of ``S`` bytes (each chip holds ``S/T``): ring
  ``(T-1)/T x S / bw + (T-1) a``; torus ``(r-1)/r x S / (c bw) + (c-1)/c x S / bw +
  (r-1 + c-1) a``; switch ``(T-1)/T x S / bw + a``;
* point-to-point between pipeline stages: ``S / bw + a``.

``link_bytes`` of an entry is what each chip sends: ``2 (T-1)/T x S`` for an all-reduce,
``(T-1)/T x S`` for an all-gather, ``S`` point to point.

Thread safety: values are immutable; functions keep no state. Errors: ``ValueError`` naming
the field, the value and what is accepted (``TypeError`` for a wrong type).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ._names import did_you_mean
from .hardware import Accelerator, resolve
from .ledger import Ledger, LedgerEntry

__all__ = [
    "COLLECTIVES",
    "TOPOLOGIES",
    "Link",
    "StepTime",
    "System",
    "SystemLedger",
    "check_tensor_parallel",
    "collective_link_bytes",
    "collective_seconds",
    "pipeline_seconds",
    "shard_gemm",
    "stage_layers",
]

#: Link topologies :func:`collective_seconds` has a formula for.
TOPOLOGIES = ("ring", "torus2d", "switch")
#: Collectives a system charges.
COLLECTIVES = ("all_reduce", "all_gather", "p2p")


def _positive(owner: str, name: str, value: Any, *, integer: bool = False,
              allow_zero: bool = False) -> None:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{owner}.{name} must be {kind}, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{owner}.{name} must be {bound} and finite, got {value!r}")


@dataclass(frozen=True)
class Link:
    """The links between chips: one bandwidth and latency for every hop, one topology.

    Parameters
    ----------
    bandwidth_gbps : float
        GB/s (10^9 bytes/s) each chip sends per direction.
    latency_us : float
        Microseconds per hop (per step of a ring, per pass through a switch).
    topology : {"ring", "torus2d", "switch"}
        How collectives travel (the module's formulas).
    """

    bandwidth_gbps: float = 100.0
    latency_us: float = 1.0
    topology: str = "ring"

    def __post_init__(self) -> None:
        _positive("Link", "bandwidth_gbps", self.bandwidth_gbps)
        _positive("Link", "latency_us", self.latency_us, allow_zero=True)
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"Link.topology must be one of {', '.join(TOPOLOGIES)}, got "
                f"{self.topology!r}{did_you_mean(str(self.topology), TOPOLOGIES)}"
            )


@dataclass(frozen=True)
class System:
    """An accelerator on ``chips`` chips: ``tensor_parallel`` chips share each layer
    (Megatron-LM), ``pipeline_parallel`` stages take consecutive layers, ``micro_batches``
    split a batch through the pipeline.

    ``chips`` must equal ``tensor_parallel x pipeline_parallel`` (no data parallelism: every
    chip serves the same batch). ``System(acc)`` (one chip) estimates what ``acc`` alone does.
    """

    accelerator: Accelerator
    chips: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    link: Link = field(default_factory=Link)

    def __post_init__(self) -> None:
        if isinstance(self.accelerator, str):
            object.__setattr__(self, "accelerator", resolve(self.accelerator))
        if not isinstance(self.accelerator, Accelerator):
            raise TypeError(f"System.accelerator must be a tenet_byoc.Accelerator or a preset "
                            f"name, got {type(self.accelerator).__name__}")
        for name in ("chips", "tensor_parallel", "pipeline_parallel", "micro_batches"):
            _positive("System", name, getattr(self, name), integer=True)
        if not isinstance(self.link, Link):
            raise TypeError(f"System.link must be a Link, got {type(self.link).__name__}")
        if self.chips != self.tensor_parallel * self.pipeline_parallel:
            raise ValueError(
                f"System.chips={self.chips} must equal tensor_parallel x pipeline_parallel = "
                f"{self.tensor_parallel} x {self.pipeline_parallel} = "
                f"{self.tensor_parallel * self.pipeline_parallel}"
            )

    def chip(self, stage: int, rank: int) -> int:
        """The chip number of tensor-parallel ``rank`` in pipeline ``stage``."""
        return stage * self.tensor_parallel + rank

    def to_json(self) -> str:
        """The system's one serialized form: its fields, the accelerator in its own JSON."""
        return json.dumps({
            "accelerator": json.loads(self.accelerator.to_json()),
            "chips": self.chips, "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel, "micro_batches": self.micro_batches,
            "link": {"bandwidth_gbps": self.link.bandwidth_gbps,
                     "latency_us": self.link.latency_us, "topology": self.link.topology},
        })

    @classmethod
    def from_json(cls, text: str) -> System:
        """The system :meth:`to_json` wrote.

        Raises
        ------
        ValueError
            For text that is not JSON or misses, adds or mistypes a field (named).
        """
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"System JSON is not valid JSON: {err}") from None
        keys = {"accelerator", "chips", "tensor_parallel", "pipeline_parallel",
                "micro_batches", "link"}
        if not isinstance(data, dict) or set(data) != keys:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"System JSON must be an object with keys {sorted(keys)}, got {got}")
        link = data["link"]
        link_keys = {"bandwidth_gbps", "latency_us", "topology"}
        if not isinstance(link, dict) or set(link) != link_keys:
            raise ValueError(f"System JSON field 'link' must be an object with keys "
                             f"{sorted(link_keys)}, got {link!r}")
        return cls(Accelerator.from_json(json.dumps(data["accelerator"])), data["chips"],
                   data["tensor_parallel"], data["pipeline_parallel"], data["micro_batches"],
                   Link(**link))


# ---- Collectives ---------------------------------------------------------------------------

def _torus_shape(chips: int) -> tuple[int, int]:
    rows = max(d for d in range(1, math.isqrt(chips) + 1) if chips % d == 0)
    return rows, chips // rows


def _check_collective(kind: str, nbytes: float, chips: int) -> None:
    if kind not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {kind!r}")
    _positive("collective", "bytes", nbytes, allow_zero=True)
    _positive("collective", "chips", chips, integer=True)


def collective_seconds(kind: str, nbytes: float, chips: int, link: Link) -> float:
    """Seconds a collective takes by the module's formulas (0 for one chip, except p2p)."""
    _check_collective(kind, nbytes, chips)
    bw, lat = link.bandwidth_gbps * 1e9, link.latency_us * 1e-6
    if kind == "p2p":
        return nbytes / bw + lat
    t = chips
    if t == 1:
        return 0.0
    if link.topology == "ring" or (link.topology == "torus2d" and _torus_shape(t)[0] == 1):
        if kind == "all_reduce":
            return 2 * (t - 1) / t * nbytes / bw + 2 * (t - 1) * lat
        return (t - 1) / t * nbytes / bw + (t - 1) * lat
    if link.topology == "switch":
        if kind == "all_reduce":
            return 2 * (t - 1) / t * nbytes / bw + 2 * lat
        return (t - 1) / t * nbytes / bw + lat
    r, c = _torus_shape(t)
    if kind == "all_reduce":
        return (2 * (r - 1) / r * nbytes / bw + 2 * (c - 1) / c * nbytes / (r * bw)
                + 2 * (r - 1 + c - 1) * lat)
    return (r - 1) / r * nbytes / (c * bw) + (c - 1) / c * nbytes / bw + (r - 1 + c - 1) * lat


def collective_link_bytes(kind: str, nbytes: float, chips: int) -> float:
    """Bytes each chip sends in a collective (the module's ``link_bytes``)."""
    _check_collective(kind, nbytes, chips)
    if kind == "p2p":
        return float(nbytes)
    share = (chips - 1) / chips * nbytes
    return 2 * share if kind == "all_reduce" else share


# ---- Sharding ------------------------------------------------------------------------------

# GEMM name endings by Megatron-LM role (GPT-2 and Llama names of models.gemms).
_COLUMN = ("attn.c_attn", "q_proj", "mlp.c_fc", "gate_proj", "up_proj")
_KV = ("k_proj", "v_proj")
_ROW = ("attn.c_proj", "o_proj", "mlp.c_proj", "down_proj")
_ATTENTION = ("attn.qk", "attn.pv")


def _heads(config: Any) -> tuple[int, int]:
    if hasattr(config, "n_head"):
        return config.n_head, config.n_head
    return config.num_attention_heads, config.num_key_value_heads


def check_tensor_parallel(config: Any, tp: int) -> None:
    """Refuse a tensor-parallel degree the model's heads or widths do not split into."""
    heads, kv = _heads(config)
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) \
        or 4 * getattr(config, "n_embd", 0)
    if heads % tp:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s {heads} attention "
                         "heads (Megatron-LM splits heads across chips)")
    if kv % tp and tp % kv:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s {kv} key/value heads "
                         "or be a multiple of them (then each chip holds one, replicated)")
    if inner % tp:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s MLP width {inner}")


def shard_gemm(name: str, batch: int, m: int, n: int, k: int, config: Any,
               tp: int) -> tuple[tuple[int, int, int, int], str | None]:
    """One chip's share of a GEMM under tensor parallelism ``tp``, and the collective after it.

    Column-parallel (QKV, Q, up, gate, GPT-2's c_attn and c_fc): N / tp. Key/value
    projections: N / tp while tp divides the key/value heads, else one head per chip
    (replicated). Row-parallel (attention output, down, GPT-2's c_proj): K / tp, followed by
    an all-reduce of the ``[m, n]`` output. Attention: heads / tp per chip (query heads of a
    group split when tp exceeds the key/value heads). The head (``lm_head``): the vocabulary
    split, ceil(N / tp) per chip, followed by an all-gather of the logits.

    Returns ``((batch, m, n, k), collective)`` with collective None, "all_reduce" or
    "all_gather".
    """
    if tp == 1:
        return (batch, m, n, k), None
    heads, kv = _heads(config)
    if name.endswith(_ATTENTION):
        if heads == kv:  # GPT-2 and MHA: batch = heads
            return (batch // tp, m, n, k), None
        # Llama: batch = key/value heads, rows = query heads per group x tokens.
        group = heads // kv
        kv_here = max(1, kv // tp)
        q_here = heads // tp
        rows = m // group * (q_here // kv_here)
        return (batch // kv * kv_here, rows, n, k), None
    if name.endswith(_KV):
        head_dim = n // kv
        return (batch, m, head_dim * max(1, kv // tp), k), None
    if name.endswith(_COLUMN):
        return (batch, m, n // tp, k), None
    if name.endswith(_ROW):
        return (batch, m, n, k // tp), "all_reduce"
    if name == "lm_head":
        return (batch, m, -(-n // tp), k), "all_gather"
    raise ValueError(f"no Megatron-LM sharding rule for GEMM {name!r}")


def stage_layers(n_layers: int, stages: int) -> list[range]:
    """Consecutive layers per pipeline stage, the first stages taking one more when the
    layers do not split evenly."""
    if stages > n_layers:
        raise ValueError(f"pipeline_parallel={stages} exceeds the model's {n_layers} layers")
    base, extra = divmod(n_layers, stages)
    out, start = [], 0
    for s in range(stages):
        size = base + (1 if s < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def pipeline_seconds(stage_seconds: list[float], p2p_seconds: float,
                     micro_batches: int) -> tuple[float, float]:
    """Critical path and bubble of one step through the pipeline.

    Each of ``micro_batches`` passes every stage in order (``stage_seconds`` per micro-batch,
    ``p2p_seconds`` between consecutive stages); a stage starts a micro-batch when it is free
    and the previous stage has handed it over. Returns (critical path, bubble), the bubble
    being the critical path less the busiest stage's own work (``micro_batches x max``).
    """
    finish = [0.0] * len(stage_seconds)
    for _ in range(micro_batches):
        ready = 0.0
        for s, t in enumerate(stage_seconds):
            start = max(finish[s], ready)
            finish[s] = start + t
            ready = finish[s] + p2p_seconds
    critical = finish[-1]
    return critical, critical - micro_batches * max(stage_seconds)


# ---- What an estimate on a system gives ----------------------------------------------------

@dataclass(frozen=True)
class StepTime:
    """One prefill or decode step on a system: its critical path and how it was made."""

    phase: str
    tokens: int
    seconds: float  #: the critical path over chips and pipeline stages
    bubble_seconds: float  #: the critical path less the busiest stage's own work
    stage_seconds: tuple[float, ...]  #: one micro-batch per stage: GEMMs + tensor collectives
    p2p_seconds: float  #: one hand-over between consecutive stages


class SystemLedger(Ledger):
    """The ledger of an estimate on a :class:`System`: every chip's GEMM entries (``chip``
    set, ``unit="array"``) and collectives (``unit="link"``), plus the critical path of each
    step (``steps``). ``totals()`` sums work over all chips; :meth:`latency_s` is the time."""

    def __init__(self, entries: list[LedgerEntry], system: System, steps: list[StepTime]):
        acc = system.accelerator
        super().__init__(entries, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [])
        self.system = system
        self.steps = steps

    def latency_s(self, phase: str | None = None) -> float:
        """Seconds of the steps of ``phase`` ("prefill", "decode"; None: all), each its
        critical path."""
        if phase is not None and phase not in ("prefill", "decode"):
            raise ValueError(f"phase must be 'prefill', 'decode' or None, got {phase!r}")
        return sum(s.seconds for s in self.steps if phase is None or s.phase == phase)
