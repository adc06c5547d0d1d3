"""Several threads charging one runtime module: no entry lost, duplicated or corrupted."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import tvm
from ledger_testing import mlp_executable
from tvm import relax

import tenet_byoc

THREADS, RUNS = 4, 100


def test_four_threads_hundred_runs_each():
    _, ex = mlp_executable()
    x = tvm.runtime.tensor(np.ones((2, 784), "float32"))
    one = relax.VirtualMachine(ex, tvm.cpu())
    want_out = one["main"](x).numpy()
    single = tenet_byoc.ledger(one)
    tenet_byoc.ledger(one).reset()
    # A Relax VM keeps its registers and program counter in the VM object, so each thread
    # gets its own VM; all of them share the executable's one tenet runtime module.
    vms = [relax.VirtualMachine(ex, tvm.cpu()) for _ in range(THREADS)]
    errors: list[BaseException] = []
    mismatches = []
    start = threading.Barrier(THREADS)

    def work(vm):
        try:
            start.wait()
            for _ in range(RUNS):
                out = vm["main"](x).numpy()
                if not np.array_equal(out, want_out):
                    mismatches.append(out)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(vm,)) for vm in vms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not mismatches
    book = tenet_byoc.ledger(one)
    n = THREADS * RUNS
    assert len(book) == n * len(single)
    assert len({e.call_index for e in book}) == n  # one call index per call, none reused
    assert sorted({e.call_index for e in book}) == list(range(n))
    per_step = Counter((e.symbol, e.name, e.batch, e.m, e.n, e.k, e.cycles) for e in book)
    assert per_step == Counter(
        {(e.symbol, e.name, e.batch, e.m, e.n, e.k, e.cycles): n for e in single}
    )
    assert book.totals().macs == n * single.totals().macs
