"""Precision-aware MAC units and energy per call (K-group rescaling included), against hand
counts from the figures."""

from __future__ import annotations

import math

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.quantization import get_scheme


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
    mm = cm.analyze_memory(
        cm.GemmCall(m=16, n=16, k=16, bits_a=8, bits_b=8, bits_c=32),
        cm.Accelerator("t", hw, df, memory=mem),
        cm.TileMapping(16, 16, 16),
    )
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


# Partial sums rescaled per K-group (issue 14): each rescale reads and writes the 32-bit sum
# in the PE's registers. K = 200 is no multiple of either G, so the last group is partial.
K_GROUP_RECIPES = [("mxfp4", 32), ("w=int8/channel,a=int8/group64", 64)]


@pytest.mark.parametrize(("spec", "group"), K_GROUP_RECIPES)
@pytest.mark.parametrize("batch", [1, 3])
def test_k_group_rescaling_is_charged_in_register_energy(spec, group, batch):
    scheme = get_scheme(spec)
    acc = preset("os16")
    m, n, k = 8, 48, 200
    a, b, _ = scheme.bits()
    common = {"batch": batch, "bits_a": a, "bits_b": b, "bits_c": 16}
    grouped = cm.charge(
        cm.GemmCall(m=m, n=n, k=k, recipe=scheme, **common),
        acc,
    )
    q = grouped.quant
    # The same call with no K-group rescaling: the recipe's side data and ops, nothing more.
    side = {"extra_read_bits": q["weight_side_bits"] + q["activation_side_bits"],
            "extra_ops": q["quantize_ops"] + q["dequant_ops"]}
    plain = cm.charge(cm.GemmCall(m=m, n=n, k=k, **side, **common), acc)
    per_bit = acc.memory.register_pj_per_bit
    rescale_bits = 2 * batch * m * n * math.ceil(k / group) * 32
    assert q["accumulator_traffic_bits"] == rescale_bits
    assert grouped.energy.register_pj - plain.energy.register_pj == pytest.approx(
        rescale_bits * per_bit, rel=1e-9)
    # Against the whole register term by hand: per MAC A and B read, the partial sum read
    # and written at the memory's psum width; plus the rescaling's reads and writes.
    macs = batch * m * n * k
    assert grouped.energy.register_pj == pytest.approx(
        (macs * (a + b + 2 * acc.memory.psum_bits) + rescale_bits) * per_bit, rel=1e-12)
    assert grouped.energy.total_pj - plain.energy.total_pj == pytest.approx(
        rescale_bits * per_bit, rel=1e-9)
    # Register accesses cost no cycles in this model.
    assert (grouped.memory.cycles, grouped.memory.mapping) == (plain.memory.cycles,
                                                               plain.memory.mapping)
    # Given as a workload field, the bits are charged the same way.
    direct = cm.charge(
        cm.GemmCall(
            m=m,
            n=n,
            k=k,
            extra_register_bits=rescale_bits,
            **side,
            **common,
        ),
        acc,
    )
    assert direct.energy.register_pj == pytest.approx(grouped.energy.register_pj, rel=1e-12)


def test_recipes_without_k_groups_add_no_register_bits():
    acc = preset("os16")
    for spec in ("per_token", "q4f16_1", "per_embedding"):
        scheme = get_scheme(spec)
        a, b, c = scheme.bits()
        ch = cm.charge(
            cm.GemmCall(m=8, n=48, k=200, bits_a=a, bits_b=b, bits_c=c, recipe=scheme), acc
        )
        assert ch.quant["accumulator_traffic_bits"] == 0
        assert ch.energy.register_pj == pytest.approx(
            8 * 48 * 200 * (a + b + 2 * acc.memory.psum_bits) * acc.memory.register_pj_per_bit,
            rel=1e-12)


def test_extra_register_bits_are_validated():
    hw = cm.Hardware.systolic(4, 4)
    df = cm.Dataflow.preset("os", rows=4, cols=4)
    with pytest.raises(ValueError, match="GemmWorkload.extra_register_bits must be >= 0, got -8"):
        cm.charge(
            cm.GemmCall(m=4, n=4, k=4, extra_register_bits=-8), cm.Accelerator("analysis", hw, df)
        )
    with pytest.raises(ValueError, match="extra_register_bits, not both"):
        cm.charge(
            cm.GemmCall(m=4, n=4, k=64, recipe=get_scheme("group32"), extra_register_bits=64),
            cm.Accelerator("analysis", hw, df),
        )


def test_precision_table_repr_shows_each_unit():
    t = cm.PrecisionTable.horowitz_45nm_packed(int8_rate=4, int4_rate=8)
    text = repr(t)
    lines = text.splitlines()
    assert lines[0] == "PrecisionTable(units=[" and lines[-1] == "])"
    assert len(lines) == len(t.units) + 2
    for line, u in zip(lines[1:-1], t.units):
        assert line.strip() == (f"MacSpec(bits_a={u.bits_a}, bits_b={u.bits_b}, "
                                f"macs_per_pe_per_cycle={u.macs_per_pe_per_cycle!r}, "
                                f"pj_per_mac={u.pj_per_mac!r}),")
    # The repr is the constructor's spelling: evaluated, it gives the same units back.
    back = eval(text, {"PrecisionTable": cm.PrecisionTable, "MacSpec": cm.MacSpec})
    assert [(u.bits_a, u.bits_b, u.macs_per_pe_per_cycle, u.pj_per_mac) for u in back.units] == [
        (u.bits_a, u.bits_b, u.macs_per_pe_per_cycle, u.pj_per_mac) for u in t.units]
    assert repr(t.units[0]) == lines[1].strip().rstrip(",")
