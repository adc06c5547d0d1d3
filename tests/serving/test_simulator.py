"""The serving simulator against queueing theory and hand-derived schedules."""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.plan import Step
from tenet_byoc.serving import (
    FixedLengths,
    SchedulerConfig,
    SplitStepCost,
    TraceRequest,
    poisson_trace,
    serving_metrics,
    simulate,
)


class Recording:
    """A cost of ``seconds`` per step that records each step's (new tokens, context) pairs."""

    def __init__(self, seconds=1.0):
        self.seconds = seconds
        self.steps: list[list[tuple[int, int]]] = []
        self.calls = self.misses = 0

    def seconds_of(self, items):
        self.steps.append(list(items))
        return self.seconds


def test_md1_mean_wait_matches_pollaczek_khinchine():
    # One request at a time, Poisson arrivals, a fixed service time D: M/D/1. The mean wait
    # in queue is lambda D^2 / (2 (1 - rho)) (Pollaczek-Khinchine with zero service variance).
    # Across seeds the 10^5-request mean scatters by about 1.2% (sd) at rho = 0.5.
    rate, service = 50.0, 0.01
    trace = poisson_trace(rate, 100_000, FixedLengths(8, 1), seed=0)
    run = simulate(trace, lambda step: service, scheduler=SchedulerConfig(max_seqs=1))
    wait = run.first_token_s - run.arrival_s - service
    rho = rate * service
    expected = rate * service**2 / (2 * (1 - rho))
    assert wait.mean() == pytest.approx(expected, rel=0.02)
    assert run.finish_s == pytest.approx(run.first_token_s)  # one output token each


def test_no_batching_throughput_is_the_steps_summed():
    # Service proportional to tokens, one sequence at a time, all requests waiting at 0: the
    # run lasts the sum of every request's prefill and decode steps, in arrival order.
    c = 1e-3
    rng = np.random.default_rng(7)
    lengths = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 40),
                                                 rng.integers(1, 50, 40), strict=True)]
    trace = [TraceRequest(0.0, p, o) for p, o in lengths]
    for policy in ("orca", "vllm"):
        run = simulate(trace, lambda step: c * step.tokens,
                       scheduler=SchedulerConfig(policy, token_budget=4096, max_seqs=1))
        per_request = [c * p + c * (o - 1) for p, o in lengths]  # prefill + O - 1 decodes
        total = sum(per_request)
        m = serving_metrics(run)
        assert m.seconds == pytest.approx(total)
        assert m.tokens_per_s == pytest.approx(sum(o for _, o in lengths) / total)
        assert m.requests_per_s == pytest.approx(len(lengths) / total)
        ends = np.cumsum(per_request)
        assert run.finish_s == pytest.approx(ends)
        firsts = ends - np.array(per_request) + [c * p for p, _ in lengths]
        assert run.first_token_s == pytest.approx(firsts)
        assert run.iterations == sum(o for _, o in lengths)


def test_preemption_by_recompute_by_hand():
    # 3 blocks of 4 tokens. A (prompt 4, output 6) and B (prompt 4, output 2) start together
    # (1 block each). A's first decode needs a second block, B's too: B, the later admitted,
    # is preempted and waits while A decodes (contexts 4..8: a step holds context + 1 tokens,
    # 2 blocks up to 8 tokens, 3 for 9); when A leaves, B recomputes its prompt and first
    # token (5 tokens, 2 blocks) and emits its second token.
    trace = [TraceRequest(0.0, 4, 6), TraceRequest(0.0, 4, 2)]
    cost = Recording(1.0)
    run = simulate(trace, cost, kv_blocks=3, block_size=4,
                   scheduler=SchedulerConfig("vllm", token_budget=64))
    assert cost.steps == [[(4, 0), (4, 0)], [(1, 4)], [(1, 5)], [(1, 6)], [(1, 7)], [(1, 8)],
                          [(5, 0)]]
    assert list(run.first_token_s) == [1.0, 1.0]
    assert list(run.finish_s) == [6.0, 7.0]
    assert list(run.preemptions) == [0, 1]
    assert list(run.step_kv_blocks) == [2, 2, 2, 2, 2, 3, 2]


def test_chunked_prefill_puts_decodes_first():
    # Budget 8: A (prompt 3) prefills, then decodes one token a step first while B's 20-token
    # prompt arriving at 0.5 is cut into chunks of what the budget leaves (7, 7, 6).
    trace = [TraceRequest(0.0, 3, 5), TraceRequest(0.5, 20, 2)]
    cost = Recording(1.0)
    simulate(trace, cost, scheduler=SchedulerConfig("vllm", token_budget=8))
    assert cost.steps == [[(3, 0)], [(1, 3), (7, 0)], [(1, 4), (7, 7)], [(1, 5), (6, 14)],
                          [(1, 6), (1, 20)]]


