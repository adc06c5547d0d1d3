"""The cost model's GEMM times against an NVIDIA H200's measured ones, row by row, per format.

Reads any CSV with the columns of ``data/h200/gemm.csv`` (beside this file) (model, layer, M, N,
K, format, ms, tflops, error), charges each measured row to an accelerator preset (``h200``
by default; ``--accelerator h100_sxm`` for rows measured on an H100) and prints ours, the
measured time and the relative error, then one line of JSON: per format the median and 90th
percentile of the absolute relative errors and the number of rows.

How each format is charged (the kernels ``measure.py`` timed, its README):

* ``fp32``: float32 x float32 -> float32 (cuBLAS SGEMM, the CUDA cores).
* ``bf16``: bf16 x bf16 -> bf16.
* ``fp8_tensor``: 8-bit x 8-bit -> bf16; the two per-tensor scales are one scalar in the
  GEMM's epilogue: no side data, no extra ops.
* ``fp8_row``: 8-bit x 8-bit -> bf16, a float32 scale per column of W read with the operands
  and a rescale per output element (dequantization place "output"); x's row scales (M
  floats) are left out: the recipe's per-token activation scales are dynamic ones, computed
  on chip, which the timed kernel does not do.
* ``int8_mm``: int8 x int8 -> int32, nothing else.
* ``int8_mm_dequant``: ``int8_mm``, then a separate elementwise pass on the vector unit
  reading the int32 product and writing bf16 (a multiply per element): two kernels.
* ``w4a16_g32`` / ``w4a16_g128``: bf16 activations x int4 weights in groups of 32 / 128
  along K, a bf16 scale and zero per group, dequantized once per weight element (place
  "weight").

Usage::

    python benchmarks/silicon/h200.py [--csv FILE] [--accelerator NAME] [--mapping auto]
        [--calibrate [PEAKS_CSV]]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.hardware import PRESETS, hopper, preset

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "h200" / "gemm.csv"
COLUMNS = ("model", "layer", "M", "N", "K", "format", "ms", "tflops", "error")


def _recipe(**fields) -> cm.QuantRecipe:
    return cm.QuantRecipe(**fields)


#: format -> (bits_a, bits_b, bits_c, recipe or None, separate dequantization pass)
FORMATS = {
    "fp32": (32, 32, 32, None, False),
    "bf16": (16, 16, 16, None, False),
    "fp8_tensor": (8, 8, 16, None, False),
    "fp8_row": (8, 8, 16, dict(place="output", weight="channel", scale_bits=32), False),
    "int8_mm": (8, 8, 32, None, False),
    "int8_mm_dequant": (8, 8, 32, None, True),
    "w4a16_g32": (16, 4, 16, dict(place="weight", weight="group", weight_group=32,
                                  zero_point_bits=16), False),
    "w4a16_g128": (16, 4, 16, dict(place="weight", weight="group", weight_group=128,
                                   zero_point_bits=16), False),
}


def read_rows(path: Path) -> list[dict]:
    """The measured rows of a gemm.csv-like file (rows with an ``error`` are skipped).

    Raises
    ------
    ValueError
        A missing column, a format not in :data:`FORMATS`, or a non-positive size or time
        (the message names the file, the line and the field).
    """
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected {list(COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            if row["error"]:
                continue
            if row["format"] not in FORMATS:
                raise ValueError(f"{path}:{line}: format {row['format']!r} is not one of "
                                 f"{sorted(FORMATS)}")
            try:
                m, n, k = (int(row[c]) for c in ("M", "N", "K"))
                ms = float(row["ms"])
            except ValueError as err:
                raise ValueError(f"{path}:{line}: {err}") from None
            if min(m, n, k) < 1 or not ms > 0:
                raise ValueError(f"{path}:{line}: M, N, K and ms must be positive")
            rows.append({**row, "M": m, "N": n, "K": k, "ms": ms})
    return rows


def charge_us(acc: cm.Accelerator, fmt: str, m: int, n: int, k: int) -> float:
    """Our time of one measured row, microseconds (how: the module's docstring)."""
    bits_a, bits_b, bits_c, recipe, dequant_pass = FORMATS[fmt]
    call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits_a, bits_b=bits_b, bits_c=bits_c,
                       scheme=fmt, recipe=_recipe(**recipe) if recipe else None)
    us = cm.charge(call, acc).ledger_fields()["latency_us"]
    if dequant_pass:
        pass_call = cm.VectorCall("multiply", [m, n], bits_in=32, bits_out=16,
                                  operand_elements=n)
        us += cm.charge_vector(pass_call, acc).ledger_fields()["latency_us"]
    return us


