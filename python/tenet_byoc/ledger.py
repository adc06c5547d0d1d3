"""The cost ledger of a run or an estimate: stored by columns, typed entries made when read,
totals and groupings by numpy, and CSV / JSON / table output."""

from __future__ import annotations

import gc
import itertools
import json
import re
from collections import namedtuple
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from . import cost_model as cm
from ._cost_model import _ledger_field_names, _ledger_tensor_field_names
from .compose import chain_cycles
from .documents import write_json, write_rows

# The ledger's fields are the cost model's one table (src/cost_model/charge.h,
# ChargeLedgerFields), which the runtime's ledger JSON and Charge.ledger_fields() both
# write; the entry types below declare the same names between them (checked when this
# module loads).


@dataclass(frozen=True)
class TensorTraffic:
    """The data movement of one tensor (A, B or C) in one call, as TENET counts it."""

    bits: int
    is_write: bool
    total: int  #: (space-time point, element) access pairs
    unique: int  #: pairs no neighbouring point shares: what crosses the chip boundary
    reuse_factor: float
    spatial_reuse: float
    temporal_reuse: float
    offchip_elements: int
    offchip_bytes: float  #: TENET's unique volume: what crosses the array boundary
    dram_read_bytes: float  #: fetched from DRAM into the buffer (C: partial sums read back)
    dram_write_bytes: float  #: written from the buffer to DRAM (C only)
    buffer_read_bytes: float  #: read from the buffer by the array
    buffer_write_bytes: float  #: written into the buffer by the array (C)


class TensorMap(dict):
    """A GEMM entry's ``tensors``: A, B, C -> :class:`TensorTraffic`, read-only (the entries
    of one charge share it) and picklable (a ``MappingProxyType`` is not)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a ledger entry's tensors are read-only")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple:
        return (TensorMap, (dict(self),))


def tensor_map(tensors: Mapping[str, Mapping[str, Any]]) -> TensorMap:
    """The ``tensors`` of a charge's ledger fields as an entry holds them."""
    return TensorMap({name: TensorTraffic(**t) for name, t in tensors.items()})


# Entries are tuples (LedgerEntry says which): ~10^5 are made when a model's ledger is read,
# each a 9-tuple (tuple.__new__), 10x faster than filling a dataclass of 60 fields.

#: Every entry's names: made per call (the charge fields follow, stored once per charge).
ENTRY_NAMES = ("call_index", "symbol", "pattern", "name", "phase", "scheme", "layer", "chip")
#: The charge fields every unit has.
COMMON_FIELDS = ("unit", "op", "cycles", "latency_us", "energy_pj", "mapping")
#: The fields every charge has, from the cost model's one table (charge.h).
CHARGE_FIELDS = tuple(_ledger_field_names())
_VECTOR_OWN = ("elements", "vector_add_ops", "vector_mul_ops", "vector_exp_ops",
               "vector_recip_ops", "vector_tanh_ops", "spilled", "schedule")
#: A GEMM's own charge fields: charge.h's table, less the common ones and the vector unit's.
GEMM_FIELDS = (*(f for f in CHARGE_FIELDS if f not in COMMON_FIELDS + _VECTOR_OWN),
               "recipe", "tensors")
#: A vector call's own charge fields (and ``fused``: it is a GEMM's epilogue).
VECTOR_FIELDS = (
    "m", "n", "k", "bits_a", "bits_b", "bits_c", *_VECTOR_OWN, "fused", "roofline_cycles",
    "compute_cycles", "stall_cycles", "offchip_read_bytes", "offchip_write_bytes",
    "dram_read_bytes", "dram_write_bytes", "buffer_read_bytes", "buffer_write_bytes",
    "mac_pj", "buffer_pj", "dram_pj")


class LedgerEntry:
    """What every ledger entry has: a :class:`GemmEntry` (``unit="array"``), a
    :class:`VectorEntry` (``"vector"``), a :class:`LinkEntry` (``"link"``) or an
    :class:`AttentionEntry` (``"attention"``).

    Attributes
    ----------
    call_index : int
        Module-wide count of calls; the GEMMs of one merged call share it.
    symbol, pattern, name : str
        The offloaded function the VM called, its composite pattern (e.g.
        ``tenet.matmul_transposed_bias``; ``estimate`` for an estimate) and the step's name.
    phase : str
        The tag set with :func:`set_phase` when the call ran ("" if none).
    scheme : str
        The quantization scheme of the call ("none" for float32).
    layer : int or None
        The decoder layer (from a name ``h.3.…`` / ``layers.3.…``); None outside them.
    chip : int
        The chip of a :class:`~tenet_byoc.system.System` that ran it (0 alone).
    unit, op : str
        Where it ran (array, vector, link, attention) and what: "matmul", the vector kind
        (layer_norm, softmax, add, ...) or the collective (all_reduce, all_gather, p2p).
    cycles : int
        The call's latency in cycles (memory.h: tile steps with DRAM overlapped).
    latency_us, energy_pj : float
        Its latency at the clock and its energy (0 for a collective).
    mapping : str
        How it was mapped: "os 16x16 | tiles ...", "vector softmax", "all_reduce ring x4".

    Entries are named tuples ``(call_index, symbol, pattern, name, phase, scheme, layer,
    chip, charge)``, ``charge`` the unit's charge (:class:`GemmCharge`, ...: one value that
    every call of it shares), whose fields the entry reads by name too; ``FIELDS`` names
    them all, ``_asdict()`` gives them all, ``_replace()`` takes any. Equal when their
    fields are; they pickle.
    """

    __slots__ = ()
    FIELDS: tuple[str, ...] = ()

    def _asdict(self) -> dict[str, Any]:
        return {**dict(zip(ENTRY_NAMES, self)), **self[-1]._asdict()}

    def _replace(self, **changes: Any) -> LedgerEntry:
        names = [changes.pop(n, v) for n, v in zip(ENTRY_NAMES, self)]
        charge = self[-1]._replace(**changes) if changes else self[-1]
        return tuple.__new__(type(self), (*names, charge))


