"""The cost model's GEMM times against LLMCompass's A100 measurements, row by row.

Reads ``data/llmcompass_a100/matmul_A100.csv`` (beside this file; copied from
PrincetonUniversity/LLMCompass with its licence: that folder's README) or any file with its
columns (M, N, K, "<t>ms", "<f>Tflops"; fp16 products C[M,N] = A[M,K] B[K,N]), charges each
row to the ``a100`` preset (LLMCompass's own description of the A100, as 108 SM cores) as a
16-bit GEMM, prints ours, measured and the error, then one line of JSON
``{"fp16": {"median": ..., "p90": ..., "n": ...}}`` (absolute relative errors). Each
measured row carries LLMCompass's host cost per matmul call, 21 us on its A100 (its
``overhead_dict["A100"]``, which its own ae/figure5/ab/test_matmul.py adds to every simulated
row): added to ours (``--harness-us`` replaces it; 0 for the kernel alone). The ``a100`` is
charged at the HBM rate it sustains (``a100_ops.SUSTAINED_HBM_GBPS``, its source there), or at
the data sheet's with ``--nominal``.

Usage::

    python benchmarks/silicon/a100.py [--csv FILE] [--accelerator NAME] [--nominal]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, preset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from a100_ops import HARNESS_US, SUSTAINED_HBM_GBPS, a100  # noqa: E402
from h200 import run_main, summary  # noqa: E402  (the same summary of errors)

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "llmcompass_a100" / "matmul_A100.csv"


def read_rows(path: Path) -> list[tuple[int, int, int, float]]:
    """(M, N, K, measured ms) per line.

    Raises
    ------
    ValueError
        A line that is not ``M, N, K, <t>ms, <f>Tflops`` with positive numbers (naming the
        file and the line).
    """
    rows = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            if len(parts) != 5 or not parts[3].endswith("ms"):
                raise ValueError("expected 'M, N, K, <t>ms, <f>Tflops'")
            m, n, k = (int(p) for p in parts[:3])
            ms = float(parts[3][:-2])
            if min(m, n, k) < 1 or not ms > 0:
                raise ValueError("M, N, K and the time must be positive")
        except ValueError as err:
            raise ValueError(f"{path}:{line_no}: {err}: {line!r}") from None
        rows.append((m, n, k, ms))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--accelerator", default="a100", choices=sorted(PRESETS))
    ap.add_argument("--harness-us", type=float, default=HARNESS_US["matmul"])
    ap.add_argument("--nominal", action="store_true",
                    help="the a100 at the data sheet's HBM, not a100_ops.SUSTAINED_HBM_GBPS")
    args = ap.parse_args(argv)
    acc = (a100(hbm_gbps=SUSTAINED_HBM_GBPS) if args.accelerator == "a100" and not args.nominal
           else preset(args.accelerator))
    errors = []
    print(f"{'M':>6} {'N':>6} {'K':>6} {'ours us':>10} {'meas us':>10} {'error':>8}  mapping")
    for m, n, k, ms in read_rows(args.csv):
        c = cm.charge(cm.GemmCall(m=m, n=n, k=k, bits_a=16, bits_b=16, bits_c=16), acc)
        ours, meas = c.memory.latency_us + args.harness_us, ms * 1e3
        errors.append(ours / meas - 1)
        print(f"{m:>6} {n:>6} {k:>6} {ours:>10.1f} {meas:>10.1f} {errors[-1]:>+8.1%}  "
              f"{c.memory.mapping.split(' | ')[0]}")
    print(json.dumps(summary({"fp16": errors})))
    return 0


if __name__ == "__main__":
    run_main(main, __file__)
