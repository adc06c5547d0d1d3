"""The buffer level's fields travel through the ledger's CSV and JSON: per entry, per tensor
(DRAM bytes of A, B and C add up to the entry's), and in the totals."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import mlp_executable
from tenet_byoc.hardware import preset


@pytest.mark.parametrize("hardware", ["os16", "tpu_v1"])
def test_memory_fields_in_csv_and_json(hardware):
    acc = preset(hardware)
    _, ex = mlp_executable(hardware)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.ones((4, 784), "float32")))
    book = tenet_byoc.ledger(vm)
    assert len(book) == 2
    for e in book:
        assert e.roofline_cycles <= e.cycles
        assert e.mapping.startswith(("os 16x16 | tiles", "ws 256x256 | tiles"))
        for field in ("dram_read_bytes", "dram_write_bytes"):
            assert getattr(e, field) == sum(getattr(t, field) for t in e.tensors.values())
        # C is written once (K innermost in the default mapping), A and B read at least once.
        assert e.tensors["C"].dram_write_bytes == e.batch * e.m * e.n * e.bits_c / 8
        assert e.tensors["A"].dram_read_bytes >= e.batch * e.m * e.k * e.bits_a / 8
        # DRAM energy is its bits at the hierarchy's pJ per bit.
        assert e.dram_pj == pytest.approx(8 * e.dram_bytes * acc.memory.dram_pj_per_bit)
        assert e.energy_pj == pytest.approx(e.mac_pj + e.register_pj + e.buffer_pj + e.dram_pj)
    rows = list(csv.DictReader(io.StringIO(book.to_csv())))
    for r, e in zip(rows, book, strict=True):
        assert (int(r["roofline_cycles"]), r["mapping"], float(r["energy_pj"])) == (
            e.roofline_cycles, e.mapping, e.energy_pj)
        assert float(r["C_dram_write_bytes"]) == e.tensors["C"].dram_write_bytes
    doc = json.loads(book.to_json())
    assert doc["totals"]["energy_pj"] == pytest.approx(sum(e.energy_pj for e in book))
    assert doc["totals"]["roofline_cycles"] == sum(e.roofline_cycles for e in book)
    assert doc["entries"][0]["tensors"]["B"]["dram_read_bytes"] == book.entries[
        0].tensors["B"].dram_read_bytes
