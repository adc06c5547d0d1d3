"""Design-space exploration: many accelerator designs, each estimated per scheme with its area,
and the Pareto fronts of cost against area marked.

A :class:`DesignSpace` lists values per design field (:data:`AXES`, the one schema) and
optional budgets; :func:`explore` estimates every point under every scheme
(what :func:`tenet_byoc.estimate` gives for that accelerator, or that system of chips,
alone: TTFT, TPOT, tokens/s, energy per token) beside its area at the space's node
(:mod:`tenet_byoc.area`) and average power, and marks the Pareto fronts.

Speed: the model is planned once per (scheme, sharding) (``tenet_byoc.plan``: every call of
each step, tallied per phase into distinct calls with counts), then per design each
distinct call is charged once (a few microseconds: the accelerator value keeps its
relations parsed) and the tallies composed (``tenet_byoc.compose``, the rule ``estimate``
times a step by), never a ledger of entries. A GEMM is charged once per set of points whose
array, memory and precision agree, a vector call once per set whose vector unit and memory
agree, and one chip's sums are made once per set that differs only in the clock (cycles and
energy do not depend on it). Points run in a local process pool
(``executor="local"``), in this process (``"serial"``) or as Ray tasks (``"ray"``, the
optional extra ``tenet-byoc[ray]``). Results are appended to a JSON-lines file as they
finish, so an interrupted run resumes where it stopped.

Thread safety: functions keep no state between calls. Errors: a bad space, scheme, model or
length raises ``ValueError`` naming the field, value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The design point's schema lives beside the light console entry, which reads its columns.
from tenet_byoc_cli.design_point import (
    AXES,
    DEFAULTS,
    LATER,
    Axis,
    DesignAxes,
    PointColumns,
)

from . import cost_model as cm
from ._names import did_you_mean
from .documents import load_mapping
from .area import (
    FORMATS,
    AreaTable,
    accelerator_area,
    dram_interface_mm2,
    mac_figure,
    number_format,
)
from .accelerators import Accelerator, check_dram_capacity

__all__ = ["AXES", "OBJECTIVE_PAIRS", "Axis", "DesignPoint", "DesignSpace", "PointResult", "explore",
           "mark_fronts", "pareto_front"]

#: The most points a :class:`DesignSpace` may hold (each is built before any runs).
MAX_DESIGN_POINTS = 1_000_000

#: The fronts :func:`mark_fronts` marks, per scheme: (name, objectives to minimise).
OBJECTIVE_PAIRS: dict[str, tuple[str, ...]] = {
    "tpot_area": ("tpot_ms", "area_mm2"),
    "ttft_area": ("ttft_ms", "area_mm2"),
    "energy_area": ("energy_per_token_mj", "area_mm2"),
}
#: With accuracy: one front across schemes (which scheme on which design).
ACCURACY_FRONT = ("perplexity", "energy_per_token_mj", "area_mm2")

_DATAFLOWS = ("os", "ws", "is")
_MAPPINGS = ("default", "auto")


# ----------------------------------------------------------------------------------------
# The design point: each field written once, with what the rest is made from
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DesignPoint(DesignAxes):
    """One design (:class:`~tenet_byoc_cli.design_point.DesignAxes`, where each field is
    written once with its schema): a ``rows x cols`` systolic array of PEs with a MAC unit
    per format, a global buffer, DRAM at ``dram_gbps``, a clock, a vector unit, and the chips
    it is one of, with the accelerator and charge keys made from them."""

    @property
    def formats_by_width(self) -> dict[int, str]:
        return {number_format(f).bits: f for f in self.pe_formats}

    def accelerator(self) -> Accelerator:
        """The accelerator value of this point."""
        precision = cm.PrecisionTable([
            cm.MacSpec(b, b, macs_per_pe_per_cycle=1, pj_per_mac=mac_figure(f, key="pj"))
            for b, f in sorted(self.formats_by_width.items(), reverse=True)])
        memory = cm.MemoryHierarchy(
            dram_bandwidth_bits=self.dram_bits_per_cycle, buffer_bytes=self.buffer_bytes,
            # the buffer feeds an edge of A and of B and takes one of C at 32 bits a cycle,
            # as the shipped presets do (accelerators._research_array)
            buffer_bandwidth_bits=(self.rows + 2 * self.cols) * 32,
            register_bytes=self.register_bytes)
        return Accelerator.systolic(
            self.dataflow, self.rows, self.cols, name=self.name,
            bandwidth_bits=self.dram_bits_per_cycle, clock_ghz=self.clock_ghz,
            l1_bytes=self.register_bytes, l2_bytes=self.buffer_bytes, memory=memory,
            precision=precision, mapping="auto" if self.mapping == "auto" else None,
            objective="latency" if self.mapping == "auto" else None,
            vector=cm.VectorUnit(lanes=self.vector_lanes))

    @property
    def alone(self) -> bool:
        """One chip and one micro-batch: no System (its sums are one chip's cycles)."""
        return self.chips == 1 and self.micro_batches == 1

    def charged_as(self, *charges: str) -> tuple:
        """What the charges of the fields of ``charges`` (:attr:`Axis.charges` values) see of
        the point: equal for two points whose those charges are equal."""
        return tuple(read(self) for read in _key_readers(charges))

    def charge_key(self) -> tuple:
        """What the charges (and the area but for the DRAM interface) depend on: all but the
        clock (DRAM as bits per cycle)."""
        return self.charged_as("array", "memory", "vector", "system")

    def array_key(self) -> tuple:
        """What a GEMM's charge depends on: the array and the memory."""
        return self.charged_as("array", "memory")

    def vector_key(self) -> tuple:
        """What a vector call's charge depends on: the vector unit and the memory (buffer
        size, DRAM bits per cycle, registers; src/cost_model/vector.cc), not the array."""
        return self.charged_as("vector", "memory")


@functools.cache  # once per set of charges: the keys are asked per point
def _key_readers(charges: tuple[str, ...]) -> tuple[Callable[[DesignPoint], Any], ...]:
    return tuple(a.charged_as or operator.attrgetter(name) for name, a in AXES.items()
                 if a.charges in charges)


#: The order a space's points come in: the chips and the vector unit vary slowest, the clock
#: fastest, so that consecutive points share their charges.
_VARIES = {"system": 0, "vector": 1, "array": 2, "memory": 2, "clock": 3}


def _column(name: str, value: Any) -> Any:
    """A point's field as its :class:`PointResult` column (a set of formats ``+``-joined)."""
    return "+".join(value) if AXES[name].check == "formats" else value


def _from_column(name: str, value: Any) -> Any:
    return tuple(value.split("+")) if AXES[name].check == "formats" else value


def _with_axes(cls: type) -> type:
    """``cls`` (a dataclass to be) with a list of values per :data:`AXES` field, first, each
    defaulting to the point's default alone."""
    own = cls.__dict__.get("__annotations__", {})
    axes = {}
    for name, a in AXES.items():
        axes[a.space] = f"tuple[{DesignAxes.__annotations__[name]}, ...]"
        setattr(cls, a.space, (DEFAULTS[name],))
    cls.__annotations__ = {**axes, **own}
    return cls


@dataclass(frozen=True)
@_with_axes
class DesignSpace:
    """Values per :class:`DesignPoint` field; the points are their product, less those over
    the area budget.

    Parameters
    ----------
    rows, cols, dataflows, pe_formats, buffer_bytes, dram_gbps, clock_ghz, register_bytes, \
mappings, vector_lanes, tensor_parallel, pipeline_parallel, link_gbps, micro_batches : sequence
        The values of each field (:data:`AXES` names them: a field's space name is its own
        but ``dataflows`` and ``mappings``), default the point's default alone. Each set of
        ``pe_formats`` has at most one format per width (names of
        ``tenet_byoc.area.FORMATS``, e.g. ``[["int8", "fp32"], ["fp8_e4m3", "fp16",
        "fp32"]]``); a scheme whose calls need a width no unit takes is refused on that
        design (the point says why). ``mappings``: each call's default buffer tiles
        ("default"), or its mapping searched for latency ("auto"; slower to charge, and
        the default tiles of a large prefill on a small buffer can be far from it). A point
        of ``tensor_parallel x pipeline_parallel`` chips is a
        :class:`~tenet_byoc.system.System` of copies of its accelerator with ``link_gbps``
        links (a ring), estimated as ``estimate(..., system=...)`` estimates it, its area
        all chips'; a model whose heads ``tensor_parallel`` does not divide is refused on
        that point, and so is a batch ``micro_batches`` does not divide (several
        micro-batches on one chip run one after another).
    node_nm : float
        Process node of the area figures.
    area_budget_mm2, power_budget_w : float, optional
        Points over the area budget are left out before anything is estimated; a point over
        the power budget (average W of the estimated run) is kept but marked infeasible.
    area_table : AreaTable or path, optional
        Figures replacing the published ones (see ``AreaTable.load``).
    """

    node_nm: float = 45.0
    area_budget_mm2: float | None = None
    power_budget_w: float | None = None
    area_table: AreaTable | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for a in AXES.values():
            name = a.space
            values = getattr(self, name)
            if isinstance(values, str | bytes) or not isinstance(values, Iterable):
                raise ValueError(  # noqa: TRY004 (a bad field of a space file, like the others)
                    f"design space field {name} must be a list, got {values!r}")
            values = tuple(values)
            if not values:
                raise ValueError(f"design space field {name} is empty: give at least one value")
            clean = tuple(self._value(name, a.check, v) for v in values)
            object.__setattr__(self, name, tuple(dict.fromkeys(clean)))
        for name in ("node_nm", "area_budget_mm2", "power_budget_w"):
            value = getattr(self, name)
            if value is None and name != "node_nm":
                continue
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value <= 0):
                raise ValueError(f"design space field {name} must be a finite positive number, "
                                 f"got {value!r}")
            object.__setattr__(self, name, float(value))
        size = math.prod(len(getattr(self, a.space)) for a in AXES.values())
        if size > MAX_DESIGN_POINTS:  # all_points builds every point before anything runs
            counts = ", ".join(f"{a.space} {len(getattr(self, a.space))}" for a in AXES.values()
                               if len(getattr(self, a.space)) > 1)
            raise ValueError(f"design space has {size:,} points ({counts}), over the limit of "
                             f"{MAX_DESIGN_POINTS:,}: split it into smaller spaces")
        table = self.area_table
        if table is not None and not isinstance(table, AreaTable):
            object.__setattr__(self, "area_table", AreaTable.load(table))
        self.table.bitcell_um2(self.node_nm)  # refuse a node the table cannot scale to

    @staticmethod
    def _value(name: str, check: str, v: Any) -> Any:
        where = f"design space field {name}: value {v!r}"
        if check == "formats":
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, Sequence) or not v:
                raise ValueError(f"{where} must be a list of PE formats ({', '.join(FORMATS)})")
            for f in v:
                if f not in FORMATS:
                    raise ValueError(f"{where}: unknown PE format {f!r}"
                                     f"{did_you_mean(str(f), FORMATS)}; known: "
                                     f"{', '.join(FORMATS)}")
            widths = [FORMATS[f].bits for f in v]
            if len(set(widths)) != len(widths):
                raise ValueError(f"{where} has two formats of one width: a PE takes one "
                                 "format per operand width")
            return tuple(v)
        choices = {"mapping": _MAPPINGS, "dataflow": _DATAFLOWS}.get(check)
        if choices is not None:
            if v not in choices:
                raise ValueError(f"{where} is not a {check}{did_you_mean(str(v), choices)}; "
                                 f"accepted: {', '.join(choices)}")
            return v
        kind = int if check == "int" else float
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0 or (
                kind is int and v != int(v)):
            what = "a positive integer" if kind is int else "a positive number"
            raise ValueError(f"{where} must be {what}")
        return kind(v)

    @property
    def table(self) -> AreaTable:
        return self.area_table or AreaTable()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "design space") -> DesignSpace:
        """A space from a mapping of the fields (a YAML/JSON file's content); a single value
        stands for a list of one."""
        names = [f.name for f in dataclasses.fields(cls)]
        checks = {a.space: a.check for a in AXES.values()}
        kwargs = {}
        for key, value in data.items():
            if key not in names:
                raise ValueError(f"{where}: unknown field {key!r}{did_you_mean(str(key), names)}"
                                 f"; fields: {', '.join(names)}")
            if key in checks and (not isinstance(value, list) or (
                    checks[key] == "formats" and value and isinstance(value[0], str))):
                value = [value]
            kwargs[key] = value
        try:
            return cls(**kwargs)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> DesignSpace:
        """A space from a YAML or JSON file of its fields."""
        return cls.from_dict(load_mapping(path, "design space"), f"design space {str(path)!r}")

    def all_points(self) -> list[DesignPoint]:
        """Every combination of the fields' values, each design once (the chips and the
        vector unit varying slowest, the clock fastest: consecutive points share their
        charges). A point of mapping "auto" searches every call's dataflow among os, ws and
        is whatever its own, so of the points that differ only in the dataflow it is made
        once, under the first of ``dataflows`` (the others would repeat its figures)."""
        names = sorted(AXES, key=lambda name: _VARIES[AXES[name].charges])
        points = (DesignPoint(**dict(zip(names, values, strict=True)))
                  for values in itertools.product(*(getattr(self, AXES[n].space)
                                                    for n in names)))
        return [p for p in points if p.mapping != "auto" or p.dataflow == self.dataflows[0]]

    def area(self, point: DesignPoint) -> dict[str, float]:
        """The point's area by component at the space's node: one chip's (``total`` is all
        ``point.chips`` chips')."""
        parts = accelerator_area(point.accelerator(), self.node_nm, self.table,
                                 point.formats_by_width)
        if point.chips > 1:
            parts["total"] *= point.chips
        return parts


