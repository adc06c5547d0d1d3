"""The mapping search on GPT-2 small: search time and latency beside ZigZag 3.9's LOMA search and
the roofline; phase totals per quantization scheme on os16 and tpu_v1 with the searched mappings.

Parts (all printed as markdown, written with --out):
1. Per GPT-2 GEMM (prefill 128 tokens, decode at context 128; attention for one head), on an
   os16 equivalent (16 x 16 at 1 GHz, 1 MiB buffer, DRAM 256 bits per cycle, 8-bit operands,
   32-bit C - zigzag_ref.py's accelerator): our search time (median of --repeats, fresh search
   each time, no cache) and latency over os/ws/is and over os alone, ZigZag's search time and
   latency (`get_hardware_performance_zigzag`, LOMA at the API's default depth), the roofline.
2. The whole GPT-2 small search: every distinct call of prefill and decode (as the charge unit
   would see them: attention as a batch of 12 heads, each scheme's widths, scale side data and
   dequantization ops), median of --repeats.
3. Phase totals with the searched mapping (12 layers + lm_head) against the roofline, per scheme
   (none, w8a8_per_channel_per_token, w4a16_group128) on os16, and decode on tpu_v1 (Jouppi et
   al., ISCA 2017: 256 x 256 at 700 MHz, 24 MiB buffer, 34 GB/s, double-buffered weights).

Needs `pip install zigzag-dse==3.9.1 six` for part 1 (skipped with --no-zigzag).

    python benchmarks/mapper.py [--out benchmarks/results/mapper.md] [--repeats 5] [--no-zigzag]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from tenet_byoc import cost_model as cm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cost_model"))

# GPT-2 small: d_model 768, 12 heads of 64, MLP 3072, vocabulary 50257. (name, M, N, K, heads)
PREFILL = [("qkv", 128, 2304, 768, 1), ("attn proj", 128, 768, 768, 1), ("fc", 128, 3072, 768, 1),
           ("fc proj", 128, 768, 3072, 1), ("lm_head", 128, 50257, 768, 1),
           ("QK^T", 128, 128, 64, 12), ("PV", 128, 64, 128, 12)]
DECODE = [("qkv", 1, 2304, 768, 1), ("attn proj", 1, 768, 768, 1), ("fc", 1, 3072, 768, 1),
          ("fc proj", 1, 768, 3072, 1), ("lm_head", 1, 50257, 768, 1),
          ("QK^T", 1, 129, 64, 12), ("PV", 1, 64, 129, 12)]
LAYERS = 12
ATTENTION = ("QK^T", "PV")
SCALE_BITS = 16  # float16 scales, as the charge unit charges them (charge.h kScaleBits)


def scheme_call(scheme: str, name: str, M: int, N: int, K: int, heads: int) -> dict:
    """The call the charge unit sees (charge.h DescribeGemmCall): widths, side data, extra ops.

    Attention (activation x activation) stays float in every scheme; linear layers and the
    tied lm_head carry the scheme.
    """
    base = {"M": M, "N": N, "K": K, "batch": heads, "bits_a": 32, "bits_b": 32, "bits_c": 32,
            "extra_read_bits": 0, "extra_ops": 0}
    if scheme == "none" or name in ATTENTION:
        return base
    if scheme == "w8a8_per_channel_per_token":  # int8 x int8, scales per output channel
        return {**base, "bits_a": 8, "bits_b": 8, "bits_c": 16, "extra_read_bits": N * SCALE_BITS,
                "extra_ops": heads * M * (2 * K + N)}
    if scheme == "w4a16_group128":  # int4 weights, a float16 scale per 128 of K
        return {**base, "bits_a": 16, "bits_b": 4, "bits_c": 16,
                "extra_read_bits": N * (K // 128) * SCALE_BITS, "extra_ops": N * K}
    raise ValueError(scheme)


SCHEMES = ("none", "w8a8_per_channel_per_token", "w4a16_group128")


def os16(bits_a: int, bits_b: int, bits_c: int):
    """os16 with the memory hierarchy of issue 12: an array edge of A, B and C fed per cycle."""
    hw = cm.Hardware.systolic(16, 16)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20,
                             buffer_bandwidth_bits=16 * (bits_a + bits_b + bits_c))
    return hw, mem, 16, 16


def tpu_v1(bits_a: int, bits_b: int, bits_c: int):
    hw = cm.Hardware.systolic(256, 256, clock_ghz=0.7)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=34e9 * 8 / 0.7e9, buffer_bytes=24 << 20,
                             buffer_bandwidth_bits=256 * (bits_a + bits_b + bits_c),
                             stationary_double_buffered=True)
    return hw, mem, 256, 256


def search(call: dict, accelerator=os16, dataflows=("os", "ws", "is")):
    hw, mem, rows, cols = accelerator(call["bits_a"], call["bits_b"], call["bits_c"])
    return cm.search_mapping(call["M"], call["N"], call["K"], hw, mem, dataflows=dataflows,
                             rows=rows, cols=cols, batch=call["batch"], bits_a=call["bits_a"],
                             bits_b=call["bits_b"], bits_c=call["bits_c"],
                             extra_read_bits=call["extra_read_bits"], extra_ops=call["extra_ops"])


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def part_zigzag(repeats: int, run_zigzag: bool) -> tuple[list[str], dict]:
    lines = [("| GEMM | M x N x K | our search ms (os/ws/is) | our cycles | our mapping "
             "| our search ms (os only) | os-only cycles | ZigZag search s | ZigZag cycles "
             "| roofline | ours / roofline |"),
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    totals = {"ours": 0.0, "ours_os": 0.0, "zigzag": 0.0}
    if run_zigzag:
        import zigzag_ref
    for phase, gemms in (("prefill", PREFILL), ("decode", DECODE)):
        for name, M, N, K, _ in gemms:
            call = {"M": M, "N": N, "K": K, "batch": 1, "bits_a": 8, "bits_b": 8, "bits_c": 32,
                    "extra_read_bits": 0, "extra_ops": 0}
            ours = search(call)
            ours_os = search(call, dataflows=("os",))
            t_ours = median_seconds(lambda c=call: search(c), repeats)
            t_os = median_seconds(lambda c=call: search(c, dataflows=("os",)), repeats)
            totals["ours"] += t_ours
            totals["ours_os"] += t_os
            z_s, z_cyc = "-", "-"
            if run_zigzag:
                z = zigzag_ref.run(M, N, K)
                totals["zigzag"] += z.search_seconds
                z_s, z_cyc = f"{z.search_seconds:.2f}", f"{z.latency_cycles:,.0f}"
            roof = ours.metrics.roofline_cycles
            lines.append(
                f"| {phase} {name} | {M} x {N} x {K} | {t_ours * 1e3:.1f} | "
                f"{ours.metrics.cycles:,} | {ours.mapping.replace('|', '/')} | {t_os * 1e3:.1f} | "
                f"{ours_os.metrics.cycles:,} | {z_s} | {z_cyc} | {roof:,} | "
                f"{ours.metrics.cycles / roof:.3f} |")
            print(lines[-1], flush=True)
    return lines, totals


def distinct_calls(schemes) -> list[dict]:
    seen, out = set(), []
    for scheme in schemes:
        for gemms in (PREFILL, DECODE):
            for name, M, N, K, heads in gemms:
                c = scheme_call(scheme, name, M, N, K, heads)
                key = tuple(sorted(c.items()))
                if key not in seen:
                    seen.add(key)
                    out.append(c)
    return out


def part_whole(repeats: int) -> list[str]:
    lines = ["| calls searched | distinct calls | median s | min s | max s |",
             "|---|---:|---:|---:|---:|"]
    for label, schemes in [(s, (s,)) for s in SCHEMES] + [("all three schemes", SCHEMES)]:
        calls = distinct_calls(schemes)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for c in calls:
                search(c)
            times.append(time.perf_counter() - t0)
        lines.append(f"| {label} | {len(calls)} | {statistics.median(times):.3f} | "
                     f"{min(times):.3f} | {max(times):.3f} |")
        print(lines[-1], flush=True)
    return lines


def limit_of(r) -> str:
    """Which hardware limit keeps a searched call above its roofline."""
    m = r.metrics
    gap = m.cycles - m.roofline_cycles
    if gap <= 0.02 * m.roofline_cycles:
        return "at the roofline"
    parts = []
    if m.extra_op_cycles > 0.1 * gap:
        parts.append(f"dequantization ops {m.extra_op_cycles:,} cycles on the active PEs")
    if m.array_cycles > m.roofline_cycles:
        parts.append(f"array {m.array_cycles:,} cycles ({r.dataflow.preset_name} with M = "
                     f"{r.tiles.tm} on {min(r.tiles.tm, r.dataflow.rows)} of "
                     f"{r.dataflow.rows} rows: edge feed and fold fill/drain)")
    if m.dram_stall_cycles > 0.1 * gap:
        parts.append(f"DRAM stalls {m.dram_stall_cycles:,} (first fetch {m.first_fetch_cycles:,})")
    return "; ".join(parts) or "fold fill and drain"


def part_phases() -> list[str]:
    lines = [("| accelerator | phase | scheme | searched cycles | roofline | ratio | worst call "
             "| what holds the worst call |"),
             "|---|---|---|---:|---:|---:|---|---|"]
    for acc_name, acc, phases in (("os16", os16, (("prefill 128", PREFILL), ("decode at 128", DECODE))),
                                  ("tpu_v1", tpu_v1, (("decode at 128", DECODE),))):
        for label, gemms in phases:
            for scheme in SCHEMES:
                cyc = roof = 0
                worst = (0.0, "", None)
                for name, M, N, K, heads in gemms:
                    r = search(scheme_call(scheme, name, M, N, K, heads), accelerator=acc)
                    times = 1 if name == "lm_head" else LAYERS
                    cyc += times * r.metrics.cycles
                    roof += times * r.metrics.roofline_cycles
                    assert r.metrics.cycles >= r.metrics.roofline_cycles, (name, scheme)
                    worst = max(worst, (r.metrics.cycles / r.metrics.roofline_cycles, name, r),
                                key=lambda x: x[0])
                lines.append(f"| {acc_name} | {label} | {scheme} | {cyc:,} | {roof:,} | "
                             f"{cyc / roof:.3f} | {worst[1]} {worst[0]:.2f} ({worst[2].mapping.replace('|', '/')}) "
                             f"| {limit_of(worst[2])} |")
                print(lines[-1], flush=True)
    return lines


NOTES = """Notes
- Search times are wall times of a fresh search (no cache) from Python, one thread (the
  automatic choice: after pruning a call is milliseconds of work and a second thread cost more
  than it saved on this shared machine). In the charge unit a call is searched once
  (`MappingSearch`), so a model's later calls cost a lookup.
