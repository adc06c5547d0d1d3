"""The cost model's vector, attention and whole-model times against an NVIDIA H200's measured ones.

Reads ``data/h200/vector.csv``, ``attention.csv`` and ``model.csv`` (beside this file; how
they were measured: that folder's README), charges each row on the ``h200`` preset and prints
ours, measured and the relative error row by row, then one line of JSON per file: per
operator the median and 90th percentile of the absolute relative errors and the row count.

How each row is charged (the kernels ``measure.py`` timed, eager PyTorch, bf16 unless said):

* ``layer_norm``, ``rms_norm``, ``gelu_tanh``: one :class:`VectorCall` of that op on
  ``[tokens, width]``; ``residual_add``: ``add`` of two ``[tokens, width]`` tensors;
  ``silu_mul`` (``F.silu(x) * y``, two kernels): ``silu`` then ``multiply``;
  ``softmax``: ``softmax`` on ``[heads, S, S]``.
* ``bmm_qk`` / ``bmm_pv`` (``torch.bmm``, one product per sequence and head): a
  :class:`GemmCall` with ``batch = B x heads``, ``S x ctx x head_dim`` and
  ``S x head_dim x ctx``, at the row's width (fp32 or bf16).
* ``sdpa_flash`` (cuDNN's fused kernel, causal prefill or one-token decode, GQA): one
  :class:`AttentionCall` (``cost_model.charge_attention``: 128-row query tiles of each KV
  head's stacked query heads, causal prefill skipping the upper triangle, K and V read once
  per KV head, the scores' softmax on the core's lanes between the MMAs).
* ``model.csv``: Llama-3-8B prefill (batch 1 and 8) from :func:`tenet_byoc.estimate` on
  ``h200`` with a bf16 scheme (16-bit weights, activations and KV cache), its array entries
  against the measured GEMM + attention kernels and its vector entries against the "other"
  kernels; the total against the measured sum. Then "fused": the same GEMMs, one
  :class:`AttentionCall` per layer in place of the plan's ``qk`` / ``pv`` products, and the
  vector entries without the plan's S x S work (:data:`FUSED_AWAY`) and its ``quantize``
  entries, as the measured model runs (the plan itself still charges attention unfused).

The ``h200`` preset's vector unit runs kernels as PyTorch's eager CUDA kernels do
(``accelerators.py``): through HBM, softmax reading its input 3 times and the norms twice.
``--calibrate`` charges on ``h200.py --calibrate``'s accelerator instead (clock and HBM from
``peaks.csv``, launch cost and L2 bandwidth fitted on GEMM rows of ``gemm.csv``) with two
vector figures fitted on named rows of ``vector.csv`` and left out of its summary:
the vector launch cost on :data:`VECTOR_LAUNCH_SUBSET` (the median of measured minus ours)
and the per-row bound on :data:`ROW_SUBSET` (the median of the bits per cycle one row's
passes take in the measured time less that launch).

Usage::

    python benchmarks/silicon/h200_ops.py [--calibrate] [--only vector|attention|model]
        [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200 import calibrated, read_rows, run_main, summary  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "h200"


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line, row) of a CSV, checking its columns (the message names the file)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}")
        return list(enumerate(reader, start=2))


def _int(path: Path, line: int, row: dict, col: str) -> int:
    try:
        v = int(row[col])
    except ValueError:
        raise ValueError(f"{path}:{line}: {col} {row[col]!r} is not an integer") from None
    if v < 1:
        raise ValueError(f"{path}:{line}: {col} must be positive, got {v}")
    return v


def _ms(path: Path, line: int, row: dict, col: str = "ms") -> float:
    try:
        v = float(row[col])
    except ValueError:
        raise ValueError(f"{path}:{line}: {col} {row[col]!r} is not a number") from None
    if not v > 0:
        raise ValueError(f"{path}:{line}: {col} must be positive, got {v}")
    return v


def vec_us(acc: cm.Accelerator, op: str, shape: list[int], bits: int = 16,
           operand: int = 0) -> float:
    """One vector kernel's time at ``bits`` in and out (``operand``: a binary operator's
    second input's elements), microseconds."""
    call = cm.VectorCall(op, shape, bits_in=bits, bits_out=bits, operand_elements=operand)
    return cm.charge_vector(call, acc).ledger_fields()["latency_us"]


