"""Ledger entries against independent references: the Relax IR's matmul shapes, the cost model."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import (
    gemm_ledger,
    ir_matmul_shapes,
    memory_reference,
    mlp_executable,
    mlp_params,
)
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params

# The references below walk each call's default tiles (a preset otherwise searches them).
DEFAULT_TILES = preset("os16", mapping="default")


def _build(mod):
    return tenet_byoc.build(mod, accelerator=DEFAULT_TILES)


def _shapes(ledger) -> Counter:
    return Counter((e.batch, e.m, e.n, e.k) for e in ledger)


def _assert_entries_match_cost_model(ledger, accelerator) -> None:
    """Each entry's figures equal analyze_gemm recomputed for its shape on the same config."""
    hw, df = accelerator.hardware, accelerator.dataflow
    assert (ledger.accelerator, ledger.dataflow) == (hw.name, df.name)
    for e in ledger:
        m = cm.analyze_array(
            cm.GemmCall(
                m=e.m,
                n=e.n,
                k=e.k,
                batch=e.batch,
                bits_a=e.bits_a,
                bits_b=e.bits_b,
                bits_c=e.bits_c,
            ),
            cm.Accelerator("t", hw, df),
        )
        assert e.macs == m.macs == e.batch * e.m * e.n * e.k
        assert (e.array_cycles, e.compute_cycles, e.stall_cycles, e.time_steps, e.active_pes,
                e.num_pes) == (m.cycles, m.compute_cycles, m.stall_cycles, m.time_steps,
                               m.active_pes, m.num_pes)
        assert e.offchip_read_bytes == m.offchip_read_bits / 8
        assert e.offchip_write_bytes == m.offchip_write_bits / 8
        assert e.tenet_delay == pytest.approx(m.delay, rel=1e-12)
        # The call's latency is the buffer level's, recomputed by the memory core.
        mm, energy = memory_reference(e, accelerator)
        assert (e.cycles, e.roofline_cycles, e.mapping) == (
            mm.cycles, mm.roofline_cycles, mm.mapping)
        assert e.roofline_cycles <= e.cycles
        assert e.latency_us == pytest.approx(mm.latency_us, rel=1e-12)
        assert e.energy_pj == pytest.approx(energy.total_pj, rel=1e-12)
        assert e.energy_pj == pytest.approx(e.mac_pj + e.register_pj + e.buffer_pj + e.dram_pj)
        assert e.pe_utilization == pytest.approx(
            e.macs / (e.cycles * e.num_pes * e.macs_per_pe_per_cycle), rel=1e-12)
        assert set(e.tensors) == set(m.tensors) == {"A", "B", "C"}
        for name, t in e.tensors.items():
            r = m.tensors[name]
            assert (t.total, t.unique, t.offchip_elements, t.bits, t.is_write) == (
                r.total, r.unique, r.offchip_elements, r.bits, r.is_write)
            assert t.offchip_bytes == r.offchip_bits / 8
            assert t.reuse_factor == pytest.approx(r.reuse_factor, rel=1e-12)


@pytest.mark.parametrize("hardware", ["os16", "ws16", "tenet_os8"])
def test_mlp_ledger_matches_ir_and_cost_model(hardware):
    mod, ex = mlp_executable(hardware)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    batch = 3
    vm["main"](tvm.runtime.tensor(np.zeros((batch, 784), "float32")))
    book = gemm_ledger(vm)
    expected = ir_matmul_shapes(mod, "main", {"batch": batch})
    assert expected == [(1, 3, 128, 784), (1, 3, 10, 128)]  # the reference itself, by hand
    assert _shapes(book) == Counter(expected)
    assert book.totals().macs == sum(b * m * n * k for b, m, n, k in expected)
    _assert_entries_match_cost_model(book, preset(hardware, mapping="default"))


@pytest.mark.parametrize("scheme", ["mxfp4", "w=int8/channel,a=int8/group64"])
def test_k_group_entries_match_the_memory_core(scheme):
    # Partial sums rescaled per K-group: their register traffic is in the entry's energy as
    # the memory core's own call_energy counts it, and is 2 x M x N x ceil(K/G) x 32 bits.
    from tenet_byoc.models.mlp import mlp_module

    mod = tenet_byoc.quantize(mlp_module(mlp_params()), scheme)
    vm = relax.VirtualMachine(tenet_byoc.build(mod, accelerator=DEFAULT_TILES), tvm.cpu())
    rng = np.random.default_rng(0)
    vm["main"](tvm.runtime.tensor(rng.standard_normal((3, 784)).astype("float32")))
    book = gemm_ledger(vm)
    assert len(book) == 2
    group = 32 if scheme == "mxfp4" else 64
    for e in book:
        assert e.extra_register_bits == 2 * e.batch * e.m * e.n * -(-e.k // group) * 32
        _, energy = memory_reference(e, DEFAULT_TILES)
        assert e.register_pj == pytest.approx(energy.register_pj, rel=1e-12)
        assert e.energy_pj == pytest.approx(energy.total_pj, rel=1e-12)


@pytest.fixture(scope="module")
def tiny_gpt2():
    config = GPT2Config.preset("tiny")
    return GPT2Runner(config, random_params(config), build=_build)


@pytest.mark.parametrize("seq_len", [1, 7])
def test_gpt2_prefill_ledger_matches_ir_and_cost_model(tiny_gpt2, seq_len):
    gemm_ledger(tiny_gpt2.vm).reset()
    tiny_gpt2.prefill(list(range(seq_len)))
    book = gemm_ledger(tiny_gpt2.vm)
    # The reference walks the exported module (before partitioning) with seq_len bound.
    expected = ir_matmul_shapes(tiny_gpt2.mod, "prefill", {"seq_len": seq_len})
    assert len(expected) == 6 * tiny_gpt2.config.n_layer + 1
    assert _shapes(book) == Counter(expected)
    assert book.totals().macs == sum(b * m * n * k for b, m, n, k in expected)
    _assert_entries_match_cost_model(book, DEFAULT_TILES)


def test_totals_and_groups_add_up():
    _, ex = mlp_executable()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for batch in (1, 2):
        vm["main"](tvm.runtime.tensor(np.zeros((batch, 784), "float32")))
    book = gemm_ledger(vm)
    t = book.totals()
    assert t.calls == len(book) == 4
    assert t.cycles == sum(e.cycles for e in book)
    for key in ("symbol", "pattern", "name", "phase"):
        groups = book.group_by(key)
        assert sum(g.macs for g in groups.values()) == t.macs
        assert sum(g.calls for g in groups.values()) == t.calls
    book.reset()
    assert len(gemm_ledger(vm)) == 0


@pytest.mark.slow
def test_gpt2_small_prefill_ledger_matches_ir_and_cost_model():
    config = GPT2Config.preset("small")
    runner = GPT2Runner(config, random_params(config), build=_build)
    seq_len = 8
    runner.prefill(list(range(seq_len)))
    book = gemm_ledger(runner.vm)
    expected = ir_matmul_shapes(runner.mod, "prefill", {"seq_len": seq_len})
    assert len(expected) == 6 * config.n_layer + 1
    assert _shapes(book) == Counter(expected)
    assert book.totals().macs == sum(b * m * n * k for b, m, n, k in expected)
    _assert_entries_match_cost_model(book, DEFAULT_TILES)