# The charge type of each unit, only its own fields: what a GEMM is charged (the cost model's
# ``Charge.ledger_fields``, a GEMM's part), a vector call (``charge_vector``'s ledger fields,
# its own part, and whether it is a GEMM's fused epilogue), a collective
# (``tenet_byoc.system``'s formulas: the bytes its chip sent over links) and a fused
# attention kernel (``charge_attention``: its MACs, the PEs and MAC rate its cycles hold, its
# DRAM bytes).
GemmCharge = namedtuple("GemmCharge", COMMON_FIELDS + GEMM_FIELDS)
VectorCharge = namedtuple("VectorCharge", COMMON_FIELDS + VECTOR_FIELDS)
LinkCharge = namedtuple("LinkCharge", (*COMMON_FIELDS, "link_bytes"))
AttentionCharge = namedtuple("AttentionCharge", (
    *COMMON_FIELDS, "macs", "num_pes", "macs_per_pe_per_cycle", "dram_read_bytes",
    "dram_write_bytes"))

_CALL = ENTRY_NAMES + ("charge",)


class _Traffic:
    """Traffic sums of an entry that moves data through the buffer (GEMM, vector)."""

    __slots__ = ()

    @property
    def offchip_bytes(self) -> float:
        return self.offchip_read_bytes + self.offchip_write_bytes

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def roofline_ratio(self) -> float:
        """cycles / roofline_cycles: how far this call is from its limit (>= 1)."""
        return self.cycles / self.roofline_cycles if self.roofline_cycles else 1.0


class _OnPes:
    """The PE time of an entry whose products run on the array (GEMM, fused attention)."""

    __slots__ = ()

    @property
    def mac_capacity(self) -> int:
        """The MACs the PEs (every core's) could have done in this call's cycles."""
        return self.cycles * self.num_pes * self.macs_per_pe_per_cycle


class GemmEntry(LedgerEntry, _Traffic, _OnPes, namedtuple("GemmEntry", _CALL)):
    """One GEMM on the PE array and what it costs (``unit="array"``).

    Its fields are charge.h's table (``Charge.ledger_fields``): shape ``batch, m, n, k``,
    operand widths, the quantization work (``extra_*``, ``dequant_*``, side bits), MACs,
    cycles and their parts (``array_cycles``, ``dram_stall_cycles``, ``edge_cycles``, TENET's
    delays), the array's use (``active_pes``, ``pe_utilization``), bytes per level, energy
    per level, ``recipe`` (a ``QuantRecipe``) and ``tensors`` (A, B, C ->
    :class:`TensorTraffic`).
    """

    __slots__ = ()

    @property
    def call(self) -> cm.GemmCall:
        """The call as the cost model takes it: ``cost_model.charge(entry.call, accelerator)``
        gives this entry's charge again."""
        return cm.GemmCall(m=self.m, n=self.n, k=self.k, batch=self.batch, bits_a=self.bits_a,
                        bits_b=self.bits_b, bits_c=self.bits_c, scheme=self.scheme,
                        recipe=self.recipe, a_on_chip=self.a_on_chip, c_on_chip=self.c_on_chip)

    @property
    def weight_bytes(self) -> float:
        """Bytes of the B operand (a linear layer's weight) and its scales, each once."""
        return (self.batch * self.k * self.n * self.bits_b + self.weight_side_bits) / 8


class VectorEntry(LedgerEntry, _Traffic, namedtuple("VectorEntry", _CALL)):
    """One call of the vector unit (``unit="vector"``): ``m`` rows of ``n`` elements,
    ``k`` elements of a second operand (0: none; its width ``bits_b``), widths in
    ``bits_a`` / out ``bits_c``; its output ``elements``, its ops by class
    (``vector_*_ops``), whether it ``spilled`` to DRAM, the unit's ``schedule`` and whether
    it is a GEMM's ``fused`` epilogue (its input straight from the array: the pipelined
    schedule hides it behind that GEMM); ``mac_pj`` is its arithmetic's energy."""

    __slots__ = ()

    @property
    def vector_call(self) -> cm.VectorCall:
        """The call: ``cost_model.charge_vector(entry.vector_call, accelerator)`` gives its
        charge again."""
        return cm.VectorCall(self.op, [self.m, self.n], bits_in=self.bits_a,
                           bits_out=self.bits_c, operand_elements=self.k)


class LinkEntry(LedgerEntry, namedtuple("LinkEntry", _CALL)):
    """One collective over a system's links (``unit="link"``, ``op`` its kind), timed by
    ``tenet_byoc.system``'s formulas; ``link_bytes`` what its chip sent."""

    __slots__ = ()