def gemm_us(acc: cm.Accelerator, batch: int, m: int, n: int, k: int, bits: int) -> float:
    """One (batched) GEMM's time, microseconds."""
    call = cm.GemmCall(m=m, n=n, k=k, batch=batch, bits_a=bits, bits_b=bits, bits_c=bits)
    return cm.charge(call, acc).ledger_fields()["latency_us"]


#: Rows the vector launch cost is fitted on (--calibrate): one-token residual adds and GELUs,
#: whose few kilobytes stream in nanoseconds: their time is the kernel's fixed cost.
VECTOR_LAUNCH_SUBSET = {(op, 1, w) for op, ws in (("residual_add", (768, 4096, 8192)),
                                                   ("gelu_tanh", (3072, 14336, 28672)))
                        for w in ws}
#: Rows the per-row bound is fitted on (--calibrate): one-token layer and RMS norms, one row
#: reduced by one core.
ROW_SUBSET = {(op, 1, w) for op in ("layer_norm", "rms_norm") for w in (768, 4096, 8192)}


def _vector_key(path: Path, line: int, r: dict) -> tuple[str, int, int]:
    if r["op"] == "softmax":
        return ("softmax", _int(path, line, r, "heads"), _int(path, line, r, "S"))
    return (r["op"], _int(path, line, r, "tokens"), _int(path, line, r, "width"))


def fit_vector(acc: cm.Accelerator, path: Path = DATA / "vector.csv") -> tuple[dict, str]:
    """The vector launch cost fitted on :data:`VECTOR_LAUNCH_SUBSET` of ``path`` (the median
    of measured minus ours on ``acc``) and the per-row rate on :data:`ROW_SUBSET` (the median
    of the bits per cycle one row's passes take in the measured time less that launch), as
    :func:`accelerators.hopper`'s keywords, and a line saying so."""
    rows = [(_vector_key(path, n, r), r, n) for n, r in
            _rows(path, ("op", "tokens", "width", "heads", "S", "ms"))]
    gaps = [_ms(path, n, r) * 1e3 - vector_row_us(acc, r, path, n)
            for k, r, n in rows if k in VECTOR_LAUNCH_SUBSET]
    if not gaps:
        raise ValueError(f"{path}: none of the launch-fit rows {sorted(VECTOR_LAUNCH_SUBSET)}")
    launch = max(0.0, statistics.median(gaps))
    clock = acc.hardware.clock_ghz
    per_row = []
    for (op, tokens, width), r, n in rows:
        spare_us = _ms(path, n, r) * 1e3 - launch
        if (op, tokens, width) in ROW_SUBSET and spare_us > 0:
            per_row.append(acc.vector.norm_passes * width * 16 / (spare_us * 1e3 * clock))
    if not per_row:
        raise ValueError(f"{path}: none of the row-fit rows {sorted(ROW_SUBSET)}")
    row_bits = statistics.median(per_row)
    return ({"vector_launch_us": launch, "row_bits_per_cycle": row_bits},
            f"vector launch {launch:.2f} us fitted on {len(gaps)} rows of {path.name} "
            f"(one-token residual_add, gelu_tanh); one row's passes at {row_bits:.1f} "
            f"bits/cycle fitted on {len(per_row)} rows (one-token layer_norm, rms_norm); "
            "these rows are left out of vector.csv's summary")


def calibrated_vector(peaks: Path, gemm_rows: list[dict],
                      path: Path = DATA / "vector.csv") -> tuple[cm.Accelerator, str]:
    """``h200.py --calibrate``'s accelerator with :func:`fit_vector`'s figures."""
    acc, _ = calibrated("h200", peaks, gemm_rows)
    vector, vline = fit_vector(acc, path)
    acc, line = calibrated("h200", peaks, gemm_rows, **vector)
    return acc, f"{line}; {vline}"


VECTOR_OPS = {"layer_norm": ["layer_norm"], "rms_norm": ["rms_norm"], "residual_add": ["add"],
              "gelu_tanh": ["gelu_tanh"], "silu_mul": ["silu", "multiply"],
              "softmax": ["softmax"]}


