"""DRAM traffic per operand: ZigZag 3.9's chosen mapping, re-expressed as our tiles, on GPT-2 small.

For every GEMM of GPT-2 small (prefill of 128 tokens, decode at context 128; attention per
head), ZigZag's LOMA search (latency objective, its default depth) maps the GEMM on an os16
equivalent (16 x 16, 1 MiB buffer, 256 bit/cycle DRAM; 8-bit operands, 32-bit C). We take the
loops it put above the buffer, express them as our TileMapping (tiles and loop order) and
compare DRAM elements moved per operand. ZigZag's latency is printed for reference only: it
does not double-buffer the global buffer here, and floors spatial unrolling on shapes the
array does not divide (DESIGN.md). Needs `pip install zigzag-dse==3.9.1 six`.

    python benchmarks/memory_zigzag.py [--out benchmarks/results/memory_zigzag.md] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tenet_byoc import cost_model as cm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cost_model"))

# GPT-2 small: d_model 768, 12 heads of 64, MLP 3072, vocabulary 50257.
GEMMS = [
    ("prefill qkv", 128, 2304, 768), ("prefill attn proj", 128, 768, 768),
    ("prefill fc", 128, 3072, 768), ("prefill fc proj", 128, 768, 3072),
    ("prefill lm_head", 128, 50257, 768), ("prefill QK^T (1 head)", 128, 128, 64),
    ("prefill PV (1 head)", 128, 64, 128),
    ("decode qkv", 1, 2304, 768), ("decode attn proj", 1, 768, 768),
    ("decode fc", 1, 3072, 768), ("decode fc proj", 1, 768, 3072),
    ("decode lm_head", 1, 50257, 768), ("decode QK^T (1 head)", 1, 129, 64),
    ("decode PV (1 head)", 1, 64, 129),
]


def compare(M: int, N: int, K: int, rows: int = 16, cols: int = 16, buffer_bytes: int = 1 << 20,
            dram_bits: int = 256) -> dict:
    import zigzag_ref

    z = zigzag_ref.run(M, N, K, rows=rows, cols=cols, buffer_bytes=buffer_bytes,
                       dram_bits=dram_bits)
    mapping, exact_order = zigzag_ref.as_tile_mapping(z, M, N, K)
    hw = cm.Hardware.systolic(rows, cols)
    df = cm.Dataflow.preset("os", rows=rows, cols=cols)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=dram_bits, buffer_bytes=buffer_bytes,
                             psum_bits=zigzag_ref.BITS_OUT)
    kw = {"bits_a": zigzag_ref.BITS_IN, "bits_b": zigzag_ref.BITS_IN, "bits_c": zigzag_ref.BITS_OUT}
    fits = True
    try:
        ours = cm.analyze_memory(
            cm.GemmCall(m=M, n=N, k=K, **kw), cm.Accelerator("t", hw, df, memory=mem), mapping
        )
    except ValueError:
        # ZigZag does not double-buffer here: its tiles may need more than our double-buffered
        # capacity check allows. Traffic does not depend on capacity; say so in the table.
        fits = False
        big = cm.MemoryHierarchy(
            dram_bandwidth_bits=dram_bits, buffer_bytes=1 << 40, psum_bits=zigzag_ref.BITS_OUT
        )
        ours = cm.analyze_memory(
            cm.GemmCall(m=M, n=N, k=K, **kw), cm.Accelerator("t", hw, df, memory=big), mapping
        )
    t = ours.tensors
    return {
        "zigzag": z, "mapping": mapping, "exact_order": exact_order, "fits": fits, "ours": ours,
        "a": (t["A"].dram_read_bits // zigzag_ref.BITS_IN, z.a_reads),
        "b": (t["B"].dram_read_bits // zigzag_ref.BITS_IN, z.b_reads),
        "cw": (t["C"].dram_write_bits // zigzag_ref.BITS_OUT, z.c_writes),
        "cr": (t["C"].dram_read_bits // zigzag_ref.BITS_OUT, z.c_reads),
    }


def random_configurations(count: int, seed: int):
    """Shapes, arrays, buffers and DRAM bandwidths not tuned on: (M, N, K, rows, cols, bytes, bits)."""
    import random

    rng = random.Random(seed)
    for _ in range(count):
        yield (rng.choice([1, rng.randint(2, 300)]), rng.randint(1, 2000), rng.randint(1, 2000),
               rng.choice([4, 8, 16, 32]), rng.choice([4, 8, 16, 32]),
               rng.choice([16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]),
               rng.choice([64, 256, 1024]))


def ratio(pair) -> str:
    ours, theirs = pair
    if theirs == 0:
        return "1.000" if ours == 0 else "inf"
    return f"{ours / theirs:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here")
    ap.add_argument("--quick", action="store_true", help="attention GEMMs and one linear only")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="also N random shapes, arrays, buffers and DRAM bandwidths")
    ap.add_argument("--seed", type=int, default=12)
    args = ap.parse_args()
    gemms = [g for g in GEMMS if not args.quick or "head" in g[0] or g[0] == "decode attn proj"]
    lines = [
        ("| GEMM | M x N x K | ZigZag loops above buffer (outer first) | our mapping | "
        "A ours/ZZ | B ours/ZZ | C writes ours/ZZ | C reads ours/ZZ | fits 2x-buffered | "
        "our cycles | roofline | ZigZag latency | ZigZag search s |"),
        "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    worst = 1.0
    for name, M, N, K in gemms:
        r = compare(M, N, K)
        for key in ("a", "b", "cw", "cr"):
            ours, theirs = r[key]
            if theirs:
                worst = max(worst, ours / theirs, theirs / max(ours, 1))
        loops = r["zigzag"].dram_loops
        longest = max(loops.values(), key=len)
        lines.append(
            f"| {name} | {M} x {N} x {K} | {' '.join(f'{d}{s}' for d, s in longest) or '-'} | "
            f"{r['mapping'].describe()}{'' if r['exact_order'] else ' (merged)'} | "
            f"{ratio(r['a'])} ({r['a'][1]:,}) | {ratio(r['b'])} ({r['b'][1]:,}) | "
            f"{ratio(r['cw'])} ({r['cw'][1]:,}) | {ratio(r['cr'])} ({r['cr'][1]:,}) | "
            f"{'yes' if r['fits'] else 'no'} | {r['ours'].cycles:,} | "
            f"{r['ours'].roofline_cycles:,} | {r['zigzag'].latency_cycles:,.0f} | "
            f"{r['zigzag'].search_seconds:.1f} |")
        print(lines[-1], flush=True)
    if args.random:
        lines += ["", f"Random configurations (seed {args.seed}):", "",
                  ("| M x N x K | array | buffer KiB | DRAM bits/cycle | our mapping | A | B | "
                  "C writes | C reads |"), "|---|---|---:|---:|---|---:|---:|---:|---:|"]
        for M, N, K, rows, cols, nbytes, bits in random_configurations(args.random, args.seed):
            r = compare(M, N, K, rows, cols, nbytes, bits)
            for key in ("a", "b", "cw", "cr"):
                ours, theirs = r[key]
                if theirs:
                    worst = max(worst, ours / theirs, theirs / max(ours, 1))
            lines.append(
                f"| {M} x {N} x {K} | {rows}x{cols} | {nbytes >> 10} | {bits} | "
                f"{r['mapping'].describe()}{'' if r['exact_order'] else ' (merged)'} | "
                + " | ".join(f"{ratio(r[k])} ({r[k][1]:,})" for k in ("a", "b", "cw", "cr"))
                + " |")
            print(lines[-1], flush=True)
    lines.append("")
    lines.append(f"Largest traffic ratio either way: {worst:.3f} (elements; ZigZag's count in "
                 "parentheses).")
    text = "\n".join(lines)
    print(lines[-1])
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
