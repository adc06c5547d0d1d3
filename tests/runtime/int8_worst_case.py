"""Worst-case int8 GEMMs through the tenet runtime, checked against numpy's int64 sums.

Imported by test_int8_exact.py, and run as a script in a subprocess whose oneDNN is held to
a lower ISA (``ONEDNN_MAX_CPU_ISA``), so a VNNI machine also checks the saturating path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tenet_byoc
from relax_testing import matmul_module, run
from tenet_byoc.quantization import quantize

# Every kernel's row range and its edges: oneDNN's few-row (<= 4) and matmul kernels; without
# VNNI the int16 kernel's tiles of 6 rows.
ROWS = (1, 3, 4, 5, 16, 17, 64)
# K: below a K block, past one (with a tail that is not a multiple of 16), two blocks.
KS = (255, 1100, 4096)
N = 40
# A wide weight: several column blocks of the int16 kernel, with a tail.
WIDE = (17, 2100, 1100)

# The int16 kernel's edges (int8_gemm.cc): row tiles of 6 and tasks of up to 96 rows (97:
# 54 + 43); weight rows in pairs and in blocks of up to 256 (257: 130 + 127 on two threads);
# K in steps of 16 and blocks of up to 2048 (4100: 1376, 1376, 1348, the last with a tail of 4;
# 16385: eight of 1824 and 1793, sums up to 2^28 at -128 x -128).
KERNEL_ROWS = (1, 5, 6, 7, 17, 33, 63, 65, 97, 100)
KERNEL_WEIGHTS = ((1, 3), (15, 33), (16, 2), (17, 31), (33, 257), (2065, 7), (4100, 40),
                  (16385, 9))


def int8_accumulator_module(wq: np.ndarray) -> tvm.IRModule:
    """main(xq[m, K] int8) = float(xq @ wq^T) with unit scales: the int32 sums themselves."""
    k = wq.shape[1]
    xq = relax.Var("xq", relax.TensorType((tvm.tirx.Var("m", "int64"), k), "int8"))
    one = relax.const(np.float32(1.0))
    bb = relax.BlockBuilder()
    with bb.function("main", [xq]):
        with bb.dataflow():
            acc = bb.emit(
                relax.op.matmul(xq, bb.emit(relax.op.permute_dims(relax.const(wq))),
                                out_dtype="int32")
            )
            y = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(acc, "float32")), one))
            out = bb.emit_output(relax.op.multiply(y, one))
        bb.emit_func_output(out)
    return bb.get()


def extreme(rng: np.random.Generator, shape, values=(-128, 127)) -> np.ndarray:
    """Every element at an end of the int8 range: what saturates 16-bit pair sums."""
    return rng.choice(np.array(values, dtype="int8"), size=shape)


def accumulator_mismatches(seed: int = 0) -> list[str]:
    """Run every (K, rows, value set) case; return a line per case that is not exact."""
    rng = np.random.default_rng(seed)
    bad = []
    for k in KS:
        for values in ((-127, 127), (-128, 127)):
            wq = extreme(rng, (N, k), values)
            vm = relax.VirtualMachine(tenet_byoc.build(int8_accumulator_module(wq)), tvm.cpu())
            for m in ROWS:
                x = extreme(rng, (m, k), values)
                got = vm["main"](tvm.runtime.tensor(x)).numpy()
                want = x.astype("int64") @ wq.T.astype("int64")
                # Random signs keep every sum within float32's exact integers (|sum| < 2^24),
                # so comparing the float32 output is comparing the int32 sums exactly.
                assert np.abs(want).max() < 2**24, "test case leaves float32's exact range"
                if not np.array_equal(got.astype("int64"), want):
                    wrong = int(np.count_nonzero(got.astype("int64") != want))
                    bad.append(f"K={k} rows={m} values={values}: {wrong} of {got.size} wrong, "
                               f"max diff {np.abs(got - want).max():.0f}")
    m, n, k = WIDE
    cases = {f"wide weight {WIDE}": (extreme(rng, (m, k), (-128, 127)),
                                     extreme(rng, (n, k), (-128, 127)))}
    # Sums as large as float32 holds exactly (1024 x 127 x 127 < 2^24), and, at K = 4096, sums
    # that climb to 2^25 and come back to 0: an accumulation that rounds does not return.
    for rows in (4, 64):
        same = np.full((rows, 1024), 127, "int8")
        cases[f"same signs, rows={rows}"] = (same, np.full((3, 1024), 127, "int8"))
        climb = np.full((rows, 4096), 127, "int8")
        w = np.concatenate([np.full((3, 2048), 127, "int8"), np.full((3, 2048), -127, "int8")], 1)
        cases[f"climb and cancel, rows={rows}"] = (climb, w)
    for label, (x, wq) in cases.items():
        vm = relax.VirtualMachine(tenet_byoc.build(int8_accumulator_module(wq)), tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x)).numpy().astype("int64")
        want = x.astype("int64") @ wq.T.astype("int64")
        assert np.abs(want).max() <= 2**24
        if not np.array_equal(got, want):
            bad.append(f"{label}: max diff {np.abs(got - want).max()}")
    return bad


def kernel_mismatches(seed: int = 0) -> list[str]:
    """Every edge of the int16 kernel on three kinds of operands, against numpy's int64 sums.

    The module returns float32(sum), so a case is compared as float32(numpy's sum). That is
    exact for the random operands (every |sum| < 2^24, asserted). For the extreme ones
    (every element -128, or each -128 or 127) every product is 16129 or more in magnitude,
    more than float32's spacing below 2^37, so a product lost, repeated or saturated changes
    the float32 result; -128 x -128 pairs (2^15, which int16 cannot hold) are in both.
    """
    rng = np.random.default_rng(seed)
    kinds = {
        "all -128": lambda shape: np.full(shape, -128, "int8"),
        "-128 or 127": lambda shape: extreme(rng, shape, (-128, 127)),
        "random": lambda shape: rng.integers(-128, 128, size=shape, dtype="int8"),
    }
    bad = []
    for k, n in KERNEL_WEIGHTS:
        for kind, make in kinds.items():
            wq = make((n, k))
            vm = relax.VirtualMachine(tenet_byoc.build(int8_accumulator_module(wq)), tvm.cpu())
            for m in KERNEL_ROWS:
                x = make((m, k))
                want = x.astype("int64") @ wq.T.astype("int64")
                if kind == "random":
                    assert np.abs(want).max() < 2**24, "random case leaves float32's exact range"
                got = vm["main"](tvm.runtime.tensor(x)).numpy()
                if not np.array_equal(got, want.astype("float32")):
                    wrong = int(np.count_nonzero(got != want.astype("float32")))
                    bad.append(f"K={k} N={n} rows={m} {kind}: {wrong} of {got.size} wrong")
    return bad


def scheme_mismatches(seed: int = 0) -> list[str]:
    """w8a8 schemes on a layer whose every quantized element lands on +-127, vs TVM's build.

    The last layer adds a bias and a relu (both exact in float32, so the outputs still match
    bit for bit) over 300 columns: the int16 kernel's column blocks, each dequantized with
    its own slice of the per-channel scales and of the bias.
    """
    rng = np.random.default_rng(seed)
    bad = []
    for scheme in ("w8a8_per_tensor", "w8a8_per_channel_per_token"):
        for m, k, n, tail in ((2, 1536, N, None), (33, 768, N, None), (65, 1030, 300, "relu")):
            w = np.where(rng.random((n, k)) < 0.5, -1.0, 1.0).astype("float32")
            params = {"w": w}
            if tail:
                params["b"] = rng.standard_normal(n).astype("float32")
            mod = relax.transform.BindParams("main", params)(
                matmul_module((m, k), (n, k), transposed=True, bias=bool(tail), activation=tail))
            qmod = quantize(mod, scheme)
            x = np.where(rng.random((m, k)) < 0.5, -2.0, 2.0).astype("float32")
            got = run(tenet_byoc.build(qmod), x)
            want = run(tenet_byoc.build(qmod, offload=False), x)
            if not np.array_equal(got, want):
                bad.append(f"{scheme} m={m} k={k} n={n}: max diff {np.abs(got - want).max()}")
    return bad


if __name__ == "__main__":
    info = tenet_byoc.cpu_info()
    print(json.dumps({"cpu_info": info.__dict__,
                      "mismatches": accumulator_mismatches() + kernel_mismatches()
                      + scheme_mismatches()}))
