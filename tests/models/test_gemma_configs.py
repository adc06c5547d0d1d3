"""Gemma-2 / Gemma-3 configs: published parameter counts, transformers' layer mix, refusals."""

from __future__ import annotations

import importlib.util

import pytest

from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.llama import LlamaConfig, param_count


def test_parameter_counts_equal_the_published_ones():
    # Gemma-2-9B: 9.24 B parameters (the model card's figure; its safetensors hold
    # 9,241,705,984 with the embedding tied to the head).
    _, total = param_count(resolve_config("gemma-2-9b"))
    assert round(total / 1e9, 2) == 9.24
    # Gemma-3-4B: 3,209 M non-embedding parameters in the text decoder (Gemma 3 Technical
    # Report, Table 1; its embedding column also counts the vision projector).
    config = resolve_config("gemma-3-4b")
    _, total = param_count(config)
    assert round((total - config.vocab_size * config.hidden_size) / 1e6) == 3209


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
@pytest.mark.parametrize("family, layers", [("gemma2", 7), ("gemma3_text", 13)])
def test_default_layer_mix_is_transformers(family, layers):
    import transformers

    kind = {"gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig"}[family]
    want = getattr(transformers, kind)(num_hidden_layers=layers).layer_types
    values = {"model_type": family, "num_hidden_layers": layers, "hidden_size": 32,
              "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 11,
              "sliding_window": 4}
    config = LlamaConfig.from_hf_dict(values)
    assert list(config.layer_types) == list(want)
    assert [config.layer_window(i) for i in range(layers)] == [
        4 if t == "sliding_attention" else None for t in want]
    assert config.window is None and not config.uniform_layers


def test_gemma3_rope_as_older_files_write_it():
    # The published Gemma-3-4B file: rope_theta and rope_scaling for the full layers,
    # rope_local_base_freq for the sliding ones.
    config = resolve_config("gemma-3-4b")
    assert (config.rope_theta, config.rope_local_theta) == (1e6, 1e4)
    assert (config.rope_scaling.rope_type, config.rope_scaling.factor) == ("linear", 8.0)
    assert config.qk_norm and config.attn_logit_softcapping is None