# ----------------------------------------------------------------------------------------
# Charging one point
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointResult(PointColumns):
    """One design point under one scheme (:class:`~tenet_byoc_cli.design_point.PointColumns`:
    its key, name and scheme, a column per :class:`DesignPoint` field, then its figures)."""

    def point(self) -> DesignPoint:
        return DesignPoint(**{name: _from_column(name, getattr(self, name)) for name in AXES})


def _plans(config: Any, scheme: str, prompt_len: int, decode_steps: int, batch: int,
           tp: int, pp: int, mu: int) -> dict[str, Any] | str:
    """Per phase, the tally of every step's calls (``tenet_byoc.plan``) on ``tp x pp`` chips
    with the batch in ``mu`` micro-batches: each distinct call once with how often it runs;
    or why the model cannot be planned so. A phase's time is the composition of its tally
    (``tenet_byoc.compose``; with several micro-batches and stages, a decode phase's
    slowest stage is the slowest over its steps: what composing each step alone gives when
    one stage is the slowest in every step)."""
    from .plan import Sharding, Step, plan

    sharding = Sharding(tp, pp, mu)
    out: dict[str, Any] = {}
    try:
        if prompt_len:
            out["prefill"] = plan(config, Step.prefill(prompt_len, batch), scheme,
                                  sharding).tally()
        if decode_steps:
            steps = [plan(config, Step.decode(prompt_len + i, batch), scheme, sharding)
                     for i in range(decode_steps)]
            out["decode"] = steps[0].tally(steps[1:])
    except ValueError as err:
        return f"{scheme} cannot run: {err}"
    return out


