"""Reading the runtime's cost ledger: entries, totals, groupings, and CSV / JSON / table output."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import tvm
from tvm import relax

from . import _cost_model as _core
from ._cost_model import GemmCall, QuantRecipe
from .compose import chain_cycles

# The ledger's fields are the cost model's one table (src/cost_model/charge.h,
# ChargeLedgerFields), which the runtime's ledger JSON and Charge.ledger_fields() both
# write; the dataclasses below declare the same names (checked when this module loads).


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


@dataclass(frozen=True)
class LedgerEntry:
    """One offloaded GEMM call and what it would cost on the accelerator."""

    call_index: int  #: module-wide count of calls; the GEMMs of one merged call share it
    symbol: str  #: the offloaded function the VM called
    pattern: str  #: the composite pattern, e.g. ``tenet.matmul_transposed_bias``
    name: str  #: the step's name in the partitioned module
    phase: str  #: the tag set with :func:`set_phase` when the call ran ("" if none)
    scheme: str  #: the quantization scheme of the call ("none" for float32)
    batch: int
    m: int
    n: int
    k: int
    bits_a: int
    bits_b: int
    bits_c: int
    extra_read_bits: int  #: side data read once per call: weight_side_bits + activation_side_bits
    extra_ops: int  #: non-MAC work: quantize_ops + dequant_ops
    extra_register_bits: int  #: register bits beyond the MACs' own: accumulator_traffic_bits
    dequant_place: str  #: none, weight (before the array), k_group (in accumulation), output
    scale_bits: int  #: width of a stored scale: 16 fp16, 32 fp32, 8 e8m0
    accumulator_bits: int  #: width of the partial sums
    weight_side_bits: int  #: weight scales and zero points, at their widths, per granularity
    activation_side_bits: int  #: static (calibrated) activation scales
    quantize_ops: int  #: activations quantized on chip: 1 op per element, 2 if dynamic
    dequant_ops: int  #: by place: N*K (weight), M*N*K/G (k_group), M*N (output)
    accumulator_traffic_bits: int  #: k_group: partial sums read and written per group
    macs: int
    cycles: int  #: the call's latency: tile steps with DRAM transfers overlapped (memory.h)
    roofline_cycles: int  #: max(MACs / MAC rate of all PEs, compulsory DRAM bits / bandwidth)
    array_cycles: int  #: the PE array alone, with one off-chip bandwidth (TENET's level)
    dram_stall_cycles: int  #: cycles the array waits on DRAM
    edge_cycles: int  #: weight dequantization on the edge dequantizer (overlapped); 0: none
    compute_cycles: int  #: the array level's compute cycles
    stall_cycles: int  #: the array level's bandwidth stall
    tenet_delay: float  #: TENET's max(ingress, egress, compute) delay
    ingress_delay: float
    egress_delay: float
    compute_delay: float  #: TENET's MACs / active PEs
    compute_delay_exact: float
    time_steps: int
    folds: int  #: presets: folds of the array run one after another
    active_pes: int
    num_pes: int
    macs_per_pe_per_cycle: int  #: the hardware's MAC rate at this call's operand width
    avg_active_pes: float
    pe_utilization: float  #: the call's: MACs / (cycles x PEs x MACs per PE per cycle)
    bandwidth_bits_per_cycle: float  #: off-chip bits / compute cycles
    latency_us: float  #: cycles at the configured clock
    offchip_read_bytes: float  #: TENET's unique volume in (buffer -> array at the array level)
    offchip_write_bytes: float
    dram_read_bytes: float  #: DRAM -> buffer, all operands and side data
    dram_write_bytes: float  #: buffer -> DRAM
    buffer_read_bytes: float  #: buffer -> array
    buffer_write_bytes: float  #: array -> buffer
    energy_pj: float  #: mac_pj + register_pj + buffer_pj + dram_pj + edge_pj
    mac_pj: float
    register_pj: float
    buffer_pj: float
    dram_pj: float
    edge_pj: float  #: the edge dequantizer's energy (in energy_pj)
    mapping: str  #: dataflow, buffer tiles and tile-loop order, e.g. "os 16x16 | tiles ..."
    recipe: QuantRecipe  #: how the call is quantized (with the widths, what it is charged for)
    tensors: Mapping[str, TensorTraffic]
    # Where the work ran: "array" (the PE array), "vector" (the vector unit) or "link" (a
    # collective of a system of several chips, tenet_byoc.system); which chip did it, and the
    # bytes that chip sent over links.
    chip: int = 0
    unit: str = "array"
    link_bytes: float = 0.0
    # The operator: "matmul" on the array, the vector kind (layer_norm, softmax, add, ...)
    # on the vector unit; its output elements, its vector ops by class, whether its operands
    # spilled to DRAM, and the vector unit's schedule ("" for the array).
    op: str = "matmul"
    elements: int = 0
    vector_add_ops: int = 0
    vector_mul_ops: int = 0
    vector_exp_ops: int = 0
    vector_recip_ops: int = 0
    vector_tanh_ops: int = 0
    spilled: bool = False
    schedule: str = ""
    #: A vector entry that is a GEMM's fused epilogue (bias, activation): its input comes
    #: straight from the array (the ``pipelined`` schedule hides it behind that GEMM).
    fused: bool = False

    @property
    def call(self) -> GemmCall:
        """The call as the cost model takes it: ``cost_model.charge(entry.call, accelerator)``
        gives this entry's charge again (array entries; see :attr:`vector_call`)."""
        if self.unit != "array":
            raise ValueError(f"entry {self.name!r} is a {self.unit} entry, not a GEMM: use "
                             "entry.vector_call for a vector entry")
        return GemmCall(m=self.m, n=self.n, k=self.k, batch=self.batch, bits_a=self.bits_a,
                        bits_b=self.bits_b, bits_c=self.bits_c, scheme=self.scheme,
                        recipe=self.recipe)

    @property
    def vector_call(self) -> _core.VectorCall:
        """A vector entry's call: ``cost_model.charge_vector(entry.vector_call, accelerator)``
        gives its charge again (its ``m`` rows of ``n``; ``k`` holds the second operand's
        elements)."""
        if self.unit != "vector":
            raise ValueError(f"entry {self.name!r} is a {self.unit} entry, not a vector one")
        return _core.VectorCall(self.op, [self.m, self.n], bits_in=self.bits_a,
                                bits_out=self.bits_c, operand_elements=self.k)

    @property
    def offchip_bytes(self) -> float:
        return self.offchip_read_bytes + self.offchip_write_bytes

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def roofline_ratio(self) -> float:
        """cycles / roofline_cycles: how far this call's mapping is from the limit (>= 1)."""
        return self.cycles / self.roofline_cycles if self.roofline_cycles else 1.0

    @property
    def mac_capacity(self) -> int:
        """The MACs the array could have done in this call's cycles."""
        return self.cycles * self.num_pes * self.macs_per_pe_per_cycle

    @property
    def weight_bytes(self) -> float:
        """Bytes of the B operand (a linear layer's weight) and its scales, each once."""
        return (self.batch * self.k * self.n * self.bits_b + self.weight_side_bits) / 8


