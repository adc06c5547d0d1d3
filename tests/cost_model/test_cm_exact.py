"""The fast exact method equals brute-force enumeration of TENET's definitions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenet_byoc import cost_model as cm

STREAM_KEY = {"os": "k", "ws": "m", "is": "n"}
SCALAR_FIELDS = ["macs", "time_steps", "active_pes", "num_pes", "avg_active_pes",
                 "ingress_delay", "egress_delay", "compute_delay", "compute_delay_exact",
                 "delay", "compute_cycles", "stall_cycles", "cycles", "folds",
                 "offchip_read_bits", "offchip_write_bits", "array_utilization",
                 "bandwidth_bits_per_cycle", "latency_us"]
TENSOR_FIELDS = ["total", "unique", "reuse_factor", "spatial_reuse", "temporal_reuse", "offchip_bytes",
                 "offchip_elements", "offchip_bits"]


def assert_same(fast: cm.Metrics, ref: cm.Metrics, what: str) -> None:
    assert fast.method == "fast" and ref.method == "enumerate"
    for f in SCALAR_FIELDS:
        assert getattr(fast, f) == getattr(ref, f), f"{what}: {f}"
    assert sorted(fast.tensors) == sorted(ref.tensors)
    for t in ref.tensors:
        for f in TENSOR_FIELDS:
            assert getattr(fast.tensors[t], f) == getattr(ref.tensors[t], f), f"{what}: {t}.{f}"


def compare(m, n, k, rows, cols, preset, tile=None, bw=64.0, bits=(8, 8, 32)):
    hw = cm.Hardware.systolic(rows, cols, bandwidth_bits=bw)
    tiling = {STREAM_KEY[preset]: tile} if tile else {}
    df = cm.Dataflow.preset(preset, rows=rows, cols=cols, **tiling)
    kw = {"bits_a": bits[0], "bits_b": bits[1], "bits_c": bits[2]}
    fast = cm.analyze_array(cm.GemmCall(m=m, n=n, k=k, **kw), cm.Accelerator("t", hw, df), "fast")
    ref = cm.analyze_array(
        cm.GemmCall(m=m, n=n, k=k, **kw), cm.Accelerator("t", hw, df), "enumerate"
    )
    assert_same(fast, ref, f"{m}x{n}x{k} {preset} {rows}x{cols} tile={tile}")


ARRAYS = [(1, 8), (4, 4), (3, 5), (8, 1), (1, 1)]
SHAPES = [(1, 1, 1), (5, 7, 3), (9, 1, 2), (3, 9, 1), (17, 9, 4), (8, 8, 8), (2, 13, 1)]


@pytest.mark.parametrize("preset", ["os", "ws", "is"])
@pytest.mark.parametrize("rows,cols", ARRAYS)
def test_grid_untiled_and_tiled(preset, rows, cols):
    for (m, n, k), tile in itertools.product(SHAPES, [None, 1, 3]):
        compare(m, n, k, rows, cols, preset, tile)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20), n=st.integers(1, 20), k=st.integers(1, 20),
       rows=st.integers(1, 9), cols=st.integers(1, 9), preset=st.sampled_from(["os", "ws", "is"]),
       tile=st.one_of(st.none(), st.integers(1, 25)), bw=st.sampled_from([1.0, 16.0, 1e6]))
def test_random_small(m, n, k, rows, cols, preset, tile, bw):
    compare(m, n, k, rows, cols, preset, tile, bw)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["os", "ws", "is"])
def test_larger_sweep(preset):
    for rows, cols in [(8, 8), (16, 16), (8, 16), (1, 8)]:
        for m, n, k in [(40, 33, 17), (16, 48, 32), (1, 50, 70), (65, 1, 9)]:
            compare(m, n, k, rows, cols, preset)
            compare(m, n, k, rows, cols, preset, tile=7)


def test_batch_is_independent_gemms():
    hw = cm.Hardware.systolic(4, 4, bandwidth_bits=32)
    df = cm.Dataflow.preset("ws", rows=4, cols=4)
    one = cm.analyze(cm.Statement.gemm(6, 5, 7), hw, df)
    three = cm.analyze_array(cm.GemmCall(m=6, n=5, k=7, batch=3), cm.Accelerator("t", hw, df))
    for f in ["macs", "time_steps", "compute_delay_exact", "cycles", "folds",
              "offchip_read_bits", "offchip_write_bits"]:
        assert getattr(three, f) == 3 * getattr(one, f), f
    assert three.avg_active_pes == one.avg_active_pes
    for t in "ABC":
        assert three.tensors[t].unique == 3 * one.tensors[t].unique
        assert three.tensors[t].reuse_factor == one.tensors[t].reuse_factor


def test_enumeration_of_a_non_preset_dataflow_counts_by_hand():
    # TENET's 1-D GEMM mapping on a 4-PE line, M=2, N=4, K=3:
    # PE[j], T[i, k]: every stamp (i,k) runs 4 instances on 4 PEs -> 6 stamps, 24 MACs.
    # Interconnect PE[p]->PE[p-1] (data from the left, same or previous stamp):
    #  A[i,k] is read by all 4 PEs at stamp (i,k): PE 0 has no left neighbour -> unique
    #  per stamp 1, so unique A = 6; spatial reuse = 18 pairs / 24.
    #  B[k,j] at PE j, stamps (i,k): no neighbour holds it at the same/previous stamp
    #  except... PE j-1 holds B[k,j-1] -> unique B = 24 (temporal: prev stamp is k-1).
    #  C[i,j] at PE j, stamps (i,0..2): the previous stamp (i,k-1) has it -> unique C = 8.
    hw = cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect="{PE[p]->PE[p-1]}",
                     bandwidth_bits=8)
    df = cm.Dataflow(space="{S[i,j,k]->PE[j%4]}", time="{S[i,j,k]->T[floor(j/4),i,k]}")
    r = cm.analyze_array(
        cm.GemmCall(m=2, n=4, k=3, bits_a=8, bits_b=8, bits_c=8), cm.Accelerator("t", hw, df)
    )
    assert r.method == "enumerate"
    assert (r.macs, r.time_steps, r.active_pes, r.avg_active_pes) == (24, 6, 4, 4.0)
    assert (r.tensors["A"].unique, r.tensors["B"].unique, r.tensors["C"].unique) == (6, 24, 8)
    assert r.tensors["A"].spatial_reuse == 18 / 24
    assert r.tensors["C"].temporal_reuse == 16 / 24
    # compute cycles without a systolic fold model: one cycle per stamp.
    assert r.compute_cycles == r.compute_delay_exact == 6
    # off chip: (6+24) * 8 bits read, 8 * 8 written, over 8 bits/cycle = 38 cycles > 6.
    assert r.cycles == 38 and r.stall_cycles == 32


def test_exact_compute_delay_with_unequal_work_by_hand():
    # M=3, N=1, K=2 on 2 PEs allowing 2 MACs per cycle: PE 0 runs i=0,1 and PE 1 runs i=2
    # at each stamp k. Exact: stamps k=0,1 each busiest PE 2 instances -> (2+2)/2 = 2.
    # TENET's compute delay assumes equal work: 6 MACs / (2 PEs x 2) = 1.5.
    hw = cm.Hardware(pe_domain="{PE[p]: 0<=p<2}", interconnect="{PE[p]->PE[p-1]}",
                     macs_per_pe_per_cycle=2)
    df = cm.Dataflow(space="{S[i,j,k]->PE[floor(i/2)]}", time="{S[i,j,k]->T[k]}")
    r = cm.analyze(cm.Statement.gemm(3, 1, 2), hw, df)
    assert (r.compute_delay, r.compute_delay_exact, r.compute_cycles) == (1.5, 2.0, 2)
    # With 1 MAC per PE per cycle the same map is a conflict.
    hw1 = cm.Hardware(pe_domain="{PE[p]: 0<=p<2}", interconnect="{PE[p]->PE[p-1]}")
    with pytest.raises(ValueError, match=r"puts 2 instances on PE\[0\] at T\[0\]"):
        cm.analyze(cm.Statement.gemm(3, 1, 2), hw1, df)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 20), n=st.integers(1, 20), k=st.integers(1, 40),
       rows=st.integers(1, 6), cols=st.integers(1, 6), preset=st.sampled_from(["os", "ws", "is"]),
       rate=st.integers(2, 8), bits=st.sampled_from([4, 8, 16]))
def test_mac_rate_by_width_is_a_packed_gemm(m, n, k, rows, cols, preset, rate, bits):
    """At rate r a preset runs the GEMM with ceil(K/r) packed elements of r x bits; the
    report is per element. The reference is that packed GEMM at 1 MAC per cycle."""
    table = cm.Hardware.systolic(rows, cols, bandwidth_bits=64,
                                 macs_per_pe_per_cycle={bits: rate})
    one = cm.Hardware.systolic(rows, cols, bandwidth_bits=64)
    df = cm.Dataflow.preset(preset, rows=rows, cols=cols)
    kp = -(-k // rate)
    got = cm.analyze_array(
        cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits, extra_ops=7),
        cm.Accelerator("t", table, df),
    )
    packed = cm.analyze_array(
        cm.GemmCall(
            m=m, n=n, k=kp, bits_a=bits * rate, bits_b=bits * rate, bits_c=bits, extra_ops=7
        ),
        cm.Accelerator("t", one, df),
    )
    assert got.macs == m * n * k and got.macs_per_pe_per_cycle == rate
    for f in ("cycles", "compute_cycles", "stall_cycles", "time_steps", "folds",
              "offchip_read_bits", "offchip_write_bits"):
        assert getattr(got, f) == getattr(packed, f), f
    for t in ("A", "B"):
        assert got.tensors[t].unique == rate * packed.tensors[t].unique
        assert got.tensors[t].bits == bits
    assert got.tensors["C"].unique == packed.tensors["C"].unique
    assert got.array_utilization == pytest.approx(got.macs / (got.cycles * rows * cols * rate))
    # A width the table does not list runs at 1 MAC per cycle; enumeration agrees.
    assert (
        cm.analyze_array(
            cm.GemmCall(m=m, n=n, k=k, bits_a=32, bits_b=32, bits_c=32),
            cm.Accelerator("t", table, df),
        ).cycles
        == cm.analyze_array(
            cm.GemmCall(m=m, n=n, k=k, bits_a=32, bits_b=32, bits_c=32),
            cm.Accelerator("t", one, df),
        ).cycles
    )
    assert_same(
        got,
        cm.analyze_array(
            cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits, extra_ops=7),
            cm.Accelerator("t", table, df),
            "enumerate",
        ),
        "rate table",
    )
