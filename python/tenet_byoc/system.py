"""Several chips running one model: the System value, Megatron-LM sharding and collectives.

A :class:`System` is an accelerator repeated over ``chips = tensor_parallel x
pipeline_parallel`` chips joined by one kind of :class:`Link`. ``estimate(..., system=...)``
plans every call of the model as Megatron-LM shards it (``tenet_byoc.plan``), charges each
chip's share on the accelerator, the collectives the sharding needs as ledger entries of
``unit="link"`` (:func:`collective_seconds`), and takes the step latency as the critical path
over chips and pipeline stages (``tenet_byoc.compose``), not a sum.

Collectives are charged by the cost model (``cost_model.charge_link``, the formulas of
``src/cost_model/link.h``, written once there): ``S`` bytes of the tensor each chip holds,
``T`` chips taking part, link bandwidth ``bw`` bytes/s per chip and direction, per-hop
latency ``a`` s. Each collective puts ``link_bytes`` on each chip's links in some hops and
takes ``link_bytes / bw + hops x a``:

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
* all-to-all (expert parallelism) of ``S`` bytes each chip holds, ``S/T`` for each chip:
  ring ``(T-1)/2 x S / bw + (T-1) a`` (block ``d`` travels ``d`` hops); torus a ring
  all-to-all along rows then columns, ``((r-1) + (c-1))/2 x S / bw + (r-1 + c-1) a``;
  switch ``(T-1)/T x S / bw + a``;
* point-to-point between pipeline stages: ``S / bw + a``.

``link_bytes`` of an entry is what each chip puts on its links: ``2 (T-1)/T x S`` for an
all-reduce, ``(T-1)/T x S`` for an all-gather (on every topology), ``S`` point to point, and
for an all-to-all the bandwidth term's bytes above. Its energy is ``link_bytes x 8 x
Link.pj_per_bit`` (default NVLink-C2C's 1.3 pJ/bit, NVIDIA's Grace Hopper whitepaper).

Thread safety: values are immutable; functions keep no state. Errors: ``ValueError`` naming
the field, the value and what is accepted (``TypeError`` for a wrong type).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

from . import cost_model as cm
from ._names import did_you_mean
from .accelerators import Accelerator, resolve
from .ledger import Ledger, LedgerEntry

__all__ = [
    "TOPOLOGIES",
    "Link",
    "StepTime",
    "System",
    "SystemLedger",
    "charge_collective",
    "collective_link_bytes",
    "collective_seconds",
]

#: Link topologies :func:`collective_seconds` has a formula for.
TOPOLOGIES = ("ring", "torus2d", "switch")


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
    pj_per_bit : float
        Energy of a bit sent over a link (default NVLink-C2C's 1.3 pJ/bit, NVIDIA Grace Hopper
        Superchip Architecture whitepaper, 2022, and NVIDIA blog "What Is NVLink?", 2023; a link
        off the package costs more).
    """

    bandwidth_gbps: float = 100.0
    latency_us: float = 1.0
    topology: str = "ring"
    pj_per_bit: float = cm.NVLINK_C2C_PJ_PER_BIT

    def __post_init__(self) -> None:
        _positive("Link", "bandwidth_gbps", self.bandwidth_gbps)
        _positive("Link", "latency_us", self.latency_us, allow_zero=True)
        _positive("Link", "pj_per_bit", self.pj_per_bit, allow_zero=True)
        # 2^50 bytes over 4,096 hops, in picoseconds, must stay a finite double: a bandwidth of
        # 1e-320 GB/s or a latency of 1e308 us gave inf seconds (OverflowError in cycles)
        worst = (2.0**50 / (self.bandwidth_gbps * 1e9) + 4096 * self.latency_us * 1e-6) * 1e12
        if not math.isfinite(worst):
            raise ValueError(
                f"Link.bandwidth_gbps={self.bandwidth_gbps!r} / Link.latency_us="
                f"{self.latency_us!r}: a collective's time over this link is not finite "
                f"(2^50 bytes over 4,096 hops overflows a double in picoseconds)")
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"Link.topology must be one of {', '.join(TOPOLOGIES)}, got "
                f"{self.topology!r}{did_you_mean(str(self.topology), TOPOLOGIES)}"
            )

    def __setstate__(self, state: dict) -> None:
        """Unpickling runs the constructor's checks, so an edited pickle is refused by field."""
        state.setdefault("pj_per_bit", cm.NVLINK_C2C_PJ_PER_BIT)  # pickled before it existed
        self.__dict__.update(state)
        self.__post_init__()

    def charged(self) -> cm.Link:
        """The link as the cost model charges collectives on it (``cost_model.Link``)."""
        return _cost_model_link(self.bandwidth_gbps, self.latency_us, self.topology,
                                self.pj_per_bit)


@lru_cache(maxsize=256)
def _cost_model_link(bandwidth_gbps: float, latency_us: float, topology: str,
                     pj_per_bit: float) -> cm.Link:
    return cm.Link(bandwidth_gbps, latency_us, topology, pj_per_bit)