#: The scalar columns of a ledger table, in order (per-tensor traffic is flattened after them).
COLUMNS = [f.name for f in fields(LedgerEntry) if f.name not in ("tensors", "recipe")]

#: The fields every charge has, from the cost model's one table (charge.h).
CHARGE_FIELDS = tuple(_core._ledger_field_names())
_TENSOR_FIELDS = tuple(_core._ledger_tensor_field_names())
_ENTRY_CALL_FIELDS = ("call_index", "symbol", "pattern", "name", "phase", "scheme", "recipe",
                      "tensors", "chip", "link_bytes", "fused")


def _check_schema() -> None:
    """The dataclasses declare exactly the cost model's field names (one schema; ``unit``
    comes last here, with a default, so that Python-made entries such as a system's link
    collectives may leave it out)."""
    declared = [f.name for f in fields(LedgerEntry) if f.name not in _ENTRY_CALL_FIELDS]
    tensor = [f.name for f in fields(TensorTraffic)]
    if sorted(declared) != sorted(CHARGE_FIELDS) or tensor != list(_TENSOR_FIELDS):
        raise ImportError(
            "tenet_byoc.ledger's LedgerEntry / TensorTraffic fields differ from the cost model's "
            f"ledger table (charge.h ChargeLedgerFields): "
            f"{sorted(set(declared) ^ set(CHARGE_FIELDS))} "
            f"{sorted(set(tensor) ^ set(_TENSOR_FIELDS))}; rebuild the package so both agree"
        )