def _sharding(point: DesignPoint) -> tuple[int, int, int]:
    """The (tensor parallel, pipeline stages, micro-batches) the model is planned for."""
    return point.tensor_parallel, point.pipeline_parallel, point.micro_batches


@dataclass
class _Job:
    """What every worker needs: the model's call tallies per (scheme, tensor parallel,
    pipeline stages) and the run's settings."""

    plans: dict[tuple[str, int, int, int], dict[str, Any] | str]
    operands: dict[str, tuple[int, str]]  #: per scheme: its weight GEMMs' width and kind
    prompt_len: int
    decode_steps: int
    batch: int
    node_nm: float
    table: AreaTable
    power_budget_w: float | None
    #: per (scheme, tensor parallel, pipeline stages): why the model does not fit each
    #: chip's DRAM, or "" (:func:`_memory_reasons`)
    memory: dict[tuple[str, int, int], str] = field(default_factory=dict)

    @property
    def schemes(self) -> list[str]:
        return list(self.operands)


def _memory_reasons(config: Any, schemes: Sequence[str], points: Iterable[DesignPoint],
                    prompt_len: int, decode_steps: int, batch: int,
                    capacity: float | None) -> dict[tuple[str, int, int], str]:
    """Per (scheme, sharding) the points use: why the footprint per chip
    (``models.footprint``: weights at their stored widths, the KV cache, activations' peak;
    the larger of the prefill's and the last decode step's) exceeds ``capacity`` bytes, or
    "". Empty without a capacity."""
    if capacity is None:
        return {}
    from .models.footprint import fit

    out = {}
    for tp, pp in sorted({(p.tensor_parallel, p.pipeline_parallel) for p in points}):
        for scheme in schemes:
            # fit()'s accelerator only names the chip; its capacity is ``capacity`` here
            worst = fit(config, scheme, None, prompt_len, prompt_len, decode_steps, batch, tp,
                        pp).footprint
            short = worst.shortfall(capacity)
            out[scheme, tp, pp] = f"{scheme} does not fit: it {short}" if short else ""
    return out


