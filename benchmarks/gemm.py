"""GEMM speed: the tenet-offloaded build against numpy's matmul and TVM's own build, same data.

Prints a markdown table; asserts nothing. Run: python benchmarks/gemm.py [--skip-tvm]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import tvm
from tvm import relax

import tenet_byoc

# (M, K, N) of GPT-2 small's GEMMs: decode c_attn, prefill attention projection, prefill MLP
# up and down, and an 8-token lm_head.
SHAPES = [(1, 768, 2304), (128, 768, 768), (1024, 768, 3072), (1024, 3072, 768), (8, 768, 50257)]


def linear_module(m: int, k: int, n: int) -> tvm.IRModule:
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    w = relax.Var("w", relax.TensorType((n, k), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w))))
        bb.emit_func_output(y)
    return bb.get()


def int8_linear_module(m: int, k: int, n: int) -> tvm.IRModule:
    """``(float(xq @ wq^T) * sa) * sb``: the int8 GEMM of the w8a8 schemes, offloaded whole."""
    xq = relax.Var("xq", relax.TensorType((m, k), "int8"))
    wq = relax.Var("wq", relax.TensorType((n, k), "int8"))
    sa = relax.Var("sa", relax.TensorType((m, 1), "float32"))
    sb = relax.Var("sb", relax.TensorType((n,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [xq, wq, sa, sb]):
        with bb.dataflow():
            acc = bb.emit(relax.op.matmul(xq, bb.emit(relax.op.permute_dims(wq)), "int32"))
            y = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(acc, "float32")), sa))
            out = bb.emit_output(relax.op.multiply(y, sb))
        bb.emit_func_output(out)
    return bb.get()


def median_seconds(fn, min_time: float = 1.0, max_reps: int = 200) -> float:
    fn()  # warm-up: primitive creation, page faults
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time or len(times) < 3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-tvm", action="store_true", help="skip TVM's own (slow) build")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    dev = tvm.cpu()
    print("| M x K x N | numpy GFLOP/s | tenet GFLOP/s | tenet / numpy | TVM GFLOP/s | tenet / TVM |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k)).astype("float32")
        w = rng.standard_normal((n, k)).astype("float32")
        flop = 2.0 * m * k * n
        mod = linear_module(m, k, n)
        vm = relax.VirtualMachine(tenet_byoc.build(mod), dev)
        tx, tw = tvm.runtime.tensor(x), tvm.runtime.tensor(w)
        np.testing.assert_allclose(vm["main"](tx, tw).numpy(), x @ w.T, rtol=1e-3, atol=1e-3)
        t_np = median_seconds(lambda x=x, w=w: x @ w.T)
        t_tenet = median_seconds(lambda vm=vm, tx=tx, tw=tw: vm["main"](tx, tw))
        ratios.append(t_np / t_tenet)
        tvm_cols = "skipped | -"
        if not args.skip_tvm:
            ref = relax.VirtualMachine(tenet_byoc.build(mod, offload=False), dev)
            t_tvm = median_seconds(
                lambda ref=ref, tx=tx, tw=tw: ref["main"](tx, tw), min_time=0.0, max_reps=1
            )
            tvm_cols = f"{flop / t_tvm / 1e9:.2f} | {t_tvm / t_tenet:.0f}x"
        print(
            f"| {m} x {k} x {n} | {flop / t_np / 1e9:.1f} | {flop / t_tenet / 1e9:.1f} "
            f"| {t_np / t_tenet:.2f}x | {tvm_cols} |",
            flush=True,
        )
    print(f"\ngeometric mean tenet / numpy throughput: {statistics.geometric_mean(ratios):.2f}x")

    print("\nint8 GEMM (int32 accumulation, per-token x per-channel dequantization), same shapes:")
    print("| M x K x N | numpy f32 GOP/s | tenet int8 GOP/s | int8 / numpy f32 |")
    print("|---|---|---|---|")
    ratios = []
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k)).astype("float32")
        w = rng.standard_normal((n, k)).astype("float32")
        xq = rng.integers(-127, 128, (m, k)).astype("int8")
        wq = rng.integers(-127, 128, (n, k)).astype("int8")
        sa = rng.random((m, 1)).astype("float32")
        sb = rng.random(n).astype("float32")
        vm = relax.VirtualMachine(tenet_byoc.build(int8_linear_module(m, k, n)), dev)
        args = [tvm.runtime.tensor(a) for a in (xq, wq, sa, sb)]
        expected = (xq.astype("int64") @ wq.T.astype("int64")).astype("float32") * sa * sb
        np.testing.assert_allclose(vm["main"](*args).numpy(), expected, rtol=1e-5)
        flop = 2.0 * m * k * n
        t_np = median_seconds(lambda x=x, w=w: x @ w.T)
        t_int8 = median_seconds(lambda vm=vm, args=args: vm["main"](*args))
        ratios.append(t_np / t_int8)
        print(f"| {m} x {k} x {n} | {flop / t_np / 1e9:.1f} | {flop / t_int8 / 1e9:.1f} "
              f"| {t_np / t_int8:.2f}x |", flush=True)
    print(f"\ngeometric mean int8 / numpy f32 throughput: {statistics.geometric_mean(ratios):.2f}x")


if __name__ == "__main__":
    main()