class AttentionEntry(LedgerEntry, _OnPes, namedtuple("AttentionEntry", _CALL)):
    """One fused attention kernel (``unit="attention"``): a plan's ``….attn.fused`` call in
    place of a layer's attention products and score work (``plan(attention="fused")``).

    Its products run on the PEs: ``macs`` (2 x B x H x (query, key) pairs x D; the causal
    upper triangle skipped) count as a GEMM's, and its cycles hold ``num_pes`` (every core's)
    at ``macs_per_pe_per_cycle`` (the rate at its width), as a GEMM entry's do."""

    __slots__ = ()

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes


#: The entry type of each unit.
ENTRY_TYPES: dict[str, type] = {"array": GemmEntry, "vector": VectorEntry, "link": LinkEntry,
                                "attention": AttentionEntry}
_UNITS = tuple(ENTRY_TYPES)
#: The charge type of each unit.
CHARGE_TYPES: dict[str, type] = {"array": GemmCharge, "vector": VectorCharge,
                                 "link": LinkCharge, "attention": AttentionCharge}
_OWN = {unit: cls._fields for unit, cls in CHARGE_TYPES.items()}


def _read_charge(i: int) -> property:
    return property(lambda self: self[-1][i])


for _unit, _entry in ENTRY_TYPES.items():
    _entry.FIELDS = ENTRY_NAMES + _OWN[_unit]
    for _i, _field in enumerate(_OWN[_unit]):
        setattr(_entry, _field, _read_charge(_i))


def layer_of(name: str) -> int | None:
    """The decoder layer of a call named ``h.3.…`` / ``layers.3.…``; None outside them."""
    found = re.match(r"(?:h|layers)\.(\d+)(?:\.|$)", name, re.ASCII)
    return int(found[1]) if found else None


def charge_row(fields: Mapping[str, Any]) -> tuple:
    """The charge part of an entry, from a charge's ledger fields (with ``recipe`` and
    ``fused`` where the unit has them): what a ledger stores once per distinct call."""
    unit = fields["unit"]
    return tuple.__new__(CHARGE_TYPES[unit], [fields[f] for f in _OWN[unit]])


def make_entry(fields: Mapping[str, Any], *, call_index: int, symbol: str, pattern: str,
               name: str, phase: str, scheme: str, chip: int = 0,
               layer: int | None = None) -> LedgerEntry:
    """The entry of one call: its names and its charge's ledger fields (the unit's own are
    taken, the others left out). ``layer`` defaults to the one ``name`` says."""
    cls = ENTRY_TYPES[fields["unit"]]
    if layer is None:
        layer = layer_of(name)
    return tuple.__new__(cls, (call_index, symbol, pattern, name, phase, scheme, layer, chip,
                               charge_row(fields)))


#: The scalar columns of a ledger table, in order (per-tensor traffic is flattened after
#: them); a column an entry's unit lacks is empty in its row.
COLUMNS = list(dict.fromkeys(
    f for cls in ENTRY_TYPES.values() for f in cls.FIELDS if f not in ("tensors", "recipe")))

_TENSOR_FIELDS = tuple(_ledger_tensor_field_names())


def _check_schema() -> None:
    """The entry types declare between them exactly the cost model's field names (one
    schema; ``fused`` is the runtime's, ``link_bytes`` a system's, ``recipe`` and
    ``tensors`` the charge's values): the GEMM's come from that table, the others must be
    in it."""
    declared = {f for own in _OWN.values() for f in own} - {"fused", "link_bytes", "recipe",
                                                             "tensors"}
    tensor = [f.name for f in fields(TensorTraffic)]
    if declared != set(CHARGE_FIELDS) or tensor != list(_TENSOR_FIELDS):
        raise ImportError(
            "tenet_byoc.ledger's entry / TensorTraffic fields differ from the cost model's "
            f"ledger table (charge.h ChargeLedgerFields): "
            f"{sorted(declared ^ set(CHARGE_FIELDS))} "
            f"{sorted(set(tensor) ^ set(_TENSOR_FIELDS))}; rebuild the package so both agree"
        )


_check_schema()
TENSORS = ("A", "B", "C")
_PER_TENSOR = ("offchip_bytes", "reuse_factor", "dram_read_bytes", "dram_write_bytes")
_TENSOR_COLUMNS = [f"{t}_{c}" for t in TENSORS for c in _PER_TENSOR]


def _entry_row(e: LedgerEntry) -> list:
    row = [getattr(e, c, "") for c in COLUMNS]
    tensors = getattr(e, "tensors", {})
    for t in TENSORS:
        tr = tensors.get(t)
        row += [getattr(tr, c) for c in _PER_TENSOR] if tr else [0] * len(_PER_TENSOR)
    return row