def summary(errors: dict[str, list[float]]) -> dict:
    """Per format the median and 90th percentile of |error| and the row count."""
    out = {}
    for fmt, errs in errors.items():
        a = sorted(abs(e) for e in errs)
        p90 = a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))]
        out[fmt] = {"median": round(statistics.median(a), 4), "p90": round(p90, 4),
                    "n": len(a)}
    return out


#: The rows the launch cost is fitted on with --calibrate (left out of the summary): the
#: smallest GEMM measured, GPT-2's attention output projection (768 x 768) at 1 to 64 rows,
#: whose time is nearly all fixed cost (its weights stream in 0.25 us at 4.8 TB/s).
LAUNCH_SUBSET = {("gpt2-small", "attn_out", "bf16", m) for m in (1, 16, 64)}
#: The rows the L2 bandwidth is fitted on with --calibrate (left out of the summary):
#: Llama-3-8B's attention output projection (4096 x 4096) in bf16 at 1,024 and 4,096 rows,
#: large products whose time the shared level's bandwidth bounds.
L2_SUBSET = {("llama-3-8b", "o", "bf16", m) for m in (1024, 4096)}
HOPPER = {"h200": (4800.0, 60_000_000), "h100_sxm": (3350.0, 50_000_000)}


def calibrated(name: str, peaks: Path, rows: list[dict]) -> tuple[cm.Accelerator, str]:
    """The preset with the sustained clock and HBM bandwidth of ``peaks`` (its bf16 8192^3
    rate over the data sheet's 989.4 TFLOP/s scales the 1.83 GHz clock; its device-to-device
    copy is the HBM bandwidth) and a launch cost fitted on :data:`LAUNCH_SUBSET`: the median
    of measured minus ours there. Returns it and a line saying what was fitted."""
    if name not in HOPPER:
        raise ValueError(f"--calibrate applies to {sorted(HOPPER)}, not {name!r}")
    with open(peaks, newline="", encoding="utf-8") as f:
        got = {r["what"]: float(r["tflops_or_gbps"]) for r in csv.DictReader(f)}
    try:
        clock = 1.83 * got["bf16 8192^3"] / 989.4
        hbm = got["d2d copy 1 GiB"]
    except KeyError as err:
        raise ValueError(f"{peaks}: no row {err} (the bf16 peak and the d2d copy)") from None
    _, l2 = HOPPER[name]
    acc = hopper(name, hbm_gbps=hbm, l2_bytes=l2, clock_ghz=clock)
    gaps = [r["ms"] * 1e3 - charge_us(acc, r["format"], r["M"], r["N"], r["K"])
            for r in rows if (r["model"], r["layer"], r["format"], r["M"]) in LAUNCH_SUBSET]
    if not gaps:
        raise ValueError("--calibrate: the CSV has none of the launch-fit rows "
                         f"{sorted(LAUNCH_SUBSET)}")
    launch = max(0.0, statistics.median(gaps))
    fit = [r for r in rows if (r["model"], r["layer"], r["format"], r["M"]) in L2_SUBSET]

    def l2_error(per_clock: int) -> float:
        a = hopper(name, hbm_gbps=hbm, l2_bytes=l2, clock_ghz=clock, launch_us=launch,
                   l2_bytes_per_clock=per_clock)
        return statistics.median(abs(charge_us(a, r["format"], r["M"], r["N"], r["K"])
                                     / (r["ms"] * 1e3) - 1) for r in fit)

    per_clock = min(range(5120, 16384 + 1, 512), key=l2_error) if fit else 5120
    acc = hopper(name, hbm_gbps=hbm, l2_bytes=l2, clock_ghz=clock, launch_us=launch,
                 l2_bytes_per_clock=per_clock)
    return acc, (f"calibrated: clock {clock:.3f} GHz and HBM {hbm:.0f} GB/s from {peaks.name}; "
                 f"launch {launch:.2f} us fitted on {len(gaps)} rows (GPT-2 attn_out bf16, "
                 f"M <= 64); L2 {per_clock} B/clock fitted on {len(fit)} rows (Llama-3-8B o "
                 "bf16, M >= 1024); the fitted rows are left out of the summary")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--accelerator", default="h200", choices=sorted(PRESETS))
    ap.add_argument("--mapping", default=None, choices=["auto", "default"])
    ap.add_argument("--calibrate", type=Path, nargs="?", const=True, default=None,
                    help="fit the clock and HBM on a peaks.csv (default: beside --csv) and "
                    "the launch cost on LAUNCH_SUBSET")
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    acc = preset(args.accelerator, mapping=args.mapping)
    fitted = set()
    if args.calibrate:
        peaks = args.csv.parent / "peaks.csv" if args.calibrate is True else args.calibrate
        acc, line = calibrated(args.accelerator, peaks, rows)
        print(line)
        fitted = LAUNCH_SUBSET | L2_SUBSET
    errors: dict[str, list[float]] = {}
    speed: dict[tuple, dict[str, tuple[float, float]]] = {}
    print(f"{'model':<12} {'layer':<9} {'M':>5} {'N':>6} {'K':>6} {'format':<16} "
          f"{'ours us':>10} {'meas us':>10} {'error':>8}")
    for r in rows:
        ours = charge_us(acc, r["format"], r["M"], r["N"], r["K"])
        meas = r["ms"] * 1e3
        err = ours / meas - 1
        if (r["model"], r["layer"], r["format"], r["M"]) not in fitted:
            errors.setdefault(r["format"], []).append(err)
        speed.setdefault((r["model"], r["layer"], r["M"]), {})[r["format"]] = (ours, meas)
        print(f"{r['model']:<12} {r['layer']:<9} {r['M']:>5} {r['N']:>6} {r['K']:>6} "
              f"{r['format']:<16} {ours:>10.2f} {meas:>10.2f} {err:>+8.1%}")
    # fp8 per tensor over bf16, per M: the median over layers of ours and measured.
    by_m: dict[int, list[tuple[float, float]]] = {}
    for (_, _, m), f in speed.items():
        if "bf16" in f and "fp8_tensor" in f:
            by_m.setdefault(m, []).append((f["bf16"][0] / f["fp8_tensor"][0],
                                           f["bf16"][1] / f["fp8_tensor"][1]))
    for m in sorted(by_m):
        ours = statistics.median(x for x, _ in by_m[m])
        meas = statistics.median(y for _, y in by_m[m])
        print(f"fp8_tensor / bf16 speed-up at M={m}: ours {ours:.2f}, measured {meas:.2f}, "
              f"error {ours / meas - 1:+.1%}")
    print(json.dumps(summary(errors)))
    return 0


def run_main(main, script: str) -> None:
    """Exit with ``main()``'s code; a missing or malformed file ends with one line naming it
    (``script: error``), not a traceback. Every script of this folder ends with it."""
    try:
        sys.exit(main())
    except (OSError, ValueError) as err:
        sys.exit(f"{Path(script).name}: {err}")


if __name__ == "__main__":
    run_main(main, __file__)
