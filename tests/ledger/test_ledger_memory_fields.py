"""The buffer level's fields travel through the ledger's CSV and JSON: per entry, per tensor
(DRAM bytes of A, B and C add up to the entry's), in the totals, and the register traffic of
partial sums rescaled per K-group (counted by hand)."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import gemm_ledger, mlp_executable
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.quantization import quantize


@pytest.mark.parametrize("hardware", ["os16", "tpu_v1"])
def test_memory_fields_in_csv_and_json(hardware):
    acc = preset(hardware, mapping="default")  # as mlp_executable builds it
    _, ex = mlp_executable(hardware)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.ones((4, 784), "float32")))
    book = gemm_ledger(vm)
    assert len(book) == 2
    # Layer 1 reads the host's x and keeps its output on chip for layer 2, which returns the
    # logits; both fit the buffer (4 rows of 784 + 128 and 128 + 10 floats).
    assert [(e.a_on_chip, e.c_on_chip) for e in book] == [(False, True), (True, False)]
    for e in book:
        assert e.roofline_cycles <= e.cycles
        assert e.mapping.startswith(("os 16x16 | tiles", "ws 256x256 | tiles"))
        for field in ("dram_read_bytes", "dram_write_bytes"):
            assert getattr(e, field) == sum(getattr(t, field) for t in e.tensors.values())
        # C is written once (K innermost in the default mapping), A and B read at least once,
        # but for what stays on chip; in the shape the array computes (tpu_v1: K and N in
        # whole 256 x 256 weight tiles, tests/cost_model/test_tile_rules.py).
        t = cm.computed_call(cm.GemmCall(m=e.m, n=e.n, k=e.k, bits_a=e.bits_a,
                                         bits_b=e.bits_b), acc)
        c_bits = 0 if e.c_on_chip else e.batch * t.m * t.n * e.bits_c
        assert e.tensors["C"].dram_write_bytes == c_bits / 8
        a_bits = 0 if e.a_on_chip else e.batch * t.m * t.k * e.bits_a
        assert e.tensors["A"].dram_read_bytes >= a_bits / 8
        assert e.tensors["A"].dram_read_bytes == 0 or not e.a_on_chip
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


@pytest.mark.parametrize(("spec", "group"), [("mxfp4", 32), ("w=int8/channel,a=int8/group64", 64)])
def test_k_group_register_traffic_in_entries_csv_and_json(spec, group):
    # The MLP's layers (784 -> 128 -> 10) run with their partial sums rescaled per K-group
    # (the quantizer pads the first layer's K to whole groups; the entry's k is what ran).
    acc = preset("os16", mapping="default")  # the references walk the default tiles
    mod, _ = mlp_executable("os16")
    ex = tenet_byoc.build(quantize(mod, spec), accelerator=acc)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    batch = 3
    vm["main"](tvm.runtime.tensor(np.ones((batch, 784), "float32")))
    book = gemm_ledger(vm)
    assert [(e.m, e.n) for e in book] == [(batch, 128), (batch, 10)]
    assert book.entries[0].k >= 784 and book.entries[1].k == 128
    per_bit, psum_bits = acc.memory.register_pj_per_bit, acc.memory.psum_bits
    for e in book:
        rescale_bits = 2 * e.m * e.n * math.ceil(e.k / group) * 32  # a 32-bit read + write
        assert e.dequant_place == "k_group"
        assert e.extra_register_bits == e.accumulator_traffic_bits == rescale_bits
        # Per MAC: A and B read, the partial sum read and written; plus the rescaling.
        assert e.register_pj == pytest.approx(
            (e.macs * (e.bits_a + e.bits_b + 2 * psum_bits) + rescale_bits) * per_bit, rel=1e-12)
        assert e.energy_pj == pytest.approx(e.mac_pj + e.register_pj + e.buffer_pj + e.dram_pj)
    rows = list(csv.DictReader(io.StringIO(book.to_csv())))
    assert [int(r["extra_register_bits"]) for r in rows] == [e.extra_register_bits for e in book]
    doc = json.loads(book.to_json())
    assert [d["extra_register_bits"] for d in doc["entries"]] == [
        e.extra_register_bits for e in book]