@dataclass(frozen=True)
class Totals:
    """Sums over a set of entries; utilisation is MAC-weighted (sum MACs / sum PE-cycles)."""

    calls: int
    macs: int  #: of the calls on the PEs: GEMMs and fused attention kernels
    cycles: int
    roofline_cycles: int  #: sum of the calls' rooflines (cycles / roofline_cycles >= 1)
    latency_us: float
    offchip_bytes: float  #: TENET's unique volume (the array level's traffic)
    dram_bytes: float  #: DRAM reads + writes of the buffer level
    energy_pj: float
    #: MACs over the MAC capacity (cycles x PEs, every core's, x MACs per PE per cycle) of
    #: the calls on the PEs, so a PE doing several MACs a cycle at low precision counts at
    #: its real rate
    pe_utilization: float
    bandwidth_gbps: float  #: off-chip bytes / latency: the average bandwidth the calls need

    @property
    def roofline_ratio(self) -> float:
        return self.cycles / self.roofline_cycles if self.roofline_cycles else 1.0

    def __str__(self) -> str:
        return _totals_table([("total", self)], "")


# Column titles with their units and each value's format: one table form for a Totals and
# for a group_by result, with thousands separators so 15-digit sums stay readable.
_TOTALS_COLUMNS = (
    ("calls", lambda t: f"{t.calls:,}"),
    ("MACs", lambda t: f"{t.macs:,}"),
    ("cycles", lambda t: f"{t.cycles:,}"),
    ("latency (us)", lambda t: f"{t.latency_us:,.2f}"),
    ("/ roofline", lambda t: f"{t.roofline_ratio:.2f}x"),
    ("PE util", lambda t: f"{100 * t.pe_utilization:.1f}%"),
    ("off-chip (MB)", lambda t: f"{t.offchip_bytes / 1e6:,.3f}"),
    ("DRAM (MB)", lambda t: f"{t.dram_bytes / 1e6:,.3f}"),
    ("energy (uJ)", lambda t: f"{t.energy_pj / 1e6:,.3f}"),
    ("bandwidth (GB/s)", lambda t: f"{t.bandwidth_gbps:,.2f}"),
)


