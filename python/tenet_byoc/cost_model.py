"""TENET's relation-centric accelerator cost model (Python face of the C++ core).

Example
-------
>>> from tenet_byoc import cost_model as cm
>>> hw = cm.Hardware.systolic(16, 16)
>>> df = cm.Dataflow.preset("os", rows=16, cols=16)
>>> m = cm.analyze_gemm(128, 768, 768, hw, df, bits=8)
>>> m.macs, m.cycles, m.tensors["A"].unique

Every bad input raises ``ValueError`` with a message naming what is wrong.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, NamedTuple

from tenet_byoc import _cost_model as _core
from tenet_byoc._cost_model import (
    MAX_ENUMERATED_INSTANCES,
    Charge,
    Dataflow,
    Hardware,
    Metrics,
    Statement,
    TensorAccess,
    TensorMetrics,
    accelerator_parts,
    format_tenet_hardware,
    format_tenet_mapping,
    format_tenet_statement,
    memory_from_tenet,
    parse_accelerator,
    parse_tenet_hardware,
    parse_tenet_mapping,
    parse_tenet_statement,
    serialize_accelerator,
    validate_accelerator,
)
from tenet_byoc.mapping import (  # the mapping search (mapping.py)
    MappingChoice,
    MappingSearch,
    search_mapping,
    tile_size_candidates,
)
from tenet_byoc.memory import (  # the buffer level, roofline and energy (memory.py)
    EnergyBreakdown,
    MacSpec,
    MemoryHierarchy,
    MemoryMetrics,
    OperandTraffic,
    PrecisionTable,
    TileMapping,
    analyze_memory,
    buffer_bytes_needed,
    call_energy,
    default_tile_mapping,
    integer_mac_pj,
    roofline_cycles,
    scalesim_equivalent,
    scalesim_mapping,
    sram_pj_per_bit,
)

__all__ = [
    "MAX_ENUMERATED_INSTANCES",
    "Charge",
    "Dataflow",
    "EnergyBreakdown",
    "Hardware",
    "MacSpec",
    "MappingChoice",
    "MappingSearch",
    "MemoryHierarchy",
    "MemoryMetrics",
    "Metrics",
    "OperandTraffic",
    "PrecisionTable",
    "Statement",
    "TenetProblem",
    "TensorAccess",
    "TensorMetrics",
    "TileMapping",
    "accelerator_mapping_search",
    "accelerator_parts",
    "analyze",
    "analyze_gemm",
    "analyze_memory",
    "buffer_bytes_needed",
    "call_energy",
    "charge_gemm",
    "default_tile_mapping",
    "format_tenet_hardware",
    "format_tenet_mapping",
    "format_tenet_statement",
    "integer_mac_pj",
    "load_tenet",
    "memory_from_tenet",
    "parse_accelerator",
    "parse_tenet_hardware",
    "parse_tenet_mapping",
    "parse_tenet_statement",
    "roofline_cycles",
    "save_tenet",
    "scalesim_equivalent",
    "scalesim_mapping",
    "search_mapping",
    "serialize_accelerator",
    "sram_pj_per_bit",
    "tile_size_candidates",
    "validate_accelerator",
]


def charge_gemm(
    M: int,
    N: int,
    K: int,
    hardware: Hardware,
    dataflow: Dataflow,
    bits: int = 32,
    *,
    batch: int = 1,
    bits_a: int | None = None,
    bits_b: int | None = None,
    bits_c: int | None = None,
    extra_read_bits: int = 0,
    extra_ops: int = 0,
    extra_register_bits: int = 0,
    scheme: str = "none",
    method: str = "auto",
    recipe: Any = None,
    memory: MemoryHierarchy | None = None,
    precision: PrecisionTable | None = None,
    mapping: TileMapping | str | None = None,
    objective: str | None = None,
) -> Charge:
    """What the runtime's ledger charges a call ``C[M,N] = A[M,K] @ B[K,N]`` (``batch`` times).

    The one charging rule (``src/cost_model/charge.h``), by level of the model: ``.array``
    is the PE array's :class:`Metrics`; ``.memory`` the buffer level's
    :class:`MemoryMetrics` (DRAM and buffer traffic, ``cycles``: the call's latency,
    ``roofline_cycles``, ``mapping``); ``.energy`` its :class:`EnergyBreakdown` in pJ.

    Parameters
    ----------
    bits : int
        Element width of A, B and C unless ``bits_a``/``bits_b``/``bits_c`` override it.
    batch : int
        Independent GEMMs run one after another: counts and cycles scale by ``batch``.
    extra_read_bits, extra_ops : int
        Side data read off chip once per call, and non-MAC element operations per call.
    extra_register_bits : int
        Register-file bits accessed per call beyond the MACs' own (partial sums read and
        written once per K-group: ``Charge.quant["accumulator_traffic_bits"]``). Charged in
        ``energy.register_pj`` at the memory's ``register_pj_per_bit``; no cycles.
    scheme : str
        The quantization scheme that made the call (recorded with the charge).
    method : str
        ``"auto"`` (fast exact method when it applies, else enumeration), ``"fast"`` or
        ``"enumerate"`` (brute force; the ground truth, small sizes only).
    memory, precision, mapping
        The accelerator's memory hierarchy (None: ``memory_from_tenet(hardware)``), MAC
        units by operand widths (None: ``PrecisionTable.horowitz_45nm()``; rates are always
        the hardware's ``macs_per_pe_per_cycle``) and buffer mapping (None or
        ``"default"``: ``default_tile_mapping`` per call; ``"auto"``: the mapping search's
        best dataflow and tiles for the call; a :class:`TileMapping`: that one), as
        :class:`tenet_byoc.Accelerator` holds them.
    objective : {"latency", "energy", "edp"} or None
        What ``mapping="auto"`` minimises (None: latency); only with ``"auto"``. The search
        is held per accelerator (:func:`accelerator_mapping_search`), so a repeated call is
        a lookup, as in the runtime.
    recipe : QuantScheme, dict or None
        The call's quantization recipe (:meth:`tenet_byoc.quantization.QuantScheme.recipe`,
        or the scheme itself): its side data and extra ops are then derived from it, as the
        runtime derives them (``extra_read_bits``, ``extra_ops`` and
        ``extra_register_bits`` must stay 0); the
        breakdown is ``Charge.quant``.
    """
    if recipe is not None and hasattr(recipe, "recipe"):
        recipe = recipe.recipe()
    search = None
    if isinstance(mapping, str) and mapping == "auto":
        search = accelerator_mapping_search(hardware, dataflow, memory, precision, mapping,
                                            objective)
    return _core.charge_gemm(
        M, N, K, hardware, dataflow, batch,
        bits if bits_a is None else bits_a,
        bits if bits_b is None else bits_b,
        bits if bits_c is None else bits_c,
        extra_read_bits, extra_ops, scheme, method, recipe, memory, precision, mapping,
        objective, search, extra_register_bits,
    )


def accelerator_mapping_search(
    hardware: Hardware,
    dataflow: Dataflow,
    memory: MemoryHierarchy | None = None,
    precision: PrecisionTable | None = None,
    mapping: TileMapping | str | None = "auto",
    objective: str | None = None,
) -> Any:
    """The one mapping search of the accelerator these parts make (``mapping="auto"``).

    Held here per accelerator, as the runtime's cost cache holds its own: every distinct call
    is searched once (``.searches`` counts them, ``.best(M, N, K, ...)`` gives a call's
    choice) and later charges are lookups. None when ``mapping`` is not ``"auto"``. The
    search is thread-safe.
    """
    # Keyed by the accelerator's one serialized form; its name plays no part in a search.
    return _search_of(serialize_accelerator("analysis", hardware, dataflow, memory, precision,
                                            mapping, objective))


@functools.lru_cache(maxsize=64)
def _search_of(accelerator_json: str) -> Any:
    return _core._accelerator_mapping_search(accelerator_json)


def analyze_gemm(
    M: int,
    N: int,
    K: int,
    hardware: Hardware,
    dataflow: Dataflow,
    bits: int = 32,
    *,
    batch: int = 1,
    bits_a: int | None = None,
    bits_b: int | None = None,
    bits_c: int | None = None,
    extra_read_bits: int = 0,
    extra_ops: int = 0,
    extra_register_bits: int = 0,
    scheme: str = "none",
    method: str = "auto",
    recipe: Any = None,
) -> Metrics:
    """The PE array's metrics of a call: what ``charge_gemm(...).array`` holds, same
    arguments (``scheme`` is accepted and does not change the array's figures; a ``recipe``
    derives side data and extra ops as ``charge_gemm`` does).

    Only the array level runs (TENET's relations, one off-chip bandwidth), so calls the
    buffer level or the PEs' precision table would refuse still get the array's figures.
    """
    if recipe is not None:  # the recipe derives the side data and extra ops, as charged
        return charge_gemm(M, N, K, hardware, dataflow, bits, batch=batch, bits_a=bits_a,
                           bits_b=bits_b, bits_c=bits_c, extra_read_bits=extra_read_bits,
                           extra_ops=extra_ops, extra_register_bits=extra_register_bits,
                           scheme=scheme, method=method, recipe=recipe).array
    return _core._analyze_gemm(
        M, N, K, hardware, dataflow, batch,
        bits if bits_a is None else bits_a,
        bits if bits_b is None else bits_b,
        bits if bits_c is None else bits_c,
        extra_read_bits, extra_ops, method, extra_register_bits,
    )


def analyze(
    statement: Statement, hardware: Hardware, dataflow: Dataflow, method: str = "auto"
) -> Metrics:
    """Cost of a general TENET statement (GEMMs on presets take the fast path)."""
    return _core.analyze(statement, hardware, dataflow, method)


class TenetProblem(NamedTuple):
    """The three inputs read from TENET's files."""

    statement: Statement
    hardware: Hardware
    dataflow: Dataflow


def load_tenet(p_file: str | Path, m_file: str | Path, s_file: str | Path) -> TenetProblem:
    """Read TENET's ``.p`` (hardware), ``.m`` (mapping) and ``.s`` (statement) files.

    ``cm.analyze(*cm.load_tenet(p, m, s))`` is TENET's own analysis of those files
    (the tuple is ordered statement, hardware, dataflow).
    """
    return TenetProblem(
        _core.load_tenet_statement(str(s_file)),
        _core.load_tenet_hardware(str(p_file)),
        _core.load_tenet_mapping(str(m_file)),
    )


def save_tenet(
    p_file: str | Path | None = None,
    m_file: str | Path | None = None,
    s_file: str | Path | None = None,
    *,
    hardware: Hardware | None = None,
    dataflow: Dataflow | None = None,
    statement: Statement | None = None,
) -> None:
    """Write any of the three inputs in TENET's file formats."""
    if p_file is not None and hardware is not None:
        _core.save_text_file(str(p_file), format_tenet_hardware(hardware))
    if m_file is not None and dataflow is not None:
        _core.save_text_file(str(m_file), format_tenet_mapping(dataflow))
    if s_file is not None and statement is not None:
        _core.save_text_file(str(s_file), format_tenet_statement(statement))
