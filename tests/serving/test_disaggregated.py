"""Disaggregated serving against a schedule derived by hand, and the transfer's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.serving import SchedulerConfig, TraceRequest, serving_metrics
from tenet_byoc.serving.disaggregated import kv_transfer_seconds, simulate_disaggregated
from tenet_byoc.system import Link


def test_schedule_by_hand():
    # Prefill pool: 0.002 s + 1 ms per token; decode pool: 0.003 s + 1 ms per sequence;
    # a prompt's transfer 0.5 ms per token, one at a time.
    #   prefill: A (10) and B (20) at 0 in one step of 30 tokens, 0.032 s: both first
    #     tokens at 0.032; C (10, one output token) arrives at 0.05, done at 0.062.
    #   link: A 0.032 -> 0.037, then B 0.037 -> 0.047 (C has nothing to decode).
    #   decode: A alone at 0.037 (context 10) -> 0.041, again (11) -> 0.045, done;
    #     idle to B's arrival, 0.047 (context 20) -> 0.051, done.
    decode_steps = []

    def prefill(step):
        return 0.002 + 0.001 * step.tokens

    def decode(step):
        decode_steps.append(sorted((s.new_tokens, s.context) for s, n in step.groups
                                   for _ in range(n)))
        return 0.003 + 0.001 * step.sequences

    trace = [TraceRequest(0.0, 10, 3), TraceRequest(0.0, 20, 2), TraceRequest(0.05, 10, 1)]
    out = simulate_disaggregated(trace, prefill, decode, lambda p: 0.0005 * p,
                                 prefill_kv_blocks=10, decode_kv_blocks=10, block_size=4)
    assert out.run.first_token_s == pytest.approx([0.032, 0.032, 0.062])
    assert out.run.finish_s == pytest.approx([0.045, 0.051, 0.062])
    assert out.transfer_start_s[:2] == pytest.approx([0.032, 0.037])
    assert out.transfer_end_s[:2] == pytest.approx([0.037, 0.047])
    assert np.isnan(out.transfer_start_s[2])
    assert decode_steps == [[(1, 10)], [(1, 11)], [(1, 20)]]
    # The decode pool held A's prompt and tokens: 11 then 12 tokens, 3 blocks of 4.
    assert list(out.decode.step_kv_blocks) == [3, 3, 6]
    m = serving_metrics(out.run)
    assert m.ttft_ms_p50 == pytest.approx(32.0)


def test_a_full_decode_cache_makes_a_transfer_wait():
    # A decode pool of 6 blocks of 4: A's 16-token prompt takes 5 blocks (17 tokens), B's
    # 8-token prompt cannot join until A is done: B decodes after A.
    trace = [TraceRequest(0.0, 16, 2), TraceRequest(0.0, 8, 2)]
    out = simulate_disaggregated(trace, lambda s: 0.01, lambda s: 0.001, lambda p: 0.0,
                                 decode_kv_blocks=6, block_size=4,
                                 decode_scheduler=SchedulerConfig(max_seqs=8))
    assert out.run.finish_s == pytest.approx([0.011, 0.012])


def test_transfer_seconds_by_hand():
    # 100 tokens of 36,864 bytes (GPT-2 small, fp16 cache) over 2 chips of 50 GB/s, 2 us.
    t = kv_transfer_seconds(36864.0, Link(50.0, 2.0), senders=2)
    assert t(100) == pytest.approx(100 * 36864 / 100e9 + 2e-6)
    with pytest.raises(ValueError, match="senders"):
        kv_transfer_seconds(1.0, Link(), senders=0)
