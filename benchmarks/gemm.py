"""GEMM speed: the tenet-offloaded build against numpy's matmul (and TVM's own build), same data.

Each row times numpy and the tenet build in alternating rounds in one process (as a user
mixes them), so both see the same machine state; the ratio is of the two medians. Each
turn starts once the process's threads are idle, wakes its own threads with an untimed call
and times back-to-back calls (``--back-to-back`` times single calls started at once:
numpy's OpenBLAS workers then spin through the next call and halve it). The
header names the CPU, the ISA oneDNN runs and the int8 path taken. The last table repeats
the small calls with one competing busy process on the machine. Asserts nothing beyond
the results being right. Prints markdown and writes it, with the machine and the load average
before and after, to ``benchmarks/results/gemm.md`` (``--out``).

Run: python benchmarks/gemm.py [--skip-tvm] [--rounds N] [--cpu-time] [--back-to-back]
     [--out FILE]
"""

from __future__ import annotations

# isort: off
# First: it sets OMP_WAIT_POLICY before tvm loads libgomp (see machine.py).
from machine import describe, load_now, wait_idle
# isort: on

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from tenet_byoc.models.mlp import mlp_module, mlp_numpy, random_mlp_params

RESULTS = Path(__file__).parent / "results" / "gemm.md"

# (M, K, N) of GPT-2 small's GEMMs: decode c_attn, prefill attention projection, a 64-token
# prefill's MLP up, a 256-token GPT-2 medium attention projection, prefill MLP up and down,
# and an 8-token lm_head.
SHAPES = [(1, 768, 2304), (128, 768, 768), (64, 768, 3072), (256, 1024, 1024),
          (1024, 768, 3072), (1024, 3072, 768), (8, 768, 50257)]

# Prefill shapes (M >= 64): the geometric mean of their ratios is the figure the README quotes.
MIN_PREFILL_ROWS = 64


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


#: The clock of alternating_medians: wall time, or with --cpu-time the process's CPU time
#: over all its threads (what each kernel costs, whatever share of the cores it was given).
CLOCK: Callable[[], float] = time.perf_counter

#: Whether each timed call waits for the process's threads to go idle first
#: (machine.wait_idle); --back-to-back turns it off to show what a spinning pool costs.
SETTLE = True


def alternating_medians(
    fns: dict[str, Callable[[], object]], rounds: int, min_time: float = 0.5,
    burst: float = 0.02,
) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternating rounds.

    Every round gives each function a turn, in an order that flips from round to round, so
    none of them always runs first after the other's caches or threads. With
    :data:`SETTLE` a turn starts once the process's threads are idle (numpy's OpenBLAS
    workers spin for about 0.1 s after a call and would otherwise hold a core through the
    next contender's), makes one untimed call that wakes the function's own threads (after
    20 ms idle a woken OpenMP worker of this 2-vCPU VM is first queued on the caller's
    core and starts about a millisecond late), then times back-to-back calls for about
    ``burst`` seconds, as a model's GEMMs follow one another, and keeps their mean. Without
    SETTLE a turn is one call, started at once. Times are read from :data:`CLOCK`.
    """
    calls = {}
    for name, fn in fns.items():
        fn()  # warm-up: primitive creation, page faults, thread start
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, round(burst / max(time.perf_counter() - t0, 1e-7)))
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    start = time.perf_counter()
    r = 0
    while r < rounds or time.perf_counter() - start < min_time:
        for name in names if r % 2 == 0 else reversed(names):
            fn, n = fns[name], calls[name] if SETTLE else 1
            if SETTLE:
                wait_idle()
                fn()
            t0 = CLOCK()
            for _ in range(n):
                fn()
            times[name].append((CLOCK() - t0) / n)
        r += 1
        if r >= 20 * rounds:
            break
    return {name: statistics.median(t) for name, t in times.items()}


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """One more process spinning on a core, as a second job on a shared machine."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        yield
    finally:
        proc.kill()
        proc.wait()




def float_case(m: int, k: int, n: int, rng: np.random.Generator):
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((n, k)).astype("float32")
    vm = relax.VirtualMachine(tenet_byoc.build(linear_module(m, k, n)), tvm.cpu())
    tx, tw = tvm.runtime.tensor(x), tvm.runtime.tensor(w)
    np.testing.assert_allclose(vm["main"](tx, tw).numpy(), x @ w.T, rtol=1e-3, atol=1e-3)
    return {"numpy": lambda: x @ w.T, "tenet": lambda: vm["main"](tx, tw)}, (x, w, tx, tw)


def int8_case(m: int, k: int, n: int, rng: np.random.Generator):
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((n, k)).astype("float32")
    # Worst-case operands for saturating kernels: every element at an end of the range.
    xq = rng.choice(np.array([-127, 127], dtype="int8"), (m, k))
    wq = rng.choice(np.array([-128, 127], dtype="int8"), (n, k))
    sa = rng.random((m, 1)).astype("float32")
    sb = rng.random(n).astype("float32")
    vm = relax.VirtualMachine(tenet_byoc.build(int8_linear_module(m, k, n)), tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in (xq, wq, sa, sb)]
    exact = (xq.astype("int64") @ wq.T.astype("int64")).astype("float32") * sa * sb
    np.testing.assert_allclose(vm["main"](*args).numpy(), exact, rtol=1e-6)
    return {"numpy f32": lambda: x @ w.T, "tenet int8": lambda: vm["main"](*args)}