_check_schema()
TENSORS = ("A", "B", "C")
_PER_TENSOR = ("offchip_bytes", "reuse_factor", "dram_read_bytes", "dram_write_bytes")
_TENSOR_COLUMNS = [f"{t}_{c}" for t in TENSORS for c in _PER_TENSOR]


def _entry_row(e: LedgerEntry) -> list:
    row = [getattr(e, c) for c in COLUMNS]
    for t in TENSORS:
        tr = e.tensors.get(t)
        row += [getattr(tr, c) for c in _PER_TENSOR] if tr else [0] * len(_PER_TENSOR)
    return row


@dataclass(frozen=True)
class Totals:
    """Sums over a set of entries; utilisation is MAC-weighted (sum MACs / sum PE-cycles)."""

    calls: int
    macs: int
    cycles: int
    roofline_cycles: int  #: sum of the calls' rooflines (cycles / roofline_cycles >= 1)
    latency_us: float
    offchip_bytes: float  #: TENET's unique volume (the array level's traffic)
    dram_bytes: float  #: DRAM reads + writes of the buffer level
    energy_pj: float
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


def _totals_table(groups: Sequence[tuple[str, Totals]], key: str) -> str:
    header = [key or "", *(title for title, _ in _TOTALS_COLUMNS)]
    rows = [[str(name), *(fmt(t) for _, fmt in _TOTALS_COLUMNS)] for name, t in groups]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        # The name column reads left to right; numbers align on their last digit.
        return "  ".join([cells[0].ljust(widths[0]),
                          *(c.rjust(w) for c, w in zip(cells[1:], widths[1:]))]).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


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


def pe_utilization(entries: Iterable[LedgerEntry]) -> float:
    """The one definition of PE utilization over several calls: MACs over MAC capacity.

    ``sum(macs) / sum(cycles x num_pes x macs_per_pe_per_cycle)`` over the calls' cycles
    (their latency, DRAM stalls included); for one entry this is its ``pe_utilization``.
    The array level's ``Metrics.array_utilization`` divides by the array's cycles alone. Ledger totals and profile rows both use it, so a
    PE doing several MACs per cycle at low precision counts at its real rate.
    """
    entries = list(entries)
    capacity = sum(e.mac_capacity for e in entries)
    return sum(e.macs for e in entries) / capacity if capacity else 0.0


def step_cycles(entries: Iterable[LedgerEntry]) -> int:
    """How a run's calls add up to its latency, in cycles: ``tenet_byoc.compose``'s one rule
    (a GEMM's fused epilogues hidden behind it under a ``pipelined`` vector unit, every other
    call adding) applied to entries in their order."""
    return chain_cycles((e.unit, e.fused and e.schedule == "pipelined", e.cycles, 1)
                        for e in entries)


def totals(entries: Iterable[LedgerEntry]) -> Totals:
    """Sums over ``entries`` (see :class:`Totals`); ``cycles`` and ``latency_us`` follow
    :func:`step_cycles` (fused epilogues hidden under a pipelined vector unit)."""
    return counted_totals((e.__dict__ if _PLAIN else asdict(e), 1) for e in entries)


# An entry's fields are its __dict__ (a dataclass without slots); read by name below.
_PLAIN = not hasattr(LedgerEntry, "__slots__")