def text_table(lines: Sequence[Sequence[str]]) -> list[str]:
    """``lines`` of cells aligned: the name column reads left to right, numbers align on
    their last digit."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return ["  ".join([line[0].ljust(widths[0]),
                       *(c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True))]).rstrip()
            for line in lines]


def _totals_table(groups: Sequence[tuple[str, Totals]], key: str) -> str:
    header = [key or "", *(title for title, _ in _TOTALS_COLUMNS)]
    rows = [[str(name), *(fmt(t) for _, fmt in _TOTALS_COLUMNS)] for name, t in groups]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(text_table([header, ["-" * w for w in widths], *rows]))


class GroupedTotals(dict):
    """``Ledger.group_by``'s result: a ``dict`` of group value -> :class:`Totals` that
    prints as a table (one row per group, units in the header)."""

    def __init__(self, key: str, groups: Mapping[str, Totals]) -> None:
        super().__init__(groups)
        self.key = key

    def table(self) -> str:
        """The groups as an aligned text table, thousands separated, units in the header."""
        return _totals_table([(k if k != "" else "(none)", t) for k, t in self.items()],
                             self.key)

    __str__ = table
    __repr__ = table


def _hides(e: LedgerEntry) -> bool:
    """Whether ``e`` (an entry or its charge) is a fused epilogue hidden behind its GEMM
    (pipelined vector unit)."""
    return e.unit == "vector" and e.fused and e.schedule == "pipelined"


def step_cycles(entries: Iterable[LedgerEntry]) -> int:
    """How a run's calls add up to its latency, in cycles: ``tenet_byoc.compose``'s one rule
    (a GEMM's fused epilogues hidden behind it under a ``pipelined`` vector unit, every other
    call adding) applied to entries in their order."""
    entries = list(entries)
    return chain_cycles([e.unit == "array" for e in entries], list(map(_hides, entries)),
                        [e.cycles for e in entries])[0]


def totals(entries: Iterable[LedgerEntry]) -> Totals:
    """Sums over ``entries``, one by one (see :class:`Totals`); ``cycles`` and
    ``latency_us`` follow :func:`step_cycles`. A :class:`Ledger` sums its columns instead
    (:meth:`Ledger.totals`); this is the plain reference."""
    entries = list(entries)
    on_pes = [e for e in entries if e.unit in ("array", "attention")]
    moving = [e for e in entries if e.unit in ("array", "vector")]  # through the buffer
    summed = sum(e.cycles for e in entries)
    cycles = step_cycles(entries)
    latency = sum(e.latency_us for e in entries) * (cycles / summed if summed else 1.0)
    offchip = sum(e.offchip_bytes for e in moving)
    macs = sum(e.macs for e in on_pes)
    capacity = sum(e.mac_capacity for e in on_pes)
    return Totals(
        calls=len(entries), macs=macs, cycles=cycles,
        roofline_cycles=sum(e.roofline_cycles for e in moving), latency_us=latency,
        offchip_bytes=offchip, dram_bytes=sum(getattr(e, "dram_bytes", 0) for e in entries),
        energy_pj=sum(e.energy_pj for e in entries),
        pe_utilization=macs / capacity if capacity else 0.0,
        bandwidth_gbps=offchip / (latency * 1e3) if latency else 0.0,
    )


# ---- The ledger stored by columns ----------------------------------------------------------

#: What Ledger.group_by groups by.
GROUP_KEYS = ("symbol", "pattern", "name", "phase", "scheme", "chip", "unit", "layer", "op")
_STRING_KEYS = ("symbol", "pattern", "name", "phase", "scheme")
#: A ledger's columns per call (:class:`LedgerColumns`' keyword arguments).
_CALL_COLUMNS = ("charge", "name", "phase", "chip", "call_index", "symbol", "pattern", "scheme")


class LedgerColumns:
    """A ledger stored by columns: each distinct charge once, and per call where its
    charge is and its names.

    The charges are a table (one row per distinct (charge, fused) pair, of any unit):
    ``charges[i]`` the charge part of an entry (:func:`charge_row`), with numpy columns of
    what totals sum (unit, cycles, MACs, roofline, MAC capacity, latency, bytes, energy,
    whether it hides behind its GEMM). Per call, in call order, numpy columns: ``charge``
    (a row of that table), ``name`` and ``phase`` (indices into ``strings``), ``chip``;
    ``scheme``; ``call_index``, ``symbol`` and ``pattern`` likewise, or None / one string
    for all (the call's position; one symbol and pattern). An entry
    is made from a call's columns when read; totals and group-bys are numpy sums over the
    columns.

    An estimate writes one (``tenet_byoc.estimate``), a run's entries give one
    (:meth:`from_entries`).
    """

    def __init__(self, charges: list[tuple], strings: list[str], *, charge: np.ndarray,
                 name: np.ndarray, phase: np.ndarray, chip: np.ndarray,
                 call_index: np.ndarray | None = None, symbol: np.ndarray | str = "",
                 pattern: np.ndarray | str = "", scheme: np.ndarray):
        self.charges = charges
        self.strings = strings
        self.charge, self.name, self.phase, self.chip = charge, name, phase, chip
        self.call_index, self.symbol, self.pattern, self.scheme = (call_index, symbol,
                                                                   pattern, scheme)
        self.unit_of = np.array([_UNITS.index(row[0]) for row in charges], dtype=np.int8)
        self.layer_of = np.array([-1 if (x := layer_of(s)) is None else x for s in strings],
                                 dtype=np.int64)

        def column(*names: str, dtype: Any = np.float64) -> np.ndarray:
            """The sum of fields ``names`` per charge (0 where a unit lacks one)."""
            return sum(np.array([getattr(row, f, 0) for row in charges], dtype=dtype)
                       for f in names)

        # What totals sum per charge, by the Totals field (or part of one) it sums into.
        self.summed = {
            "cycles": column("cycles", dtype=np.int64), "macs": column("macs", dtype=np.int64),
            "roofline_cycles": column("roofline_cycles", dtype=np.int64),
            "capacity": column("cycles") * column("num_pes") * column("macs_per_pe_per_cycle"),
            "latency_us": column("latency_us"),
            "offchip_bytes": column("offchip_read_bytes", "offchip_write_bytes"),
            "dram_bytes": column("dram_read_bytes", "dram_write_bytes"),
            "energy_pj": column("energy_pj")}
        self.hides = np.array([_hides(row) for row in charges], dtype=bool)

    def __len__(self) -> int:
        return len(self.charge)

    @classmethod
    def from_entries(cls, entries: Sequence[LedgerEntry]) -> LedgerColumns:
        """The columns of a list of entries (each entry's charge a row of its own)."""
        strings: dict[str, int] = {}

        def column(key: str) -> np.ndarray:
            values = [getattr(e, key) for e in entries]
            if key in _STRING_KEYS:
                values = [strings.setdefault(v, len(strings)) for v in values]
            return np.asarray(values, dtype=np.int64)

        calls = {k: column(k) for k in _CALL_COLUMNS if k != "charge"}
        return cls([e.charge for e in entries], list(strings),
                   charge=np.arange(len(entries), dtype=np.int64), **calls)

    # -- entries ---------------------------------------------------------------------------

    def entries(self, rows: Any = slice(None)) -> list[LedgerEntry]:
        """The entries of the calls ``rows`` (all by default), made now."""

        def objects(values: Sequence) -> np.ndarray:
            out = np.empty(len(values), dtype=object)
            out[:] = values
            return out

        def column(col: Any, table: np.ndarray) -> Any:
            if isinstance(col, np.ndarray):
                return table[col[rows]].tolist()
            return itertools.repeat(col)  # one symbol / pattern for every call

        strings = objects(self.strings)
        charge = self.charge[rows]
        n = len(charge)
        layers = objects([None if x < 0 else x for x in self.layer_of.tolist()])
        types = objects([ENTRY_TYPES[_UNITS[u]] for u in self.unit_of.tolist()])
        index = (self.call_index[rows] if self.call_index is not None
                 else np.arange(len(self))[rows]).tolist()
        names = self.name[rows]
        calls = zip(index, column(self.symbol, strings), column(self.pattern, strings),
                    strings[names].tolist(), column(self.phase, strings),
                    column(self.scheme, strings), layers[names].tolist(),
                    self.chip[rows].tolist(), objects(self.charges)[charge].tolist())
        # ~10^5 tuples made at once, in C loops: the cyclic collector would walk them again
        # and again as they are made (3x the time); none of them can form a cycle.
        collecting = gc.isenabled()
        gc.disable()
        try:
            out = list(map(tuple.__new__, types[charge].tolist(), calls))
        finally:
            if collecting:
                gc.enable()
        assert len(out) == n
        return out

    # -- sums ------------------------------------------------------------------------------

    def codes(self, key: str | tuple[str, ...]) -> tuple[np.ndarray, list]:
        """Each call's group under ``key`` (0, 1, ...) and the groups' values, in order of
        first appearance; a tuple of keys groups by their values together."""
        if isinstance(key, tuple):
            parts = [self.codes(k) for k in key]
            code, combos = _first_seen(np.stack([c for c, _ in parts], axis=1))
            return code, [tuple(values[i] for (_, values), i in zip(parts, combo, strict=True))
                          for combo in combos]
        if key in _STRING_KEYS:
            col = getattr(self, key)
            if not isinstance(col, np.ndarray):  # one value for every call
                return np.zeros(len(self), dtype=np.int64), [col] if len(self) else []
            value = self.strings.__getitem__
        elif key == "chip":
            col, value = self.chip, int
        elif key == "unit":
            col, value = self.unit_of[self.charge], _UNITS.__getitem__
        elif key == "layer":
            col, value = self.layer_of[self.name], lambda i: None if i < 0 else i
        else:  # "op" (Ledger.group_by checked the key)
            col, value = np.array([row[1] for row in self.charges])[self.charge], str
        code, raw = _first_seen(col)
        return code, [value(i) for i in raw]

    def totals(self, groups: np.ndarray | None = None, count: int = 1) -> list[Totals]:
        """:class:`Totals` of each group (``groups``: each call's, 0 .. count-1; None: one
        group of all), each a sum over its calls in order, by :func:`step_cycles`' rule."""
        n = len(self)
        g = np.zeros(n, dtype=np.int64) if groups is None else groups
        c = self.charge
        calls = np.bincount(g, minlength=count)

        def total(values: np.ndarray) -> list:  # ints exactly, floats by bincount
            if values.dtype.kind == "f":
                return np.bincount(g, weights=values, minlength=count).tolist()
            out = np.zeros(count, dtype=np.int64)
            np.add.at(out, g, values)
            return out.tolist()

        s = {k: total(v[c]) for k, v in self.summed.items()}
        chain = chain_cycles(self.unit_of[c] == 0, self.hides[c], self.summed["cycles"][c],
                             groups=g, n_groups=count)
        out = []
        for i, cycles in enumerate(chain):
            summed, macs, capacity, offchip = (s[k][i] for k in ("cycles", "macs", "capacity",
                                                                 "offchip_bytes"))
            lat = s["latency_us"][i] * (cycles / summed if summed else 1.0)
            out.append(Totals(
                calls=int(calls[i]), macs=macs, cycles=cycles,
                roofline_cycles=s["roofline_cycles"][i], latency_us=lat, offchip_bytes=offchip,
                dram_bytes=s["dram_bytes"][i], energy_pj=s["energy_pj"][i],
                pe_utilization=macs / capacity if capacity else 0.0,
                bandwidth_gbps=offchip / (lat * 1e3) if lat else 0.0))
        return out


def _first_seen(col: np.ndarray) -> tuple[np.ndarray, list]:
    """Each value's rank in order of first appearance in ``col``, and the values in it (rows
    of a 2-D ``col``)."""
    uniq, first, inverse = np.unique(col, return_index=True, return_inverse=True,
                                     axis=0 if col.ndim > 1 else None)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], uniq[order].tolist()


class Ledger:
    """A snapshot of the charged calls of one executable or VM, or of an estimate.

    Get one with :func:`tenet_byoc.ledger` or ``tenet_byoc.estimate``. Its calls are stored
    by columns (:class:`LedgerColumns`: each distinct charge once); ``entries`` (and
    iterating, indexing) makes the :class:`GemmEntry` / :class:`VectorEntry` /
    :class:`LinkEntry` of each call when first read; ``totals()`` and ``group_by()`` are
    numpy sums over the columns and make none. ``to_csv`` and ``to_json``
    export the entries; ``reset()`` clears the runtime's ledger (not this snapshot).

    ``entries`` are the calls in order (a callable returning LedgerColumns: made when first
    needed); ``accelerator`` and ``dataflow`` name the accelerator and its dataflow;
    ``modules`` are the tenet modules read (empty for an estimate); ``count`` is how many
    calls a callable ``entries`` gives (``len`` without making them); ``max_entries`` the
    most entries that may be made and what a ``ValueError`` over it says.
    """

    def __init__(self, entries: Any, accelerator: str, dataflow: str, clock_ghz: float,
                 modules: list[tvm.runtime.Module], *, count: int | None = None,
                 max_entries: tuple[int, str] | None = None):
        self._make = entries if callable(entries) else None
        self._columns = entries if isinstance(entries, LedgerColumns) else None
        self._entries = list(entries) if isinstance(entries, (list, tuple)) else None
        self._count = count
        self._max_entries = max_entries
        self.accelerator = accelerator
        self.dataflow = dataflow
        self.clock_ghz = clock_ghz
        self._modules = modules

    @property
    def columns(self) -> LedgerColumns:
        """The calls by columns (made from the entries if they were given as a list)."""
        if self._columns is None:
            self._columns = (self._make() if self._make is not None
                             else LedgerColumns.from_entries(self._entries))
            self._make = None
        return self._columns

    @property
    def entries(self) -> list[LedgerEntry]:
        """The entries, in call order (made now if they were not yet)."""
        if self._entries is None:
            if self._max_entries is not None and len(self.columns) > self._max_entries[0]:
                raise ValueError(self._max_entries[1])
            self._entries = self.columns.entries()
        return self._entries

    @entries.setter
    def entries(self, value: list[LedgerEntry]) -> None:
        self._entries, self._make, self._columns = list(value), None, None

    def __len__(self) -> int:
        if self._entries is not None:
            return len(self._entries)
        if self._columns is None and self._count is not None:
            return self._count
        return len(self.columns)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries)

    def __getitem__(self, index: int | slice) -> LedgerEntry | list[LedgerEntry]:
        """Entry ``index`` (or a slice of them), made from the columns if not yet made."""
        if self._entries is not None:
            return self._entries[index]
        columns = self.columns
        if isinstance(index, slice):
            return columns.entries(np.arange(len(columns))[index])
        i = range(len(columns))[index]  # IndexError as a list gives it
        return columns.entries(slice(i, i + 1))[0]

    def totals(self) -> Totals:
        """Totals over all calls (numpy over the columns; :func:`totals` is the reference)."""
        return self.columns.totals()[0]

    @property
    def mapping_searches(self) -> int:
        """Distinct calls the runtime's mapping search has searched so far (now, not at the
        snapshot): accelerators with ``mapping="auto"`` search each distinct call once and
        charge its repeats from the cache; 0 for other mappings."""
        return sum(int(m["__tenet_mapping_searches"]()) for m in self._modules)

    def charged_on(self, accelerator) -> Ledger:
        """The same calls charged on ``accelerator`` (a preset name or a
        ``tenet_byoc.Accelerator``), entry for entry.

        Each entry keeps its call (shape, widths, scheme, recipe) and names (symbol, pattern,
        name, phase, call index) with the charge ``cost_model.charge(entry.call,
        accelerator)`` gives, which is what a run built for ``accelerator`` would record;
        each distinct call is charged once. ``reset`` does nothing (no runtime module).

        Raises ``TypeError`` for ``accelerator=None`` (no silent default preset);
        ``ValueError`` for an unknown preset or a call the accelerator refuses (an operand
        width its PEs do not take, tiles that do not fit), naming it, or a link entry (a
        system's collective has no one-chip charge).
        """
        from .accelerators import resolve

        if accelerator is None:  # resolve(None) is the default preset: refuse, not guess
            raise TypeError("charged_on needs an accelerator (a preset name or an Accelerator), "
                            "got None")
        acc = resolve(accelerator)
        old = self.columns
        charged: dict = {}
        rows = list(old.charges)  # a charge no call uses stays as it is
        # Each distinct charge row once: the call of its first entry, charged again; the
        # calls' columns stay.
        used, first = np.unique(old.charge, return_index=True)
        for i, e in zip(used.tolist(), old.entries(first), strict=True):
            if e.unit in ("link", "attention"):
                raise ValueError(f"charged_on: the ledger has {e.unit} entries (a system's "
                                 "collectives or fused attention, which a run does not "
                                 "charge): estimate it again on that accelerator instead")
            call = e.vector_call if e.unit == "vector" else e.call
            key = (call, getattr(e, "fused", False))
            fields = charged.get(key)
            if fields is None:
                try:
                    charge = cm.charge_vector if e.unit == "vector" else cm.charge
                    fields = charge(call, acc).ledger_fields()
                except ValueError as err:
                    raise ValueError(f"accelerator {acc.name!r} cannot charge entry {e.name!r} "
                                     f"({call!r}): {err}") from None
                fields.update(tensors=tensor_map(fields["tensors"]), fused=key[1],
                              recipe=getattr(e, "recipe", None))
                charged[key] = fields
            rows[i] = charge_row(fields)
        new = LedgerColumns(rows, old.strings, **{k: getattr(old, k) for k in _CALL_COLUMNS})
        return Ledger(new, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [])

    def group_by(self, key: str | tuple[str, ...]) -> GroupedTotals:
        """Totals per value of ``key``: symbol, pattern, name, phase, scheme, chip, unit
        (array, vector, link, attention), layer (None: outside the decoder layers) or op; or
        per tuple of values of a tuple of them, e.g. ``("phase", "name")``. Each group's
        MACs and utilisation are those of its calls on the PEs, as :class:`Totals` says.

        A ``dict`` (:class:`GroupedTotals`) that prints as a table with units; groups in
        order of their first call. Numpy sums over the columns: no entry is made.
        """
        keys = key if isinstance(key, tuple) else (key,)
        if not keys or any(k not in GROUP_KEYS for k in keys):
            raise ValueError(f"cannot group a ledger by {key!r}; use "
                             f"{', '.join(GROUP_KEYS[:-1])} or {GROUP_KEYS[-1]}")
        columns = self.columns
        codes, values = columns.codes(key)
        return GroupedTotals(key if isinstance(key, str) else ", ".join(key),
                             dict(zip(values, columns.totals(codes, len(values)),
                                      strict=True)))

    def to_csv(self, path: str | Path | None = None) -> str:
        """One row per entry (per-tensor traffic flattened; a field the entry's unit lacks is
        empty)."""
        return write_rows(COLUMNS + _TENSOR_COLUMNS, map(_entry_row, self.entries), path)

    def to_json(self, path: str | Path | None = None) -> str:
        doc = {"accelerator": self.accelerator, "dataflow": self.dataflow,
               "clock_ghz": self.clock_ghz, "totals": asdict(self.totals()),
               "entries": [_entry_json(e) for e in self.entries]}
        return write_json(doc, path)

    def reset(self) -> None:
        """Clear the runtime ledger this snapshot was read from."""
        for m in self._modules:
            m["__tenet_ledger_reset"]()

    def __str__(self) -> str:
        t = self.totals()
        return (
            f"Ledger({len(self)} calls on {self.accelerator} [{self.dataflow}]: "
            f"{t.macs:,} MACs, {t.cycles:,} cycles, {t.latency_us:,.1f} us, "
            f"{t.offchip_bytes / 1e6:,.3f} MB off chip, PE util {100 * t.pe_utilization:.1f}%)"
        )

    __repr__ = __str__


