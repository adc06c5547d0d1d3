"""Area of an accelerator by component at a process node, from a table of published figures.

:func:`accelerator_area` (and :meth:`tenet_byoc.Accelerator.area`) sums, per component, what
the accelerator value holds: the PEs' MAC datapaths per supported format, the PE registers,
the global buffer by capacity and banking, and the DRAM interface by bandwidth. The figures
are an :class:`AreaTable`; every default figure names its source in :data:`SOURCES`, and a
user's JSON or YAML file of the same fields (e.g. from their own synthesis runs) replaces any
of them (:meth:`AreaTable.load`).

Rules (stated once, used everywhere here):

* **Node scaling.** Figures are at 45 nm (Horowitz). Logic at node ``n`` is scaled by
  ``bitcell(n) / bitcell(45)``, the ratio of published 6T SRAM bit-cell areas (a measured
  density ratio, not the ideal ``(n/45)^2``); between table nodes the bit-cell area is
  interpolated on log-log axes. Nodes outside the table are refused (add the node's bit
  cell to your table).
* **Integer formats.** An array multiplier has ``a x b`` partial-product bits, so its area
  and energy scale with the product of the widths: int4 = int8 x 16/64 (the cost model's
  int4 energy rule, ``PrecisionTable.Horowitz45nmPacked``); widths above 8 scale from the
  32-bit multiply. Adders scale linearly with width from the 32-bit add. An integer MAC is a
  multiply plus an add at the accumulator width (``memory.psum_bits``).
* **Float formats.** A float multiply is dominated by its significand multiplier: area and
  energy scale with ``s^2`` (``s`` = mantissa bits + 1) from fp16 (Horowitz: fp32 / fp16 =
  4.7, (24/11)^2 = 4.8). A float add (alignment shift + add + normalise) scales with
  ``s log2 s`` from fp16 (Horowitz: 3.1, the rule gives 2.9). fp16 and fp32 use the table's
  own figures. Accumulation: fp16 in fp16 and fp32 in fp32 (as the cost model's Horowitz
  energies), bf16 in fp32, fp8 (e4m3, e5m2) in fp16.
* **MX block scaling** (OCP Microscaling v1.0: blocks of 32 elements sharing an 8-bit
  power-of-two scale): the element format's MAC plus, per block dot product, one 8-bit
  exponent add and one accumulator-width add to fold the block in, amortised over the block.

Thread safety: values are immutable and functions keep no state. Errors: a bad table file,
field, format or node raises ``ValueError`` naming it and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._names import did_you_mean

__all__ = ["FORMATS", "SOURCES", "AreaTable", "NumberFormat", "accelerator_area", "static_watts"]


@dataclass(frozen=True)
class AreaTable:
    """Per-operation area (um2) and energy (pJ) at 45 nm, SRAM bit-cell area per node, and the
    figures for registers, buffer periphery and the DRAM interface. See :data:`SOURCES`."""

    # Horowitz, ISSCC 2014, 45 nm, 0.9 V: area (um2) and energy (pJ) per operation.
    int8_add_um2: float = 36.0
    int8_add_pj: float = 0.03
    int32_add_um2: float = 137.0
    int32_add_pj: float = 0.1
    int8_mult_um2: float = 282.0
    int8_mult_pj: float = 0.2
    int32_mult_um2: float = 3495.0
    int32_mult_pj: float = 3.1
    fp16_add_um2: float = 1360.0
    fp16_add_pj: float = 0.4
    fp16_mult_um2: float = 1640.0
    fp16_mult_pj: float = 1.1
    fp32_add_um2: float = 4184.0
    fp32_add_pj: float = 0.9
    fp32_mult_um2: float = 7700.0
    fp32_mult_pj: float = 3.7
    #: 6T SRAM bit-cell area (um2) by node (nm).
    sram_bitcell_um2: Mapping[float, float] = field(default_factory=lambda: {
        45.0: 0.346, 32.0: 0.171, 28.0: 0.127, 22.0: 0.092, 16.0: 0.070, 7.0: 0.027,
        5.0: 0.021,
    })
    #: Bit-cell area over macro area of an SRAM bank (the rest is decoders, sense amps, IO).
    sram_array_efficiency: float = 0.7
    #: Bits one buffer bank delivers per cycle: banks = buffer bandwidth / this.
    sram_bank_width_bits: float = 128.0
    #: Periphery of one bank beyond the efficiency above (um2 at 45 nm).
    sram_bank_overhead_um2: float = 5000.0
    #: One D flip-flop (um2 at 45 nm): PE registers.
    register_bit_um2: float = 4.522
    #: DRAM interface (PHY + controller) per GB/s of bandwidth (mm2 at 45 nm).
    dram_interface_mm2_per_gbps: float = 0.05
    #: Elements that share one MX scale.
    mx_block: int = 32
    #: Static power (leakage and the clock that runs while idle) per mm2 of the design, W:
    #: TPU v1's measured idle die power over its die, 28 W / 331 mm2 at 28 nm. Charged as
    #: power x time in the energy of every estimated run (``tenet_byoc.dse``, ``estimate``'s
    #: phase figures through :func:`static_watts`); 0 turns it off.
    static_w_per_mm2: float = 0.085

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "sram_bitcell_um2":
                if not isinstance(value, Mapping) or len(value) < 1:
                    raise ValueError(f"area table field sram_bitcell_um2 must map node (nm) to "
                                     f"bit-cell area (um2), got {value!r}")
                clean = {_positive(f"sram_bitcell_um2[{node!r}]", node, "node"):
                         _positive(f"sram_bitcell_um2[{node!r}]", cell)
                         for node, cell in value.items()}
                object.__setattr__(self, f.name, MappingProxyType(dict(sorted(clean.items()))))
                continue
            if f.name == "mx_block":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"area table field mx_block must be an integer >= 1, got "
                                     f"{value!r}")
                continue
            if f.name == "static_w_per_mm2" and value == 0 and not isinstance(value, bool):
                object.__setattr__(self, f.name, 0.0)  # static power left out
                continue
            number = _positive(f.name, value)
            if f.name == "sram_array_efficiency" and number > 1:
                raise ValueError(f"area table field sram_array_efficiency must be in (0, 1], "
                                 f"got {value!r}")
            object.__setattr__(self, f.name, number)

    def __reduce__(self) -> tuple:
        # the bit-cell map is a read-only view, which pickle cannot copy: send a dict
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["sram_bitcell_um2"] = dict(self.sram_bitcell_um2)
        return (partial(AreaTable, **state), ())

    @classmethod
    def load(cls, path: str | Path, base: AreaTable | None = None) -> AreaTable:
        """``base`` (default: the published table) with the fields a JSON or YAML file gives.

        Raises
        ------
        ValueError
            For a file that is not a JSON/YAML mapping, an unknown field (with the near
            name), or a value that is not a positive number.
        FileNotFoundError
            For a missing file.
        """
        from .documents import load_mapping

        data = load_mapping(path, "area table")
        return (base or cls()).replace(**data, _where=str(path))

    def replace(self, _where: str = "area table", **changes: Any) -> AreaTable:
        """This table with some figures replaced (``sram_bitcell_um2`` entries are merged:
        a file giving one node keeps the others)."""
        names = [f.name for f in fields(self)]
        for key in changes:
            if key not in names:
                raise ValueError(f"{_where}: unknown field {key!r}{did_you_mean(key, names)}; "
                                 f"fields: {', '.join(names)}")
        cells = changes.get("sram_bitcell_um2")
        if isinstance(cells, Mapping):  # anything else is refused by __post_init__
            merged, spelt = dict(self.sram_bitcell_um2), {}
            for node, cell in cells.items():
                node_f = _positive(f"{_where}: sram_bitcell_um2 node", node, "node")
                if node_f in spelt:  # "45" and "45.0": one node, and one would be lost
                    raise ValueError(f"{_where}: sram_bitcell_um2 gives node {node_f:g} nm "
                                     f"twice (as {spelt[node_f]!r} and {node!r})")
                spelt[node_f] = node
                merged[node_f] = cell
            changes["sram_bitcell_um2"] = merged
        try:
            return dataclasses.replace(self, **changes)
        except ValueError as err:
            raise ValueError(f"{_where}: {err}") from None

    def bitcell_um2(self, node_nm: float) -> float:
        """The 6T bit-cell area at ``node_nm``: the table's figure, or log-log interpolated
        between the two nearest nodes of the table."""
        node = _positive("node_nm", node_nm, "node")
        cells = self.sram_bitcell_um2
        if node in cells:
            return cells[node]
        nodes = sorted(cells)
        if not nodes[0] < node < nodes[-1]:
            raise ValueError(
                f"node_nm={node_nm!r} is outside the area table's nodes {nodes[0]:g}-"
                f"{nodes[-1]:g} nm: add its SRAM bit cell (sram_bitcell_um2) to your table")
        hi = next(n for n in nodes if n > node)
        lo = max(n for n in nodes if n < node)
        t = (math.log(node) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return math.exp(math.log(cells[lo]) + t * (math.log(cells[hi]) - math.log(cells[lo])))

    def logic_scale(self, node_nm: float) -> float:
        """Logic area at ``node_nm`` over its area at 45 nm (the bit-cell ratio)."""
        return self.bitcell_um2(node_nm) / self.bitcell_um2(45.0)


def _positive(name: str, value: Any, what: str = "figure") -> float:
    number = math.nan  # a bool, or what float() cannot read, is refused like a negative
    if not isinstance(value, bool) and isinstance(value, int | float | str):
        try:
            number = float(value)
        except ValueError:
            pass
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"area table field {name}: {what} must be a positive number, got "
                         f"{value!r}")
    return number


#: Where each default figure of :class:`AreaTable` comes from.
SOURCES: Mapping[str, str] = MappingProxyType({
    **{f"{op}_{unit}": "M. Horowitz, 'Computing's energy problem (and what we can do about "
       "it)', ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V)"
       for op in ("int8_add", "int32_add", "int8_mult", "int32_mult", "fp16_add", "fp16_mult",
                  "fp32_add", "fp32_mult") for unit in ("um2", "pj")},
    "sram_bitcell_um2": "6T high-density bit cells as published: 45 nm 0.346 (Mistry et al., "
    "IEDM 2007), 32 nm 0.171 (Natarajan et al., IEDM 2008), 28 nm 0.127 (TSMC's 28 nm "
    "high-density cell as reported), 22 nm 0.092 (Auth et al., VLSI 2012), 16 nm 0.070 "
    "(Wu et al., IEDM "
    "2013, 16 nm FinFET), 7 nm 0.027 (Wu et al., IEDM 2016), 5 nm 0.021 (Yeap et al., IEDM "
    "2019)",
    "sram_array_efficiency": "assumption: a typical bit-cell share of an SRAM macro (CACTI "
    "reports 50-80% for large banks); replace with your compiler's figure",
    "sram_bank_width_bits": "assumption: one 128-bit port per bank; banks = buffer bandwidth "
    "bits per cycle / 128",
    "sram_bank_overhead_um2": "assumption: per-bank periphery (row decoder, sense amplifiers, "
    "IO) at 45 nm; replace with your compiler's figure",
    "register_bit_um2": "NanGate FreePDK45 Open Cell Library, DFF_X1 cell area 4.522 um2",
    "dram_interface_mm2_per_gbps": "assumption (no figure in the published table): a DRAM "
    "PHY + controller of about 0.05 mm2 per GB/s at 45 nm; replace with your PHY's figure",
    "mx_block": "OCP Microscaling Formats (MX) Specification v1.0 (2023): k = 32",
    "static_w_per_mm2": "N. Jouppi et al., 'In-Datacenter Performance Analysis of a Tensor "
    "Processing Unit', ISCA 2017, Table 2: the TPU die (< 331 mm2, 28 nm) measured 28 W idle "
    "(40 W busy); 28 / 331 = 0.085 W per mm2, used at every node (an upper bound of leakage: "
    "idle power includes the clock tree); replace with your library's leakage figure, or 0",
})


# ----------------------------------------------------------------------------------------
# Number formats
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumberFormat:
    """A PE operand format: integer (``mantissa`` = 0) or float, optionally MX-scaled."""

    name: str
    bits: int  #: operand width the cost model charges (the element width for MX)
    kind: str  #: "int" or "float"
    mantissa: int = 0  #: stored mantissa bits (floats)
    accumulator: str = "int"  #: "int" (memory.psum_bits), "fp16" or "fp32"
    mx: bool = False


#: The PE formats :func:`accelerator_area` and the design-space exploration know.
FORMATS: Mapping[str, NumberFormat] = MappingProxyType({f.name: f for f in (
    NumberFormat("int4", 4, "int"),
    NumberFormat("int8", 8, "int"),
    NumberFormat("fp8_e4m3", 8, "float", 3, "fp16"),
    NumberFormat("fp8_e5m2", 8, "float", 2, "fp16"),
    NumberFormat("fp16", 16, "float", 10, "fp16"),
    NumberFormat("bf16", 16, "float", 7, "fp32"),
    NumberFormat("fp32", 32, "float", 23, "fp32"),
    NumberFormat("mxint8", 8, "int", mx=True),
    NumberFormat("mxfp8_e4m3", 8, "float", 3, "fp16", mx=True),
    NumberFormat("mxfp8_e5m2", 8, "float", 2, "fp16", mx=True),
    NumberFormat("mxfp6_e2m3", 6, "float", 3, "fp16", mx=True),
    NumberFormat("mxfp6_e3m2", 6, "float", 2, "fp16", mx=True),
    NumberFormat("mxfp4", 4, "float", 1, "fp16", mx=True),
)})


def number_format(name: str) -> NumberFormat:
    """The :data:`FORMATS` entry called ``name``; an unknown name is refused with the list."""
    if name not in FORMATS:
        raise ValueError(f"unknown PE format {name!r}{did_you_mean(name, FORMATS)}; known: "
                         f"{', '.join(FORMATS)}")
    return FORMATS[name]


def _add(t: AreaTable, accumulator: str, psum_bits: int, key: str) -> float:
    if accumulator == "int":
        return getattr(t, f"int32_add_{key}") * psum_bits / 32
    return getattr(t, f"{accumulator}_add_{key}")


def mac_figure(fmt: NumberFormat | str, table: AreaTable | None = None, *, psum_bits: int = 32,
               key: str = "um2") -> float:
    """Area (``key="um2"``) or energy (``key="pj"``) of one MAC of ``fmt`` at 45 nm, by the
    rules of this module's docstring."""
    t = table or AreaTable()
    f = number_format(fmt) if isinstance(fmt, str) else fmt
    if f.kind == "int":  # the int8 multiplier's partial-product bits, or the int32 one's
        base, cells = ("int8", 64) if f.bits <= 8 else ("int32", 1024)
        mult = getattr(t, f"{base}_mult_{key}") * f.bits * f.bits / cells
    elif f.mantissa == 23:
        mult = getattr(t, f"fp32_mult_{key}")
    else:
        mult = getattr(t, f"fp16_mult_{key}") * (f.mantissa + 1) ** 2 / 11**2
    value = mult + _add(t, f.accumulator, psum_bits, key)
    if f.mx:  # one exponent add and one fold-in add per block, amortised over it
        value += (getattr(t, f"int8_add_{key}") + _add(t, f.accumulator, psum_bits, key)) / \
            t.mx_block
    return value