def _evaluate(job: _Job, points: Sequence[DesignPoint]) -> list[PointResult]:
    """Every scheme on every point: its plans composed with the point's charges. Points of
    one ``charge_key`` (they differ only in the clock) share one accelerator value, their
    one-chip cycles and energy per phase and their area but for the DRAM interface, which
    follows the point's GB/s. The GEMMs' charges are shared by points of one ``array_key``
    and the vector calls' by points of one ``vector_key``."""
    shared: dict[tuple, tuple] = {}
    arrays: dict[tuple, dict] = {}
    vectors: dict[tuple, dict] = {}
    out = []
    scale = job.table.logic_scale(job.node_nm)
    for point in points:
        found = shared.get(point.charge_key())
        if found is None:
            acc = point.accelerator()
            parts = accelerator_area(acc, job.node_nm, job.table, point.formats_by_width)
            found = shared[point.charge_key()] = (parts, acc, {})
        parts, acc, composed = found
        area = point.chips * sum(  # accelerator_area's order and sum, all chips'
            dram_interface_mm2(point.dram_gbps, job.table, scale) if name == "dram_interface"
            else value for name, value in parts.items() if name != "total")
        # one chip, one micro-batch: its sums (cycles) do not depend on the clock
        one_chip = point.alone
        for scheme in job.schemes:
            key = (scheme, point.tensor_parallel, point.pipeline_parallel)
            got = composed.get(scheme) if one_chip else None
            if got is None:
                plans = job.plans[(scheme, *_sharding(point))]
                got = _compose(job, point, acc, scheme, plans,
                               arrays.setdefault(point.array_key(), {}),
                               vectors.setdefault(point.vector_key(), {}))
                if one_chip:
                    composed[scheme] = got
            times, energy, reason = got
            latency_us = {ph: t / (point.clock_ghz * 1e3) if one_chip else t * 1e6
                          for ph, t in times.items()}
            reason = reason or job.memory.get(key, "")
            out.append(_result(job, point, area, scheme, latency_us, energy, reason))
    return out


