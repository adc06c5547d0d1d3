"""Distinct experts a batch touches and the tokens each receives: the closed forms against a
Monte-Carlo count of routings, uniform and under a user's popularity (``ExpertLoad``)."""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.moe import (
    ExpertLoad,
    expected_routing,
    param_counts,
    touched_experts,
    weights_read,
)

TRIALS = 4000


def _uniform_routing(rng, e: int, k: int, tokens: int) -> np.ndarray:
    # Each token's k distinct experts: the k smallest of E uniform keys.
    keys = rng.random((TRIALS, tokens, e))
    chosen = np.argpartition(keys, k - 1, axis=-1)[..., :k]
    hit = np.zeros((TRIALS, e), bool)
    np.put_along_axis(hit, chosen.reshape(TRIALS, -1), True, axis=1)
    return hit.sum(axis=1)


def _skewed_routing(rng, p: np.ndarray, tokens: int, per_expert: bool = False) -> np.ndarray:
    # Madow's systematic sampling: k distinct experts, expert e with probability p_e
    # (the points u, u + 1, ..., u + k - 1 fall in the cumulative intervals of p).
    # Distinct experts per trial, or (per_expert) each expert's tokens per trial.
    k = round(p.sum())
    edges = np.concatenate([[0.0], np.cumsum(p)])
    points = rng.random((TRIALS, tokens, 1)) + np.arange(k)
    chosen = np.searchsorted(edges, points, side="right") - 1
    if per_expert:
        return np.stack([np.bincount(c.ravel(), minlength=p.size) for c in chosen])
    hit = np.zeros((TRIALS, p.size), bool)
    np.put_along_axis(hit, chosen.reshape(TRIALS, -1), True, axis=1)
    return hit.sum(axis=1)


@pytest.mark.parametrize("e,k,tokens", [(8, 2, 1), (8, 2, 3), (64, 6, 16), (256, 8, 12)])
def test_uniform_formula_equals_monte_carlo(e, k, tokens):
    counts = _uniform_routing(np.random.default_rng(e + tokens), e, k, tokens)
    error = counts.std() / np.sqrt(TRIALS)
    want = touched_experts(e, k, tokens)
    assert want == pytest.approx(e * (1 - (1 - k / e) ** tokens))
    assert abs(counts.mean() - want) < 4 * error + 1e-9


@pytest.mark.parametrize("tokens", [1, 4, 32])
def test_skewed_load_equals_monte_carlo(tokens):
    e, k = 16, 4
    load = 1.0 / np.arange(1, e + 1) ** 0.8  # Zipf-like: expert 0 busiest
    p = k * load / load.sum()
    assert p.max() <= 1
    counts = _skewed_routing(np.random.default_rng(tokens), p, tokens)
    # Madow's scheme picks exactly k distinct experts per token.
    assert np.all(_skewed_routing(np.random.default_rng(0), p, 1) == k)
    want = touched_experts(e, k, tokens, load)
    assert abs(counts.mean() - want) < 4 * counts.std() / np.sqrt(TRIALS) + 1e-9
    if tokens > 1:  # skew touches fewer than uniform
        assert want < touched_experts(e, k, tokens)


def test_decode_reads_active_weights_at_batch_1_and_nearly_all_at_64():
    mixtral = resolve_config("mixtral-8x7b")
    total, active = param_counts(mixtral)
    assert weights_read(mixtral, 1) == pytest.approx(active, rel=1e-12)
    assert weights_read(mixtral, 64) / total > 0.9999  # 8 x (1 - 0.75^64) experts
    deepseek = resolve_config("deepseek-v3")
    total, active = param_counts(deepseek)
    assert weights_read(deepseek, 1) == pytest.approx(active, rel=1e-12)
    # 256 experts, 8 a token: 64 tokens reach 256 x (1 - (31/32)^64) = 222.4 of them.
    assert touched_experts(256, 8, 64) == pytest.approx(222.4, abs=0.05)
    assert 0.85 < weights_read(deepseek, 64) / total < 0.9