def _entry_json(e: LedgerEntry) -> dict:
    doc = e._asdict()
    if "recipe" in doc:
        doc["recipe"] = e.recipe.as_dict()
        doc["tensors"] = {k: asdict(t) for k, t in e.tensors.items()}
    return doc


def tenet_modules(obj) -> list[tvm.runtime.Module]:
    """The tenet runtime modules inside a VM, an executable or a loaded library.

    Raises
    ------
    ValueError
        When there is none (nothing was offloaded, or it was built without tenet).
    """
    if isinstance(obj, relax.VirtualMachine):
        root = obj.module
    elif isinstance(obj, tvm.runtime.Executable):
        root = obj.jit()  # cached: a VM made from this executable uses the same modules
    elif isinstance(obj, tvm.runtime.Module):
        root = obj
    else:
        raise TypeError(
            f"expected a relax.VirtualMachine, an Executable or a runtime Module, got {type(obj)}"
        )
    found, stack, seen = [], [root], set()
    while stack:
        m = stack.pop()
        handle = m.__chandle__()
        if handle in seen:
            continue
        seen.add(handle)
        if m.kind == "tenet":
            found.append(m)
        stack.extend(m.imports)
    if not found:
        raise ValueError(
            f"{type(obj).__name__} has no tenet runtime module: nothing was offloaded to tenet "
            "(build it with tenet_byoc.build, or partition_for_tenet + RunCodegen)"
        )
    return found


