"""The simulator's fast-forward of decode-only stretches against its iteration-by-iteration loop: every figure equal to the last bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tenet_byoc.serving import (
    LognormalLengths,
    SchedulerConfig,
    SplitStepCost,
    TraceRequest,
    poisson_trace,
    simulate,
)


class CountingCost(SplitStepCost):
    """A split cost with inexact float terms (so that the order of every sum shows) that
    counts the steps asked one by one."""

    def __init__(self, granularity: int):
        super().__init__(lambda t: 1e-3 * (1.0 + math.sqrt(t) / 7.0),
                         lambda n, c: 1.1e-5 * math.sqrt(n * (c + n)) + 1e-7 / (c + 3),
                         context_granularity=granularity, token_granularity=granularity,
                         head=lambda s: 3e-4 * (1.0 + math.sqrt(s) / 5.0))
        self.one_by_one = 0

    def seconds_of(self, items):
        self.one_by_one += 1
        return super().seconds_of(items)


def _trace(seed: int, n: int, prefixes: bool) -> list[TraceRequest]:
    trace = poisson_trace(60.0, n, LognormalLengths(60, 80, 1.0, 400, 300), seed=seed)
    if not prefixes:
        return trace
    return [TraceRequest(r.arrival_s, max(r.prompt_tokens, 40), r.output_tokens,
                         f"sys{i % 2}", 40) if i % 3 == 0 else r for i, r in enumerate(trace)]


def _both(trace, granularity, **kw):
    runs = []
    for fast in (False, True):
        cost = CountingCost(granularity)
        runs.append((simulate(trace, cost, fast_forward=fast, **kw), cost))
    return runs


@pytest.mark.parametrize("policy", ["vllm", "orca"])
@pytest.mark.parametrize(("seed", "kv_blocks", "prefixes", "granularity"),
                         [(0, 1 << 30, False, 16), (1, 40, False, 16), (2, 40, True, 1),
                          (3, 1 << 30, True, 4)])
def test_fast_forward_gives_the_loops_figures(policy, seed, kv_blocks, prefixes, granularity):
    trace = _trace(seed, 150, prefixes)
    sched = SchedulerConfig(policy, token_budget=256, max_seqs=24)
    (slow, slow_cost), (fast, fast_cost) = _both(trace, granularity, scheduler=sched,
                                                 kv_blocks=kv_blocks, block_size=16)
    # Exact equality: the fast path adds each step's terms in the loop's order and keeps
    # the clock as the loop's running sum (np.cumsum adds in sequence).
    for field in ("first_token_s", "finish_s", "preemptions", "step_start_s", "step_seconds",
                  "step_sequences", "step_tokens", "step_kv_blocks"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field), err_msg=field)
    assert (fast.cost_calls, fast.cost_misses) == (slow.cost_calls, slow.cost_misses)
    if kv_blocks < 1 << 30:
        assert slow.preemptions.sum() > 0  # the case holds preemptions
    # The fast path did run: some steps were not asked one by one.
    assert slow_cost.one_by_one == slow.iterations
    assert fast_cost.one_by_one < fast.iterations


def test_fast_forward_stops_at_the_sequence_limit_with_requests_waiting():
    # 40 requests at once, at most 8 sequences: the rest wait while 8 decode.
    trace = [TraceRequest(0.0, 5 + i, 30 + 7 * i) for i in range(40)]
    sched = SchedulerConfig("vllm", token_budget=64, max_seqs=8)
    (slow, _), (fast, fast_cost) = _both(trace, 16, scheduler=sched, block_size=16)
    np.testing.assert_array_equal(fast.finish_s, slow.finish_s)
    np.testing.assert_array_equal(fast.first_token_s, slow.first_token_s)
    np.testing.assert_array_equal(fast.step_seconds, slow.step_seconds)
    assert fast_cost.one_by_one < fast.iterations