def mlp_case():
    params = random_mlp_params()
    x = np.random.default_rng(1).random((1, 784)).astype("float32")
    vm = relax.VirtualMachine(tenet_byoc.build(mlp_module(params)), tvm.cpu())
    tx = tvm.runtime.tensor(x)
    np.testing.assert_allclose(vm["main"](tx).numpy(), mlp_numpy(x, params), rtol=1e-4,
                               atol=1e-4)
    return {"numpy": lambda: mlp_numpy(x, params), "tenet": lambda: vm["main"](tx)}


def summary(label: str, ratios: list[float]) -> str:
    """The geometric mean of all ratios, and of the prefill shapes' with their lowest."""
    prefill = [r for (m, _, _), r in zip(SHAPES, ratios) if m >= MIN_PREFILL_ROWS]
    return (f"\ngeometric mean {label}: all shapes {statistics.geometric_mean(ratios):.2f}x; "
            f"prefill shapes (M >= {MIN_PREFILL_ROWS}) {statistics.geometric_mean(prefill):.2f}x, "
            f"lowest {min(prefill):.2f}x\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-tvm", action="store_true", help="skip TVM's own (slow) build")
    parser.add_argument("--rounds", type=int, default=30, help="alternating rounds per row")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time calls in process CPU time over all threads, not wall time "
                             "(kernels compared on a shared machine; GFLOP/s are then per "
                             "CPU second)")
    parser.add_argument("--back-to-back", action="store_true",
                        help="start each timed call at once, not after the process's threads "
                             "are idle (shows what numpy's spinning OpenBLAS workers cost the "
                             "call after them)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown file to write")
    args = parser.parse_args()
    global CLOCK, SETTLE
    if args.cpu_time:
        CLOCK = time.process_time
    SETTLE = not args.back_to_back
    rng = np.random.default_rng(0)
    machine = describe()
    lines: list[str] = []

    def emit(text: str = "") -> None:
        # Every line printed also goes to the results file.
        lines.append(text)
        print(text, flush=True)

    emit("# GEMM kernels against numpy\n")
    emit(f"Measured {machine.line()}; OMP_WAIT_POLICY={tenet_byoc.cpu_info().omp_wait_policy}. "
          "Ratios are of medians over alternating rounds in one process"
          f"{', timed in process CPU time over all threads (--cpu-time)' if args.cpu_time else ''}"
          + ("; each call started back to back (--back-to-back), so a call may share the "
             "cores with the previous contender's still-spinning threads" if args.back_to_back
             else "; each turn started once the process's threads were idle, woke its own "
                "threads with one untimed call, then timed back-to-back calls for about 20 ms")
          + ". Produced by `benchmarks/gemm.py`.\n")

    emit("float32 GEMM, x @ W^T, alternating rounds in one process:\n")
    emit("| M x K x N | numpy GFLOP/s | tenet GFLOP/s | tenet / numpy | TVM GFLOP/s | tenet / TVM |")
    emit("|---|---:|---:|---:|---:|---:|")
    ratios = []
    for m, k, n in SHAPES:
        fns, (_, _, tx, tw) = float_case(m, k, n, rng)
        t = alternating_medians(fns, args.rounds)
        flop = 2.0 * m * k * n
        ratios.append(t["numpy"] / t["tenet"])
        tvm_cols = "skipped | -"
        if not args.skip_tvm:
            ref = relax.VirtualMachine(
                tenet_byoc.build(linear_module(m, k, n), offload=False), tvm.cpu())
            t0 = time.perf_counter()
            ref["main"](tx, tw)
            t_tvm = time.perf_counter() - t0
            tvm_cols = f"{flop / t_tvm / 1e9:.2f} | {t_tvm / t['tenet']:.0f}x"
        emit(f"| {m} x {k} x {n} | {flop / t['numpy'] / 1e9:.1f} "
              f"| {flop / t['tenet'] / 1e9:.1f} | {ratios[-1]:.2f}x | {tvm_cols} |")
    emit(summary("tenet / numpy", ratios))

    emit(f"int8 GEMM (int32 sums, per-token x per-channel dequantization; path "
          f"{machine.int8_path}), worst-case operands, against numpy float32 on the same shape:\n")
    emit("| M x K x N | numpy f32 GFLOP/s | tenet int8 GOP/s | int8 / numpy f32 |")
    emit("|---|---:|---:|---:|")
    ratios = []
    for m, k, n in SHAPES:
        t = alternating_medians(int8_case(m, k, n, rng), args.rounds)
        flop = 2.0 * m * k * n
        ratios.append(t["numpy f32"] / t["tenet int8"])
        emit(f"| {m} x {k} x {n} | {flop / t['numpy f32'] / 1e9:.1f} "
              f"| {flop / t['tenet int8'] / 1e9:.1f} | {ratios[-1]:.2f}x |")
    emit(summary("int8 / numpy f32", ratios))

    emit("Small calls, quiet and with one competing busy process (microseconds per call):\n")
    emit("| call | setting | numpy us | tenet us | tenet / numpy time |")
    emit("|---|---|---:|---:|---:|")
    small = {
        "MLP 784-128-10, one image": mlp_case,
        "GEMM 1 x 768 x 2304": lambda: float_case(1, 768, 2304, rng)[0],
        "GEMM 128 x 768 x 768": lambda: float_case(128, 768, 768, rng)[0],
    }
    for label, make in small.items():
        fns = make()
        for setting in ("quiet", "one busy process"):
            ctx = busy_process() if setting != "quiet" else contextlib.nullcontext()
            with ctx:
                t = alternating_medians(fns, args.rounds)
            t_np, t_tenet = (t[name] for name in fns)
            emit(f"| {label} | {setting} | {t_np * 1e6:.1f} | {t_tenet * 1e6:.1f} "
                  f"| {t_tenet / t_np:.2f}x |")
    after = load_now()
    emit(f"\nLoad average after the run: {'/'.join(f'{x:.1f}' for x in after)}.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
