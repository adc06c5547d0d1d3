"""Vector charges are ledger entries of the one schema (charge.h ChargeLedgerFields /
VectorLedgerFields): unit "vector" beside the GEMMs' "array", the charge's own figures in
the entry, and ``group_by("unit")`` totals equal to the sums of each unit's charges."""

from __future__ import annotations

import math

import pytest

from tenet_byoc import _cost_model as core
from tenet_byoc import cost_model as cm
from tenet_byoc.estimate import estimate
from tenet_byoc.hardware import preset
from tenet_byoc.ledger import CHARGE_FIELDS, Ledger, LedgerEntry
from tenet_byoc.models.gpt2 import GPT2Config


def _vector_entry(charge: cm.VectorCharge, index: int) -> LedgerEntry:
    fields = charge.ledger_fields()
    fields.pop("tensors")
    return LedgerEntry(call_index=index, symbol="preview", pattern="vector", name=charge.call.op,
                       phase="prefill", scheme="none", recipe=cm.QuantRecipe(), tensors={},
                       **fields)


def test_vector_fields_are_the_gemm_entries_schema():
    assert tuple(core._vector_ledger_field_names()) == CHARGE_FIELDS


@pytest.mark.parametrize("op, shape, operand", [("layer_norm", (1, 9, 64), None),
                                                 ("softmax", (2, 4, 9, 9), None),
                                                 ("rotary", (1, 9, 4, 16), 2 * 9 * 16)])
def test_a_vector_entry_holds_its_charge(op, shape, operand):
    acc = preset("os16")
    ch = cm.charge_vector(cm.VectorCall(op, shape, operand_elements=operand), acc)
    e = _vector_entry(ch, 0)
    n = math.prod(shape)
    assert (e.unit, e.op, e.elements, e.m, e.n, e.k) == ("vector", op, n, n // shape[-1],
                                                          shape[-1], 0)
    assert {c: getattr(e, f"vector_{c}_ops") for c in ch.ops} == ch.ops
    assert (e.cycles, e.compute_cycles, e.latency_us) == (ch.cycles, ch.compute_cycles,
                                                          ch.latency_us)
    assert e.roofline_cycles == max(ch.compute_cycles, ch.dram_cycles) <= e.cycles
    assert (e.dram_read_bytes, e.dram_write_bytes, e.buffer_read_bytes, e.buffer_write_bytes) == (
        ch.dram_read_bytes, ch.dram_write_bytes, ch.buffer_read_bytes, ch.buffer_write_bytes)
    assert (e.energy_pj, e.mac_pj, e.buffer_pj, e.dram_pj) == (ch.energy_pj, ch.op_pj,
                                                               ch.buffer_pj, ch.dram_pj)
    assert (e.macs, e.num_pes, e.pe_utilization, e.spilled) == (0, 0, 0.0, ch.spilled)
    with pytest.raises(ValueError, match="ran on the vector unit"):
        _ = e.call


def test_group_by_unit_shows_both_units():
    acc = preset("os16")
    book = estimate(GPT2Config.preset("tiny"), "none", acc, prompt_len=9, decode_steps=0)
    for e in book.entries:
        assert (e.unit, e.op, e.elements) == ("array", "matmul", e.batch * e.m * e.n)
        assert (e.vector_add_ops, e.vector_exp_ops, e.spilled) == (0, 0, False)
    calls = [cm.VectorCall("layer_norm", (1, 9, 64)), cm.VectorCall("softmax", (1, 4, 9, 9)),
             cm.VectorCall("gelu_tanh", (1, 9, 256)), cm.VectorCall("add", (1, 9, 64))]
    charges = [cm.charge_vector(c, acc) for c in calls]
    vector = [_vector_entry(ch, len(book.entries) + i) for i, ch in enumerate(charges)]
    both = Ledger(book.entries + vector, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [])
    groups = both.group_by("unit")
    assert set(groups) == {"array", "vector"}
    assert groups["vector"].calls == 4 and groups["vector"].macs == 0
    assert groups["vector"].cycles == sum(ch.cycles for ch in charges)
    assert groups["vector"].energy_pj == pytest.approx(sum(ch.energy_pj for ch in charges))
    assert groups["array"].cycles == sum(e.cycles for e in book.entries)
    # The vector entries add no MAC capacity: utilization stays the array's.
    assert both.totals().pe_utilization == pytest.approx(book.totals().pe_utilization)