def _operands(scheme: str) -> tuple[int, str]:
    """The width and kind ("int" or "float") of the unit a scheme's weight GEMMs need: the
    wider operand's width; integer only when both operands are integers."""
    from .codegen import gemm_charging
    from .quantization import get_scheme

    q = get_scheme(scheme)
    bits = gemm_charging(q, "weight").bits
    kinds = {q.weight_format, q.activation_format}
    return max(bits[0], bits[1]), "int" if kinds <= {"int", "uint"} else "float"


def _format_mismatch(point: DesignPoint, scheme: str, needs: tuple[int, str]) -> str:
    """Why ``scheme``'s weight GEMMs would run on a unit of the wrong kind (the cost model
    charges by width alone, so an int8 call would otherwise be charged to fp8 PEs), or ""."""
    width, kind = needs
    units = [(FORMATS[f].bits, mac_figure(f, key="pj"), f) for f in point.pe_formats
             if FORMATS[f].bits >= width]
    if not units:
        return ""  # the charge refuses it, naming the width
    # the unit the cost model picks: equal rates here, so the least energy per MAC
    _, _, unit = min(units, key=lambda u: (u[1], u[0]))
    if FORMATS[unit].kind != kind:
        return (f"{scheme} cannot run: its {width}-bit {kind} weight GEMMs would run on the "
                f"{unit} unit; add a {kind} format of {width} bits")
    return ""


def _compose(job: _Job, point: DesignPoint, acc: Accelerator, scheme: str,
             plans: dict[str, Any] | str, gemm_charges: dict,
             vector_charges: dict) -> tuple[dict[str, float], dict[str, float], str]:
    """Per phase, the time (cycles of one chip; seconds, the critical path, on several) and
    energy (pJ, all chips) of ``scheme`` on the point, by ``compose`` of its tallies: no
    entry is made, each distinct call is charged once per group of points (``gemm_charges``
    for points of one ``array_key``, ``vector_charges`` for points of one ``vector_key``,
    both by the call's plain key). Or the reason it cannot run."""
    from .compose import compose
    from .system import Link

    times = {"prefill": 0.0, "decode": 0.0}
    energy = {"prefill": 0.0, "decode": 0.0}
    reason = _format_mismatch(point, scheme, job.operands[scheme])
    if not reason and isinstance(plans, str):
        reason = plans
    if reason:
        return times, energy, reason
    link = Link(bandwidth_gbps=point.link_gbps).charged()

    def cost(pc: Any) -> tuple[float, float]:
        if pc.unit == "link":
            c = cm.charge_link(pc.call, link)
            return c.seconds, c.energy_pj
        charges = gemm_charges if pc.unit == "array" else vector_charges
        found = charges.get(pc.key)
        if found is None:
            if pc.unit == "array":
                c = cm.charge(pc.call, acc)
                found = (c.memory.cycles, c.energy.total_pj)
            else:
                c = cm.charge_vector(pc.call, acc)
                found = (c.cycles, c.energy_pj)
            charges[pc.key] = found
        return found

    try:
        for phase, p in plans.items():
            step = compose(p, cost, acc.vector.schedule, point.clock_ghz)
            times[phase] = step.stage_cycles[0] if point.alone else step.seconds
            energy[phase] = step.energy_pj
    except ValueError as err:
        return times, energy, f"{scheme} cannot run: {err}"
    return times, energy, ""