@pytest.mark.parametrize("field, value, message", [
    ("layer_types", ["sliding_attention"], "must list num_hidden_layers=2"),
    ("layer_types", ["full", "full"], "each one of"),
    ("hidden_activation", "relu", "hidden_act='relu' is not supported"),
    ("use_bidirectional_attention", True, "use_bidirectional_attention"),
    ("attn_logit_softcapping", -1.0, "attn_logit_softcapping=-1.0 must be a positive"),
    ("sliding_window_pattern", 0, "sliding_window_pattern=0 must be a positive"),
    ("sliding_window_pattern", "6", "sliding_window_pattern='6' must be an integer"),
])
def test_bad_fields_are_refused_by_name(field, value, message):
    family = "gemma3_text" if field == "sliding_window_pattern" else "gemma2"
    values = {"model_type": family, "num_hidden_layers": 2, "hidden_size": 32,
              "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 11, field: value}
    with pytest.raises(ValueError, match=message):
        LlamaConfig.from_hf_dict(values)


def _tiny_mix() -> LlamaConfig:
    # Gemma-2's layer mix, tiny: sliding, full, sliding (window 5).
    return LlamaConfig.from_hf_dict({
        "model_type": "gemma2", "num_hidden_layers": 3, "hidden_size": 32,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "intermediate_size": 8, "vocab_size": 11, "sliding_window": 5,
        "max_position_embeddings": 64})


def test_plan_gives_each_layer_its_own_keys():
    # A 4-token chunk after 20 cached tokens and a decode step at context 20, on the tiny
    # Gemma-2 mix (sliding, full, sliding; window 5): by hand, a sliding layer's queries see
    # min(20, 5 - 1) + 4 keys in the chunk (its first row the 4 cached before it) and the
    # last 5 in decode, a full layer's all of them.
    from tenet_byoc.plan import Step, StepSequence, plan
    from tenet_byoc.system import System

    config = _tiny_mix()
    for step, want in ((Step([StepSequence(4, 20)]), [8, 24, 8]),
                       (Step.decode(20), [5, 21, 5])):
        calls = plan(config, step).calls
        assert [c.call.n for c in calls if c.name.endswith("attn.qk")] == want
        assert [c.call.k for c in calls if c.name.endswith("attn.pv")] == want
        caps = [c.call.shape for c in calls if c.name.endswith("attn.softcap")]
        assert [shape[-1] for shape in caps] == want
    # Under tensor parallelism the soft-capping splits by heads, as the scores do.
    calls = plan(config, Step.decode(20), system=System("os16", chips=2, tensor_parallel=2)).calls
    scores = {c.name: tuple(c.call.shape) for c in calls if c.name.endswith(("attn.scale",
                                                                        "attn.softcap"))}
    assert scores["layers.0.self_attn.softcap"] == scores["layers.0.self_attn.scale"] == (
        1, 1, 2, 5)


def test_a_batched_chunk_masks_each_kind_of_layer_over_its_own_keys():
    # The tiny Gemma-2 mix (sliding, full, sliding; window 5) in batched steps: the first
    # layer builds each sequence's mask for its own kind (sliding: min(20, 4) + 4 = 8 keys
    # for a 4-token chunk after 20) and for the other kind (full: 20 + 4 = 24); a decode
    # beside it after 30 tokens sees 5 and 31.
    from tenet_byoc.plan import Step, StepSequence, plan

    config = _tiny_mix()

    def masks(step):
        calls = plan(config, step).calls
        return [[tuple(c.call.shape) for c in calls if c.name == "layers.0.self_attn." + name]
                for name in ("batch_mask", "batch_mask.other")]

    assert masks(Step([(StepSequence(4, 20), 2)])) == [[(2, 1, 4, 8)], [(2, 1, 4, 24)]]
    assert masks(Step([StepSequence(4, 20), StepSequence(1, 30)])) == [
        [(1, 1, 4, 8), (1, 1, 1, 5)], [(1, 1, 4, 24), (1, 1, 1, 31)]]
    masked = [c.call for c in plan(config, Step([(StepSequence(4, 20), 2)])).calls
              if c.name.endswith("self_attn.masked")]
    assert [(tuple(c.shape), c.operand_elements) for c in masked] == [
        ((2, 2, 2, 4, n), 2 * 4 * n) for n in (8, 24, 8)]


@pytest.mark.parametrize("context", [3, 40])
def test_serving_cost_of_a_layer_mix_matches_the_whole_step(context):
    # Serving charges one layer of each kind times its count; estimate_step plans every
    # layer. Within the window (3) the kinds cost alike, past it (40) they differ. The
    # split cost's own approximation: each sequence's score calls (scale, soft-capping,
    # masks, softmax) are its own vector calls where the whole step batches the four, and on
    # this tiny model their fixed costs weigh: +0.75% at 3, +3.05% at 40 (+1.40% with
    # sliding layers only, +5.13% with full layers only); on Gemma-2-9B under 1% (below).
    from tenet_byoc.estimate import estimate_step
    from tenet_byoc.plan import Step
    from tenet_byoc.serving.cost import model_step_cost

    values = {"model_type": "gemma2", "num_hidden_layers": 5, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "intermediate_size": 128, "vocab_size": 97, "sliding_window": 8,
              "max_position_embeddings": 128}
    config = LlamaConfig.from_hf_dict(values)
    step = Step.decode(context, batch=4)
    cost = model_step_cost(config, "none", "os16", context_granularity=1, token_granularity=1)
    whole = estimate_step(config, step, "none", "os16", entries=False)[0].seconds
    assert cost(step) == pytest.approx(whole, rel=0.04)
    full = LlamaConfig.from_hf_dict({**values, "layer_types": ["full_attention"] * 5})
    assert full.window is None and full.uniform_layers
    if context > 8:  # the sliding layers read fewer keys than a model of full layers
        assert whole < estimate_step(full, step, "none", "os16", entries=False)[0].seconds


def test_serving_cost_of_gemma_2_9b_matches_the_whole_step():
    # Its soft-capped scores are each sequence's attention work (a chunk's 512 x 4,096, not
    # the dense part's 512 x 512): the split cost of 8 decodes at 2,000 and of a 512-token
    # chunk after 3,584 against estimate_step's plan of the whole step.
    from tenet_byoc.estimate import estimate_step
    from tenet_byoc.plan import Step, StepSequence
    from tenet_byoc.serving.cost import model_step_cost

    cost = model_step_cost("gemma-2-9b", "none", "os16", context_granularity=1,
                           token_granularity=1)
    for step in (Step.decode(2000, batch=8), Step([StepSequence(512, 3584, logits="last")])):
        whole = estimate_step("gemma-2-9b", step, "none", "os16", entries=False)[0].seconds
        assert cost(step) == pytest.approx(whole, rel=0.01)


@pytest.mark.parametrize("model, period", [("gemma-2-9b", 2), ("gemma-3-4b", 6),
                                           ("llama-3-8b", 1)])
def test_cut_plan_of_a_layer_mix_expands_to_the_whole_walk(model, period, monkeypatch):
    # The plan walks layers 0 .. period and repeats 1 .. period in turn; the reference walks
    # every layer (the cut switched off), over three pipeline stages, prefill and decode
    # steps of two sequences.
    from tenet_byoc import plan as planning
    from tenet_byoc.plan import Sharding, Step, plan

    config = resolve_config(model)
    steps = (Step.prefill(16, batch=2), Step.decode(5000, batch=2))
    cut = [plan(config, s, "w4a16_group128", Sharding(1, 3, 1)) for s in steps]
    assert {p.period for p in cut} == {period}
    monkeypatch.setattr(planning, "_cut_layers", lambda config: (None, 0))
    whole = [plan(config, s, "w4a16_group128", Sharding(1, 3, 1)) for s in steps]
    for a, b in zip(cut, whole, strict=True):
        assert a.size == len(b.calls)
        # names, layers, stages, epilogues, schemes and each call's plain key (its sizes)
        assert [c[1:] for c in a.calls] == [c[1:] for c in b.calls]
