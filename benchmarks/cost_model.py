"""Speed and agreement of the C++ cost model (prints; asserts nothing).

Two parts:
  speed     median time of one new analysis (C++ inside, and through Python) against
            isl + barvinok computing the same TENET metrics, on GPT-2 GEMM shapes, with a
            check that every number is identical;
  scalesim  our trusted cycles and off-chip reads against SCALE-Sim 3.0.0's compute model.

Usage: python benchmarks/cost_model.py [speed|scalesim|all] [--reps N] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from tenet_byoc import _cost_model as core
from tenet_byoc import cost_model as cm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cost_model"))

GPT2_SHAPES = [(1024, 768, 3072), (128, 768, 768), (1, 768, 2304), (8, 768, 50257)]
ARRAYS = [16, 128]


def _identical(ours: cm.Metrics, ref) -> bool:
    if (ours.macs, ours.time_steps, ours.active_pes) != (ref.macs, ref.time_steps,
                                                          ref.active_pes):
        return False
    if ours.avg_active_pes != ref.st_points / ref.time_steps:
        return False
    for name, t in ref.tensors.items():
        g = ours.tensors[name]
        if (g.total, g.unique) != (t.total, t.unique):
            return False
        if g.spatial_reuse != t.spatial / ref.macs or g.temporal_reuse != t.temporal / ref.macs:
            return False
    return True


def speed(reps: int) -> str:
    import isl_oracle

    lines = [("| GEMM MxNxK | array | dataflow | ours C++ (us) | ours via Python (us) | "
              "isl+barvinok (ms) | ratio (isl / ours C++) | identical |"),
             "|---|---|---|---:|---:|---:|---:|---|"]
    for m, n, k in GPT2_SHAPES:
        for size in ARRAYS:
            for preset in ["os", "ws", "is"]:
                hw = cm.Hardware.systolic(size, size)
                df = cm.Dataflow.preset(preset, rows=size, cols=size)
                cpp = statistics.median(core._time_analyze_gemm(m, n, k, hw, df, reps))
                py_times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    ours = cm.analyze(cm.Statement.gemm(m, n, k), hw, df)
                    py_times.append(time.perf_counter() - t0)
                isl_times = []
                for _ in range(max(3, reps // 100)):
                    t0 = time.perf_counter()
                    ref = isl_oracle.gemm(m, n, k, hw.pe_domain, hw.interconnect, df.space,
                                          df.time)
                    isl_times.append(time.perf_counter() - t0)
                isl = statistics.median(isl_times)
                same = _identical(ours, ref)
                lines.append(f"| {m}x{n}x{k} | {size}x{size} | {preset} | {cpp * 1e6:.1f} | "
                             f"{statistics.median(py_times) * 1e6:.1f} | {isl * 1e3:.1f} | "
                             f"{isl / cpp:,.0f}x | {'yes' if same else 'NO'} |")
                print(lines[-1], flush=True)
    return "\n".join(lines)


SCALESIM_SHAPES = [(64, 64, 64), (100, 37, 250), (256, 256, 256), (1, 768, 256),
                   (128, 96, 300), (33, 200, 17)]
SCALESIM_ARRAYS = [(8, 8), (16, 16), (8, 32), (32, 32)]


def scalesim() -> str:
    import scalesim_ref

    lines = [("| GEMM MxNxK | array | dataflow | SCALE-Sim cycles (rows of demand) | "
              "SCALE-Sim report (last index) | ours cycles | TENET time steps | "
              "SCALE-Sim reads A / B | ours off-chip A / B | match |"),
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for m, n, k in SCALESIM_SHAPES:
        for rows, cols in SCALESIM_ARRAYS:
            for preset in ["os", "ws", "is"]:
                ref = scalesim_ref.run_gemm(m, n, k, rows, cols, preset)
                hw = cm.Hardware.systolic(rows, cols, bandwidth_bits=1e12)
                ours = cm.analyze_array(
                    cm.GemmCall(m=m, n=n, k=k),
                    cm.Accelerator("t", hw, cm.Dataflow.preset(preset, rows=rows, cols=cols)),
                )
                a, b = ours.tensors["A"].offchip_elements, ours.tensors["B"].offchip_elements
                ok = (ours.cycles, a, b) == (ref.cycles, ref.ifmap_reads, ref.filter_reads)
                lines.append(f"| {m}x{n}x{k} | {rows}x{cols} | {preset} | {ref.cycles} | "
                             f"{ref.cycles - 1} | {ours.cycles} | {ours.time_steps} | "
                             f"{ref.ifmap_reads} / {ref.filter_reads} | {a} / {b} | "
                             f"{'yes' if ok else 'NO'} |")
                print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", nargs="?", default="all", choices=["speed", "scalesim", "all"])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args()
    sections = []
    if args.part in ("speed", "all"):
        print("## Speed: one new analysis vs isl + barvinok (median)\n")
        sections.append("## Speed: one new analysis vs isl + barvinok (median)\n\n" +
                        speed(args.reps))
    if args.part in ("scalesim", "all"):
        print("\n## Cycles and off-chip reads vs SCALE-Sim 3.0.0 (ample bandwidth)\n")
        sections.append("## Cycles and off-chip reads vs SCALE-Sim 3.0.0 compute model "
                        "(ample bandwidth)\n\n" + scalesim())
    if args.out:
        import os
        import platform

        header = (f"# Cost model benchmark\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
                  f" on {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                  f"`python benchmarks/cost_model.py {args.part} --reps {args.reps}`. "
                  "\"ours C++\" is the median wall time of one AnalyzeGemm call timed inside C++; "
                  "\"via Python\" adds the binding. isl+barvinok is tests/cost_model/isl_oracle.py "
                  "(TENET's dataflow.cpp formulation: card of isl maps) on the same inputs.")
        args.out.write_text(header + "\n\n" + "\n\n".join(sections) + "\n")


if __name__ == "__main__":
    main()
