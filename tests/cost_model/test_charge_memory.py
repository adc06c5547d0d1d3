"""The charge of a call includes the memory hierarchy and energy: GPT-2 small on os16 against
a roofline computed here by hand, and the charge's parts against the memory core's own
entry points."""

from __future__ import annotations

import math

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, Accelerator, preset

# GPT-2 small prefill of 128 tokens: (M, N, K, batch, times). 12 layers of qkv, attention
# projection, MLP up and down, and attention's QK^T and PV per head (12 heads as the batch);
# the tied lm_head once.
LAYERS, P, D, HEADS = 12, 128, 768, 12
PREFILL = [(P, 3 * D, D, 1, LAYERS), (P, D, D, 1, LAYERS), (P, 4 * D, D, 1, LAYERS),
           (P, D, 4 * D, 1, LAYERS), (P, P, D // HEADS, HEADS, LAYERS),
           (P, D // HEADS, P, HEADS, LAYERS), (P, 50257, D, 1, 1)]


def _plain_roofline(m, n, k, batch, pes, bits, dram_bits_per_cycle):
    # max(MACs / PEs, compulsory bits / bandwidth): every element of A, B and C once.
    macs = batch * m * n * k
    compulsory = batch * (m * k + k * n + m * n) * bits
    return max(math.ceil(macs / pes), math.ceil(compulsory / dram_bits_per_cycle))


def test_gpt2_small_float32_prefill_on_os16_is_within_1_5x_of_the_roofline():
    acc = preset("os16")
    cycles = roofline = 0
    for m, n, k, batch, times in PREFILL:
        c = cm.charge(cm.GemmCall(m=m, n=n, k=k, batch=batch), acc)
        ref = _plain_roofline(m, n, k, batch, 256, 32, 256)
        assert c.memory.roofline_cycles == ref  # the charge's roofline is the plain one
        assert c.memory.cycles >= ref
        cycles += times * c.memory.cycles
        roofline += times * ref
    # The plain roofline at 1 GHz: 62.9 ms.
    assert roofline / 1e6 == pytest.approx(62.9, abs=0.05)
    assert cycles / roofline <= 1.5, (cycles / 1e6, roofline / 1e6)


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize(("m", "n", "k", "bits"), [(7, 96, 32, 32), (33, 50, 70, 8),
                                                   (1, 200, 64, 16)])
def test_charge_parts_equal_the_memory_core(name, m, n, k, bits):
    # one core, each call's default tiles: the buffer level is the memory core's
    acc = preset(name, mapping="default").replace(cores=None)
    try:
        mac = acc.precision.lookup(bits, bits)
    except ValueError:
        with pytest.raises(ValueError, match="not support"):
            cm.charge(cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits), acc)
        return
    c = cm.charge(cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits), acc)
    # The parts are those of the call as the array computes it (tpu_v1: weights in whole
    # 256 x 256 tiles; the call itself elsewhere, tests/cost_model/test_tile_rules.py).
    computed = cm.computed_call(cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits), acc)
    m, n, k = computed.m, computed.n, computed.k
    rows, cols = acc.dataflow.rows or 1, acc.dataflow.cols or acc.hardware.num_pes
    tiles = cm.default_tile_mapping(m, n, k, acc.memory, rows, cols, bits)
    mm = cm.analyze_memory(
        cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits), acc, tiles
    )
    assert (c.memory.cycles, c.memory.dram_read_bits, c.memory.dram_write_bits,
            c.memory.mapping) == (mm.cycles, mm.dram_read_bits, mm.dram_write_bits, mm.mapping)
    assert c.energy.total_pj == pytest.approx(cm.call_energy(mm, acc.memory, mac).total_pj)
    assert (
        c.array.cycles
        == cm.analyze_array(
            cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits), acc
        ).cycles
    )
    # The roofline by hand at the hardware's rate for these widths.
    rate = acc.hardware.macs_per_pe_per_cycle_at(bits)
    pes = acc.hardware.num_pes
    # With a DRAM channel per operand the busiest operand's channel bounds it (tpu_v1).
    operand_bits = [m * k * bits, k * n * bits, m * n * bits]
    dram_bits = (max(operand_bits) if acc.memory.dram_channel_per_operand
                 else sum(operand_bits))
    assert c.memory.roofline_cycles == max(
        math.ceil(m * n * k / (pes * rate)),
        math.ceil(dram_bits / acc.memory.dram_bandwidth_bits))
    assert c.memory.roofline_cycles <= c.memory.cycles


def test_a_given_mapping_is_charged_and_a_misfit_refused():
    base = preset("os16")
    tiles = cm.TileMapping(32, 32, 64, "kmn")
    c = cm.charge(
        cm.GemmCall(m=64, n=64, k=128),
        cm.Accelerator("analysis", base.hardware, base.dataflow, memory=base.memory, mapping=tiles),
    )
    assert c.memory.mapping.endswith(tiles.describe())
    # K outermost: C's partial sums leave for every K tile but the first... and come back.
    assert c.memory.tensors["C"].dram_read_bits > 0
    small = cm.MemoryHierarchy(buffer_bytes=1024)
    with pytest.raises(ValueError, match="buffer"):
        cm.charge(
            cm.GemmCall(m=64, n=64, k=128),
            cm.Accelerator("analysis", base.hardware, base.dataflow, memory=small, mapping=tiles),
        )


def test_unsupported_widths_are_refused_with_their_names():
    acc = preset("tpu_v1")
    with pytest.raises(ValueError, match="64-bit A x 64-bit B"):
        cm.charge(cm.GemmCall(m=8, n=8, k=8, bits_a=64, bits_b=64, bits_c=64), acc)


def test_precision_rates_are_the_hardwares_one_setting():
    hw = cm.Hardware.systolic(4, 4, macs_per_pe_per_cycle={8: 4})
    df = cm.Dataflow.preset("os", 4, 4)
    table = cm.PrecisionTable([cm.MacSpec(8, 8, 1, 0.3)])  # a rate of 1 is overridden: 4
    parsed = Accelerator.from_json(
        cm.Accelerator("a", hw, df, precision=table).to_json())
    assert [u.macs_per_pe_per_cycle for u in parsed.precision.units] == [4]
    c = cm.charge(
        cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8, bits_c=8),
        cm.Accelerator("analysis", hw, df, precision=table),
    )
    assert c.memory.roofline_cycles >= math.ceil(64**3 / (16 * 4))
