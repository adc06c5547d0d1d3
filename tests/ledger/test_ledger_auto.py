"""mapping="auto" through the runtime's ledger, and GPT-2 small's phases against the roofline.

References: ``cm.search_mapping`` called directly for each ledger entry (the ledger's charge
goes through the runtime's cost cache and the accelerator's MappingSearch instead); the
roofline recomputed here from its definition (DESIGN.md: max(MACs / peak, compulsory DRAM
bits / DRAM bandwidth)) from the call's shape and widths; GPT-2 small's call list from its
config (``model_gemms``, checked against real runs' ledgers in tests/models).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import gemm_ledger, mlp_executable
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.models.gemms import model_gemms
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params
from tenet_byoc.quantization import get_scheme


def _direct_best(acc, e) -> cm.MappingChoice:
    edge = max(acc.dataflow.rows, acc.dataflow.cols)
    return cm.MappingSearch(
        acc.hardware,
        acc.memory,
        dataflows=("os", "ws", "is"),
        rows=acc.dataflow.rows,
        cols=acc.dataflow.cols,
        objective=acc.objective,
        precision=acc.precision,
        stream_tiles=(edge, 4 * edge),
    ).best(
        cm.GemmCall(
            m=e.m,
            n=e.n,
            k=e.k,
            batch=e.batch,
            bits_a=e.bits_a,
            bits_b=e.bits_b,
            bits_c=e.bits_c,
            extra_read_bits=e.extra_read_bits,
            extra_ops=e.extra_ops,
            extra_register_bits=e.extra_register_bits,
            a_on_chip=e.a_on_chip,
            c_on_chip=e.c_on_chip,
        )
    )


def _assert_ledger_is_the_search(book, acc) -> None:
    assert len(book) > 0
    for e in book:
        best = _direct_best(acc, e)
        assert (e.mapping, e.cycles, e.roofline_cycles) == (
            best.mapping, best.metrics.cycles, best.metrics.roofline_cycles)
        assert e.energy_pj == pytest.approx(best.energy.total_pj, rel=1e-12)
        assert e.dram_read_bytes == best.metrics.dram_read_bits / 8


@pytest.mark.parametrize("objective", ["latency", "edp"])
def test_mlp_ledger_records_the_searched_mapping(objective):
    acc = preset("os16", mapping="auto", objective=objective)
    _, ex = mlp_executable(acc)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = tvm.runtime.tensor(np.zeros((5, 784), "float32"))
    vm["main"](x)
    assert gemm_ledger(vm).mapping_searches == 2  # 784 -> 128 and 128 -> 10, batch 5
    vm["main"](x)  # the second run's calls are the cost cache's lookups: the same charges
    book = gemm_ledger(vm)
    assert book.mapping_searches == 2
    assert len(book) == 4
    first, second = book.entries[:2], book.entries[2:]
    assert [e.mapping for e in first] == [e.mapping for e in second]
    _assert_ledger_is_the_search(book, acc)
    vm["main"](tvm.runtime.tensor(np.zeros((2, 784), "float32")))  # new shapes: searched
    assert gemm_ledger(vm).mapping_searches == 4


def test_fixed_mapping_searches_nothing():
    _, ex = mlp_executable(preset("os16", mapping="default"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.zeros((3, 784), "float32")))
    book = gemm_ledger(vm)
    assert len(book) == 2 and book.mapping_searches == 0
    assert book.entries[0].mapping == _default_mapping(preset("os16", mapping="default"), book.entries[0])


def _default_mapping(acc, e) -> str:
    tiles = cm.default_tile_mapping(e.m, e.n, e.k, acc.memory, 16, 16, batch=e.batch)
    return cm.analyze_memory(cm.GemmCall(m=e.m, n=e.n, k=e.k, batch=e.batch), acc, tiles).mapping


def test_tiny_gpt2_decode_ledger_records_the_searched_mapping():
    acc = preset("os16", mapping="auto")
    config = GPT2Config.preset("tiny")
    runner = GPT2Runner(config, random_params(config),
                        build=functools.partial(tenet_byoc.build, accelerator=acc))
    _, cache = runner.prefill(list(range(5)))
    gemm_ledger(runner.vm).reset()
    runner.decode(3, cache)
    _assert_ledger_is_the_search(gemm_ledger(runner.vm), acc)


def _roofline(acc, g, bits, extra_read_bits, extra_ops) -> int:
    # DESIGN.md's roofline, from the call alone: every PE busy, or DRAM moving each operand
    # (and the scales) once. The presets here do one MAC per PE per cycle at these widths;
    # with a DRAM channel per operand (tpu_v1) the busiest channel bounds it, the scales
    # travelling with A. The call is the one the array computes (tpu_v1: weights in whole
    # 256 x 256 tiles, tests/cost_model/test_tile_rules.py).
    a, b, c = bits
    g = cm.computed_call(cm.GemmCall(m=g.m, n=g.n, k=g.k, batch=g.batch, bits_a=a, bits_b=b,
                                     bits_c=c), acc)
    pes = acc.hardware.num_pes
    compute = math.ceil((g.batch * g.m * g.n * g.k + extra_ops) / pes)
    operand_bits = [g.batch * g.m * g.k * a + extra_read_bits, g.batch * g.k * g.n * b,
                    g.batch * g.m * g.n * c]
    dram_bits = (max(operand_bits) if acc.memory.dram_channel_per_operand
                 else sum(operand_bits))
    return max(compute, math.ceil(dram_bits / acc.memory.dram_bandwidth_bits))


def _phase_ratio(acc, scheme_name: str, phase: str, tokens: int = 128) -> float:
    """Searched cycles / roofline over GPT-2 small's calls of one phase (12 layers + head)."""
    scheme = get_scheme(scheme_name)
    cycles = roof = 0
    for g in model_gemms(GPT2Config.preset("small"), phase, tokens):
        quantized = g.weight is not None and scheme.kernel != "float"
        bits = scheme.bits() if quantized else (32, 32, 32)
        charge = cm.charge(cm.GemmCall(
            m=g.m, n=g.n, k=g.k, batch=g.batch, bits_a=bits[0], bits_b=bits[1],
            bits_c=bits[2], scheme=scheme_name if quantized else "none",
            recipe=scheme.recipe() if quantized else None), acc)
        q = charge.quant
        extra_read = q["weight_side_bits"] + q["activation_side_bits"]
        # Weight dequantization the edge dequantizer converts runs beside the array, not on
        # the PEs (its cycles bound the call separately, in edge_cycles).
        on_edge = (scheme.recipe().place == "weight"
                   and acc.edge_dequantizer.converts(bits[1])) if quantized else False
        extra_ops = q["quantize_ops"] + (0 if on_edge else q["dequant_ops"])
        expected_roof = _roofline(acc, g, bits, extra_read, extra_ops)
        assert charge.memory.roofline_cycles == expected_roof, (g, scheme_name)
        assert charge.memory.cycles >= expected_roof, (g, scheme_name)  # never below it
        cycles += charge.memory.cycles
        roof += expected_roof
    return cycles / roof


@pytest.mark.parametrize("scheme", ["none", "w8a8_per_channel_per_token", "w4a16_group128"])
def test_gpt2_small_prefill_near_the_roofline_on_os16_auto(scheme):
    # Issue 13: prefill within 1.25x of the roofline with the searched mappings.
    acc = preset("os16", mapping="auto")
    assert acc.memory.dram_channel_per_operand is False
    assert _phase_ratio(acc, scheme, "prefill") <= 1.25


def test_gpt2_small_float32_decode_near_the_roofline_on_os16_auto():
    assert _phase_ratio(preset("os16", mapping="auto"), "none", "decode") <= 1.25


@pytest.mark.parametrize("scheme", ["w8a8_per_channel_per_token", "w4a16_group128"])
def test_gpt2_small_quantized_decode_on_tpu_v1_auto(scheme):
    # Double-buffered weights let ws load the next tile while one runs: DRAM-bound decode.
    acc = preset("tpu_v1", mapping="auto")
    assert acc.memory.dram_channel_per_operand is True  # the weight memory carries B alone
    assert _phase_ratio(acc, scheme, "decode") <= 1.5
