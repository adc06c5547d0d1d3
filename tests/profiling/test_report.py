"""vm.profile reports against the ledger and the call counts the VM really made."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import mlp_executable
from tenet_byoc.ledger import step_cycles
from tenet_byoc.models.gpt2 import GPT2Config, export_gpt2, random_params
from tenet_byoc.profiling import COLUMNS, COMPACT_COLUMNS


@pytest.fixture(scope="module")
def mlp():
    _, ex = mlp_executable()
    return ex


class _CallCounter:
    """A Python instrument: the reference count of each callee the VM calls."""

    def __init__(self):
        self.counts: Counter = Counter()

    def __call__(self, func, symbol, before, ret, *args):
        if before:
            self.counts[str(symbol)] += 1
        return 0


def _reference_counts(ex, func_name, *args) -> Counter:
    vm = relax.VirtualMachine(ex, tvm.cpu())
    counter = _CallCounter()
    vm.set_instrument(counter)
    vm[func_name](*args)
    return counter.counts


def test_seed_code_runs_unchanged(mlp):
    # The seeds' code, with only the import changed from tvm.relax to tenet_byoc.
    from tenet_byoc import VirtualMachine

    vm = VirtualMachine(mlp, tvm.cpu(), profile=True)
    data = tvm.runtime.tensor(np.ones((1, 784), "float32"))
    report = vm.profile("main", data)
    text = str(report)
    assert text.splitlines()[0].split("  ")[0].strip() == "Name"
    for column in COMPACT_COLUMNS:
        assert column in text
    full = report.table(full=True)
    for column in COLUMNS:
        assert column in full
    assert "Sum" in text and "Total" in text and "Configuration" in text
    assert "os16" in text


def test_rows_agree_with_ledger_and_call_counts(mlp):
    x = tvm.runtime.tensor(np.ones((2, 784), "float32"))
    vm = tenet_byoc.VirtualMachine(mlp, tvm.cpu(), profile=True)
    tenet_byoc.ledger(vm).reset()
    report = vm.profile("main", x, warmup=1)
    book = tenet_byoc.ledger(vm)
    assert len(book) == 2 * len(report.sum_row().entries)  # warmup + timed run both charged
    timed = book.entries[len(book) // 2:]
    # Counts per callee equal what a plain Python instrument counts in one run.
    want = _reference_counts(mlp, "main", x)
    got = Counter()
    for row in report.rows(aggregate=True):
        got[row.name] += row.count
    assert got == want
    # Tenet rows carry exactly the ledger's figures for their symbol.
    tenet_rows = [r for r in report.rows() if r.is_tenet]
    assert {r.name for r in tenet_rows} == {e.symbol for e in timed}
    for row in tenet_rows:
        mine = [e for e in timed if e.symbol == row.name]
        assert row.cost.macs == sum(e.macs for e in mine if e.unit == "array")
        assert row.cost.cycles == step_cycles(mine)  # fused epilogues hidden (pipelined)
        assert row.cost.offchip_bytes == sum(e.offchip_bytes for e in mine)
        assert row.cost.latency_us == pytest.approx(
            sum(e.latency_us for e in mine) * step_cycles(mine) / sum(e.cycles for e in mine))
        v = row.values()
        assert v["Roofline cycles"] == sum(e.roofline_cycles for e in mine)
        assert v["x Roofline"] == pytest.approx(
            step_cycles(mine) / sum(e.roofline_cycles for e in mine))
        assert v["x Roofline"] >= 1
        assert v["DRAM bytes"] == sum(e.dram_read_bytes + e.dram_write_bytes for e in mine)
        assert v["Energy (uJ)"] == pytest.approx(sum(e.energy_pj for e in mine) / 1e6)
    total = report.sum_row()
    assert total.cost.macs == sum(e.macs for e in timed if e.unit == "array") == 2 * (128 * 784 + 10 * 128)
    # Percentages of the top-level calls sum to 100; durations are positive.
    assert sum(r.percent for r in report.calls if r.depth == 0) == pytest.approx(100.0)
    assert all(r.duration_us > 0 for r in report.calls)
    assert total.duration_us <= report.wall_us


def test_csv_and_json_parse_back(mlp):
    vm = tenet_byoc.VirtualMachine(mlp, tvm.cpu(), profile=True)
    report = vm.profile("main", tvm.runtime.tensor(np.ones((3, 784), "float32")))
    rows = list(csv.DictReader(io.StringIO(report.csv())))
    agg = report.rows(aggregate=True)
    assert [r["Name"] for r in rows] == [r.name for r in agg]
    assert [int(r["Count"]) for r in rows] == [r.count for r in agg]
    for r, row in zip(rows, agg, strict=True):
        assert float(r["Duration (us)"]) == pytest.approx(row.duration_us)
        assert (int(r["MACs"]) == row.cost.macs) if row.is_tenet else r["MACs"] == ""
    doc = json.loads(report.json())
    assert doc["function"] == "main"
    assert len(doc["calls"]) == len(report.calls)
    assert [c["Name"] for c in doc["calls"]] == [r.name for r in report.calls]
    assert sum(c["MACs"] or 0 for c in doc["calls"]) == report.sum_row().cost.macs
    per_call = report.table(aggregate=False)
    assert len(per_call.splitlines()) > len(report.table(aggregate=True).splitlines()) - 1


def test_profile_false_is_a_plain_vm(mlp):
    x = np.random.default_rng(0).standard_normal((2, 784)).astype("float32")
    plain = relax.VirtualMachine(mlp, tvm.cpu())
    ours = tenet_byoc.VirtualMachine(mlp, tvm.cpu())
    assert isinstance(ours, relax.VirtualMachine)
    np.testing.assert_array_equal(ours["main"](tvm.runtime.tensor(x)).numpy(),
                                  plain["main"](tvm.runtime.tensor(x)).numpy())


def test_gpt2_prefill_report_has_every_offloaded_call():
    config = GPT2Config.preset("tiny")
    params = random_params(config)
    ex = tenet_byoc.build(export_gpt2(config))
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)
    ids = tvm.runtime.tensor(np.arange(5, dtype="int32").reshape(1, 5))
    weights = [tvm.runtime.tensor(v) for v in params.values()]
    report = vm.profile("prefill", ids, *weights)
    assert report.sum_row().cost.macs == sum(
        e.macs for r in report.calls for e in r.entries if e.unit == "array")
    tenet_calls = [r for r in report.calls if any(e.unit == "array" for e in r.entries)]
    assert len(tenet_calls) == 6 * config.n_layer + 1
    # and the function's one charge call of the operators TVM ran
    assert [r.name for r in report.calls if r.is_tenet and r not in tenet_calls] == [
        "tenet_vector.prefill"]
    assert [r for r in report.calls if r.name.endswith("_tenet") and not r.is_tenet] == []


def _two_layer_calls_module() -> tvm.IRModule:
    """``forward(x, w) = layer(x, w) + layer(x, w)`` with ``layer = relu(x @ w)``, a Relax
    function the VM calls as a closure (not named main: see partition_for_tenet)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 16), "float32"))
    w = relax.Var("w", relax.TensorType((16, 8), "float32"))
    with bb.function("layer", [x, w], private=False):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(relax.op.matmul(x, w)))
        bb.emit_func_output(y)
    layer = bb.get().get_global_var("layer")
    x = relax.Var("x", relax.TensorType((4, 16), "float32"))
    w = relax.Var("w", relax.TensorType((16, 8), "float32"))
    with bb.function("forward", [x, w]):
        with bb.dataflow():
            a = bb.emit(relax.Call(layer, [x, w]))
            b = bb.emit(relax.Call(layer, [x, w]))
            out = bb.emit_output(relax.op.add(a, b))
        bb.emit_func_output(out)
    return bb.get()


def test_nested_calls_are_inside_their_caller():
    ex = tenet_byoc.build(_two_layer_calls_module())
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)
    report = vm.profile("forward", np.ones((4, 16), "float32"), np.ones((16, 8), "float32"))
    layers = [i for i, r in enumerate(report.calls) if r.name == "layer"]
    assert len(layers) == 2 and all(report.calls[i].depth == 0 for i in layers)
    for i in layers:
        children = []
        for r in report.calls[i + 1:]:
            if r.depth == 0:
                break
            children.append(r)
        assert [r.cost.macs for r in children if r.is_tenet] == [4 * 16 * 8]
        assert sum(r.duration_us for r in children) <= report.calls[i].duration_us
    assert sum(r.percent for r in report.calls if r.depth == 0) == pytest.approx(100.0)
    assert report.sum_row().cost.macs == 2 * 4 * 16 * 8
