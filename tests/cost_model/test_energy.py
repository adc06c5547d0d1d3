"""Precision-aware MAC units and energy per call, against hand counts from the figures."""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm


def test_lookup_picks_narrowest_covering_unit():
    t = cm.PrecisionTable.horowitz_45nm()
    assert t.lookup(32, 32).pj_per_mac == pytest.approx(3.7 + 0.9)
    assert t.lookup(16, 16).pj_per_mac == pytest.approx(1.1 + 0.4)
    assert t.lookup(8, 8).pj_per_mac == pytest.approx(0.2 + 0.1)
    # int4 weights run on the int8 unit; 16-bit activations with 4-bit weights on float16.
    assert (t.lookup(8, 4).bits_a, t.lookup(8, 4).bits_b) == (8, 8)
    assert (t.lookup(16, 4).bits_a, t.lookup(16, 4).bits_b) == (16, 16)
    with pytest.raises(ValueError, match=r"do not support 64-bit A x 32-bit B.*\(32, 32\)"):
        t.lookup(64, 32)


def test_packed_rates_prefer_the_faster_unit():
    t = cm.PrecisionTable.horowitz_45nm_packed(int8_rate=4, int4_rate=8)
    assert t.lookup(8, 8).macs_per_pe_per_cycle == 4
    assert t.lookup(4, 4).macs_per_pe_per_cycle == 8
    assert t.lookup(4, 4).pj_per_mac == pytest.approx(0.2 / 4 + 0.1)
    assert t.lookup(8, 4).macs_per_pe_per_cycle == 4


def test_table_validation():
    with pytest.raises(ValueError, match="units is empty"):
        cm.PrecisionTable([])
    with pytest.raises(ValueError, match=r"units\[0\].macs_per_pe_per_cycle must be > 0"):
        cm.PrecisionTable([cm.MacSpec(8, 8, 0, 0.3)])
    with pytest.raises(ValueError, match=r"widths must be in 1..64 bits, got \(0, 8\)"):
        cm.PrecisionTable([cm.MacSpec(0, 8, 1, 0.3)])


def test_integer_mac_scaling():
    assert cm.integer_mac_pj(8, 8, 8) == pytest.approx(0.2 + 0.03)
    # 32 x 32 multiply: 0.2 * 16 = 3.2 pJ, Horowitz measures 3.1.
    assert cm.integer_mac_pj(32, 32, 32) == pytest.approx(3.2 + 0.12)


def test_call_energy_by_hand():
    # 16 x 16 x 16, 8-bit operands, 32-bit C, one tile: DRAM reads 2 * 256 * 8 bits, write
    # 256 * 32 bits; the array reads from the buffer its TENET unique volume.
    hw = cm.Hardware.systolic(4, 4)
    df = cm.Dataflow.preset("os", rows=4, cols=4)
    mem = cm.MemoryHierarchy(dram_pj_per_bit=10.0, buffer_pj_per_bit=1.0, register_pj_per_bit=0.5)
    mm = cm.analyze_memory(16, 16, 16, hw, df, mem, cm.TileMapping(16, 16, 16),
                           bits_a=8, bits_b=8, bits_c=32)
    mac = cm.MacSpec(8, 8, 1, 0.3)
    e = cm.call_energy(mm, mem, mac, extra_ops=100)
    macs = 16 ** 3
    assert e.mac_pj == pytest.approx((macs + 100) * 0.3)
    assert e.register_pj == pytest.approx(macs * (8 + 8 + 2 * 32) * 0.5)
    dram = 2 * 256 * 8 + 256 * 32
    assert e.dram_pj == pytest.approx(dram * 10.0)
    # os 4x4 folds over 16x16 with K = 16: A and B each enter once per fold, 16 folds x
    # (4 rows x 16) elements; C leaves once per fold (16 elements).
    array_bits = 16 * (4 * 16 * 8) * 2 + 256 * 32
    assert mm.buffer_read_bits + mm.buffer_write_bits == array_bits
    assert e.buffer_pj == pytest.approx((array_bits + dram) * 1.0)
    assert e.total_pj == pytest.approx(e.mac_pj + e.register_pj + e.dram_pj + e.buffer_pj)