def _vector_shape(path: Path, line: int, r: dict) -> list[int]:
    if r["op"] not in VECTOR_OPS:
        raise ValueError(f"{path}:{line}: op {r['op']!r} is not one of {sorted(VECTOR_OPS)}")
    if r["op"] == "softmax":
        return [_int(path, line, r, "heads"), _int(path, line, r, "S"), _int(path, line, r, "S")]
    return [_int(path, line, r, "tokens"), _int(path, line, r, "width")]


def vector_row_us(acc: cm.Accelerator, r: dict, path: Path, line: int) -> float:
    """Our time of one vector.csv row (its kernels one after another), microseconds."""
    shape = _vector_shape(path, line, r)
    ops = VECTOR_OPS[r["op"]]
    if r["op"] == "residual_add":
        return vec_us(acc, "add", shape, operand=shape[0] * shape[1])
    if r["op"] == "silu_mul":
        return vec_us(acc, "silu", shape) + vec_us(acc, "multiply", shape,
                                                     operand=shape[0] * shape[1])
    return sum(vec_us(acc, o, shape) for o in ops)


def vector(acc: cm.Accelerator, path: Path = DATA / "vector.csv",
           fitted: frozenset = frozenset()) -> dict:
    """Print vector.csv row by row; return {op: [errors]} (rows whose key is in ``fitted``
    printed, marked, and left out)."""
    errors: dict[str, list[float]] = defaultdict(list)
    print(f"{'op':<13} {'shape':<18} {'ours us':>9} {'meas us':>9} {'error':>8} "
          f"{'meas GB/s':>9}")
    for line, r in _rows(path, ("op", "tokens", "width", "heads", "S", "ms")):
        op = r["op"]
        shape = _vector_shape(path, line, r)
        ours = vector_row_us(acc, r, path, line)
        meas = _ms(path, line, r) * 1e3
        elements = 1
        for s in shape:
            elements *= s
        # compulsory bytes: read and write each element once (two inputs for add / silu_mul)
        moved = elements * 2 * (3 if op in ("residual_add", "silu_mul") else 2)
        err = ours / meas - 1
        mark = " (fitted)" if _vector_key(path, line, r) in fitted else ""
        if not mark:
            errors[op].append(err)
        print(f"{op:<13} {'x'.join(map(str, shape)):<18} {ours:>9.2f} {meas:>9.2f} "
              f"{err:>+8.1%} {moved / meas / 1e3:>9.0f}{mark}")
    return errors


def attention(acc: cm.Accelerator, path: Path = DATA / "attention.csv") -> dict:
    """Print attention.csv row by row; return {kernel dtype: [errors]}."""
    errors: dict[str, list[float]] = defaultdict(list)
    cols = ("kernel", "phase", "dtype", "B", "heads", "kv_heads", "S", "ctx", "head_dim", "ms")
    print(f"{'kernel':<18} {'phase':<8} {'dtype':<5} {'B':>3} {'H':>3} {'S':>5} {'ctx':>5} "
          f"{'D':>4} {'ours us':>9} {'meas us':>9} {'error':>8}")
    for line, r in _rows(path, cols):
        b, h, s, ctx, d = (_int(path, line, r, c) for c in ("B", "heads", "S", "ctx",
                                                             "head_dim"))
        bits = {"bf16": 16, "fp32": 32}.get(r["dtype"])
        if bits is None:
            raise ValueError(f"{path}:{line}: dtype {r['dtype']!r} is not bf16 or fp32")
        kernel = r["kernel"]
        if kernel == "bmm_qk":
            ours = gemm_us(acc, b * h, s, ctx, d, bits)
        elif kernel == "bmm_pv":
            ours = gemm_us(acc, b * h, s, d, ctx, bits)
        elif kernel.startswith("sdpa"):
            kv = _int(path, line, r, "kv_heads")
            if h % kv:
                raise ValueError(f"{path}:{line}: kv_heads {kv} does not divide heads {h}")
            call = cm.AttentionCall(batch=b, heads=h, kv_heads=kv, queries=s, keys=ctx,
                                    head_dim=d, bits=bits, causal=r["phase"] == "prefill")
            ours = cm.charge_attention(call, acc).latency_us
        else:
            raise ValueError(f"{path}:{line}: kernel {kernel!r} is not bmm_qk, bmm_pv or "
                             "sdpa_*")
        meas = _ms(path, line, r) * 1e3
        key = f"{kernel.split('(')[0]} {r['dtype']}"
        errors[key].append(ours / meas - 1)
        print(f"{kernel:<18} {r['phase']:<8} {r['dtype']:<5} {b:>3} {h:>3} {s:>5} {ctx:>5} "
              f"{d:>4} {ours:>9.2f} {meas:>9.2f} {errors[key][-1]:>+8.1%}")
    return errors


