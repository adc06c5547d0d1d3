"""The cost model's GEMM times against an NVIDIA H200's measured ones, row by row, per format.

Reads any CSV with the columns of ``data/h200/gemm.csv`` (beside this file) (model, layer, M, N,
K, format, ms, tflops, error), charges each measured row to an accelerator preset (``h200``
by default; ``--accelerator h100_sxm`` for rows measured on an H100) and prints ours, the
measured time and the relative error, then one line of JSON: per format the median and 90th
percentile of the absolute relative errors and the number of rows.

How each format is charged (the kernels ``measure.py`` timed, its README):

* ``fp32``: float32 x float32 -> float32 (cuBLAS SGEMM, the CUDA cores); from 9 to 64 rows
  the preset charges M as the rows of the kernel's thread-block tile (32 or 64, as
  ``kernels.py`` profiled it on the H200: the float32 unit's ``row_tiles`` in
  ``accelerators.hopper``), and with ``--calibrate`` those tiles run at a fraction of the FMA
  rate fitted on :data:`SGEMM_SUBSET`.
* ``bf16``: bf16 x bf16 -> bf16.
* ``fp8_tensor``: 8-bit x 8-bit -> bf16; the two per-tensor scales are one scalar in the
  GEMM's epilogue: no side data, no extra ops.
* ``fp8_row``: 8-bit x 8-bit -> bf16, a float32 scale per column of W read with the operands
  and a rescale per output element (dequantization place "output"); x's row scales (M
  floats) are left out: the recipe's per-token activation scales are dynamic ones, computed
  on chip, which the timed kernel does not do.
* ``int8_mm``: int8 x int8 -> int32, nothing else.
* ``int8_mm_dequant``: ``int8_mm``, then the four elementwise kernels of
  ``(y.float() * sa * sb).to(bfloat16)`` on the vector unit (:func:`dequant_kernels`).
* ``w4a16_g32`` / ``w4a16_g128``: bf16 activations x int4 weights in groups of 32 / 128
  along K, a bf16 scale and zero per group, dequantized by the SMs' CUDA cores (the
  preset's edge dequantizer for 4-bit codes) again for every 16 output rows (place
  "weight", ``dequant_rows=16``): tinygemm (``_weight_int4pack_mm``) computes 16-row tiles
  with ``mma.sync`` and unpacks the weight in registers inside each tile.

Kernel structure of the integer rows: ``int8_mm`` is one cuBLASLt int8 product with int32
output; ``int8_mm_dequant`` is that product then four eager elementwise kernels (cast to float32,
x per-token scale, x per-channel scale, cast to bf16), each through HBM with its launch;
tinygemm as above.
With ``--calibrate`` each 8-bit kernel runs at the rate ``peaks.csv`` measured for it
(:data:`KERNEL_PEAKS`: its 8192^3 row over the bf16 row, x the bf16 MACs per PE: int8 18
and fp8 29 where the data sheet says 32 for both; both share one 8-bit MAC unit in the
preset, so each is charged on its own variant), and the CUDA cores' dequantization rate is
fitted on :data:`DEQUANT_SUBSET` and the SGEMM tiles' rates on :data:`SGEMM_SUBSET`.

Usage::

    python benchmarks/silicon/h200.py [--csv FILE] [--accelerator NAME] [--mapping auto]
        [--calibrate [PEAKS_CSV]] [--fit-csv FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, hopper, preset

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
                                  zero_point_bits=16, dequant_rows=16), False),
    "w4a16_g128": (16, 4, 16, dict(place="weight", weight="group", weight_group=128,
                                   zero_point_bits=16, dequant_rows=16), False),
}
#: The 8-bit kernels by the peaks.csv row that measured each at 8192^3: torch._int_mm
#: (cuBLASLt's int8 product) and torch._scaled_mm (fp8).
KERNEL_PEAKS = {"int8_mm": "int8 8192^3", "int8_mm_dequant": "int8 8192^3",
                "fp8_tensor": "fp8 8192^3", "fp8_row": "fp8 8192^3"}


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


def dequant_kernels(m: int, n: int) -> list[cm.VectorCall]:
    """The four eager kernels ``int8_mm_dequant`` runs after the product
    (``(y.float() * sa * sb).to(bfloat16)``): the int32 -> float32 cast, the per-token and the
    per-channel multiply, the float32 -> bf16 cast; a cast is charged as a multiply by one
    scalar (one read and one write of each element)."""
    return [cm.VectorCall("multiply", [m, n], bits_in=32, bits_out=32, operand_elements=1),
            cm.VectorCall("multiply", [m, n], bits_in=32, bits_out=32, operand_elements=m),
            cm.VectorCall("multiply", [m, n], bits_in=32, bits_out=32, operand_elements=n),
            cm.VectorCall("multiply", [m, n], bits_in=32, bits_out=16, operand_elements=1)]


def sgemm_tile_rows(acc: cm.Accelerator, m: int) -> int:
    """The rows of C one thread block of cuBLAS's SGEMM computes for an ``m``-row call: the
    accelerator's float32 unit's row tile (``MacSpec.row_tiles``, 32 or 64 rows on the Hopper
    presets from 9 to 64 rows); 0 where its rows are charged as they are."""
    return acc.precision.lookup(32, 32).row_tile_for(m)


def charge_us(acc: cm.Accelerator, fmt: str, m: int, n: int, k: int,
              kernels: dict[str, cm.Accelerator] | None = None,
              sgemm_rate: dict[int, float] | None = None) -> float:
    """Our time of one measured row, microseconds (how: the module's docstring);
    ``kernels`` (format -> accelerator) charges those formats' rows on their own. An fp32
    row in a thread block's tile (:func:`sgemm_tile_rows`; the preset charges the tile's
    rows) runs at ``sgemm_rate[tile rows]`` of the CUDA cores' rate (1 unless fitted:
    :func:`fit_sgemm`)."""
    acc = (kernels or {}).get(fmt, acc)
    bits_a, bits_b, bits_c, recipe, dequant_pass = FORMATS[fmt]
    tile = sgemm_tile_rows(acc, m) if fmt == "fp32" else 0
    call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits_a, bits_b=bits_b, bits_c=bits_c,
                       scheme=fmt, recipe=_recipe(**recipe) if recipe else None)
    us = cm.charge(call, acc).ledger_fields()["latency_us"] / (sgemm_rate or {}).get(tile, 1.0)
    if dequant_pass:
        us += sum(cm.charge_vector(c, acc).ledger_fields()["latency_us"]
                  for c in dequant_kernels(m, n))
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


#: The rows the CUDA cores' int4 dequantization rate is fitted on with --calibrate (left out
#: of the summary): Llama-3-8B's attention output projection in w4a16 g128 at 256 and 1,024
#: rows, 16 and 64 tiles of 16 rows each re-dequantizing the whole weight.
DEQUANT_SUBSET = {("llama-3-8b", "o", "w4a16_g128", m) for m in (256, 1024)}


def calibrated_parts(name: str, peaks: Path, rows: list[dict],
                     **vector: float) -> tuple[dict, dict[str, int], str]:
    """:func:`accelerators.hopper`'s keywords for the preset with the sustained clock and HBM
    bandwidth of ``peaks`` (its bf16 8192^3 rate over the data sheet's 989.4 TFLOP/s scales
    the 1.83 GHz clock; its device-to-device copy is the HBM bandwidth), a launch cost fitted
    on :data:`LAUNCH_SUBSET` (the median of measured minus ours there), the L2 bandwidth on
    :data:`L2_SUBSET` and the int4 dequantization rate on :data:`DEQUANT_SUBSET` (each the
    candidate with the least median error there); ``vector`` (``vector_launch_us``,
    ``row_bits_per_cycle``) goes in as is. Also each 8-bit kernel's MACs per PE per clock
    by format (:data:`KERNEL_PEAKS`: its ``peaks`` 8192^3 rate over the bf16 rate x the bf16
    MACs) and a line saying what was fitted."""
    if name not in HOPPER:
        raise ValueError(f"--calibrate applies to {sorted(HOPPER)}, not {name!r}")
    with open(peaks, newline="", encoding="utf-8") as f:
        got = {r["what"]: float(r["tflops_or_gbps"]) for r in csv.DictReader(f)}
    try:
        clock = 1.83 * got["bf16 8192^3"] / 989.4
        hbm = got["d2d copy 1 GiB"]
        rate_8bit = {fmt: round(16 * got[row] / got["bf16 8192^3"])
                     for fmt, row in KERNEL_PEAKS.items()}
    except KeyError as err:
        raise ValueError(f"{peaks}: no row {err} (the bf16, int8 and fp8 peaks and the d2d "
                         "copy)") from None
    _, l2 = HOPPER[name]
    kw = dict(hbm_gbps=hbm, l2_bytes=l2, clock_ghz=clock, **vector)
    acc = hopper(name, **kw)
    gaps = [r["ms"] * 1e3 - charge_us(acc, r["format"], r["M"], r["N"], r["K"])
            for r in rows if (r["model"], r["layer"], r["format"], r["M"]) in LAUNCH_SUBSET]
    if not gaps:
        raise ValueError("--calibrate: the CSV has none of the launch-fit rows "
                         f"{sorted(LAUNCH_SUBSET)}")
    kw["launch_us"] = max(0.0, statistics.median(gaps))

    def best(field: str, subset: set, candidates: range, default: int) -> tuple[int, int]:
        fit = [r for r in rows if (r["model"], r["layer"], r["format"], r["M"]) in subset]

        def error(value: int) -> float:
            a = hopper(name, **{**kw, field: value})
            return statistics.median(abs(charge_us(a, r["format"], r["M"], r["N"], r["K"])
                                         / (r["ms"] * 1e3) - 1) for r in fit)

        return (min(candidates, key=error) if fit else default), len(fit)

    kw["l2_bytes_per_clock"], n_l2 = best("l2_bytes_per_clock", L2_SUBSET,
                                          range(5120, 16384 + 1, 512), 5120)
    kw["dequant_per_clock"], n_dq = best("dequant_per_clock", DEQUANT_SUBSET, range(1, 33), 32)
    return kw, rate_8bit, (
        f"calibrated: clock {clock:.3f} GHz and HBM {hbm:.0f} GB/s from {peaks.name}; "
        f"8-bit kernels' MACs/PE/clock from their 8192^3 rows over bf16's: int8 "
        f"{rate_8bit['int8_mm']}, fp8 {rate_8bit['fp8_tensor']}; launch "
        f"{kw['launch_us']:.2f} us fitted on {len(gaps)} rows (GPT-2 attn_out bf16, M <= 64); "
        f"L2 {kw['l2_bytes_per_clock']} B/clock fitted on {n_l2} rows (Llama-3-8B o bf16, "
        f"M >= 1024); int4 dequantization {kw['dequant_per_clock']} elements/SM/clock fitted "
        f"on {n_dq} rows (Llama-3-8B o w4a16_g128, M 256 and 1024); the fitted rows are left "
        "out of the summary")


#: The rows the SGEMM tiles' rates are fitted on with --calibrate (left out of the summary):
#: Llama-3-8B's five layers in fp32 at 16 rows (32-row tiles) and 64 rows (64-row tiles).
SGEMM_SUBSET = {("llama-3-8b", layer, "fp32", m) for layer in ("qkv", "o", "gate_up", "down",
                                                                "lm_head") for m in (16, 64)}


def fit_sgemm(acc: cm.Accelerator, rows: list[dict]) -> tuple[dict[int, float], str]:
    """The fraction of the CUDA cores' FMA rate cuBLAS's SGEMM thread blocks of 32 and 64 rows
    reach on their padded rows (one or two warps per SM sub-partition, too few to hide their
    latencies), each the median of ours over measured on :data:`SGEMM_SUBSET`'s rows of that
    tile; and a line saying so."""
    rate = {}
    for tile in (32, 64):
        fit = [r for r in rows if (r["model"], r["layer"], r["format"], r["M"]) in SGEMM_SUBSET
               and sgemm_tile_rows(acc, r["M"]) == tile]
        if fit:
            rate[tile] = statistics.median(charge_us(acc, "fp32", r["M"], r["N"], r["K"])
                                           / (r["ms"] * 1e3) for r in fit)
    return rate, ("SGEMM tiles' rate fitted on Llama-3-8B fp32 at 16 / 64 rows: " + ", ".join(
        f"{t}-row tiles {v:.2f} of the FMA rate" for t, v in sorted(rate.items())))


def calibrated(name: str, peaks: Path, rows: list[dict],
               **vector: float) -> tuple[cm.Accelerator, str]:
    """The accelerator of :func:`calibrated_parts` and its line."""
    kw, _, line = calibrated_parts(name, peaks, rows, **vector)
    return hopper(name, **kw), line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--accelerator", default="h200", choices=sorted(PRESETS))
    ap.add_argument("--mapping", default=None, choices=["auto", "default"])
    ap.add_argument("--calibrate", type=Path, nargs="?", const=True, default=None,
                    help="fit the clock and HBM on a peaks.csv (default: beside --fit-csv) "
                    "and the launch cost, L2 and int4 dequantization on named rows of "
                    "--fit-csv")
    ap.add_argument("--fit-csv", type=Path, default=None,
                    help="the gemm.csv --calibrate fits on (default: --csv); another file "
                    "than --csv is then charged out of sample")
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    acc = preset(args.accelerator, mapping=args.mapping)
    kernels: dict[str, cm.Accelerator] = {}
    fitted: set = set()
    sgemm_rate: dict[int, float] | None = None
    if args.calibrate:
        fit_csv = args.fit_csv or args.csv
        fit_rows = rows if fit_csv == args.csv else read_rows(fit_csv)
        peaks = fit_csv.parent / "peaks.csv" if args.calibrate is True else args.calibrate
        vector = {}
        if args.accelerator == "h200":  # the vector launch (int8_mm_dequant's second kernel)
            from h200_ops import fit_vector  # noqa: PLC0415 (h200_ops imports this module)

            vector, vline = fit_vector(calibrated(args.accelerator, peaks, fit_rows)[0])
            print(vline)
        kw, rate_8bit, line = calibrated_parts(args.accelerator, peaks, fit_rows, **vector)
        acc = hopper(args.accelerator, **kw)
        kernels = {fmt: hopper(args.accelerator, **kw, rate_8bit=rate)
                   for fmt, rate in rate_8bit.items()}
        sgemm_rate, sline = fit_sgemm(acc, fit_rows)
        print(line)
        print(sline)
        if fit_csv == args.csv:
            fitted = LAUNCH_SUBSET | L2_SUBSET | DEQUANT_SUBSET | SGEMM_SUBSET
    errors: dict[str, list[float]] = {}
    speed: dict[tuple, dict[str, tuple[float, float]]] = {}
    print(f"{'model':<12} {'layer':<9} {'M':>5} {'N':>6} {'K':>6} {'format':<16} "
          f"{'ours us':>10} {'meas us':>10} {'error':>8}")
    for r in rows:
        ours = charge_us(acc, r["format"], r["M"], r["N"], r["K"], kernels, sgemm_rate)
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