def _result(job: _Job, point: DesignPoint, area: float, scheme: str,
            latency_us: dict[str, float], energy: dict[str, float], reason: str) -> PointResult:
    nan = math.nan
    base = {"key": point.key, "name": point.name, "scheme": scheme,
            **{name: _column(name, getattr(point, name)) for name in AXES}, "area_mm2": area}
    if reason:  # every figure NaN
        return PointResult(**base, feasible=False, reason=reason)
    prefill_us, decode_us = latency_us["prefill"], latency_us["decode"]
    steps, batch, prompt = job.decode_steps, job.batch, job.prompt_len
    # static power (all chips' area x the table's W per mm2) over each phase's time, in pJ
    static_w = area * job.table.static_w_per_mm2
    energy = {"prefill": energy["prefill"] + static_w * prefill_us * 1e6,
              "decode": energy["decode"] + static_w * decode_us * 1e6}
    total_us = prefill_us + decode_us
    power = (energy["prefill"] + energy["decode"]) / total_us * 1e-6 if total_us else 0.0
    over = job.power_budget_w is not None and power > job.power_budget_w
    return PointResult(
        **base,
        ttft_ms=prefill_us / 1e3 if prompt else nan,
        tpot_ms=decode_us / 1e3 / steps if steps else nan,
        tokens_per_s=batch * steps / (decode_us / 1e6) if steps and decode_us else nan,
        energy_per_token_mj=energy["decode"] / 1e9 / (steps * batch) if steps else nan,
        prefill_energy_per_token_mj=energy["prefill"] / 1e9 / (prompt * batch)
        if prompt else nan,
        power_w=power, feasible=not over,
        reason=f"average power {power:.3g} W is over the budget {job.power_budget_w:g} W"
        if over else "")


# ----------------------------------------------------------------------------------------
# Pareto fronts
# ----------------------------------------------------------------------------------------


def pareto_front(values: Sequence[Sequence[float]]) -> list[bool]:
    """Which rows of ``values`` no other row dominates (every objective minimised; a row
    dominates another when no worse in each and better in one). Rows with a NaN are off."""
    order = sorted((i for i, v in enumerate(values) if not any(math.isnan(x) for x in v)),
                   key=lambda i: tuple(values[i]))
    on = [False] * len(values)
    front: list[tuple[float, ...]] = []
    for i in order:
        v = tuple(values[i])
        # a dominator sorts before its victim, and one on the front dominates any other
        if not any(all(a <= b for a, b in zip(f, v, strict=True)) and f != v for f in front):
            on[i] = True
            front.append(v)
    return on


def mark_fronts(results: Sequence[PointResult]) -> list[PointResult]:
    """``results`` with ``fronts`` set: per scheme, each pair of :data:`OBJECTIVE_PAIRS`
    among its feasible points; with accuracy, :data:`ACCURACY_FRONT` across schemes."""
    fronts: dict[int, list[str]] = {i: [] for i in range(len(results))}
    sets = [(name, objectives, [i for i, r in enumerate(results)
                                if r.scheme == scheme and r.feasible])
            for scheme in dict.fromkeys(r.scheme for r in results)
            for name, objectives in OBJECTIVE_PAIRS.items()]
    sets.append(("accuracy", ACCURACY_FRONT, [i for i, r in enumerate(results)
                                              if r.feasible and not math.isnan(r.perplexity)]))
    for name, objectives, idx in sets:
        on = pareto_front([[getattr(results[i], o) for o in objectives] for i in idx])
        for i, flag in zip(idx, on, strict=True):
            if flag:
                fronts[i].append(name)
    return [dataclasses.replace(r, fronts=tuple(fronts[i])) for i, r in enumerate(results)]


# ----------------------------------------------------------------------------------------
# Executors and the results file
# ----------------------------------------------------------------------------------------


def _chunks(points: Sequence[DesignPoint], size: int) -> list[list[DesignPoint]]:
    """Points grouped by array key, then charge key (so a worker reuses their GEMM charges
    across vector units, and their sums across clocks), cut to ``size``."""
    by_array: dict[tuple, dict[tuple, list[DesignPoint]]] = {}
    for p in points:
        by_array.setdefault(p.array_key(), {}).setdefault(p.charge_key(), []).append(p)
    groups = [[p for same in array.values() for p in same] for array in by_array.values()]
    out, current = [], []
    for group in groups:
        if current and len(current) + len(group) > size:
            out.append(current)
            current = []
        current.extend(group)
        while len(current) >= size * 2:
            out.append(current[:size])
            current = current[size:]
    if current:
        out.append(current)
    return out


def _run_local(job: _Job, chunks: list, workers: int | None) -> Iterable[list[PointResult]]:
    from concurrent.futures import as_completed

    # loky's workers are fresh interpreters (fork + exec: a forked child of a process that
    # loaded TVM's thread pool can hang) that do not import the caller's __main__, so a
    # plain script calling explore without an `if __name__ == "__main__":` guard is not run
    # again in every worker (multiprocessing's spawn did, and the pool broke).
    from joblib.externals.loky import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = [pool.submit(_evaluate, job, chunk) for chunk in chunks]
        for f in as_completed(futures):
            yield f.result()