def model(acc: cm.Accelerator, path: Path = DATA / "model.csv") -> dict:
    """Print Llama-3-8B bf16 prefill rows of model.csv against tenet_byoc.estimate (the plan
    with fused attention, as the h200 preset runs it: ``Accelerator.attention``)."""
    import tenet_byoc as tb
    from tenet_byoc.quantization.scheme import QuantScheme

    bf16 = QuantScheme("bf16", 16, "none", 16, "none", kv_bits=16)
    errors: dict[str, list[float]] = defaultdict(list)
    cols = ("model", "dtype", "phase", "batch", "tokens_or_context", "kernel_gemm_ms",
            "kernel_attention_ms", "kernel_other_ms")
    for line, r in _rows(path, cols):
        if (r["model"], r["dtype"], r["phase"]) != ("llama-3-8b", "bfloat16", "prefill"):
            continue
        batch, tokens = (_int(path, line, r, c) for c in ("batch", "tokens_or_context"))
        gemm, attn, other = (_ms(path, line, r, c) for c in
                             ("kernel_gemm_ms", "kernel_attention_ms", "kernel_other_ms"))
        ledger = tb.estimate("llama-3-8b", bf16, acc, prompt_len=tokens, decode_steps=0,
                             batch=batch, attention="fused")
        parts: dict[str, float] = defaultdict(float)
        ops: dict[str, float] = defaultdict(float)
        for e in ledger.entries:
            parts[e.unit] += e.latency_us / 1e3
            if e.unit == "vector":
                ops[e.op] += e.latency_us / 1e3
        ours = {"gemm": parts["array"], "attention": parts["attention"],
                "other": parts["vector"]}
        ours["total"] = sum(ours.values())
        meas = {"gemm": gemm, "attention": attn, "other": other, "total": gemm + attn + other}
        print(f"llama-3-8b bf16 prefill batch {batch} x {tokens} tokens (fused attention):")
        for k in ("gemm", "attention", "other", "total"):
            err = ours[k] / meas[k] - 1
            errors[k].append(err)
            print(f"  {k:<10} ours {ours[k]:>9.3f} ms  measured {meas[k]:>9.3f} ms  "
                  f"{err:>+8.1%}")
        print("  ours, other by op (ms): " + ", ".join(
            f"{k} {v:.3f}" for k, v in sorted(ops.items(), key=lambda x: -x[1])))
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true",
                    help="charge on h200.py --calibrate's accelerator (fitted on gemm.csv)")
    ap.add_argument("--only", choices=["vector", "attention", "model"], default=None)
    ap.add_argument("--data", type=Path, default=DATA,
                    help="a folder with vector.csv / attention.csv / model.csv measured the "
                    "same way (e.g. data/h200_holdout): charged with what was fitted on "
                    "data/h200, nothing fitted on it")
    args = ap.parse_args(argv)
    acc = preset("h200")
    fitted: frozenset = frozenset()
    if args.calibrate:
        acc, line = calibrated_vector(DATA / "peaks.csv", read_rows(DATA / "gemm.csv"))
        print(line)
        if args.data.resolve() == DATA.resolve():
            fitted = frozenset(VECTOR_LAUNCH_SUBSET | ROW_SUBSET)
    for name, fn in (("vector", lambda a, p: vector(a, p, fitted=fitted)),
                     ("attention", attention), ("model", model)):
        path = args.data / f"{name}.csv"
        if args.only in (None, name) and (args.only == name or path.exists()):
            print(f"== {path}")
            print(json.dumps({name: summary(fn(acc, path))}))
    return 0


if __name__ == "__main__":
    run_main(main, __file__)
