"""TENET's relation-centric accelerator cost model (Python face of the C++ core).

A call (:class:`GemmCall`) and an accelerator (:class:`Accelerator`) cross into C++ as one
value each; every entry point takes them: :func:`charge`, :func:`analyze_array`,
:func:`analyze_memory`, :func:`roofline`, :func:`search_mapping`. A non-GEMM operator is a
:class:`VectorCall` (:func:`charge_vector`), a collective between chips a :class:`LinkCall`
on a :class:`Link` (:func:`charge_link`).

Example
-------
>>> from tenet_byoc import cost_model as cm
>>> acc = cm.Accelerator("os16", cm.Hardware.systolic(16, 16),
...                      cm.Dataflow.preset("os", rows=16, cols=16))
>>> call = cm.GemmCall(m=128, n=768, k=768, bits_a=8, bits_b=8)
>>> c = cm.charge(call, acc)
>>> c.array.macs, c.memory.cycles, c.energy.total_pj, c.array.tensors["A"].unique

Every bad input raises ``ValueError`` with a message naming what is wrong.
"""

from __future__ import annotations

import copyreg
from pathlib import Path
from typing import Any, NamedTuple

from ._cost_model import (
    MAX_ENUMERATED_INSTANCES,
    NVLINK_C2C_PJ_PER_BIT,
    Accelerator,
    Charge,
    Cores,  # an accelerator of cores (src/cost_model/core.h)
    Dataflow,
    EdgeDequantizer,  # the units beside the array (src/cost_model/vector.h)
    GemmCall,
    Hardware,
    Link,  # collectives over links (src/cost_model/link.h)
    LinkCall,
    LinkCharge,
    Metrics,
    QuantRecipe,
    Statement,
    TensorAccess,
    TensorMetrics,
    VectorCall,
    VectorCharge,
    VectorUnit,
    _analyze_array,
    analyze_array,
    charge,
    charge_link,
    charge_vector,
    format_tenet_hardware,
    format_tenet_mapping,
    format_tenet_statement,
    load_tenet_hardware,
    load_tenet_mapping,
    load_tenet_statement,
    memory_from_tenet,
    parse_tenet_hardware,
    parse_tenet_mapping,
    parse_tenet_statement,
    roofline,
    save_text_file,
)
from ._cost_model import (
    analyze as _core_analyze,
)
from ._gemm_call import _call_from_keywords, _deprecated
from .mapping import (  # the mapping search (mapping.py)
    MappingChoice,
    MappingSearch,
    search_mapping,
    tile_size_candidates,
)
from .memory import (  # the buffer level, roofline and energy (memory.py)
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
    "NVLINK_C2C_PJ_PER_BIT",
    "Accelerator",
    "Charge",
    "Cores",
    "Dataflow",
    "EdgeDequantizer",
    "EnergyBreakdown",
    "GemmCall",
    "Hardware",
    "Link",
    "LinkCall",
    "LinkCharge",
    "MacSpec",
    "MappingChoice",
    "MappingSearch",
    "MemoryHierarchy",
    "MemoryMetrics",
    "Metrics",
    "OperandTraffic",
    "PrecisionTable",
    "QuantRecipe",
    "Statement",
    "TenetProblem",
    "TensorAccess",
    "TensorMetrics",
    "TileMapping",
    "VectorCall",
    "VectorCharge",
    "VectorUnit",
    "accelerator_mapping_search",
    "accelerator_parts",
    "analyze",
    "analyze_array",
    "analyze_gemm",
    "analyze_memory",
    "buffer_bytes_needed",
    "call_energy",
    "charge",
    "charge_gemm",
    "charge_link",
    "charge_vector",
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
    "roofline",
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


def _accelerator_of(hardware: Hardware, dataflow: Dataflow, memory: Any = None,
                    precision: Any = None, mapping: Any = None,
                    objective: Any = None, name: str = "analysis") -> Accelerator:
    return Accelerator(name, hardware, dataflow, memory, precision, mapping, objective)


def charge_gemm(M: int, N: int, K: int, hardware: Hardware, dataflow: Dataflow,
                bits: int = 32, *, method: str = "auto", memory: Any = None,
                precision: Any = None, mapping: Any = None, objective: Any = None,
                vector: Any = None, edge_dequantizer: Any = None, **call: Any) -> Charge:
    """Deprecated (one release): ``charge(GemmCall(...), Accelerator(...), method)``.

    The call keywords are ``GemmCall``'s (``bits`` for every width not given apart); the
    accelerator is made of ``hardware``, ``dataflow``, ``memory``, ``precision``, ``mapping``,
    ``objective``, ``vector`` and ``edge_dequantizer`` as :class:`Accelerator` takes them.
    """
    _deprecated("charge_gemm", "charge(GemmCall(...), accelerator)")
    acc = Accelerator("analysis", hardware, dataflow, memory, precision, mapping, objective,
                      vector=vector, edge_dequantizer=edge_dequantizer)
    return charge(_call_from_keywords(M, N, K, bits, **call), acc, method)


def accelerator_mapping_search(hardware: Hardware, dataflow: Dataflow, memory: Any = None,
                               precision: Any = None, mapping: Any = "auto",
                               objective: Any = None) -> Any:
    """Deprecated (one release): ``Accelerator(...).mapping_search`` (None unless
    ``mapping="auto"``)."""
    _deprecated("accelerator_mapping_search", "tenet_byoc.Accelerator(...).mapping_search")
    acc = _accelerator_of(hardware, dataflow, memory, precision, mapping, objective)
    return acc._mapping_search


def analyze_gemm(M: int, N: int, K: int, hardware: Hardware, dataflow: Dataflow,
                 bits: int = 32, *, method: str = "auto", **call: Any) -> Metrics:
    """Deprecated (one release): ``analyze_array(GemmCall(...), accelerator, method)``.

    The PE array's metrics of a call on ``dataflow`` (``charge(...).array`` under the default
    mapping); a ``recipe`` derives side data and extra ops as ``charge`` does."""
    _deprecated("analyze_gemm", "analyze_array(GemmCall(...), accelerator)")
    return _analyze_array(_call_from_keywords(M, N, K, bits, **call), hardware, dataflow,
                          method)


def accelerator_parts(name: str, hardware: Hardware, dataflow: Dataflow, memory: Any = None,
                      precision: Any = None, mapping: Any = None,
                      objective: Any = None) -> tuple:
    """Deprecated (one release): an :class:`Accelerator`'s ``memory``, ``precision``,
    ``mapping`` and ``objective`` with the defaults filled in."""
    _deprecated("accelerator_parts", "Accelerator(...).memory / .precision / ...")
    a = _accelerator_of(hardware, dataflow, memory, precision, mapping, objective, name)
    return a.memory, a.precision, a.mapping, a.objective


def validate_accelerator(name: str, hardware: Hardware, dataflow: Dataflow, memory: Any = None,
                         precision: Any = None, mapping: Any = None,
                         objective: Any = None) -> None:
    """Deprecated (one release): ``Accelerator(...)`` validates when made."""
    _deprecated("validate_accelerator", "Accelerator(...)")
    _accelerator_of(hardware, dataflow, memory, precision, mapping, objective, name)


def serialize_accelerator(name: str, hardware: Hardware, dataflow: Dataflow, memory: Any = None,
                          precision: Any = None, mapping: Any = None,
                          objective: Any = None) -> str:
    """Deprecated (one release): ``Accelerator(...).to_json()``."""
    _deprecated("serialize_accelerator", "Accelerator(...).to_json()")
    return _accelerator_of(hardware, dataflow, memory, precision, mapping, objective,
                           name).to_json()


def parse_accelerator(text: str) -> tuple:
    """Deprecated (one release): ``Accelerator.from_json(text)``; (name, hardware,
    dataflow, memory, precision, mapping, objective)."""
    _deprecated("parse_accelerator", "Accelerator.from_json(text)")
    a = Accelerator._parse_json(text)
    return a.name, a.hardware, a.dataflow, a.memory, a.precision, a.mapping, a.objective


def analyze(
    statement: Statement, hardware: Hardware, dataflow: Dataflow, method: str = "auto"
) -> Metrics:
    """Cost of a general TENET statement (GEMMs on presets take the fast path)."""
    return _core_analyze(statement, hardware, dataflow, method)


class TenetProblem(NamedTuple):
    """The three inputs read from TENET's files."""

    statement: Statement
    hardware: Hardware
    dataflow: Dataflow


def _vector_call(op: str, shape: tuple[int, ...], bits_in: int, bits_out: int,
                 operand_elements: int) -> VectorCall:
    return VectorCall(op, list(shape), bits_in=bits_in, bits_out=bits_out,
                      operand_elements=operand_elements)


# A VectorCall crosses to worker processes (dse, serving) by its fields, as GemmCall does.
copyreg.pickle(VectorCall, lambda v: (_vector_call, (v.op, tuple(v.shape), v.bits_in,
                                                      v.bits_out, v.operand_elements)))


def load_tenet(p_file: str | Path, m_file: str | Path, s_file: str | Path) -> TenetProblem:
    """Read TENET's ``.p`` (hardware), ``.m`` (mapping) and ``.s`` (statement) files.

    ``cm.analyze(*cm.load_tenet(p, m, s))`` is TENET's own analysis of those files
    (the tuple is ordered statement, hardware, dataflow).
    """
    return TenetProblem(
        load_tenet_statement(str(s_file)),
        load_tenet_hardware(str(p_file)),
        load_tenet_mapping(str(m_file)),
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
        save_text_file(str(p_file), format_tenet_hardware(hardware))
    if m_file is not None and dataflow is not None:
        save_text_file(str(m_file), format_tenet_mapping(dataflow))
    if s_file is not None and statement is not None:
        save_text_file(str(s_file), format_tenet_statement(statement))