def check_ray_address(address: str | None, timeout_s: float = 10.0) -> None:
    """Refuse a Ray cluster address nothing answers at: ``ray.init`` would wait for it for
    ever. ``None``, ``auto`` and ``local`` are Ray's own to resolve.

    Raises
    ------
    ValueError
        Naming the address and what the connection attempt said.
    """
    import socket

    if address is None or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ray_address / --ray-address {address!r}: expected HOST:PORT (or "
                         "ray://HOST:PORT, auto, local)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise ValueError(f"ray_address / --ray-address {address!r}: nothing answers there "
                         f"({err}); start the cluster's head (ray start --head) or leave "
                         "--ray-address out for a Ray on this machine") from None


@contextmanager
def ray_session(address: str | None, num_cpus: int | None = None) -> Iterator[Any]:
    """The ``ray`` module, initialised on ``address`` (or a local Ray of ``num_cpus``) for
    the block and shut down after it, unless Ray was running already (then left so)."""
    try:
        import ray
    except ImportError:
        raise ValueError("executor='ray' needs Ray: pip install 'tenet-byoc[ray]'") from None
    started = not ray.is_initialized()
    if started:
        check_ray_address(address)  # ray.init waits for ever for an address nothing answers
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False,
                 log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _run_ray(job: _Job, chunks: list, address: str | None,
             workers: int | None) -> Iterable[list[PointResult]]:
    with ray_session(address, None if address else (workers or os.cpu_count())) as ray:
        remote = ray.remote(_evaluate)
        job_ref = ray.put(job)
        pending = [remote.remote(job_ref, chunk) for chunk in chunks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])


def _run_settings(config: Any, schemes: Sequence[str], prompt_len: int, decode_steps: int,
                  batch: int, space: DesignSpace, capacity: float | None = None) -> str:
    """A hash of what a point's rows depend on besides the point: the results file's rows
    are read back only under a ``{"run_settings": ..}`` line of the same run's hash."""
    values = [repr(config), list(schemes), prompt_len, decode_steps, batch,
              space.node_nm, space.power_budget_w, repr(space.table)]
    if capacity is not None:  # (absent, the hash of earlier runs' files is unchanged)
        values.append(capacity)
    text = json.dumps(values)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _read_done(path: Path, schemes: Sequence[str],
               settings: str | None = None) -> dict[str, list[PointResult]]:
    """Results already in the file, by point key (points with every scheme only), from the
    rows under a ``run_settings`` line equal to ``settings`` (or before any such line: a file
    an older release wrote); a row repeated keeps its last copy."""
    by_key: dict[str, dict[str, PointResult]] = {}
    if not path.exists():
        return {}
    names = {f.name for f in dataclasses.fields(PointResult)}
    current = None
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the interruption: its point runs again
            if not isinstance(row, dict):
                continue
            if set(row) == {"run_settings"}:
                current = row["run_settings"]
                continue
            if current is not None and current != settings:
                continue  # another run's rows (another model, lengths, batch or schemes)
            for name, value in LATER.items():
                row.setdefault(name, value)  # a row an older release wrote
            if set(row) != names:
                continue
            row["fronts"] = ()
            by_key.setdefault(row["key"], {})[row["scheme"]] = PointResult(**row)
    return {k: [v[s] for s in schemes] for k, v in by_key.items() if set(v) == set(schemes)}


