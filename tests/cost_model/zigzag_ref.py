"""ZigZag 3.9 (zigzag-dse) on a GEMM: the mapping its LOMA search chooses and its DRAM traffic.

The accelerator is by default the os16 equivalent: a 16 x 16 array unrolling M and N (output
stationary: a 32-bit accumulator register per PE, A broadcast along a row, B down a
column), one 1 MiB global buffer for A, B and C, and DRAM at 256 bits per cycle (array,
buffer and DRAM bandwidth are parameters of run()). Operands
are 8-bit, C (partial and final) 32-bit. Its DRAM traffic is read from the top memory level
of every operand (elements moved down = DRAM reads, up = DRAM writes).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

BUFFER_BYTES = 1 << 20
DRAM_BITS_PER_CYCLE = 256
ROWS = COLS = 16
BITS_IN, BITS_OUT = 8, 32

_ACCELERATOR = """
name: os16_equivalent
memories:
  reg_I:
    size: {BITS_IN}
    r_cost: 0.03
    w_cost: 0.03
    area: 0
    latency: 1
    operands: [I1]
    ports:
      - {{name: r_port_1, type: read, bandwidth_min: {BITS_IN}, bandwidth_max: {BITS_IN}, allocation: [I1, tl]}}
      - {{name: w_port_1, type: write, bandwidth_min: {BITS_IN}, bandwidth_max: {BITS_IN}, allocation: [I1, fh]}}
    served_dimensions: [D2]
  reg_W:
    size: {BITS_IN}
    r_cost: 0.03
    w_cost: 0.03
    area: 0
    latency: 1
    operands: [I2]
    ports:
      - {{name: r_port_1, type: read, bandwidth_min: {BITS_IN}, bandwidth_max: {BITS_IN}, allocation: [I2, tl]}}
      - {{name: w_port_1, type: write, bandwidth_min: {BITS_IN}, bandwidth_max: {BITS_IN}, allocation: [I2, fh]}}
    served_dimensions: [D1]
  reg_O:
    size: {BITS_OUT}
    r_cost: 0.05
    w_cost: 0.05
    area: 0
    latency: 1
    operands: [O]
    ports:
      - {{name: r_port_1, type: read, bandwidth_min: {BITS_OUT}, bandwidth_max: {BITS_OUT}, allocation: [O, tl]}}
      - {{name: r_port_2, type: read, bandwidth_min: {BITS_OUT}, bandwidth_max: {BITS_OUT}, allocation: [O, th]}}
      - {{name: w_port_1, type: write, bandwidth_min: {BITS_OUT}, bandwidth_max: {BITS_OUT}, allocation: [O, fh]}}
      - {{name: w_port_2, type: write, bandwidth_min: {BITS_OUT}, bandwidth_max: {BITS_OUT}, allocation: [O, fl]}}
    served_dimensions: []
  buffer:
    size: {buffer_bits}
    r_cost: 60
    w_cost: 60
    area: 0
    latency: 1
    operands: [I1, I2, O]
    ports:
      - {{name: r_port_1, type: read, bandwidth_min: 8, bandwidth_max: 4096, allocation: [I1, tl, I2, tl, O, tl, O, th]}}
      - {{name: w_port_1, type: write, bandwidth_min: 8, bandwidth_max: 4096, allocation: [I1, fh, I2, fh, O, fh, O, fl]}}
    served_dimensions: [D1, D2]
  dram:
    size: 10000000000
    r_cost: 640
    w_cost: 640
    area: 0
    latency: 1
    operands: [I1, I2, O]
    ports:
      - {{name: rw_port_1, type: read_write, bandwidth_min: 8, bandwidth_max: {dram_bits}, allocation: [I1, fh, I1, tl, I2, fh, I2, tl, O, fh, O, tl, O, fl, O, th]}}
    served_dimensions: [D1, D2]
operational_array:
  unit_energy: 0.3
  unit_area: 1
  dimensions: [D1, D2]
  sizes: [{rows}, {cols}]
"""

_MAPPING = """
- name: default
  spatial_mapping:
    D1:
      - M, {rows}
    D2:
      - N, {cols}
  memory_operand_links:
    O: O
    W: I2
    I: I1
"""


@dataclass
class ZigZagGemm:
    # Loops above the global buffer (outermost first) per operand, as ZigZag mapped them.
    dram_loops: dict
    # Elements moved between DRAM and the buffer.
    a_reads: int
    b_reads: int
    c_writes: int
    c_reads: int
    latency_cycles: float
    search_seconds: float


def _flow_yaml(text: str) -> str:
    """Port allocations written as flat [op, dir, op, dir] lists -> ZigZag's "op, dir" items."""
    out = []
    for line in text.splitlines():
        if "allocation: [" in line:
            head, rest = line.split("allocation: [", 1)
            items = [x.strip() for x in rest.split("]", 1)[0].split(",")]
            pairs = ", ".join(f'"{items[i]}, {items[i + 1]}"' for i in range(0, len(items), 2))
            line = f"{head}allocation: [{pairs}]}}"
        out.append(line)
    return "\n".join(out)