@pytest.mark.parametrize("args,message", [
    ((8, 9, 1), r"experts_per_token=9 exceeds num_experts=8"),
    ((8, 2, -1), r"tokens=-1"),
    ((8, 2, 1, [1.0] * 7), r"load has 7 weights, expected 8"),
    ((8, 2, 1, [1.0] * 7 + [-1.0]), r"non-negative"),
    ((8, 2, 1, [100.0] + [1.0] * 7), r"expert 0 would take"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        touched_experts(*args)


@pytest.mark.parametrize("tokens", [1, 6, 40])
def test_zipf_routing_counts_against_monte_carlo(tokens):
    # Zipf 1.1 over 16 experts, 2 a token: expert j's weight 1 / (j + 1)^1.1.
    e, k = 16, 2
    load = ExpertLoad(zipf=1.1)
    w = load.shares(e)
    np.testing.assert_allclose(w, 1 / np.arange(1, e + 1) ** 1.1)
    p = k * w / w.sum()
    per_expert = _skewed_routing(np.random.default_rng(tokens), p, tokens, per_expert=True)
    # each expert's mean tokens in the draws: tokens x p_e
    error = per_expert.std(axis=0) / np.sqrt(TRIALS)
    assert np.all(np.abs(per_expert.mean(axis=0) - tokens * p) < 4 * error + 1e-9)
    counts = np.array(expected_routing(e, k, tokens, w))
    # tokens x k rows over the formula's distinct experts, the busiest, at most all tokens
    touched = round(touched_experts(e, k, tokens, w))
    assert counts.sum() == tokens * k and (counts > 0).sum() == max(k, touched)
    assert np.all(np.diff(counts) <= 0) and counts.max() <= tokens
    # the tail's expected tokens go to the touched experts (and a row of rounding)
    tail = tokens * p[counts == 0].sum()
    assert np.all(np.abs(counts - tokens * p)[counts > 0] <= tail + 1)
    if tokens > 1:  # skew touches fewer experts than uniform routing
        assert (counts > 0).sum() < sum(n > 0 for n in expected_routing(e, k, tokens))


def test_zipf_0_is_uniform_and_bad_loads_are_named():
    for tokens in (1, 3, 17):
        assert expected_routing(8, 2, tokens, ExpertLoad(zipf=0).shares(8)) == \
            expected_routing(8, 2, tokens)
    with pytest.raises(ValueError, match="weights or zipf, one of them"):
        ExpertLoad()
    with pytest.raises(ValueError, match=r"zipf=-1 must be a finite number >= 0"):
        ExpertLoad(zipf=-1)
    # Zipf 3 over 8 experts gives expert 0 1 / 1.195 = 0.837 of the load: 1.67 of 2 choices
    with pytest.raises(ValueError, match="expert 0 would take 1.67"):
        expected_routing(8, 2, 4, ExpertLoad(zipf=3).shares(8))


def test_estimate_under_a_zipf_load():
    import tenet_byoc

    # Mixtral 8x7B, a decode step of 16 sequences: its experts' rows follow the load.
    load = ExpertLoad(zipf=1.0)
    skewed = tenet_byoc.estimate("mixtral-8x7b", prompt_len=0, context_len=32, decode_steps=1,
                                 batch=16, routing=load)
    rows = [e.m for e in skewed.entries if e.name.startswith("layers.0.experts.")
            and e.name.endswith("gate_proj")]
    want = [n for n in expected_routing(8, 2, 16, load.shares(8)) if n]
    assert rows == want and len(want) < 8
    uniform = tenet_byoc.estimate("mixtral-8x7b", prompt_len=0, context_len=32,
                                  decode_steps=1, batch=16)
    assert skewed.totals().dram_bytes < uniform.totals().dram_bytes
