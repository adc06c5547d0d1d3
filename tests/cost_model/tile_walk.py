"""Brute-force walk of a tile loop nest: the reference for the closed forms of memory.cc.

Every step of the (batch, order[0], order[1], order[2]) nest is visited one after another;
an operand's tile is fetched when its tile index differs from the previous step's, C's
tile is written back when the next step holds another one (partial sums at psum_bits
unless it is the last K tile), and the latency is accumulated step by step:
fetch(0) + sum_s max(array(s), fetch(s+1) + writeback(s-1)) + writeback(last). The only
thing taken from the library is each tile's array cycles (cm.analyze_gemm).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from tenet_byoc import cost_model as cm


@dataclass
class WalkResult:
    dram_read_bits: dict = field(default_factory=lambda: {"A": 0, "B": 0, "C": 0})
    dram_write_bits: int = 0
    fetches: dict = field(default_factory=lambda: {"A": 0, "B": 0, "C": 0})
    array_cycles: int = 0
    first_fetch_cycles: int = 0
    last_writeback_cycles: int = 0
    cycles: int = 0
    steps: int = 0


def _ceil_cycles(bits: int, per_cycle: float) -> int:
    if bits <= 0:
        return 0
    if float(per_cycle).is_integer():
        return -(-bits // int(per_cycle))
    return math.ceil(bits / per_cycle)


def walk(M, N, K, hw, df, mem, tm, tn, tk, order, *, batch=1, bits_a=32, bits_b=32,
         bits_c=32, accumulate=True, extra_read_bits=0, align=None, span=None):
    # align: per input operand, its dimensions' line multiples, e.g. {"A": {"m": 4}}.
    align = align or {}
    tm, tn, tk = min(tm, M), min(tn, N), min(tk, K)
    extent = {"m": M, "n": N, "k": K}
    tile = {"m": tm, "n": tn, "k": tk}
    count = {d: -(-extent[d] // tile[d]) for d in "mnk"}

    def size(d, i):
        return min(tile[d], extent[d] - i * tile[d])

    uses = {"A": "mk", "B": "kn", "C": "mn"}
    # An operand's tile covers the innermost span[op] tile loops whole.
    span = span or {}
    spanned = {op: {d for d in uses[op] if order.index(d) >= 3 - span.get(op, 0)}
               for op in uses}
    steps = []
    for b in range(batch):
        for idx in itertools.product(*(range(count[d]) for d in order)):
            pos = dict(zip(order, idx))
            steps.append((b, pos["m"], pos["n"], pos["k"]))

    def key(op, s):
        b, i, j, k = s
        d = {"m": i, "n": j, "k": k}
        return (b,) + tuple(d[x] for x in uses[op] if x not in spanned[op])

    def elems(op, s, padded=False):
        _, i, j, k = s
        d = {"m": size("m", i), "n": size("n", j), "k": size("k", k)}
        d = {x: extent[x] if x in spanned[op] else v for x, v in d.items()}
        if padded:  # array-aligned transfer lines: time, not data
            a = align.get(op, {})
            d = {x: -(-v // a.get(x, 1)) * a.get(x, 1) for x, v in d.items()}
        return math.prod(d[x] for x in uses[op])

    tile_hw = cm.Hardware(hw.pe_domain, hw.interconnect, bandwidth_bits=mem.buffer_bandwidth_bits,
                          macs_per_pe_per_cycle=hw.macs_per_pe_per_cycle)
    tile_acc = cm.Accelerator("tile", tile_hw, df)
    cache = {}

    def array(s):
        shape = (size("m", s[1]), size("n", s[2]), size("k", s[3]))
        if shape not in cache:
            m, n, k = shape
            r = cm.analyze_array(cm.GemmCall(m=m, n=n, k=k, bits_a=bits_a, bits_b=bits_b,
                                             bits_c=bits_c), tile_acc)
            cycles = r.cycles
            if mem.stationary_double_buffered and df.preset_name in ("os", "ws", "is"):
                # Folds in steady state: each holds the array for max(stream, rows) cycles.
                cycles = max(_steady_folds(df, hw, bits_a, bits_b, *shape),
                             _ceil_cycles(r.offchip_read_bits + r.offchip_write_bits,
                                          mem.buffer_bandwidth_bits))
            cache[shape] = cycles
        return cache[shape]

    if df.preset_name in ("ws", "is"):
        chunk = df.rows
    elif df.preset_name == "os" and "k" in df.tiling:
        chunk = df.tiling["k"]
    else:
        chunk = None

    res = WalkResult(steps=len(steps))
    S = len(steps)
    fetch = []   # per step: bits per channel (A, B, C)
    wb = []
    for n, s in enumerate(steps):
        f = [0, 0, 0]
        prev = steps[n - 1] if n else None
        for c, op, width in ((0, "A", bits_a), (1, "B", bits_b)):
            if prev is None or key(op, prev) != key(op, s):
                f[c] += elems(op, s, padded=True) * width
                res.dram_read_bits[op] += elems(op, s) * width
                res.fetches[op] += 1
        k_in_c = "k" in spanned["C"]
        if (accumulate and (prev is None or key("C", prev) != key("C", s)) and s[3] != 0
                and not k_in_c):
            f[2] += elems("C", s) * mem.psum_bits
            res.dram_read_bits["C"] += elems("C", s) * mem.psum_bits
        if n == 0:
            f[0] += extra_read_bits
        w = [0, 0, 0]
        nxt = steps[n + 1] if n + 1 < S else None
        final = k_in_c or s[3] == count["k"] - 1
        if accumulate:
            if nxt is None or key("C", nxt) != key("C", s):
                w[2] = elems("C", s) * (bits_c if final else mem.psum_bits)
                res.fetches["C"] += 1
        else:
            passes = -(-size("k", s[3]) // chunk) if chunk else 1
            w[2] = elems("C", s) * ((passes - 1) * mem.psum_bits +
                                    (bits_c if final else mem.psum_bits))
            res.fetches["C"] += 1
        res.dram_write_bits += w[2]
        fetch.append(f)
        wb.append(w)

    def time(ch):
        bw = mem.dram_bandwidth_bits
        if mem.dram_channel_per_operand:
            return max(_ceil_cycles(x, bw) for x in ch)
        return _ceil_cycles(sum(ch), bw)

    res.first_fetch_cycles = time(fetch[0])
    res.last_writeback_cycles = time(wb[-1])
    total = res.first_fetch_cycles + res.last_writeback_cycles
    for n, s in enumerate(steps):
        a = array(s)
        res.array_cycles += a
        if mem.buffer_double_buffered:
            x = [0, 0, 0]
            if n + 1 < S:
                x = [u + v for u, v in zip(x, fetch[n + 1])]
            if n > 0:
                x = [u + v for u, v in zip(x, wb[n - 1])]
            total += max(a, time(x))
        else:
            total += a + (time(fetch[n]) if n else 0) + (time(wb[n]) if n + 1 < S else 0)
    if mem.stationary_double_buffered and df.preset_name in ("os", "ws", "is"):
        # once per call: the first stationary load (ws / is) and one fill and drain
        once = (df.rows if df.preset_name != "os" else 0) + df.rows + df.cols - 2
        res.array_cycles += once
        total += once
    res.cycles = total
    return res


def _steady_folds(df, hw, bits_a, bits_b, m, n, k):
    """Sum over the tile's folds, walked one by one, of max(stream length, rows)."""
    rates = hw.macs_per_pe_per_cycle
    rate = rates if isinstance(rates, int) else rates.get(max(bits_a, bits_b), 1)
    kp = -(-k // rate)
    sp, sq, sl = {"os": (m, n, kp), "ws": (kp, n, m), "is": (kp, m, n)}[df.preset_name]
    t = min(df.tiling.get({"os": "k", "ws": "m", "is": "n"}[df.preset_name], sl), sl)
    total = 0
    for _p in range(0, sp, df.rows):
        for _q in range(0, sq, df.cols):
            for start in range(0, sl, t):
                total += max(min(t, sl - start), df.rows)
    return total