_CHARGE_FIELDS = set(CHARGE_FIELDS) | {"recipe", "tensors"}


def _parse(doc: dict) -> list[LedgerEntry]:
    """Entries from the runtime's ledger JSON (``src/runtime/ledger.h``, LedgerJson)."""
    tags, charges, funcs = doc["tags"], doc["charges"], doc["functions"]
    if charges and set(charges[0]) != _CHARGE_FIELDS:
        raise ValueError(
            "the tenet runtime library writes ledger fields "
            f"{sorted(set(charges[0]) ^ _CHARGE_FIELDS)} that this tenet_byoc package does "
            "not read the same way; reinstall the package so both come from one build"
        )
    entries = []
    for e in doc["entries"]:
        if e["charge"] is None:
            continue  # an empty GEMM (a zero dim): nothing to charge
        charge = dict(charges[e["charge"]])
        charge["tensors"] = tensor_map(charge["tensors"])
        charge["recipe"] = cm.QuantRecipe.from_dict(charge["recipe"])
        func = funcs[e["program"]]
        step = func["steps"][e["step"]]
        charge["fused"] = e["epilogue"] >= 0
        if charge["fused"]:  # a GEMM step's fused epilogue (bias, activation)
            step = step["epilogues"][e["epilogue"]]
        entries.append(make_entry(
            charge, call_index=e["call_index"], symbol=func["symbol"], pattern=step["pattern"],
            name=step["name"], phase=tags[e["tag"]], scheme=step["scheme"]))
    return entries


