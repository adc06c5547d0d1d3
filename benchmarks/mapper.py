"""The mapping search on GPT-2 small through the wired path (``mapping="auto"`` on the real
``os16`` and ``tpu_v1`` presets): search time and latency beside ZigZag 3.9's LOMA search and
the roofline; phase totals per quantization scheme with the searched mappings.

Parts (all printed as markdown, written with --out):
1. Per GEMM (prefill 128 tokens, decode at context 128; attention for one head), 8-bit A and
   B, 32-bit C, on ``preset("os16", mapping="auto")``: the time of a fresh search of the call
   by the accelerator's own MappingSearch (median of --repeats, a new search object each
   time, no cache), the charged cycles and mapping (``cost_model.charge``), the same
   search restricted to os alone, ZigZag's search time and latency
   (`get_hardware_performance_zigzag`, LOMA at the API's default depth, on
   tests/cost_model/zigzag_ref.py's os16 equivalent), the roofline.
2. The whole GPT-2 small search: every call of prefill 128 and decode at 128 (12 layers +
   lm_head, from ``model_gemms``) charged through ``charge`` with each scheme's recipe,
   starting from an empty search cache: its wall time (median of --repeats), the distinct
   calls searched, and the time of charging them all again (every call a cache lookup).
3. Phase totals with the searched mappings against the roofline, per scheme (none,
   w8a8_per_channel_per_token, w4a16_group128) on os16 and tpu_v1 (Jouppi et al., ISCA 2017:
   256 x 256 at 700 MHz, 28 MiB of buffer, 34 GB/s, double-buffered weights), and what holds
   os16's quantized decode: its worst call searched with one dataflow at a time, with a
   buffer 16x larger, and with double-buffered stationary registers.

Needs `pip install zigzag-dse==3.9.1 six` for part 1 (skipped with --no-zigzag).

    python benchmarks/mapper.py [--out benchmarks/results/mapper.md] [--repeats 5] [--no-zigzag]
"""

from __future__ import annotations

# isort: off
# First: it sets OMP_WAIT_POLICY before tvm loads libgomp (see machine.py).
from machine import describe
# isort: on

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.models.gemms import model_gemms
from tenet_byoc.models.gpt2 import GPT2Config
from tenet_byoc.quantization import get_scheme

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cost_model"))

# GPT-2 small: d_model 768, 12 heads of 64, MLP 3072, vocabulary 50257. (name, M, N, K)
PREFILL = [("qkv", 128, 2304, 768), ("attn proj", 128, 768, 768), ("fc", 128, 3072, 768),
           ("fc proj", 128, 768, 3072), ("lm_head", 128, 50257, 768),
           ("QK^T", 128, 128, 64), ("PV", 128, 64, 128)]
DECODE = [("qkv", 1, 2304, 768), ("attn proj", 1, 768, 768), ("fc", 1, 3072, 768),
          ("fc proj", 1, 768, 3072), ("lm_head", 1, 50257, 768),
          ("QK^T", 1, 129, 64), ("PV", 1, 64, 129)]
SCHEMES = ("none", "w8a8_per_channel_per_token", "w4a16_group128")
TOKENS = 128
ZIGZAG_BITS = {"bits_a": 8, "bits_b": 8, "bits_c": 32}


def fresh_best(acc, M: int, N: int, K: int, **call) -> cm.MappingChoice:
    """The search ``acc`` (a preset with mapping 'auto') charges through, run afresh for one
    call: the same preset with its default tiles keeps no search (accelerators made alike
    share theirs, and ``preset(name)`` alone is the searched one since issue 31), so each
    request searches the same space again."""
    return cm.search_mapping(cm.GemmCall(m=M, n=N, k=K, **call),
                             preset(acc.name, mapping="default"), objective=acc.objective)


def charge(acc, M: int, N: int, K: int, **call) -> cm.Charge:
    return cm.charge(cm.GemmCall(m=M, n=N, k=K, **call), acc)


