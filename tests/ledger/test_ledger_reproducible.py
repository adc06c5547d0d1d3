"""A ledger entry is reproducible from its own fields, for every accelerator and scheme.

Three references: ``cost_model.analyze_gemm`` given the entry's fields (the runtime and the
binding share one charging rule), SCALE-Sim's fold model written out by hand for the float
presets (numbers independent of the cost model), and the profile's rows against the
ledger's totals (one PE-utilization definition).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tenet_byoc
from ledger_testing import gemm_ledger
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, Accelerator, preset
from tenet_byoc.ledger import Ledger
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params
from tenet_byoc.quantization import quantize
from tenet_data import TENET_DATA

PROMPT = list(range(7))
QUANTIZED = ["w8a8_per_channel_per_token", "w8a16_per_channel", "w4a16_group32"]


def _tenet_files() -> Accelerator:
    return Accelerator.from_tenet_files(TENET_DATA / "pe_array" / "systolic.p",
                                        TENET_DATA / "mapping" / "matmul_systolic_ws.m")


def _prefill_ledger(accelerator: Accelerator, scheme: str, profile: bool = False):
    config = GPT2Config.preset("tiny")
    runner = GPT2Runner(
        config, random_params(config, seed=3), bind_params=True,
        build=lambda mod: tenet_byoc.build(quantize(mod, scheme), accelerator=accelerator),
    )
    runner.prefill(PROMPT)
    return runner, gemm_ledger(runner.vm)


# Accelerators of several cores spread each call over them (src/cost_model/core.h): their
# entries are checked against one-core charges in tests/cost_model/test_cores.py.
ONE_CORE = [name for name in PRESETS if preset(name).cores.count == 1]
CASES = [(name, "none") for name in ONE_CORE] + [("os16_mp", s) for s in QUANTIZED] + [
    ("tenet_files", "none"), ("tenet_files", "w4a16_group32")
]


@pytest.mark.parametrize(("accelerator", "scheme"), CASES)
def test_every_entry_equals_analyze_gemm_of_its_fields(accelerator, scheme):
    acc = (_tenet_files() if accelerator == "tenet_files"
           else preset(accelerator, mapping="default"))  # the preset dataflow, as below
    _, book = _prefill_ledger(acc, scheme)
    assert book.accelerator == acc.name
    assert len(book) == 6 * 2 + 1
    edge = acc.edge_dequantizer
    for e in book:
        # Weight dequantization the edge dequantizer converts runs beside the array, not on
        # the PEs (issue 20): the PEs' extra ops lose it, and the call takes at least the
        # dequantizer's N x K / elements_per_cycle cycles, at its energy per element.
        on_edge = e.dequant_place == "weight" and edge.converts(e.bits_b)
        edge_ops = e.dequant_ops if on_edge else 0
        edge_cycles = -(-edge_ops // edge.elements_per_cycle) if on_edge else 0
        assert (e.edge_cycles, e.edge_pj) == (edge_cycles, edge_ops * edge.pj_per_element)
        widths = {"batch": e.batch, "bits_a": e.bits_a, "bits_b": e.bits_b,
                  "bits_c": e.bits_c, "extra_read_bits": e.extra_read_bits,
                  "extra_ops": e.extra_ops - edge_ops, "a_on_chip": e.a_on_chip,
                  "c_on_chip": e.c_on_chip}
        # The parts are the call's as the array computes it (tpu_v1: weights in whole
        # 256 x 256 tiles, tests/cost_model/test_tile_rules.py).
        t = cm.computed_call(cm.GemmCall(m=e.m, n=e.n, k=e.k, **widths), acc)
        m = cm.analyze_array(t, acc)
        assert (e.macs, e.array_cycles, e.offchip_read_bytes, e.offchip_write_bytes) == (
            e.batch * e.m * e.n * e.k, m.cycles, m.offchip_read_bits / 8, m.offchip_write_bits / 8), e.name
        assert {k: t.offchip_bytes for k, t in e.tensors.items()} == {
            k: t.offchip_bytes for k, t in m.tensors.items()}
        # The buffer level, recomputed through the memory core's own entry points (not
        # through the charge): the default mapping of this call, its analysis and energy.
        rows, cols = acc.dataflow.rows or 1, acc.dataflow.cols or acc.hardware.num_pes
        tiles = cm.default_tile_mapping(
            t.m, t.n, t.k, acc.memory, rows, cols, batch=e.batch, bits_a=e.bits_a,
            bits_b=e.bits_b, bits_c=e.bits_c)
        mm = cm.analyze_memory(t, acc, tiles)
        energy = cm.call_energy(mm, acc.memory, acc.precision.lookup(e.bits_a, e.bits_b),
                                e.extra_ops - edge_ops)
        assert (e.cycles, e.roofline_cycles, e.mapping) == (
            max(mm.cycles, edge_cycles), mm.roofline_cycles, mm.mapping), e.name
        assert (e.dram_read_bytes, e.dram_write_bytes, e.buffer_read_bytes,
                e.buffer_write_bytes) == (mm.dram_read_bits / 8, mm.dram_write_bits / 8,
                                          mm.buffer_read_bits / 8, mm.buffer_write_bits / 8)
        assert {k: (t.dram_read_bytes, t.dram_write_bytes) for k, t in e.tensors.items()} == {
            k: (t.dram_read_bits / 8, t.dram_write_bits / 8) for k, t in mm.tensors.items()}
        assert e.energy_pj == pytest.approx(energy.total_pj + e.edge_pj, rel=1e-12)
        assert e.latency_us == pytest.approx(e.cycles / acc.hardware.clock_ghz / 1e3)
        assert e.pe_utilization == pytest.approx(
            e.macs / (e.cycles * e.num_pes * e.macs_per_pe_per_cycle))
        assert e.roofline_cycles <= e.cycles, e.name
        charge = cm.charge(cm.GemmCall(m=e.m, n=e.n, k=e.k, scheme=e.scheme, **widths), acc)
        assert (charge.scheme, charge.array.cycles, max(charge.memory.cycles, edge_cycles)) == (
            e.scheme, e.array_cycles, e.cycles)
    if scheme != "none":
        assert {e.scheme for e in book} == {scheme, "none"}  # attention matmuls stay float
    if scheme in ("w8a16_per_channel", "w4a16_group32") and accelerator == "os16_mp":
        assert any(e.edge_cycles > 0 for e in book)  # the edge dequantizer is in play
    if accelerator == "os16_mp" and scheme != "none":
        # The precision-dependent rate is in play: some entries run above 1 MAC per cycle.
        assert max(e.macs_per_pe_per_cycle for e in book) > 1


def _fold_model(e, acc: Accelerator) -> tuple[int, int]:
    """SCALE-Sim's compute model and TENET's unique volumes, by hand: (cycles, off-chip bytes).

    Per fold of an R x C array: os streams K (K+R+C-2 cycles), ws streams M and is streams N
    (L+2R+C-2: the stationary operand is shifted in first). Off chip, the stationary operand
    is read or written once; each flowing one once per fold along the other array side.
    """
    rows, cols = acc.dataflow.rows, acc.dataflow.cols
    m, n, k = e.m, e.n, e.k
    df = acc.dataflow.preset_name
    if df == "os":
        folds, per_fold = math.ceil(m / rows) * math.ceil(n / cols), k + rows + cols - 2
        elements = math.ceil(n / cols) * m * k + math.ceil(m / rows) * n * k + m * n
    elif df == "ws":
        folds, per_fold = math.ceil(n / cols) * math.ceil(k / rows), m + 2 * rows + cols - 2
        elements = math.ceil(n / cols) * k * m + k * n + math.ceil(k / rows) * n * m
    else:
        folds, per_fold = math.ceil(m / cols) * math.ceil(k / rows), n + 2 * rows + cols - 2
        elements = m * k + math.ceil(m / cols) * k * n + math.ceil(k / rows) * m * n
    compute = e.batch * folds * per_fold
    bits = e.batch * elements * 32
    transfer = math.ceil(bits / acc.hardware.bandwidth_bits)
    return compute + max(0, transfer - compute), bits // 8


@pytest.mark.parametrize("accelerator", [n for n in PRESETS if n.startswith(("os", "ws", "is"))])
def test_float_preset_ledger_equals_the_fold_model_by_hand(accelerator):
    acc = preset(accelerator, mapping="default")  # the preset's own dataflow
    _, book = _prefill_ledger(acc, "none")
    for e in book:
        # A 1x1 last fold is the one case where folds interact; these shapes have none.
        assert e.m % acc.dataflow.rows != 1 or e.n % acc.dataflow.cols != 1
        cycles, offchip = _fold_model(e, acc)
        # The array level (one off-chip bandwidth); the call's latency adds the buffer level.
        assert (e.macs, e.array_cycles, e.offchip_bytes) == (e.batch * e.m * e.n * e.k,
                                                             cycles, offchip), e.name


def test_profile_rows_agree_with_the_ledger_on_os16_mp():
    acc = preset("os16_mp")
    runner, _ = _prefill_ledger(acc, "w8a8_per_channel_per_token")
    vm = tenet_byoc.VirtualMachine(runner.executable, runner.device, profile=True)
    ids = np.asarray([PROMPT], dtype="int32")
    report = vm.profile("prefill", ids, warmup=0)
    # the GEMM calls' rows (the charge call's row holds vector entries only: no MACs)
    rows = [r for r in report.rows() if any(e.unit == "array" for e in r.entries)]
    assert rows and all(0 < r.cost.pe_utilization <= 1 for r in rows)
    calls = [e for r in report.calls for e in r.entries if e.unit == "array"]
    # Capacity by hand: cycles x PEs x the hardware's rate at the call's wider operand.
    capacity = sum(e.cycles * acc.hardware.num_pes *
                   acc.hardware.macs_per_pe_per_cycle_at(max(e.bits_a, e.bits_b)) for e in calls)
    by_hand = sum(e.macs for e in calls) / capacity
    from_rows = (sum(r.cost.macs for r in rows)
                 / sum(r.cost.macs / r.cost.pe_utilization for r in rows))
    ledger_totals = Ledger(calls, acc.name, acc.dataflow.name, 1.0, []).totals()
    assert from_rows == pytest.approx(by_hand, rel=1e-12)
    assert ledger_totals.pe_utilization == pytest.approx(by_hand, rel=1e-12)
    assert report.sum_row().cost.pe_utilization == pytest.approx(by_hand, rel=1e-12)
    assert any(e.bits_a == 8 for e in calls)  # int8 calls at 4 MACs per PE per cycle
