"""Turn the JSON lines a silicon measurement writes into the CSV files the silicon benchmarks read.

The measurement script (``measure.py`` in the project's shared ``silicon/h200/`` folder, run on a
GPU machine) writes one JSON object per measured operator to ``silicon.jsonl``. This script writes
``peaks.csv``, ``gemm.csv``, ``vector.csv``, ``attention.csv`` and ``model.csv`` beside each other,
with the columns of ``data/h200/`` (only the files whose sections the measurement holds). As in
``data/h200/gemm.csv``, the ``int8_mm_pad32`` rows (int8 with M <= 16 padded to 32 rows, which
the kernel would otherwise refuse) are left out::

    python benchmarks/silicon/jsonl_to_csv.py silicon.jsonl OUT_DIR
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

COLUMNS = {
    "peaks": ("what", "ms", "tflops_or_gbps"),
    "gemm": ("model", "layer", "M", "N", "K", "format", "ms", "tflops", "error"),
    "vector": ("op", "tokens", "width", "heads", "S", "ms"),
    "attention": ("kernel", "phase", "dtype", "B", "heads", "kv_heads", "S", "ctx", "head_dim", "ms"),
    "model": ("model", "dtype", "phase", "batch", "tokens_or_context", "wall_ms", "kernel_gemm_ms",
              "kernel_attention_ms", "kernel_other_ms", "kernels", "note"),
}


def _ms(value: float) -> str:
    return f"{value:.6f}"


def _peak(r: dict) -> dict:
    rate = r.get("tflops", r.get("gbps"))
    return {"what": r["what"], "ms": f"{r['ms']:.4f}", "tflops_or_gbps": f"{rate:.1f}"}


def _gemm(r: dict) -> dict:
    row = {"model": r["model"], "layer": r["layer"], "M": r["M"], "N": r["N"], "K": r["K"],
           "format": r["fmt"], "ms": "", "tflops": "", "error": r.get("err", "")}
    if "ms" in r:
        row.update(ms=_ms(r["ms"]), tflops=f"{r['tflops']:.3f}")
    return row


def _vector(r: dict) -> dict:
    width = r.get("hidden", r.get("inner", ""))
    return {"op": r["op"], "tokens": r.get("tokens", ""), "width": width,
            "heads": r.get("heads", ""), "S": r.get("S", ""), "ms": _ms(r["ms"])}


def _attention(r: dict) -> dict:
    decode = r["phase"] == "decode"
    return {"kernel": "sdpa_flash(cudnn)", "phase": r["phase"], "dtype": "bf16", "B": r["B"],
            "heads": r["H"], "kv_heads": r["KV"], "S": 1 if decode else r["S"],
            "ctx": r["ctx"] if decode else r["S"], "head_dim": r["D"],
            "ms": _ms(r["ms"]) if "ms" in r else ""}


def _model(r: dict) -> dict:
    decode = r["phase"] == "decode"
    return {"model": r["model"], "dtype": r.get("dtype", "").replace("torch.", ""),
            "phase": r["phase"], "batch": r["B"], "tokens_or_context": r["ctx"] if decode else r["S"],
            "wall_ms": f"{r['ms']:.3f}", "kernel_gemm_ms": f"{r['gemm']:.4f}",
            "kernel_attention_ms": f"{r['attention']:.4f}", "kernel_other_ms": f"{r['other']:.4f}",
            "kernels": r["kernels"],
            "note": "HF DynamicCache" if decode else "all logits computed"}


ROWS = {"peak": ("peaks", _peak), "gemm": ("gemm", _gemm), "vector": ("vector", _vector),
        "attention": ("attention", _attention), "model": ("model", _model)}


def convert(jsonl: Path, out: Path) -> dict[str, int]:
    """Write the CSV files of ``jsonl``'s sections into ``out``; returns rows written per file."""
    tables: dict[str, list[dict]] = {}
    for n, line in enumerate(jsonl.read_text().splitlines(), 1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{jsonl}: line {n} is not JSON ({e.msg})") from None
        section = r.get("section")
        if section not in ROWS or (section in ("model", "peak") and "err" in r):
            continue
        if section == "gemm" and r.get("fmt") == "int8_mm_pad32":
            continue
        name, make = ROWS[section]
        try:
            tables.setdefault(name, []).append(make(r))
        except KeyError as e:
            raise ValueError(f"{jsonl}: line {n} ({section}) has no field {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        with open(out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS[name], lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return {name: len(rows) for name, rows in tables.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    for name, n in convert(args.jsonl, args.out).items():
        print(f"{args.out / (name + '.csv')}: {n} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