def ledger(obj) -> Ledger:
    """A snapshot of the charged calls so far of a VM, an executable or a loaded library
    (a VM made from an executable shares its ledger); call it again after more runs."""
    modules = tenet_modules(obj)
    entries: list[LedgerEntry] = []
    names = set()
    for m in modules:
        doc = json.loads(m["__tenet_ledger_json"]())
        entries.extend(_parse(doc))
        names.add((doc["accelerator"], doc["dataflow"], doc["clock_ghz"]))
    if len(names) > 1:
        shown = " and ".join(f"{a!r} (dataflow {d!r}, {c} GHz)" for a, d, c in sorted(names))
        raise ValueError(
            f"the tenet modules of this {type(obj).__name__} were built for different "
            f"accelerators, {shown}: one ledger sums calls of one accelerator; build the "
            "model for one accelerator (or read each module with tenet_byoc.ledger(module))"
        )
    hw, df, clock = names.pop()
    entries.sort(key=lambda e: e.call_index)  # stable: a call's entries keep their order
    return Ledger(entries, hw, df, clock, modules)


def set_phase(obj, phase: str) -> None:
    """Tag the calls that follow with ``phase`` (e.g. "prefill", "decode") in the ledger."""
    for m in tenet_modules(obj):
        m["__tenet_set_tag"](phase)


def set_charging(obj, on: bool) -> None:
    """Turn cost charging on or off (the GEMMs run either way); on by default."""
    for m in tenet_modules(obj):
        m["__tenet_set_charging"](bool(on))