def counted_totals(rows: Iterable[tuple[Mapping, int]]) -> Totals:
    """:func:`totals` of calls in order, each given once as its fields (an entry's, or a
    charge's ledger fields with ``fused``) and how many times it runs in a row (a GEMM's
    count covers the fused epilogues after it)."""
    calls = macs = roofline = summed = capacity = 0
    latency = offchip = dram = energy = 0.0
    chain = []
    for f, n in rows:
        cycles = f["cycles"]
        chain.append((f["unit"], bool(f.get("fused", False)) and f["schedule"] == "pipelined",
                      cycles, n))
        calls += n
        macs += n * f["macs"]
        roofline += n * f["roofline_cycles"]
        summed += n * cycles
        capacity += n * cycles * f["num_pes"] * f["macs_per_pe_per_cycle"]
        latency += n * f["latency_us"]
        offchip += n * (f["offchip_read_bytes"] + f["offchip_write_bytes"])
        dram += n * (f["dram_read_bytes"] + f["dram_write_bytes"])
        energy += n * f["energy_pj"]
    cycles = chain_cycles(chain)
    latency *= cycles / summed if summed else 1.0
    return Totals(
        calls=calls, macs=macs, cycles=cycles, roofline_cycles=roofline, latency_us=latency,
        offchip_bytes=offchip, dram_bytes=dram, energy_pj=energy,
        pe_utilization=macs / capacity if capacity else 0.0,
        bandwidth_gbps=offchip / (latency * 1e3) if latency else 0.0,
    )