def explore(
    model: Any,
    schemes: Sequence[str],
    space: DesignSpace | Mapping[str, Any] | str | os.PathLike,
    *,
    prompt_len: int = 512,
    decode_steps: int = 16,
    batch: int = 1,
    objective: str | None = None,
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    results_file: str | os.PathLike | None = None,
    accuracy: Mapping[str, Mapping[str, float]] | None = None,
    progress: bool = False,
    chunk_size: int = 64,
    dram_capacity_bytes: float | None = None,
) -> list[PointResult]:
    """Estimate every point of ``space`` under every scheme and mark the Pareto fronts.

    Parameters
    ----------
    model : str, PathLike or config
        As :func:`tenet_byoc.estimate` takes it.
    schemes : sequence of str
        Quantization schemes (names or spec strings).
    space : DesignSpace, mapping or path
        The design space (a mapping or a YAML/JSON file of its fields).
    prompt_len, decode_steps, batch : int
        As :func:`tenet_byoc.estimate` (the context is the prompt).
    objective : str, optional
        Sort the returned points by this field (e.g. "tpot_ms"); default: the space's order.
    executor : {"local", "serial", "ray"}
        A process pool of ``workers`` (default: every CPU), this process, or Ray tasks (on
        ``ray_address``, or a local Ray of ``workers`` CPUs).
    results_file : path, optional
        JSON lines, one per (point, scheme), appended as points finish; points already in it
        (with every scheme) are read back, not run again.
    accuracy : mapping, optional
        Per scheme ``{"perplexity": .., "top1_agreement": ..}`` (the eval path's figures,
        independent of the design): joined to its points, and the accuracy front marked.
    progress : bool
        Show the points done on stderr: a bar on a terminal, a line every few seconds into
        a pipe or a file (:func:`tenet_byoc.progress.progress_bar`).
    dram_capacity_bytes : float, optional
        Each chip's DRAM: a (point, scheme) whose footprint per chip exceeds it is
        infeasible (``reason`` says what it needs), so off the fronts.

    Returns
    -------
    list of PointResult
        Every (point, scheme), fronts marked.
    """
    from .estimate import _check_lengths
    from .plan import model_config
    from .quantization import get_scheme

    if not isinstance(space, DesignSpace):
        space = (DesignSpace.from_dict(space) if isinstance(space, Mapping)
                 else DesignSpace.from_file(space))
    if executor not in ("local", "serial", "ray"):
        raise ValueError(f"executor={executor!r}{did_you_mean(str(executor), ('local', 'ray'))}"
                         "; accepted: local, serial, ray")
    schemes = list(dict.fromkeys(schemes))
    if not schemes:
        raise ValueError("schemes is empty: give at least one scheme")
    for s in schemes:
        get_scheme(s)
    names = [f.name for f in dataclasses.fields(PointResult)]
    if objective is not None and objective not in names:
        raise ValueError(f"objective={objective!r}{did_you_mean(str(objective), names)}; "
                         f"accepted: a figure of PointResult such as tpot_ms, area_mm2")
    config = model_config(model)
    _check_lengths(config, prompt_len, prompt_len, decode_steps, batch)

    points = space.all_points()
    if space.area_budget_mm2 is not None:
        points = [p for p in points if space.area(p)["total"] <= space.area_budget_mm2]
    path = Path(results_file) if results_file is not None else None
    settings = _run_settings(config, schemes, prompt_len, decode_steps, batch, space,
                             dram_capacity_bytes)
    done = _read_done(path, schemes, settings) if path else {}
    results: dict[str, list[PointResult]] = {p.key: done[p.key] for p in points
                                             if p.key in done}
    todo = [p for p in points if p.key not in results]
    if dram_capacity_bytes is not None:
        check_dram_capacity(dram_capacity_bytes)
    # the model planned once per (scheme, sharding) the points to run use
    plans = {(s, *sharding): _plans(config, s, prompt_len, decode_steps, batch, *sharding)
             for s in schemes for sharding in sorted({_sharding(p) for p in todo})}
    job = _Job(plans, {s: _operands(s) for s in schemes}, prompt_len, decode_steps, batch,
               space.node_nm, space.table, space.power_budget_w,
               _memory_reasons(config, schemes, todo, prompt_len, decode_steps, batch,
                               dram_capacity_bytes))
    chunks = _chunks(todo, max(1, chunk_size))
    if executor == "serial" or not chunks:
        runs: Iterable[list[PointResult]] = (_evaluate(job, c) for c in chunks)
    elif executor == "local":
        runs = _run_local(job, chunks, workers)
    else:
        runs = _run_ray(job, chunks, ray_address, workers)
    from .progress import progress_bar

    # a bar on a terminal, a line every few seconds into a pipe or a log
    with (progress_bar(total=len(points), initial=len(results), unit="point", desc="dse",
                       smoothing=0.1, enabled=progress) as bar,
          path.open("a", encoding="utf-8") if path else nullcontext() as fh):
        if fh and fh.tell() and not path.read_bytes().endswith(b"\n"):
            fh.write("\n")  # end a line the interruption cut, so the next one starts clean
        if fh and todo:
            fh.write(json.dumps({"run_settings": settings}) + "\n")  # the rows below: this run's
        for batch_results in runs:
            for r in batch_results:
                results.setdefault(r.key, []).append(r)
            if fh:
                fh.write("".join(json.dumps(dataclasses.asdict(r), allow_nan=True) + "\n"
                                 for r in batch_results))
                fh.flush()
            bar.update(len(batch_results) // len(schemes))
    rows = [r for p in points for r in sorted(results[p.key],
                                              key=lambda r: schemes.index(r.scheme))]
    nan = math.nan
    for i, r in enumerate(rows if accuracy else ()):  # a scheme's figures join its points
        if (got := accuracy.get(r.scheme)) is not None:
            rows[i] = dataclasses.replace(r, perplexity=float(got["perplexity"]),
                                          top1_agreement=float(got.get("top1_agreement", nan)))
    rows = mark_fronts(rows)
    if objective is not None:
        rows.sort(key=lambda r: (math.isnan(v := getattr(r, objective)), v))
    return rows

