"""The buffer level of a GEMM call: memory hierarchy, tile mapping, DRAM traffic, roofline, energy.

Its values and entry points are the C++ core's (``src/cost_model/memory.h`` and
``energy.h``; model and worked example in ``src/cost_model/README.md``, "The memory
hierarchy"), all in :mod:`tenet_byoc.cost_model`; this module adds the hierarchy and tiles a
SCALE-Sim configuration describes. Every bad input raises ``ValueError`` with a message
naming the field, the value and what is accepted, and so does an exact count that would
overflow int64. Every function is a pure function of its arguments (thread-safe; the C++
work releases the GIL).

Example
-------
>>> from tenet_byoc import cost_model as cm
>>> hw = cm.Hardware.systolic(16, 16)
>>> df = cm.Dataflow.preset("os", rows=16, cols=16)
>>> mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20)
>>> tiles = cm.default_tile_mapping(128, 768, 768, mem, 16, 16)      # or cm.TileMapping(...)
>>> acc = cm.Accelerator("os16", hw, df, memory=mem)
>>> mm = cm.analyze_memory(cm.GemmCall(m=128, n=768, k=768), acc, tiles)
>>> mm.tensors["B"].dram_read_bits, mm.cycles, mm.roofline_cycles, mm.mapping
>>> cm.call_energy(mm, mem, cm.PrecisionTable.horowitz_45nm().lookup(32, 32)).total_pj
"""

from __future__ import annotations

from ._cost_model import (
    Dataflow,
    GemmCall,
    Hardware,
    MemoryHierarchy,
    MemoryMetrics,
    TileMapping,
    _analyze_memory,
)

__all__ = ["scalesim_equivalent", "scalesim_mapping"]

# SCALE-Sim's compute model assumes its SRAMs feed the array every cycle: an SRAM <-> array
# bandwidth so large that any tile's transfer takes one cycle, below every fold's length.
_UNLIMITED_BITS_PER_CYCLE = float(2**62)


def _fit(extent: int, step: int, words_per_unit: int, budget_words: int) -> int:
    """The largest multiple of ``step`` (at most ``extent``, at least ``min(step, extent)``)
    whose ``words_per_unit``-sized slices fit ``budget_words``."""
    if extent * words_per_unit <= budget_words:
        return extent
    units = max(1, budget_words // max(1, words_per_unit) // step) * step
    return max(min(step, extent), min(extent, units))


def scalesim_mapping(M: int, N: int, K: int, rows: int, cols: int, dataflow: str,
                     ifmap_sram_kb: int, filter_sram_kb: int, ofmap_sram_kb: int,
                     word_bytes: int = 1) -> TileMapping:
    """The tile mapping SCALE-Sim's configuration describes.

    SCALE-Sim keeps A, B and C in separate double-buffered SRAMs of which half is active,
    runs folds in its order (os: M blocks outside N blocks; ws: N outside K; is: M outside
    K; the third dimension streams through each fold) and does not accumulate C in SRAM (ws
    and is write every K fold's partial sums out). Where each operand fits the active half
    of its SRAM the mapping is one tile of the whole call; otherwise tiles are the largest
    multiples of the array's fold sizes whose operands fit their active halves (SCALE-Sim
    itself has no tiles there: its read buffer wraps around the operand).
    """
    half = {name: kb * 1024 // 2 // word_bytes for name, kb in
            (("A", ifmap_sram_kb), ("B", filter_sram_kb), ("C", ofmap_sram_kb))}
    if dataflow == "os":   # C stationary: M blocks outside N blocks, K streams
        tk = K if rows * K <= half["A"] and cols * K <= half["B"] else max(
            1, min(half["A"] // rows, half["B"] // cols, K))
        tm = _fit(M, rows, tk, half["A"])
        tn = _fit(N, cols, tk, half["B"])
        tn = _fit(tn, cols, tm, half["C"])
        return TileMapping(tm, tn, tk, "mnk", accumulate_in_buffer=True,
                           a_align_m=rows, b_align_n=cols)
    if dataflow == "ws":   # B stationary: N blocks outside K blocks, M streams
        tk = _fit(K, rows, min(N, cols), half["B"])
        tn = _fit(N, cols, tk, half["B"])
        tm = _fit(M, 1, tk, half["A"])
        tn = _fit(tn, cols, tm * -(-tk // rows), half["C"])
        return TileMapping(tm, tn, tk, "nkm", accumulate_in_buffer=False,
                           a_align_k=rows, b_align_n=cols)
    if dataflow == "is":   # A stationary: M blocks outside K blocks, N streams
        tk = _fit(K, rows, min(M, cols), half["A"])
        tm = _fit(M, cols, tk, half["A"])
        tn = _fit(N, 1, tk, half["B"])
        tm = _fit(tm, cols, tn * -(-tk // rows), half["C"])
        return TileMapping(tm, tn, tk, "mkn", accumulate_in_buffer=False,
                           a_align_m=cols, b_align_k=rows)
    raise ValueError(f"dataflow must be 'os', 'ws' or 'is', got {dataflow!r}")


def scalesim_equivalent(
    M: int,
    N: int,
    K: int,
    rows: int,
    cols: int,
    dataflow: str,
    ifmap_sram_kb: int,
    filter_sram_kb: int,
    ofmap_sram_kb: int,
    bandwidth_words_per_cycle: float,
    word_bytes: int = 1,
) -> MemoryMetrics:
    """Our metrics for the accelerator and mapping a SCALE-Sim 3 GEMM configuration describes.

    SCALE-Sim's USER-bandwidth memory model gives each of the ifmap (A), filter (B) and
    ofmap (C) SRAMs its own DRAM interface of ``bandwidth_words_per_cycle``, double-buffers
    each SRAM (half active) and feeds the array every cycle. Here: a DRAM channel per
    operand at that bandwidth, one double-buffered buffer as large as the three SRAMs, an
    unlimited buffer <-> array bandwidth, partial sums at the word width, and
    ``scalesim_mapping``'s tiles. ``cycles`` compares with SCALE-Sim's "Total Cycles (incl.
    prefetch)" (first fetch + compute + last write-back), ``array_cycles`` with its compute
    cycles (the length of its demand matrices).
    """
    if dataflow not in ("os", "ws", "is"):
        raise ValueError(f"dataflow must be 'os', 'ws' or 'is', got {dataflow!r}")
    if word_bytes < 1:
        raise ValueError(f"word_bytes must be >= 1, got {word_bytes}")
    word_bits = 8 * word_bytes
    hw = Hardware.systolic(rows, cols, bandwidth_bits=_UNLIMITED_BITS_PER_CYCLE)
    df = Dataflow.preset(dataflow, rows=rows, cols=cols)
    mem = MemoryHierarchy(
        dram_bandwidth_bits=bandwidth_words_per_cycle * word_bits,
        dram_channel_per_operand=True,
        buffer_bytes=(ifmap_sram_kb + filter_sram_kb + ofmap_sram_kb) * 1024,
        buffer_bandwidth_bits=_UNLIMITED_BITS_PER_CYCLE,
        psum_bits=word_bits,
    )
    mapping = scalesim_mapping(M, N, K, rows, cols, dataflow, ifmap_sram_kb, filter_sram_kb,
                               ofmap_sram_kb, word_bytes)
    call = GemmCall(m=M, n=N, k=K, bits_a=word_bits, bits_b=word_bits, bits_c=word_bits)
    return _analyze_memory(call, hw, df, mem, mapping)