class Ledger:
    """A snapshot of the charged calls of one executable or VM.

    Get one with :func:`tenet_byoc.ledger`. ``entries`` is a list of :class:`LedgerEntry`;
    ``totals()`` and ``group_by()`` sum them; ``to_csv``, ``to_json`` and ``to_dataframe``
    export them; ``reset()`` clears the runtime's ledger (not this snapshot).

    ``entries`` may also be given as a function that makes the list and ``count`` its
    length: the entries are then made when first read (an estimate of 10^5 calls returns
    before it has made them); ``sums`` then gives ``totals()`` and ``group_by("phase")``
    without making them (its totals per phase, in ``phases``' order).
    """

    def __init__(self, entries: list[LedgerEntry] | Callable[[], list[LedgerEntry]],
                 accelerator: str, dataflow: str, clock_ghz: float,
                 modules: list[tvm.runtime.Module], *, count: int | None = None,
                 sums: Callable[[str | None], Totals] | None = None,
                 phases: Sequence[str] = ()):
        self._make = entries if callable(entries) else None
        self._entries = None if callable(entries) else entries
        self._count = count
        # Totals per phase (None: all) without making the entries, and the phases in order.
        self._sums, self._phases = sums, tuple(phases)
        self.accelerator = accelerator
        self.dataflow = dataflow
        self.clock_ghz = clock_ghz
        self._modules = modules

    @property
    def entries(self) -> list[LedgerEntry]:
        """The entries, in call order (made now if they were not yet)."""
        if self._entries is None:
            self._entries = self._make()
            self._make = None
        return self._entries

    @entries.setter
    def entries(self, value: list[LedgerEntry]) -> None:
        self._entries, self._make = value, None

    def __len__(self) -> int:
        if self._entries is None and self._count is not None:
            return self._count
        return len(self.entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries)

    def totals(self) -> Totals:
        """Totals over all entries."""
        if self._entries is None and self._sums is not None:
            return self._sums(None)
        return totals(self.entries)

    @property
    def mapping_searches(self) -> int:
        """Distinct calls the runtime's mapping search has searched so far (now, not at the
        snapshot): accelerators with ``mapping="auto"`` search each distinct call once and
        charge its repeats from the cache; 0 for other mappings."""
        return sum(int(m["__tenet_mapping_searches"]()) for m in self._modules)

    def charged_on(self, accelerator) -> Ledger:
        """The same calls charged on another accelerator, entry for entry.

        Parameters
        ----------
        accelerator : str or cost_model.Accelerator
            A preset name or an accelerator value (``tenet_byoc.Accelerator``).

        Returns
        -------
        Ledger
            Each entry keeps its call (shape, widths, scheme, recipe) and names (symbol,
            pattern, name, phase, call index) with the charge ``cost_model.charge(entry.call,
            accelerator)`` gives, which is what a run built for ``accelerator`` would record;
            each distinct call is charged once. ``reset`` does nothing (no runtime module).

        Raises
        ------
        TypeError
            For ``accelerator=None`` (no silent default preset).
        ValueError
            For an unknown preset or a call the accelerator refuses (an operand width its
            PEs do not take, tiles that do not fit), naming it.
        """
        from .hardware import resolve

        if accelerator is None:  # resolve(None) is the default preset: refuse, not guess
            raise TypeError("charged_on needs an accelerator (a preset name or an Accelerator), "
                            "got None")
        acc = resolve(accelerator)
        charged: dict = {}
        entries = []
        for e in self.entries:
            call = e.vector_call if e.unit == "vector" else e.call
            fields = charged.get(call)
            if fields is None:
                try:
                    charge = _core.charge_vector if e.unit == "vector" else _core.charge
                    fields = charge(call, acc).ledger_fields()
                except ValueError as err:
                    raise ValueError(f"accelerator {acc.name!r} cannot charge entry {e.name!r} "
                                     f"({call!r}): {err}") from None
                fields["tensors"] = {k: TensorTraffic(**t) for k, t in fields["tensors"].items()}
                charged[call] = fields
            entries.append(LedgerEntry(
                call_index=e.call_index, symbol=e.symbol, pattern=e.pattern, name=e.name,
                phase=e.phase, scheme=e.scheme, recipe=e.recipe, fused=e.fused, **fields))
        return Ledger(entries, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [])

    def group_by(self, key: str) -> GroupedTotals:
        """Totals per value of ``key``: symbol, pattern, name, phase, scheme or unit (array,
        vector).

        A ``dict`` (:class:`GroupedTotals`) that prints as a table with units.
        """
        if key not in ("symbol", "pattern", "name", "phase", "scheme", "chip", "unit"):
            raise ValueError(
                f"cannot group a ledger by {key!r}; use symbol, pattern, name, phase, scheme, "
                "chip or unit"
            )
        if key == "phase" and self._entries is None and self._sums is not None:
            return GroupedTotals(key, {phase: self._sums(phase) for phase in self._phases})
        groups: dict[str, list[LedgerEntry]] = {}
        for e in self.entries:
            groups.setdefault(getattr(e, key), []).append(e)
        return GroupedTotals(key, {k: totals(v) for k, v in groups.items()})

    def rows(self) -> tuple[list[str], list[list]]:
        """Column names and one row per entry (per-tensor traffic flattened)."""
        return COLUMNS + _TENSOR_COLUMNS, [_entry_row(e) for e in self.entries]

    def to_csv(self, path: str | Path | None = None) -> str:
        header, rows = self.rows()
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(header)
        writer.writerows(rows)
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_json(self, path: str | Path | None = None) -> str:
        doc = {
            "accelerator": self.accelerator,
            "dataflow": self.dataflow,
            "clock_ghz": self.clock_ghz,
            "totals": asdict(self.totals()),
            "entries": [{**asdict(e), "recipe": e.recipe.as_dict()} for e in self.entries],
        }
        text = json.dumps(doc, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_dataframe(self):
        """The entries as a pandas DataFrame (pandas is optional and imported here)."""
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError("Ledger.to_dataframe needs pandas: pip install pandas") from err
        header, rows = self.rows()
        return pd.DataFrame(rows, columns=header)

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
        tensors = {name: TensorTraffic(**t) for name, t in charge.pop("tensors").items()}
        charge["recipe"] = QuantRecipe.from_dict(charge["recipe"])
        func = funcs[e["program"]]
        step = func["steps"][e["step"]]
        fused = e["epilogue"] >= 0
        if fused:  # a GEMM step's fused epilogue (bias, activation)
            step = step["epilogues"][e["epilogue"]]
        entries.append(
            LedgerEntry(
                call_index=e["call_index"], symbol=func["symbol"], pattern=step["pattern"],
                name=step["name"], phase=tags[e["tag"]], scheme=step["scheme"],
                tensors=tensors, fused=fused, **charge,
            )
        )
    return entries


def ledger(obj) -> Ledger:
    """The charged calls so far of a VM, an executable or a loaded library.

    Parameters
    ----------
    obj : relax.VirtualMachine, Executable or runtime.Module
        What ran the model. A VM made from an executable shares its ledger.

    Returns
    -------
    Ledger
        A snapshot; call ``tenet_byoc.ledger`` again after more runs.
    """
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
