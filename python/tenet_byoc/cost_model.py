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

from pathlib import Path
from ._cost_model import (  # noqa: F401 (the face's names: __all__ below)
    MAX_ENUMERATED_INSTANCES,
    NVLINK_C2C_PJ_PER_BIT,
    Accelerator,
    AttentionCall,  # fused attention (src/cost_model/attention.h)
    AttentionCharge,
    Charge,
    Cores,  # an accelerator of cores (src/cost_model/core.h)
    Dataflow,
    EdgeDequantizer,  # the units beside the array (src/cost_model/vector.h)
    EnergyBreakdown,
    GemmCall,
    Hardware,
    Link,  # collectives over links (src/cost_model/link.h)
    LinkCall,
    LinkCharge,
    MacSpec,
    MappingChoice,
    MemoryHierarchy,
    MemoryMetrics,
    Metrics,
    OperandTraffic,
    PrecisionTable,
    QuantRecipe,
    Statement,
    TensorAccess,
    TensorMetrics,
    TileMapping,
    VectorCall,
    VectorCharge,
    VectorUnit,
    analyze,
    analyze_array,
    analyze_memory,
    buffer_bytes_needed,
    call_energy,
    charge,
    charge_attention,
    charge_link,
    charge_vector,
    computed_call,  # the call as an accelerator computes it (MacSpec.row_tiles, whole tiles)
    clear_mapping_searches,  # a search timed from empty (benchmarks/mapper.py)
    default_tile_mapping,
    format_tenet_hardware,
    format_tenet_mapping,
    format_tenet_statement,
    integer_mac_pj,
    load_tenet_hardware,
    load_tenet_mapping,
    load_tenet_statement,
    memory_from_tenet,
    parse_tenet_hardware,
    parse_tenet_mapping,
    parse_tenet_statement,
    roofline,
    save_text_file,
    search_mapping,
    sram_pj_per_bit,
    tile_size_candidates,
)
from .mapping import MappingSearch  # noqa: F401 (the mapping search over a declared space)
from .memory import scalesim_equivalent, scalesim_mapping  # noqa: F401 (SCALE-Sim's tiles)


def load_tenet(p_file: str | Path, m_file: str | Path,
               s_file: str | Path) -> tuple[Statement, Hardware, Dataflow]:
    """Read TENET's ``.p`` (hardware), ``.m`` (mapping) and ``.s`` (statement) files.

    ``cm.analyze(*cm.load_tenet(p, m, s))`` is TENET's own analysis of those files
    (the tuple is ordered statement, hardware, dataflow).
    """
    return (
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


#: The face's names: every public name above (the cost model's C++ values and entry points,
#: the buffer level's and the mapping search's, and this module's), less what it reads.
__all__ = sorted(n for n in dir() if not n.startswith("_")
                 and n not in ("annotations", "Path"))