def os_only(acc, M: int, N: int, K: int, **call) -> cm.MappingChoice:
    """The same space with os alone (the preset's own dataflow, its tiles searched)."""
    edge = acc.dataflow.rows
    return cm.MappingSearch(
        acc.hardware,
        acc.memory,
        dataflows=("os",),
        precision=acc.precision,
        stream_tiles=(edge, 4 * edge),
    ).best(cm.GemmCall(m=M, n=N, k=K, **call))


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)




def part_zigzag(repeats: int, run_zigzag: bool) -> tuple[list[str], dict]:
    acc = preset("os16", mapping="auto")
    lines = [("| GEMM | M x N x K | our search ms | charged cycles | chosen mapping "
             "| os-only search ms | os-only cycles | ZigZag search s | ZigZag cycles "
             "| roofline | ours / roofline |"),
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    totals = {"ours": 0.0, "ours_os": 0.0, "zigzag": 0.0}
    if run_zigzag:
        import zigzag_ref
    for phase, gemms in (("prefill", PREFILL), ("decode", DECODE)):
        for name, M, N, K in gemms:
            c = charge(acc, M, N, K, **ZIGZAG_BITS)
            best = fresh_best(acc, M, N, K, **ZIGZAG_BITS)
            assert (best.mapping, best.metrics.cycles) == (c.memory.mapping, c.memory.cycles)
            ours_os = os_only(acc, M, N, K, **ZIGZAG_BITS)
            shape = (M, N, K)
            t_ours = median_seconds(lambda s=shape: fresh_best(acc, *s, **ZIGZAG_BITS), repeats)
            t_os = median_seconds(lambda s=shape: os_only(acc, *s, **ZIGZAG_BITS), repeats)
            totals["ours"] += t_ours
            totals["ours_os"] += t_os
            z_s, z_cyc = "-", "-"
            if run_zigzag:
                z = zigzag_ref.run(M, N, K)
                totals["zigzag"] += z.search_seconds
                z_s, z_cyc = f"{z.search_seconds:.2f}", f"{z.latency_cycles:,.0f}"
            roof = c.memory.roofline_cycles
            lines.append(
                f"| {phase} {name} | {M} x {N} x {K} | {t_ours * 1e3:.1f} | "
                f"{c.memory.cycles:,} | {c.memory.mapping.replace('|', '/')} | {t_os * 1e3:.1f} | "
                f"{ours_os.metrics.cycles:,} | {z_s} | {z_cyc} | {roof:,} | "
                f"{c.memory.cycles / roof:.3f} |")
            print(lines[-1], flush=True)
    return lines, totals


def scheme_calls(scheme_name: str, phase: str) -> list[tuple[str, int, int, int, int, dict]]:
    """GPT-2 small's calls of one phase as the charge unit sees them: (name, batch, M, N, K,
    GemmCall keywords). Attention (activation x activation) stays float in every scheme."""
    scheme = get_scheme(scheme_name)
    out = []
    for g in model_gemms(GPT2Config.preset("small"), phase, TOKENS):
        quantized = g.weight is not None and scheme.kernel != "float"
        a, b, c = scheme.bits() if quantized else (32, 32, 32)
        kw = {"batch": g.batch, "bits_a": a, "bits_b": b, "bits_c": c,
              "scheme": scheme_name if quantized else "none",
              "recipe": scheme.recipe() if quantized else None}
        out.append((g.name, g.batch, g.m, g.n, g.k, kw))
    return out


def part_whole(repeats: int) -> list[str]:
    lines = [("| accelerator | schemes charged | calls | distinct calls searched | median s "
              "(empty cache) | min s | max s | all calls again (cached) s |"),
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for acc_name in ("os16", "tpu_v1"):
        for label, schemes in [(s, (s,)) for s in SCHEMES] + [("all three", SCHEMES)]:
            calls = [c for s in schemes for ph in ("prefill", "decode") for c in scheme_calls(s, ph)]
            times = []
            for _ in range(repeats):
                cm.clear_mapping_searches()  # the preset made next searches every distinct call
                acc = preset(acc_name, mapping="auto")
                t0 = time.perf_counter()
                for _, _, M, N, K, kw in calls:
                    charge(acc, M, N, K, **kw)
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _, _, M, N, K, kw in calls:
                charge(acc, M, N, K, **kw)
            again = time.perf_counter() - t0
            lines.append(f"| {acc_name} | {label} | {len(calls)} | "
                         f"{acc.mapping_searches} | {statistics.median(times):.3f} | "
                         f"{min(times):.3f} | {max(times):.3f} | {again:.3f} |")
            print(lines[-1], flush=True)
    return lines


def searched_call(kw: dict, c: cm.Charge) -> dict:
    """The workload keywords of ``MappingSearch.best`` for charge ``c`` made with ``kw``."""
    q = c.quant
    return {"batch": kw["batch"], "bits_a": kw["bits_a"], "bits_b": kw["bits_b"],
            "bits_c": kw["bits_c"],
            "extra_read_bits": q["weight_side_bits"] + q["activation_side_bits"],
            "extra_ops": q["quantize_ops"] + q["dequant_ops"]}


_MEMORY_FIELDS = ("dram_bandwidth_bits", "dram_capacity_bytes", "dram_channel_per_operand",
                  "dram_pj_per_bit", "buffer_bytes", "buffer_bandwidth_bits", "buffer_pj_per_bit",
                  "buffer_double_buffered", "register_bytes", "register_pj_per_bit",
                  "stationary_double_buffered", "psum_bits")


def with_memory(acc, name: str, **changes):
    """``acc`` with some fields of its memory hierarchy changed (energies per bit kept)."""
    fields = {f: getattr(acc.memory, f) for f in _MEMORY_FIELDS}
    return acc.replace(name=name, memory=cm.MemoryHierarchy(**{**fields, **changes}))


def limit_of(r: cm.MappingChoice) -> str:
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


def part_phases() -> tuple[list[str], dict]:
    lines = [("| accelerator | phase | scheme | searched cycles | roofline | ratio | worst call "
             "| what holds the worst call |"),
             "|---|---|---|---:|---:|---:|---|---|"]
    worst_decode = {}
    for acc_name in ("os16", "tpu_v1"):
        acc = preset(acc_name, mapping="auto")
        for phase in ("prefill", "decode"):
            for scheme in SCHEMES:
                cyc = roof = 0
                worst = (0.0, "", None, None)
                for name, _, M, N, K, kw in scheme_calls(scheme, phase):
                    c = charge(acc, M, N, K, **kw)
                    cyc += c.memory.cycles
                    roof += c.memory.roofline_cycles
                    assert c.memory.cycles >= c.memory.roofline_cycles, (name, scheme)
                    ratio = c.memory.cycles / c.memory.roofline_cycles
                    if ratio > worst[0]:
                        choice = acc.mapping_search.best(
                            cm.GemmCall(m=M, n=N, k=K, **searched_call(kw, c))
                        )
                        worst = (ratio, name, choice, (M, N, K, kw))
                if acc_name == "os16" and phase == "decode" and scheme != "none":
                    worst_decode[scheme] = worst
                r = worst[2]
                lines.append(f"| {acc_name} | {phase} {TOKENS} | {scheme} | {cyc:,} | {roof:,} | "
                             f"{cyc / roof:.3f} | {worst[1]} {worst[0]:.2f} "
                             f"({r.mapping.replace('|', '/')}) | {limit_of(r)} |")
                print(lines[-1], flush=True)
    return lines, worst_decode


def part_limits(worst_decode: dict) -> list[str]:
    """os16's worst quantized decode call under one dataflow at a time and changed hardware."""
    lines = [("| scheme | call | os only | ws only | is only | buffer 16 MiB | double-buffered "
              "stationary registers | searched (os16) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    base = preset("os16", mapping="auto")
    variants = [with_memory(base, "os16_16MiB", buffer_bytes=16 << 20),
                with_memory(base, "os16_dbs", stationary_double_buffered=True)]
    # One dataflow at a time: os16 (its edge dequantizer included) running that preset alone.
    variants = [base.replace(name=f"os16_{df}", dataflow=cm.Dataflow.preset(df, rows=16, cols=16),
                             supported_dataflows=(df,)) for df in ("os", "ws", "is")] + variants
    for scheme, (ratio, name, _, (M, N, K, kw)) in worst_decode.items():
        cells = []
        for acc in variants:
            r = charge(acc, M, N, K, **kw)
            cells.append(f"{r.memory.cycles / r.memory.roofline_cycles:.2f}")
        lines.append(f"| {scheme} | decode {name} {M} x {N} x {K} | " + " | ".join(cells) +
                     f" | {ratio:.2f} |")
        print(lines[-1], flush=True)
    return lines


NOTES = """Notes
- "our search ms" is a fresh search of the call by the accelerator's own MappingSearch (the
  object the runtime's cost cache and `charge` hold), one thread (the automatic choice:
  after pruning a call is milliseconds of work). Its space is os, ws and is on the 16 x 16
  array, each also with its streamed dimension cut into 16 and 64 (1 and 4 array edges),
  which none of these calls chose and which make the search about 4x longer than with the
  three untiled presets alone. In a model a distinct call is searched once: the "cached"
  column charges every call again, all lookups.
- ZigZag's cycles are its own latency model (`latency_total2`) on the YAML of
  tests/cost_model/zigzag_ref.py (the same array, 1 MiB buffer and DRAM; its buffer does not
  double-buffer): it serialises transfers and compute, hence about 2x ours; compare its
  search time, and its DRAM traffic (benchmarks/results/memory_zigzag.md), not its latency.
- Quantized decode on os16 is held by the array edge bandwidth: a decode GEMV uses every
  weight once, and weights enter the 16 x 16 array through one edge, 16 per cycle, whatever
  the dataflow (os and is: the M = 1 row or column of 16 PEs; ws: 16 cycles to load each
  256-weight fold), while DRAM delivers 32 int8 (w8a8: ~2x the roofline) or 64 int4
  (w4a16: ~4x) weights per cycle; os16's edge dequantizer (16 weights per cycle) widens
  w4a16's weights at the same edge rate, off the PEs. The last table shows it: ws alone is worse
  (each fold of 256 MACs also pays R + C - 2 = 30 cycles of fill and drain), a 16x larger
  buffer changes nothing (the searched tiles use a few KB), and double-buffered stationary
  registers help little on 16 x 16 (ws's fold stays held by fill and drain). On tpu_v1 a
  256 x 256 ws fold does 65,536 MACs per ~511 cycles with its next weights loading behind it
  (double-buffered), far above DRAM's 48 int8 weights per cycle, so decode is DRAM-bound.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-zigzag", action="store_true")
    args = ap.parse_args()
    head = [(f"Measured {describe().line()}; search threads: automatic (1 here); repeats: "
             f"{args.repeats} (medians). Produced by `benchmarks/mapper.py`."), ""]
    print("\n".join(head), flush=True)
    out = head + [('## Per GEMM: preset("os16", mapping="auto") vs ZigZag 3.9 LOMA '
                   "(8/8/32 bits)"), ""]
    zz, totals = part_zigzag(args.repeats, not args.no_zigzag)
    out += zz
    summary = (f"Sum over the 14 GEMMs: our search {totals['ours']:.3f} s (os/ws/is with stream "
               f"tilings), {totals['ours_os']:.3f} s (os only)")
    if not args.no_zigzag:
        summary += (f"; ZigZag {totals['zigzag']:.1f} s: {totals['zigzag'] / totals['ours']:.0f}x "
                    f"(full space), {totals['zigzag'] / totals['ours_os']:.0f}x (os only) faster")
    out += ["", summary, "",
            "## The whole GPT-2 small search (every call charged, empty search cache)", ""]
    print(summary, flush=True)
    out += part_whole(args.repeats)
    out += ["", "## Phase totals with the searched mappings against the roofline", ""]
    phases, worst_decode = part_phases()
    out += phases
    out += ["", "## What holds os16's quantized decode: its worst call, cycles / roofline", ""]
    out += part_limits(worst_decode)
    out += ["", f"Load average at the end: {os.getloadavg()[0]:.2f}", "", NOTES]
    if args.out:
        args.out.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