def test_orca_never_cuts_a_prompt():
    # Orca-style, budget 8: B's 20-token prompt waits while A decodes (it does not fit whole
    # in the 7 tokens A's decode leaves), and C, behind B in arrival order, waits too; when A
    # is done B runs whole and alone (above the budget), then C.
    trace = [TraceRequest(0.0, 3, 3), TraceRequest(0.5, 20, 1), TraceRequest(0.5, 6, 1)]
    cost = Recording(1.0)
    simulate(trace, cost, scheduler=SchedulerConfig("orca", token_budget=8))
    assert cost.steps == [[(3, 0)], [(1, 3)], [(1, 4)], [(20, 0)], [(6, 0)]]


def test_prefix_sharing_skips_the_shared_blocks():
    # Two requests share a 40-token prefix (blocks of 16: two full blocks, 32 tokens); the
    # second arrives after the first's prefill and computes only its prompt past 32 tokens.
    trace = [TraceRequest(0.0, 50, 4, "sys", 40), TraceRequest(1.5, 45, 2, "sys", 40)]
    cost = Recording(1.0)
    run = simulate(trace, cost, block_size=16)
    assert cost.steps[0] == [(50, 0)]
    assert cost.steps[2] == [(1, 51), (13, 32)]  # step 3 starts at t = 2
    # A holds 52 tokens: 2 shared blocks + 2 own; B 32 shared + 13 own = 1 block.
    assert run.step_kv_blocks[2] == 4 + 1


def test_split_cost_is_dense_plus_attention():
    cost = SplitStepCost(lambda t: 2.0 * t, lambda n, c: n * (c + n), context_granularity=4)
    step = [(1, 5), (1, 5), (3, 0)]
    # dense 2 * 5 tokens; attention 1 * (8 + 1) twice (5 -> 8), 3 * 3.
    assert cost.seconds_of(step) == 10 + 9 + 9 + 9
    assert cost(Step.decode(5, batch=2)) == 4 + 18


def test_request_larger_than_the_cache_is_refused():
    with pytest.raises(ValueError, match=r"request 1 .*needs 3 KV blocks.*has 2"):
        simulate([TraceRequest(0.0, 4, 1), TraceRequest(0.0, 30, 4)], lambda s: 1.0,
                 kv_blocks=2, block_size=16)


@pytest.mark.parametrize("policy", ["vllm", "orca"])
def test_tight_cache_with_prefixes_finishes_every_request(policy):
    # 300 requests, a third sharing one of two prompt prefixes, in a cache of 40 blocks of 8
    # tokens: many preemptions; every request still finishes, in order of its own events,
    # and the blocks in use never pass the cache.
    rng = np.random.default_rng(3)
    trace, t = [], 0.0
    for i in range(300):
        t += float(rng.exponential(0.05))
        p, o = int(rng.integers(4, 120)), int(rng.integers(1, 60))
        if i % 3 == 0:
            trace.append(TraceRequest(t, max(p, 40), o, f"sys{i % 2}", 40))
        else:
            trace.append(TraceRequest(t, p, o))
    run = simulate(trace, lambda step: 1e-3 * (1 + step.tokens / 64), kv_blocks=40,
                   block_size=8, scheduler=SchedulerConfig(policy, token_budget=96,
                                                           max_seqs=16))
    assert not np.isnan(run.finish_s).any()
    assert (run.arrival_s <= run.first_token_s).all()
    assert (run.first_token_s <= run.finish_s).all()
    assert run.step_kv_blocks.max() <= 40
    assert run.preemptions.sum() > 0
    assert run.step_sequences.max() <= 16
    if policy == "vllm":  # Orca runs a prompt above the budget alone, whole
        assert run.step_tokens.max() <= 96


def test_prompt_granularity_rounds_only_a_prompts_first_chunk():
    cost = SplitStepCost(lambda t: 2.0 * t, lambda n, c: n * (c + n), context_granularity=4,
                         prompt_granularity=8)
    # dense 2 * 10 tokens on the real count; the prompt's 5 tokens charged as 8 (8 * 8), a
    # later chunk's 3 tokens after 5 (-> 8) as they are (3 * 11), a decode after 5 (1 * 9).
    assert cost.seconds_of([(5, 0), (3, 5), (1, 5), (1, 0)]) == 20 + 64 + 33 + 9 + 64
    with pytest.raises(ValueError, match="prompt_granularity=0"):
        SplitStepCost(lambda t: 0.0, lambda n, c: 0.0, prompt_granularity=0)
