"""Several threads charging one runtime module: no entry lost, duplicated or corrupted."""

from __future__ import annotations

import json
import threading
from collections import Counter

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import mlp_executable
from tenet_byoc.ledger import tenet_modules
from tenet_byoc.models.gemms import gpt2_matmuls
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params

THREADS, RUNS = 4, 100



def _batch(e) -> int:
    """A GEMM entry's batch; a vector entry has none (one call of its rows)."""
    return getattr(e, "batch", 1)


def test_four_threads_hundred_runs_each():
    _, ex = mlp_executable()
    x = tvm.runtime.tensor(np.ones((2, 784), "float32"))
    one = relax.VirtualMachine(ex, tvm.cpu())
    want_out = one["main"](x).numpy()
    single = tenet_byoc.ledger(one)
    tenet_byoc.ledger(one).reset()
    # A Relax VM keeps its registers, frames and program counter in the VM object, so each
    # thread gets its own VM; all of them share the executable's one tenet runtime module.
    # tvm-ffi releases the GIL during calls, so the threads do run the module concurrently.
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
    per_step = Counter((e.symbol, e.name, _batch(e), e.m, e.n, e.k, e.cycles) for e in book)
    assert per_step == Counter(
        {(e.symbol, e.name, _batch(e), e.m, e.n, e.k, e.cycles): n for e in single}
    )
    assert book.totals().macs == n * single.totals().macs


def test_threads_charging_new_shapes_at_once():
    """Concurrent first calls of new shapes: cost-cache misses race, entries stay exact."""
    config = GPT2Config.preset("tiny")
    runner = GPT2Runner(config, random_params(config), build=tenet_byoc.build)
    ex = runner.executable
    weights = [tvm.runtime.tensor(v) for v in random_params(config).values()]
    lengths = [3, 5, 7, 9]
    runs = 10
    errors: list[BaseException] = []
    start = threading.Barrier(len(lengths))

    def work(seq_len):
        try:
            vm = relax.VirtualMachine(ex, tvm.cpu())
            ids = tvm.runtime.tensor(np.arange(seq_len, dtype="int32").reshape(1, seq_len))
            start.wait()
            for _ in range(runs):
                vm["prefill"](ids, *weights)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(p,)) for p in lengths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    book = tenet_byoc.ledger(ex)
    want = Counter()
    for p in lengths:
        for s in gpt2_matmuls(config, p):
            want[(s.batch, s.m, s.n, s.k)] += runs
    assert Counter((e.batch, e.m, e.n, e.k) for e in book if e.unit == "array") == want
    # Every entry of one shape carries the same cost, whichever thread computed it first.
    cycles: dict[tuple, set] = {}
    for e in book:
        cycles.setdefault((e.unit, e.op, _batch(e), e.m, e.n, e.k), set()).add(
            (e.cycles, e.offchip_bytes))
    assert all(len(v) == 1 for v in cycles.values())


def test_profile_reports_only_its_own_thread_while_others_run():
    """vm.profile beside threads calling the same library: each report holds exactly one
    call's entries (those of a lone run), never another thread's."""
    _, ex = mlp_executable()
    x = tvm.runtime.tensor(np.ones((2, 784), "float32"))
    lone = relax.VirtualMachine(ex, tvm.cpu())
    tenet_byoc.ledger(lone).reset()
    lone["main"](x)
    one_call = sorted((e.symbol, e.name, _batch(e), e.m, e.n, e.k) for e in tenet_byoc.ledger(lone))
    stop = threading.Event()
    errors: list[BaseException] = []

    def hammer():
        vm = relax.VirtualMachine(ex, tvm.cpu())
        y = tvm.runtime.tensor(np.ones((5, 784), "float32"))  # other shapes: other m
        try:
            while not stop.is_set():
                vm["main"](y)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        vm = tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)
        for _ in range(10):
            report = vm.profile("main", x, warmup=0)
            got = sorted((e.symbol, e.name, _batch(e), e.m, e.n, e.k)
                         for e in report.sum_row().entries)
            assert got == one_call
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert len(tenet_byoc.ledger(ex)) > 10 * len(one_call)  # the others did charge meanwhile


def test_profile_capture_does_not_grow_with_the_ledger():
    """What vm.profile reads back is the calling thread's capture: the same text whether the
    ledger holds one call or thousands, so its cost cannot grow with the ledger."""
    _, ex = mlp_executable()
    x = tvm.runtime.tensor(np.ones((2, 784), "float32"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    (module,) = tenet_modules(vm)
    tenet_byoc.ledger(vm).reset()

    def captured() -> str:
        module["__tenet_capture_begin"]()
        vm["main"](x)
        return module["__tenet_capture_end"]()

    first = captured()
    for _ in range(2000):
        vm["main"](x)
    assert len(tenet_byoc.ledger(vm)) > 2000
    later = captured()
    # Call indices differ; everything else (functions, costs, entries' shapes) is equal.
    assert json.loads(first)["charges"] == json.loads(later)["charges"]
    strip = [[{k: v for k, v in e.items() if k != "call_index"}
              for e in json.loads(text)["entries"]] for text in (first, later)]
    # two GEMMs and three fused epilogues (bias + ReLU, bias)
    assert strip[0] == strip[1] and len(strip[0]) == 5
