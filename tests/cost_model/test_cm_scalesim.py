"""Trusted cycles and off-chip reads against SCALE-Sim 3.0.0's compute model."""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm

pytest.importorskip("scalesim", reason="scalesim (test extra) missing")
scalesim_ref = pytest.importorskip("scalesim_ref")

AMPLE = 1e12  # bits per cycle: no bandwidth stalls
SHAPES = [(5, 7, 3, 4, 4), (9, 10, 11, 4, 8), (16, 16, 16, 8, 8), (1, 13, 6, 8, 4),
          (20, 3, 17, 4, 4), (7, 7, 1, 2, 3)]


@pytest.mark.parametrize("m,n,k,rows,cols", SHAPES)
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_cycles_and_reads_equal_scalesim(m, n, k, rows, cols, dataflow):
    ref = scalesim_ref.run_gemm(m, n, k, rows, cols, dataflow)
    hw = cm.Hardware.systolic(rows, cols, bandwidth_bits=AMPLE)
    got = cm.analyze_array(
        cm.GemmCall(m=m, n=n, k=k),
        cm.Accelerator("t", hw, cm.Dataflow.preset(dataflow, rows=rows, cols=cols)),
    )
    assert got.stall_cycles == 0
    # SCALE-Sim's report prints the last cycle's index, ref.cycles - 1.
    assert got.cycles == ref.cycles
    assert got.tensors["A"].offchip_elements == ref.ifmap_reads
    assert got.tensors["B"].offchip_elements == ref.filter_reads


def test_cycles_by_hand():
    # 8x8 WS, M=10, N=20, K=12: folds = ceil(12/8) * ceil(20/8) = 6, each 8 (load) +
    # 10 + 8 + 8 - 2 = 32 cycles -> 192. OS: ceil(10/8)*ceil(20/8) = 6 folds of
    # 12 + 8 + 8 - 2 = 26 -> 156. IS: ceil(12/8)*ceil(10/8) = 4 folds of 8+20+14 = 42 -> 168.
    hw = cm.Hardware.systolic(8, 8, bandwidth_bits=AMPLE)
    for name, folds, cycles in [("ws", 6, 192), ("os", 6, 156), ("is", 4, 168)]:
        got = cm.analyze_array(
            cm.GemmCall(m=10, n=20, k=12),
            cm.Accelerator("t", hw, cm.Dataflow.preset(name, rows=8, cols=8)),
        )
        assert (got.folds, got.cycles) == (folds, cycles), name


def test_bandwidth_stall_by_hand():
    # 4x4 OS, M=N=K=4, 8-bit A/B, 32-bit C: one fold of 4+4+4-2 = 10 cycles.
    # Off chip: A 16 + B 16 elements read (8 bits) = 256 bits, C 16 written (32 bits) = 512.
    # At 16 bits/cycle the transfer needs 768/16 = 48 cycles -> 38 stall cycles.
    hw = cm.Hardware.systolic(4, 4, bandwidth_bits=16, avg_latency=5)
    got = cm.analyze_array(
        cm.GemmCall(m=4, n=4, k=4, bits_a=8, bits_b=8, bits_c=32),
        cm.Accelerator("t", hw, cm.Dataflow.preset("os", rows=4, cols=4)),
    )
    assert (got.compute_cycles, got.stall_cycles, got.cycles) == (10, 38, 48)
    assert got.bandwidth_bits_per_cycle == 768 / 10
    # TENET's delays: ingress 256/16 + 5 - 1 = 20, egress 512/16 + 4 = 36, compute 64/16 = 4.
    assert (got.ingress_delay, got.egress_delay, got.compute_delay) == (20, 36, 4)
    assert got.delay == 36
    # Quantization side data and extra element ops: 64 more bits read, 32 ops on 16 PEs.
    q = cm.analyze_array(
        cm.GemmCall(m=4, n=4, k=4, bits_a=8, bits_b=8, bits_c=32, extra_read_bits=64, extra_ops=32),
        cm.Accelerator("t", hw, cm.Dataflow.preset("os", rows=4, cols=4)),
    )
    assert q.offchip_read_bits == 256 + 64
    assert q.ingress_delay == 320 / 16 + 4
    assert q.compute_delay == (64 + 32) / 16
    assert q.compute_cycles == 10 + 2 and q.compute_delay_exact == got.compute_delay_exact + 2
    assert q.cycles == (768 + 64) // 16
