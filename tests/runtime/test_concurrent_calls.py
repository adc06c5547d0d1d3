"""Threads calling one executable at once: every output equals a lone thread's, the ledger exact.

Rows above the few-row path (16 and 64) run oneDNN's matmul primitive, cached once per shape
and shared by every VM of the executable; before each call gave it a scratchpad of its own,
two threads running it at once wrote into one scratchpad (wrong outputs, crashes in brgemm).
The run happens in a subprocess, so a crash fails the test instead of ending pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    from collections import Counter
    import numpy as np, tvm
    from tvm import relax
    import tenet_byoc
    from tenet_byoc.models.mlp import mlp_module, mlp_numpy, random_mlp_params

    params = random_mlp_params()
    ex = tenet_byoc.build(mlp_module(params), accelerator="os16")
    rng = np.random.default_rng(0)
    # 16 rows: one-thread primitive; 64 rows: a two-thread one (over 2^22 MACs); 3: few-row path
    inputs = [rng.standard_normal((rows, 784)).astype("float32") for rows in (16, 64, 3, 64, 16)]

    def key(e):
        # a vector entry has no batch or MACs (typed entries): None in the key
        return (e.symbol, e.name, e.unit, e.op, getattr(e, "batch", None), e.m, e.n, e.k,
                e.cycles, getattr(e, "macs", None))

    # One thread alone: each input's output and ledger entries.
    lone = relax.VirtualMachine(ex, tvm.cpu())
    want, charged = [], []
    for x in inputs:
        tenet_byoc.ledger(ex).reset()
        want.append(lone["main"](tvm.runtime.tensor(x)).numpy())
        charged.append(Counter(key(e) for e in tenet_byoc.ledger(ex)))
    numpy_error = max(float(np.abs(y - mlp_numpy(x, params)).max() / np.abs(y).max())
                      for x, y in zip(inputs, want))
    tenet_byoc.ledger(ex).reset()

    differ, errors, calls = [0], [], Counter()
    lock = threading.Lock()

    def work(call, t, runs, start):
        try:
            start.wait()
            for i in range(runs):
                j = (t + i) % len(inputs)
                y = call(tvm.runtime.tensor(inputs[j])).numpy()
                with lock:
                    calls[j] += 1
                    differ[0] += int(not np.array_equal(y, want[j]))
        except BaseException as err:
            errors.append(repr(err))

    def run_all(callers, runs):
        start = threading.Barrier(len(callers))
        threads = [threading.Thread(target=work, args=(c, t, runs, start))
                   for t, c in enumerate(callers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    runs = int(sys.argv[1])
    # Two threads, each with its own relax.VirtualMachine on the one executable ...
    run_all([relax.VirtualMachine(ex, tvm.cpu())["main"] for _ in range(2)], runs)
    # ... and four sharing one tenet_byoc.VirtualMachine (its calls serialized) beside two
    # more with their own VMs, all at once.
    shared = tenet_byoc.VirtualMachine(ex, tvm.cpu())
    own = [relax.VirtualMachine(ex, tvm.cpu())["main"] for _ in range(2)]
    run_all([shared["main"]] * 4 + own, runs // 4)
    want_ledger = Counter()
    for j, n in calls.items():
        for k, v in charged[j].items():
            want_ledger[k] += n * v
    book = tenet_byoc.ledger(ex)
    print(json.dumps({
        "calls": sum(calls.values()), "differ": differ[0], "errors": errors,
        "numpy_error": numpy_error,
        "ledger_exact": Counter(key(e) for e in book) == want_ledger,
        "call_indices": sorted({e.call_index for e in book}) == list(range(sum(calls.values()))),
    }))
    """
)


def run(runs: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(runs)], capture_output=True,
                          text=True, timeout=600, check=False,
                          cwd=Path(__file__).resolve().parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_threads_on_one_executable_match_one_thread_and_charge_exactly():
    runs = 400
    got = run(runs)
    assert got["errors"] == []
    assert got["calls"] == 2 * runs + 6 * (runs // 4)
    assert got["numpy_error"] < 1e-5  # the lone thread's outputs are the MLP's
    assert got["differ"] == 0
    assert got["ledger_exact"] and got["call_indices"]
