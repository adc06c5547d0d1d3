"""Serving a mixture-of-experts model: a serving step's expert calls are the plan's for that step, by hand count (a tiny Mixtral: 4 experts, 2 per token, 2 mixture layers)."""

from __future__ import annotations

import pytest

from tenet_byoc.estimate import estimate_step
from tenet_byoc.models.moe import MoEConfig
from tenet_byoc.plan import Step, plan
from tenet_byoc.serving import TraceRequest, simulate
from tenet_byoc.serving.cost import model_step_cost

TINY = {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 64, "rope_theta": 1000.0,
        "model_type": "mixtral"}


def _expert_rows(p):
    return {c.name: c.call.m for c in p.calls
            if ".experts." in c.name and c.name.endswith("gate_proj")}


def test_a_serving_steps_expert_calls_are_the_plans_by_hand():
    # A decode step of 3 sequences: 3 tokens x 2 experts = 6 rows over round(4 x (1 - (1 -
    # 2/4)^3)) = round(3.5) = 4 experts (Python rounds half to even), 2, 2, 1, 1 rows, in
    # each of the 2 mixture layers. The serving cost's dense part plans a 3-token step of
    # the whole model (its layers may differ, so no layer stands for the others): the same
    # expert calls as the plan of the decode step itself, and its seconds (dense + head +
    # each sequence's attention) those of the whole step's plan.
    config = MoEConfig.from_hf_dict(TINY, name="tiny-mixtral")
    step = Step.decode(8, batch=3)
    want = {f"layers.{i}.experts.{j}.gate_proj": r for i in range(2)
            for j, r in enumerate((2, 2, 1, 1))}
    assert _expert_rows(plan(config, step)) == want
    assert _expert_rows(plan(config, Step.prefill(3))) == want  # the dense term's plan
    cost = model_step_cost(config, "none", "os16", context_granularity=1, token_granularity=1)
    whole = estimate_step(config, step, "none", "os16", entries=False)[0].seconds
    # (1.2% apart: the dense term's vector calls are a prefill's, [1, 3, d], where the
    # decode batch has [3, 1, d]; on this tiny model their fixed costs weigh.)
    assert cost.seconds_of([(1, 8)] * 3) == pytest.approx(whole, rel=0.02)
    # serve runs on it: a request's first token after its prompt's step.
    run = simulate([TraceRequest(0.0, 6, 2)], cost)
    assert run.first_token_s[0] == pytest.approx(cost.seconds_of([(6, 0)]))


def test_a_serving_chunk_of_a_mixture_of_experts_reads_its_cached_keys():
    # A 6-token chunk after 20 cached tokens: the split cost (dense part of 6 rows, the head
    # of its last row, the chunk's attention over 20 + 6 keys) is the whole chunk's plan,
    # and dearer than the same 6 tokens as a prompt of their own (6 keys).
    from tenet_byoc.plan import StepSequence

    config = MoEConfig.from_hf_dict(TINY, name="tiny-mixtral")
    cost = model_step_cost(config, "none", "os16", context_granularity=1, token_granularity=1)
    step = Step([StepSequence(6, 20, logits="last")])
    whole = estimate_step(config, step, "none", "os16", entries=False)[0].seconds
    assert cost.seconds_of([(6, 20)]) == pytest.approx(whole, rel=0.02)
    assert cost.seconds_of([(6, 20)]) > cost.seconds_of([(6, 0)])
