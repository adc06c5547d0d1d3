"""The built-in gpt-j-6b stand-in has GPT-J 6B's GEMMs, counted by hand from its architecture."""

from __future__ import annotations

from tenet_byoc.models.configs import BUILTIN, resolve_config
from tenet_byoc.models.gemms import model_gemms


def test_gptj_decode_multiplies_each_of_its_matrices_once():
    # GPT-J 6B (EleutherAI/gpt-j-6b config.json): 28 layers of d = 4096 with q, k, v and
    # out projections [d, d], fc_in [d, 4d], fc_out [4d, d]; an lm_head [d, 50400].
    d, layers, vocab = 4096, 28, 50400
    per_token = layers * (4 * d * d + 2 * d * 4 * d) + d * vocab
    gemms = model_gemms(resolve_config("gpt-j-6b"), "decode", 100)
    assert sum(g.macs for g in gemms if g.weight) == per_token == 5_843_582_976
    # Attention: 16 heads of 256 over the 101 keys of the step.
    assert sum(g.macs for g in gemms if not g.weight) == layers * 2 * 16 * 101 * 256


def test_gptj_says_how_it_stands_in():
    note = BUILTIN["gpt-j-6b"].note
    assert "parallel attention" in note and "all-reduce" in note
    assert BUILTIN["gpt-j-6b"].source.endswith("EleutherAI/gpt-j-6b/blob/main/config.json")
