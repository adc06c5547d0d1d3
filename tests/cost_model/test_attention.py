"""Fused attention (src/cost_model/attention.h, cost_model.charge_attention): work units,
causal pairs, K/V read once per KV head, the unit's MMA, softmax and stream cycles and the
call's cycles against hand formulas; bad calls refused by field."""

from __future__ import annotations

import math
import pickle

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset


def _hand(acc, b, h, kv, s, n, d, causal, bits=16, q_tile=128):
    """The model of attention.h written out from the call and the accelerator's figures."""
    g = h // kv
    pairs = s * n - (s * (s - 1) // 2 if causal else 0)
    tiles = math.ceil(g * s / q_tile)
    units = b * kv * tiles
    cores = acc.cores.count
    pes = acc.hardware.num_pes  # one core's array
    rate = acc.hardware.macs_per_pe_per_cycle[bits]
    mma = 2 * b * h * pairs * d / units / (pes * rate)
    c = acc.vector.cycles_per_op
    soft = b * h * pairs / units * (3 * c["add"] + c["mul"] + c["exp"]) / (acc.vector.lanes / cores)
    share = acc.cores.shared_bandwidth_bits / cores if cores > 1 else acc.memory.dram_bandwidth_bits
    stream = 2 * pairs / s * d * bits / share
    dram_bits = (b * h * s * d + 2 * b * kv * n * d + b * h * s * d) * bits
    dram = math.ceil(dram_bits / acc.memory.dram_bandwidth_bits)
    waves = math.ceil(units / cores)
    return units, max(math.ceil(waves * max(mma + soft, stream)), dram) + acc.cores.launch_cycles


@pytest.mark.parametrize("b, h, kv, s, n, d, causal", [
    (1, 32, 8, 2048, 2048, 128, True),   # prefill, GQA 4: compute-bound
    (16, 64, 8, 1, 2048, 128, False),    # decode: 128 units, K/V streams
    (1, 12, 12, 128, 128, 64, True),     # small: launch-bound
    (2, 8, 2, 300, 700, 64, True),       # causal with a past: queries are the last 300 keys
])
def test_h200_charge_equals_the_hand_model(b, h, kv, s, n, d, causal):
    acc = preset("h200")
    call = cm.AttentionCall(batch=b, heads=h, kv_heads=kv, queries=s, keys=n, head_dim=d,
                            causal=causal)
    ch = cm.charge_attention(call, acc)
    units, cycles = _hand(acc, b, h, kv, s, n, d, causal)
    assert ch.units == units and ch.cycles == cycles
    pairs = s * n - (s * (s - 1) // 2 if causal else 0)
    assert ch.macs == 2 * b * h * pairs * d and ch.scores == b * h * pairs
    assert ch.dram_read_bytes == (b * h * s * d + 2 * b * kv * n * d) * 2
    assert ch.dram_write_bytes == b * h * s * d * 2
    assert ch.latency_us == pytest.approx(ch.cycles / (acc.hardware.clock_ghz * 1e3))
    # Its PE time, as a GEMM's: every SM's 8 x 16 array at the 16-bit rate.
    assert (ch.num_pes, ch.macs_per_pe_per_cycle) == (132 * 8 * 16,
                                                      acc.hardware.macs_per_pe_per_cycle[16])


def test_causal_pairs_are_the_lower_triangle_by_count():
    # 4 queries, the last of 6 keys: they see 3, 4, 5 and 6 keys = 18 pairs.
    call = cm.AttentionCall(heads=1, queries=4, keys=6, head_dim=8, causal=True)
    assert cm.charge_attention(call, preset("h200")).scores == 3 + 4 + 5 + 6


def test_gqa_reads_each_kv_head_once_and_one_core_streams_from_dram():
    mha = cm.AttentionCall(heads=32, kv_heads=32, queries=1, keys=4096, head_dim=128)
    gqa = cm.AttentionCall(heads=32, kv_heads=8, queries=1, keys=4096, head_dim=128)
    acc = preset("h200")
    a, b = cm.charge_attention(mha, acc), cm.charge_attention(gqa, acc)
    kv_bytes = lambda heads: 2 * heads * 4096 * 128 * 2  # noqa: E731
    assert a.dram_read_bytes - b.dram_read_bytes == kv_bytes(32) - kv_bytes(8)
    one = preset("os16")  # one core: the stream runs at the DRAM bandwidth
    ch = cm.charge_attention(gqa, one)
    assert ch.stream_cycles == pytest.approx(2 * 4096 * 128 * 16 / one.memory.dram_bandwidth_bits)


@pytest.mark.parametrize("kwargs, message", [
    ({"heads": 6, "kv_heads": 4}, "AttentionCall.kv_heads = 4 must divide heads = 6"),
    ({"heads": 4, "queries": 0}, r"AttentionCall.queries = 0; expected >= 1"),
    ({"heads": 4, "bits": 0}, "AttentionCall.bits = 0"),
    ({"heads": 4, "queries": 9, "keys": 8, "causal": True}, "queries = 9 exceeds keys = 8"),
    ({"heads": 4, "q_tile": 0}, "AttentionCall.q_tile"),
])
def test_bad_calls_are_refused_by_field(kwargs, message):
    base = {"queries": 4, "keys": 8, "head_dim": 16}
    with pytest.raises(ValueError, match=message):
        cm.AttentionCall(**{**base, **kwargs})


def test_a_call_pickles_to_an_equal_call():
    call = cm.AttentionCall(batch=2, heads=8, kv_heads=2, queries=5, keys=9, head_dim=16,
                            causal=True, q_tile=64)
    back = pickle.loads(pickle.dumps(call))
    assert back == call and back.to_json() == call.to_json()