# ----------------------------------------------------------------------------------------
# The accelerator's area
# ----------------------------------------------------------------------------------------

def dram_interface_mm2(gbps: float, table: AreaTable, logic_scale: float) -> float:
    """The DRAM interface's area (mm2) for ``gbps`` GB/s at a node of ``logic_scale``."""
    return gbps * table.dram_interface_mm2_per_gbps * logic_scale


def static_watts(accelerator: Any, node_nm: float = 45.0,
                 table: AreaTable | str | Path | None = None) -> float:
    """Static power of one ``accelerator`` in W: its area at ``node_nm``
    (:func:`accelerator_area`) times the table's ``static_w_per_mm2``, as dse charges a
    design over each phase's time."""
    t = _table(table)
    return accelerator_area(accelerator, node_nm, t)["total"] * t.static_w_per_mm2


def _table(table: AreaTable | str | Path | None) -> AreaTable:
    """The figures: ``table``, the published ones (None) or a file's (a path)."""
    return table if isinstance(table, AreaTable) else (
        AreaTable() if table is None else AreaTable.load(table))


def accelerator_area(
    accelerator: Any, node_nm: float = 45.0, table: AreaTable | str | Path | None = None,
    formats: Mapping[int, str] | None = None,
) -> dict[str, float]:
    """Area in mm2 by component of ``accelerator`` at ``node_nm``.

    Between the table's nodes the figures are interpolated.

    Parameters
    ----------
    table : AreaTable, str or Path, optional
        The figures (default: the published :class:`AreaTable`); a path loads a JSON/YAML
        file whose fields replace the published ones.
    formats : mapping of int to str, optional
        The :data:`FORMATS` name of the precision unit of each width, e.g. ``{8: "fp8_e4m3"}``
        for float8 PEs. By default a unit is taken to be, by its wider operand width, fp32,
        fp16, or an integer of that width (the cost model's Horowitz table is fp32, fp16,
        int8).

    Returns
    -------
    dict
        ``mac:<format>`` per precision unit (PEs x MACs per PE per cycle at that width x the
        format's MAC), ``registers``, ``buffer``, ``dram_interface``, ``vector_unit`` and
        ``edge_dequantizer`` where the accelerator has them, and ``total``.

    Raises
    ------
    ValueError
        When a figure overflows (e.g. ``clock_ghz=1.7e308``), naming the accelerator's fields.
    """
    t = _table(table)
    scale = t.logic_scale(node_nm)
    chosen = {}
    for unit in accelerator.precision.units:
        bits = max(unit.bits_a, unit.bits_b)
        chosen[bits] = {32: "fp32", 16: "fp16"}.get(bits, f"int{bits}")
    for bits, name in (formats or {}).items():
        if bits not in chosen:
            raise ValueError(f"formats: accelerator {accelerator.name!r} has no {bits}-bit "
                             f"precision unit (its widths: {sorted(chosen)})")
        if number_format(name).bits != bits:
            raise ValueError(f"formats: {name!r} is {number_format(name).bits}-bit, not "
                             f"{bits}-bit")
        chosen[bits] = name
    hw, mem = accelerator.hardware, accelerator.memory
    out: dict[str, float] = {}
    for unit in accelerator.precision.units:
        name = chosen[max(unit.bits_a, unit.bits_b)]
        lanes = hw.num_pes * unit.macs_per_pe_per_cycle
        out[f"mac:{name}"] = lanes * mac_figure(name, t, psum_bits=mem.psum_bits) * scale / 1e6
    out["registers"] = hw.num_pes * mem.register_bytes * 8 * t.register_bit_um2 * scale / 1e6
    banks = math.ceil(mem.buffer_bandwidth_bits / t.sram_bank_width_bits)
    out["buffer"] = (mem.buffer_bytes * 8 * t.bitcell_um2(node_nm) / t.sram_array_efficiency
                     + banks * t.sram_bank_overhead_um2 * scale) / 1e6
    out["dram_interface"] = dram_interface_mm2(mem.dram_bandwidth_bits * hw.clock_ghz / 8, t,
                                               scale)
    # The units beside the array, each with an energy and so an area: per float32 lane of
    # the vector unit an fp32 adder and multiplier (its exponential, reciprocal and tanh run
    # as their multiply-adds, cost_model's vector model) and the banks of its buffer port,
    # counted as the array's are; per weight element the edge dequantizer converts a cycle
    # an fp16 multiplier (the scale) and adder (the zero point).
    vector, edge = accelerator.vector, accelerator.edge_dequantizer
    if vector is not None:
        lanes = vector.lanes * (t.fp32_add_um2 + t.fp32_mult_um2)
        banks = math.ceil(vector.buffer_bandwidth_bits / t.sram_bank_width_bits)
        out["vector_unit"] = (lanes + banks * t.sram_bank_overhead_um2) * scale / 1e6
    if edge is not None and edge.elements_per_cycle:
        out["edge_dequantizer"] = (edge.elements_per_cycle * (t.fp16_mult_um2 + t.fp16_add_um2)
                                   * scale / 1e6)
    out["total"] = sum(out.values())  # in this order: dse.py sums its points' the same way
    if not math.isfinite(out["total"]):  # e.g. a clock_ghz of 1.7e308 times the DRAM width
        bad = [k for k, v in out.items() if k != "total" and not math.isfinite(v)]
        raise ValueError(
            f"accelerator {accelerator.name!r}: area is not finite ({', '.join(bad) or 'total'}"
            f" overflows; clock_ghz={hw.clock_ghz:g}, num_pes={hw.num_pes}, buffer_bytes="
            f"{mem.buffer_bytes}, dram_bandwidth_bits={mem.dram_bandwidth_bits})")
    return out
