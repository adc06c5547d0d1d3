"""The tiles a kernel computes a call in, charged by the cost model (``cm.computed_call``).

Two rules of the hardware: cuBLAS's SGEMM computes 9 to 32 rows in 32-row thread blocks and
33 to 64 in 64-row ones (``MacSpec.row_tiles`` on the Hopper presets' float32 unit, profiled
in benchmarks/silicon/data/h200/kernels.jsonl), and TPU v1 fetches weights in whole 256 x 256
tiles (``MemoryHierarchy.whole_stationary_tiles``, Jouppi et al. 2017 Sec. 2, 7). Each charge
is checked against figures derived by hand from the presets' data-sheet numbers.
"""

from __future__ import annotations

import json

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, Accelerator, preset


def fp32(m: int, n: int = 8192, k: int = 8192) -> cm.GemmCall:
    return cm.GemmCall(m=m, n=n, k=k, bits_a=32, bits_b=32, bits_c=32)


@pytest.mark.parametrize("name", ["h200", "h100_sxm"])
def test_sgemm_rows_in_thread_block_tiles(name):
    acc = preset(name)
    # The profiled ranges: 1-8 rows GEMV-like kernels, 9-32 in 32-row tiles, 33-64 in 64-row
    # tiles, 65 on as they are; bf16 (tensor cores) is never padded.
    for m, rows in ((1, 1), (8, 8), (9, 32), (16, 32), (32, 32), (33, 64), (64, 64), (65, 65)):
        assert cm.computed_call(fp32(m), acc).m == rows, m
    bf16 = cm.GemmCall(m=16, n=64, k=64, bits_a=16, bits_b=16, bits_c=16)
    assert cm.computed_call(bf16, acc) == bf16


def test_h200_fp32_16_rows_charged_as_32():
    acc = preset("h200")
    c16, c32 = cm.charge(fp32(16), acc), cm.charge(fp32(32), acc)
    # 32 rows x 8192 x 8192 MACs on 132 SMs x 128 CUDA cores (one FMA each a clock): the MAC
    # bound, above the weights' 8192^2 x 32 bits at 4.8 TB/s / 1.83 GHz (~102,300 cycles).
    mac_bound = -(-32 * 8192 * 8192 // (132 * 128))
    assert c16.memory.roofline_cycles == mac_bound == c32.memory.roofline_cycles
    assert c16.memory.cycles == c32.memory.cycles
    # The ledger keeps the call's own rows.
    assert c16.ledger_fields()["m"] == 16


def test_tpu_v1_fetches_weights_in_whole_tiles():
    acc = preset("tpu_v1", mapping="auto")
    call = cm.GemmCall(m=96, n=600, k=600, bits_a=8, bits_b=8, bits_c=32)
    assert (cm.computed_call(call, acc).k, cm.computed_call(call, acc).n) == (768, 768)
    # LSTM1's 600 x 600 int8 matrix: 3 x 3 tiles of 256 x 256 bytes (the paper's 9 steps).
    charge = cm.charge(call, acc)
    assert charge.memory.tensors["B"].dram_read_bits == 9 * 64 * 1024 * 8
    # Its MACs stay the layer's own (the padding holds PEs idle).
    assert charge.ledger_fields()["macs"] == 96 * 600 * 600 == charge.memory.macs
    # With the rule off, the weights as stored: 600 x 600 bytes.
    memory = {**json.loads(acc.to_json())["memory"], "whole_stationary_tiles": False}
    stored = acc.replace(memory=cm.MemoryHierarchy(**memory))
    assert cm.charge(call, stored).memory.tensors["B"].dram_read_bits == 600 * 600 * 8


def test_other_presets_compute_calls_as_given():
    calls = [fp32(16, 100, 300), cm.GemmCall(m=20, n=600, k=600, bits_a=8, bits_b=8),
             cm.GemmCall(m=40, n=70, k=90, bits_a=16, bits_b=16)]
    for name in sorted(set(PRESETS) - {"h200", "h100_sxm", "tpu_v1"}):
        for call in calls:
            assert cm.computed_call(call, preset(name)) == call, name


def test_rules_round_trip_and_refusals():
    for name in ("h200", "tpu_v1"):
        acc = preset(name)
        assert Accelerator.from_json(acc.to_json()) == acc
    with pytest.raises(ValueError, match=r"row_tiles\[1\].*min_rows 30, rows 64"):
        cm.PrecisionTable([cm.MacSpec(32, 32, 1, 4.6, row_tiles=[(9, 32), (30, 64)])])
    with pytest.raises(ValueError, match="whole_stationary_tiles needs an array of one preset"):
        Accelerator.systolic("ws", 8, 8, memory=cm.MemoryHierarchy(whole_stationary_tiles=True))
    bad = json.loads(preset("h200").to_json())
    bad["precision"][3]["row_tiles"] = 32
    with pytest.raises(ValueError, match=r"accelerator.precision\[3\].row_tiles must be a list"):
        Accelerator.from_json(json.dumps(bad))
    # Files written before the rules (no such keys) load with them off.
    text = json.loads(preset("os16").to_json())
    assert "whole_stationary_tiles" not in text["memory"]
    assert not Accelerator.from_json(json.dumps(text)).memory.whole_stationary_tiles
