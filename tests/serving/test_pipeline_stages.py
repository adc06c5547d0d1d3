"""Pipeline parallelism with several steps in flight: the simulator's schedule against traces worked out by hand.

A step's cost here is its new tokens in seconds (``Tokens``); with ``stages = 2`` each stage
takes half of it, a step enters a stage when the one before it has left that stage, and its
sequences emit when it leaves the last. Blocks of 4 tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.serving import SchedulerConfig, TraceRequest, simulate


class Tokens:
    """A step costs its new tokens in seconds; records the steps."""

    calls = misses = 0

    def __init__(self):
        self.steps: list[list[tuple[int, int]]] = []

    def seconds_of(self, items):
        items = list(items)
        self.steps.append(items)
        return float(sum(k for k, _ in items))


def run(trace, stages, kv_blocks=100):
    cost = Tokens()
    r = simulate(trace, cost, scheduler=SchedulerConfig("vllm", token_budget=64),
                 kv_blocks=kv_blocks, block_size=4, stages=stages)
    return r, cost.steps


def test_two_steps_in_flight_by_hand():
    # A (prompt 4, output 2) at 0, B (prompt 1, output 1) at 0.5.
    # 0: A's prompt (4 s: stage 1 0-2, stage 2 2-4). 2: the first stage is free and B has
    # arrived: B's prompt alone (A is in flight), 1 s: stage 1 2-2.5, stage 2 waits for A's
    # step to leave at 4: 4-4.5. Two in flight: wait. 4: A emits its first token and decodes
    # (stage 1 4-4.5, stage 2 4.5-5). 4.5: B emits (its only token). 5: A's second token.
    trace = [TraceRequest(0.0, 4, 2), TraceRequest(0.5, 1, 1)]
    r, steps = run(trace, stages=2)
    assert steps == [[(4, 0)], [(1, 0)], [(1, 4)]]
    assert r.step_start_s.tolist() == [0.0, 2.0, 4.0]
    assert r.step_seconds.tolist() == [4.0, 1.0, 1.0]
    assert r.step_kv_blocks.tolist() == [1, 2, 3]  # A's 5th token opens its 2nd block
    np.testing.assert_array_equal(r.first_token_s, [4.0, 4.5])
    np.testing.assert_array_equal(r.finish_s, [5.0, 4.5])
    # One stage, the same costs: B joins A's decode at 4 (2 s), both done at 6.
    r1, steps1 = run(trace, stages=1)
    assert steps1 == [[(4, 0)], [(1, 4), (1, 0)]]
    np.testing.assert_array_equal(r1.first_token_s, [4.0, 6.0])
    np.testing.assert_array_equal(r1.finish_s, [6.0, 6.0])


def test_a_sequence_in_flight_is_never_preempted():
    # 2 blocks of 4. A (prompt 4, output 3) at 0, B (prompt 3, output 2) at 0.5.
    # 0: A's prompt (1 block; 4 s: out at 4). 2: B's prompt (1 block; 3 s: stage 1 2-3.5,
    # stage 2 4-5.5). 4: A emits and needs a 2nd block for its decode; none is free, and B,
    # the latest admitted, is in flight: A itself is preempted (recompute), nothing runs.
    # 5.5: B emits, decodes (1 s, out 6.5); A cannot rejoin (5 tokens, 2 blocks, 1 free).
    # 6.5: B ends; A recomputes prompt + first token (5 s: 6.5-9, 9-11.5), emits its 2nd
    # token at 11.5, decodes (out 12.5).
    trace = [TraceRequest(0.0, 4, 3), TraceRequest(0.5, 3, 2)]
    r, steps = run(trace, stages=2, kv_blocks=2)
    assert steps == [[(4, 0)], [(3, 0)], [(1, 3)], [(5, 0)], [(1, 5)]]
    assert r.step_start_s.tolist() == [0.0, 2.0, 5.5, 6.5, 11.5]
    assert r.step_kv_blocks.tolist() == [1, 2, 1, 2, 2]
    assert r.preemptions.tolist() == [1, 0]
    np.testing.assert_array_equal(r.first_token_s, [4.0, 5.5])
    np.testing.assert_array_equal(r.finish_s, [12.5, 6.5])


@pytest.mark.parametrize("stages", [0, -1, 1.5, True])
def test_bad_stages_named(stages):
    with pytest.raises(ValueError, match="stages="):
        simulate([TraceRequest(0.0, 1, 1)], lambda step: 1.0, stages=stages)


def test_steady_decodes_overlap():
    # 4 sequences decoding for long, all admitted at 0, 2 stages, budget 2 tokens: each
    # step holds 2 sequences and the two halves alternate, so after the prompts the engine
    # emits 2 tokens every stage time (1 s for a 2-token step): twice one stage's rate.
    trace = [TraceRequest(0.0, 1, 20) for _ in range(4)]
    cost = Tokens()
    r = simulate(trace, cost, scheduler=SchedulerConfig("vllm", token_budget=2),
                 kv_blocks=100, block_size=4, stages=2)
    assert set(r.step_sequences.tolist()) == {2}
    # Each step costs 2 s: 1 s a stage. Steps start every 1 s from 0, none waits.
    np.testing.assert_allclose(r.step_start_s, np.arange(r.iterations, dtype=float))
    assert r.iterations == 4 * 20 // 2
    assert r.finish_s.max() == pytest.approx(r.iterations + 1.0)


def test_serve_keeps_a_step_in_flight_per_stage():
    # serve(system=PP 2) runs the simulator with two stages: its run equals simulate(stages=2)
    # of the same cost, and differs from one step in flight.
    from tenet_byoc.accelerators import resolve
    from tenet_byoc.serving.study import serve
    from tenet_byoc.system import Link, System

    acc = resolve("os16")
    trace = [TraceRequest(0.01 * i, 24, 4) for i in range(6)]
    system = System(acc, 2, 1, 2, 1, Link(100.0, 1.0))
    (s,) = serve("gpt2", acc, ["none"], trace=trace, system=system, memory_bytes=1e9)
    two = simulate(trace, s.cost, kv_blocks=s.sizing.blocks, stages=2)
    one = simulate(trace, s.cost, kv_blocks=s.sizing.blocks, stages=1)
    np.testing.assert_array_equal(s.run.finish_s, two.finish_s)
    # (Not necessarily faster: the last stage holds GPT-2's 50,257-wide head beside its 6
    # layers, the slowest stage here.)
    assert not np.array_equal(s.run.finish_s, one.finish_s)


def test_stages_hold_whole_layers_by_hand():
    # GPT-2 cut to 5 layers on 2 stages: 3 layers on the first, 2 on the last (the first
    # stage takes the remainder, as Megatron-LM / vLLM split layers); the embedding on the
    # first, the final norm and the head on the last. Each stage's share of a step is that of
    # the whole-step plan composed stage by stage (estimate_step's stage_seconds, the
    # hand-over counted on the stage that sends it), and the simulator's second step enters
    # the first stage when the first step leaves it.
    import dataclasses

    from tenet_byoc.estimate import estimate_step
    from tenet_byoc.accelerators import preset
    from tenet_byoc.plan import Step, StepSequence, model_config, stage_layers
    from tenet_byoc.serving.cost import model_step_cost
    from tenet_byoc.system import Link, System

    config = dataclasses.replace(model_config("gpt2"), n_layer=5)
    assert [list(r) for r in stage_layers(5, 2)] == [[0, 1, 2], [3, 4]]
    acc = preset("os16")
    system = System(acc, 2, 1, 2, 1, Link(100.0, 1.0))
    cost = model_step_cost(config, "none", acc, context_granularity=1, token_granularity=1,
                           system=system)
    total = cost.seconds_of([(16, 0)])
    parts = cost.stage_split(16, 1, total)
    whole = estimate_step(config, Step([StepSequence(16, 0, logits="last")]), "none", acc,
                          system=system, entries=False)[0]
    assert sum(parts) == pytest.approx(total, rel=1e-12)
    assert parts == pytest.approx([whole.stage_seconds[0] + whole.p2p_seconds,
                                   whole.stage_seconds[1]], rel=1e-9)
    trace = [TraceRequest(0.0, 16, 1), TraceRequest(1e-9, 16, 1)]
    r = simulate(trace, cost, stages=2)
    assert r.step_start_s.tolist() == pytest.approx([0.0, parts[0]])
    assert r.first_token_s[0] == pytest.approx(total)