def run(M: int, N: int, K: int, lpf_limit: int = 6, *, rows: int = ROWS, cols: int = COLS,
        buffer_bytes: int = BUFFER_BYTES, dram_bits: int = DRAM_BITS_PER_CYCLE) -> ZigZagGemm:
    import time

    from zigzag.api import get_hardware_performance_zigzag

    workload = [{
        "id": 0, "name": "gemm", "operator_type": "Gemm",
        "equation": "O[m][n]+=I[m][k]*W[k][n]",
        "loop_dims": ["M", "N", "K"], "loop_sizes": [M, N, K],
        "operand_precision": {"I": BITS_IN, "W": BITS_IN, "O": BITS_OUT, "O_final": BITS_OUT},
        "operand_source": {"I": 0, "W": 0},
    }]
    with tempfile.TemporaryDirectory() as tmp:
        acc = Path(tmp) / "accelerator.yaml"
        fields = {"BITS_IN": BITS_IN, "BITS_OUT": BITS_OUT, "buffer_bits": buffer_bytes * 8,
                      "dram_bits": dram_bits, "rows": rows, "cols": cols}
        acc.write_text(_flow_yaml(_ACCELERATOR.format(**fields)))
        mapping = Path(tmp) / "mapping.yaml"
        mapping.write_text(_MAPPING.format(**fields))
        root = logging.getLogger()
        level = root.level
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                logging.disable(logging.CRITICAL)
                result = get_hardware_performance_zigzag(
                    workload, str(acc), str(mapping), opt="latency", dump_folder=tmp,
                    lpf_limit=lpf_limit, loma_show_progress_bar=False)
        finally:
            logging.disable(logging.NOTSET)
            root.setLevel(level)
        seconds = time.perf_counter() - t0
    cme = result[2][0][1][0][0]
    tm = cme.temporal_mapping.mapping_dic_stationary
    moves = cme.mapping.unit_mem_data_movement
    loops = {}
    for op, levels in tm.items():
        loops[str(op)] = [(str(d), int(s)) for d, s in reversed(levels[-1])]

    from zigzag.hardware.architecture.memory_port import DataDirection
    from zigzag.mapping.data_movement import DataMoveAttr

    def top(op_name, direction):
        for op, levels in moves.items():
            if str(op) == op_name:
                counts = levels[-1].get_attribute(DataMoveAttr.DATA_ELEM_MOVE_COUNT)
                return int(counts.get(direction))
        raise KeyError(op_name)

    down, up = DataDirection.RD_OUT_TO_LOW, DataDirection.WR_IN_BY_LOW
    return ZigZagGemm(loops, top("I", down), top("W", down), top("O", up), top("O", down),
                      float(cme.latency_total2), seconds)


def as_tile_mapping(z: ZigZagGemm, M: int, N: int, K: int):
    """ZigZag's mapping as our tiles and loop order.

    The loops above the buffer are the outer part of ZigZag's one loop nest, cut at a
    different depth for each operand; the longest cut is our tile-loop nest. A dimension's
    tile is its extent over the product of its loops there; its place in our order is that
    of its outermost loop (exact when a dimension's loops there are adjacent; the second
    value returned says whether they are). An operand cut higher keeps its tile over the
    inner loops: our span_* = the dimensions of our order (innermost first) that have no
    loop above its cut.
    """
    from tenet_byoc import cost_model as cm

    nest = max(z.dram_loops.values(), key=len)  # outermost first
    extent = {"M": M, "N": N, "K": K}
    product = {d: 1 for d in extent}
    first = {}
    for pos, (d, size) in enumerate(nest):
        product[d] *= size
        first.setdefault(d, pos)
    tiles = {d: math.ceil(extent[d] / product[d]) for d in extent}
    order = sorted(extent, key=lambda d: first.get(d, len(nest)))
    adjacent = all(
        {p for p, (d2, _) in enumerate(nest) if d2 == d} ==
        set(range(first[d], first[d] + sum(1 for d2, _ in nest if d2 == d)))
        for d in first)
    spans = {}
    for op, mine in (("A", "I"), ("B", "W"), ("C", "O")):
        above = {d for d, _ in z.dram_loops.get(mine, [])}
        span = 0
        for d in reversed(order):
            if d in above:
                break
            span += 1
        spans[op] = span
    mapping = cm.TileMapping(tiles["M"], tiles["N"], tiles["K"], "".join(order).lower(),
                             span_a=spans["A"], span_b=spans["B"], span_c=spans["C"])
    return mapping, adjacent