- ZigZag's cycles are its own latency model (`latency_total2`) on the YAML of
  tests/cost_model/zigzag_ref.py, which does not double-buffer the global buffer: it serialises
  transfers and compute, hence about 2x ours; compare its search time, and its DRAM traffic
  (benchmarks/results/memory_zigzag.md), not its latency.
- Quantized decode on os16 is held by the array edge, not by DRAM: a decode GEMV has M = 1, so
  os (A's row on one array row) and is (one column) keep 16 of the 256 PEs busy, 16 MACs per
  cycle, while DRAM delivers 32 int8 (w8a8: ratio ~2) or 64 int4 (w4a16: ~4) weights per cycle;
  ws keeps all 256 PEs but reloads its 256 weights every fold (16 + 1 + 30 cycles per 256 MACs,
  worse). w4a16 also dequantizes every weight (N x K ops) on those 16 active PEs, which doubles
  it again (~6.9). Buffer size does not matter there (the searched tiles use a few KB); fold
  fill and drain is a few percent. With double-buffered stationary registers (tpu_v1), ws loads
  the next 256 x 256 weights while the current fold runs, and decode is DRAM-bound: 1.02 / 1.05.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-zigzag", action="store_true")
    args = ap.parse_args()
    head = [(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average at start "
            f"{os.getloadavg()[0]:.2f} (shared machine); search threads: automatic (1 here); "
            f"repeats: {args.repeats} (medians)"), ""]
    print("\n".join(head), flush=True)
    out = head + ["## Per GEMM: our search vs ZigZag 3.9 LOMA (os16 equivalent, 8/8/32 bits)", ""]
    zz, totals = part_zigzag(args.repeats, not args.no_zigzag)
    out += zz
    summary = (f"Sum over the 14 GEMMs: our search {totals['ours']:.3f} s (os/ws/is), "
               f"{totals['ours_os']:.3f} s (os only)")
    if not args.no_zigzag:
        summary += (f"; ZigZag {totals['zigzag']:.1f} s: {totals['zigzag'] / totals['ours']:.0f}x "
                    f"(full space), {totals['zigzag'] / totals['ours_os']:.0f}x (os only) faster")
    out += ["", summary, "", "## The whole GPT-2 small search (every distinct call, fresh)", ""]
    print(summary, flush=True)
    out += part_whole(args.repeats)
    out += ["", "## Phase totals with the searched mappings against the roofline", ""]
    out += part_phases()
    out += ["", f"Load average at the end: {os.getloadavg()[0]:.2f}", "", NOTES]
    if args.out:
        args.out.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
