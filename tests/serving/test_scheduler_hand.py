"""The vLLM-style and Orca-style schedules of one small trace, derived by hand: each iteration's sequences, tokens and KV blocks in use, and each request's first and last token.

The trace (blocks of 4 tokens, an 8-token budget, 1 s an iteration): A (prompt 6, output 3)
and B (prompt 10, output 2) arrive at 0, C (prompt 3, output 2) at 1.5 s. A sequence holding
``t`` tokens owns ceil(t / 4) blocks; a token is emitted when a sequence's computed tokens
reach its prompt plus the tokens emitted.

Vidur's schedulers differ in rules stated in benchmarks/results/serving_vidur.md (its
``sarathi`` reserves a prompt's blocks in full at admission: B's 3 blocks in the first
iteration, 5 in use where ours has 3; its ``orca`` reserves ``max_tokens`` a request and has
no token budget).
"""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.serving import SchedulerConfig, TraceRequest, simulate

TRACE = [TraceRequest(0.0, 6, 3), TraceRequest(0.0, 10, 2), TraceRequest(1.5, 3, 2)]


class Recording:
    """1 s a step; records each step's (new tokens, context) pairs."""

    calls = misses = 0

    def __init__(self):
        self.steps: list[list[tuple[int, int]]] = []

    def seconds_of(self, items):
        self.steps.append(list(items))
        return 1.0


def run(policy: str):
    cost = Recording()
    r = simulate(TRACE, cost, scheduler=SchedulerConfig(policy, token_budget=8, max_seqs=8),
                 kv_blocks=100, block_size=4)
    return r, cost.steps


def test_vllm_style_by_hand():
    r, steps = run("vllm")
    # t=0: A's whole prompt (6 tokens, 2 blocks), B's first chunk of the 2 left (1 block).
    # t=1: A decodes (7 tokens: 2 blocks), B's next chunk of 7 (9 tokens: 3 blocks) -> 5.
    # t=2: C has arrived: A decodes (8 tokens, 2 blocks), B's last prompt token (10: 3),
    #      C's prompt (3: 1) -> 6; A ends (its 3rd token), B and C emit their first.
    # t=3: B (11 tokens, 3 blocks) and C (4, 1) decode -> 4; both end.
    assert steps == [[(6, 0), (2, 0)], [(1, 6), (7, 2)], [(1, 7), (1, 9), (3, 0)],
                     [(1, 10), (1, 3)]]
    assert r.step_sequences.tolist() == [2, 2, 3, 2]
    assert r.step_tokens.tolist() == [8, 8, 5, 2]
    assert r.step_kv_blocks.tolist() == [3, 5, 6, 4]
    assert r.step_start_s.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(r.first_token_s, [1, 3, 3])
    np.testing.assert_array_equal(r.finish_s, [3, 4, 4])


def test_orca_style_by_hand():
    r, steps = run("orca")
    # Whole prompts only: B's 10 tokens never fit beside A, so B (and C behind it) wait.
    # t=0: A's prompt (2 blocks). t=1, t=2: A decodes (7, 8 tokens: 2 blocks); C, arrived,
    # waits behind B. A ends at 3. t=3: B alone, its prompt over the budget (10 tokens,
    # 3 blocks). t=4: B decodes (11: 3 blocks) beside C's prompt (1 block) -> 4; B ends.
    # t=5: C decodes (4 tokens: 1 block) and ends.
    assert steps == [[(6, 0)], [(1, 6)], [(1, 7)], [(10, 0)], [(1, 10), (3, 0)], [(1, 3)]]
    assert r.step_sequences.tolist() == [1, 1, 1, 1, 2, 1]
    assert r.step_tokens.tolist() == [6, 1, 1, 10, 4, 1]
    assert r.step_kv_blocks.tolist() == [2, 2, 2, 3, 4, 1]
    np.testing.assert_array_equal(r.first_token_s, [1, 4, 5])
    np.testing.assert_array_equal(r.finish_s, [3, 5, 6])


@pytest.mark.parametrize("policy", ["vllm", "orca"])
def test_blocks_in_use_are_the_running_sequences_tokens(policy):
    # Independent of the schedule: at each step, blocks in use = sum over the step's
    # sequences of ceil((context + new tokens) / 4) (no sequence waits while holding blocks
    # in this trace: every running sequence is in every step).
    r, steps = run(policy)
    expected = [sum(-(-(c + k) // 4) for k, c in step) for step in steps]
    assert r.step_kv_blocks.tolist() == expected