@dataclass(frozen=True)
class System:
    """An accelerator on ``chips`` chips: ``tensor_parallel`` chips share each layer
    (Megatron-LM), ``pipeline_parallel`` stages take consecutive layers, ``micro_batches``
    split a batch through the pipeline, or ``expert_parallel`` chips hold a mixture of
    experts' routed experts round-robin, the rest of each layer data-parallel over them
    (``tenet_byoc.plan.expert_parallel``: the all-to-all dispatch and gather as link calls).

    ``chips`` must equal ``tensor_parallel x pipeline_parallel x expert_parallel`` (no other
    data parallelism: every chip serves the same batch); expert parallelism is not combined
    with the other two, nor with micro-batches. ``System(acc)`` (one chip) estimates what
    ``acc`` alone does.
    """

    accelerator: Accelerator
    chips: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    link: Link = field(default_factory=Link)
    expert_parallel: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.accelerator, str):
            object.__setattr__(self, "accelerator", resolve(self.accelerator))
        if not isinstance(self.accelerator, Accelerator):
            raise TypeError(f"System.accelerator must be a tenet_byoc.Accelerator or a preset "
                            f"name, got {type(self.accelerator).__name__}")
        for name in ("chips", "tensor_parallel", "pipeline_parallel", "micro_batches",
                     "expert_parallel"):
            _positive("System", name, getattr(self, name), integer=True)
        if not isinstance(self.link, Link):
            raise TypeError(f"System.link must be a Link, got {type(self.link).__name__}")
        ep = self.expert_parallel
        if ep > 1 and (self.tensor_parallel, self.pipeline_parallel, self.micro_batches) != (
                1, 1, 1):
            raise ValueError(
                f"System.expert_parallel={ep} is not combined with tensor_parallel="
                f"{self.tensor_parallel}, pipeline_parallel={self.pipeline_parallel} or "
                f"micro_batches={self.micro_batches} yet; give expert parallelism alone"
            )
        if self.chips != self.tensor_parallel * self.pipeline_parallel * ep:
            raise ValueError(
                f"System.chips={self.chips} must equal tensor_parallel x pipeline_parallel x "
                f"expert_parallel = {self.tensor_parallel} x {self.pipeline_parallel} x {ep} = "
                f"{self.tensor_parallel * self.pipeline_parallel * ep}"
            )

    def __setstate__(self, state: dict) -> None:
        """Unpickling runs the constructor's checks, so an edited pickle is refused by field."""
        self.__dict__.update(state)
        self.__post_init__()

    def to_json(self) -> str:
        """The system's one serialized form: its fields, the accelerator in its own JSON."""
        sizes = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("accelerator", "link")}
        return json.dumps({"accelerator": json.loads(self.accelerator.to_json()), **sizes,
                           "link": asdict(self.link)})

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
        # expert_parallel may be left out (JSON written before it: 1), and so may a link's
        # pj_per_bit (JSON written before links had an energy: the default).
        _check_keys("System JSON", data, cls, "expert_parallel")
        _check_keys("System JSON field 'link'", data["link"], Link, "pj_per_bit")
        return cls(**{**data, "accelerator": Accelerator.from_json(json.dumps(
            data["accelerator"])), "link": Link(**data["link"])})


def _check_keys(what: str, data: Any, cls: type, optional: str) -> None:
    """Refuse ``data`` unless it is an object with the fields of ``cls`` (``optional`` may be
    left out), naming what it is."""
    keys = {f.name for f in fields(cls)} - {optional}
    if not isinstance(data, dict) or not keys <= set(data) <= keys | {optional}:
        got = sorted(data) if isinstance(data, dict) else f"{type(data).__name__} {data!r}"
        raise ValueError(f"{what} must be an object with keys {sorted(keys)} and optionally "
                         f"{optional!r}, got {got}")


# ---- Collectives ---------------------------------------------------------------------------

def charge_collective(kind: str, nbytes: float, chips: int, link: Link) -> cm.LinkCharge:
    """What a collective costs on ``link`` (``cost_model.charge_link``: seconds, the bytes each
    chip sends, one chip's energy).

    Raises
    ------
    ValueError
        For an unknown collective, negative or non-finite bytes, fewer than one chip (named);
        ``TypeError`` for a wrong type.
    """
    if not isinstance(link, Link):
        raise TypeError(f"link must be a tenet_byoc.system.Link, got {type(link).__name__}")
    return cm.charge_link(cm.LinkCall(kind, nbytes, chips), link.charged())


def collective_seconds(kind: str, nbytes: float, chips: int, link: Link) -> float:
    """Seconds a collective takes by the module's formulas (0 for one chip, except p2p)."""
    return charge_collective(kind, nbytes, chips, link).seconds


def collective_link_bytes(kind: str, nbytes: float, chips: int,
                          topology: str = "ring") -> float:
    """Bytes each chip sends in a collective (the module's ``link_bytes``; only an all-to-all's
    depend on the ``topology``)."""
    return charge_collective(kind, nbytes, chips, Link(topology=topology)).link_bytes


# ---- What an estimate on a system gives ----------------------------------------------------

@dataclass(frozen=True)
class StepTime:
    """One step on a system: its critical path and how it was made (``tokens``: the prompt of
    a prefill, the context of a decode step, the new tokens of a mixed step)."""

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

    def __init__(self, entries: list[LedgerEntry] | Any, system: System,
                 steps: list[StepTime], *, count: int | None = None,
                 max_entries: tuple[int, str] | None = None):
        acc = system.accelerator
        super().__init__(entries, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [],
                         count=count, max_entries=max_entries)
        self.system = system
        self.steps = steps

    def latency_s(self, phase: str | None = None) -> float:
        """Seconds of the steps of ``phase`` ("prefill", "decode"; None: all), each its
        critical path."""
        if phase is not None and phase not in ("prefill", "decode", "mixed"):
            raise ValueError(f"phase must be 'prefill', 'decode', 'mixed' or None, got "
                             f"{phase!r}")
        return sum(s.seconds for s in self.steps if phase is None or s.phase == phase)
