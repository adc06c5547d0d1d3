"""Tiny Gemma-2 and Gemma-3 (text) models made and saved by transformers, run through tenet.

Each is built by transformers with seeded weights, saved with ``save_pretrained`` and loaded
by ``from_pretrained``; prefill and decode logits must equal transformers' within 1e-4,
decoding past the sliding window. The run's ledger must equal ``tenet_byoc.estimate`` of
the same checkpoint entry for entry (the soft-capping's tanh, the four (1 + w) norms per
layer, GeGLU, the scaled embedding and the per-layer windows all charged alike).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tenet_byoc
from tenet_byoc.ledger import _CHARGE_FIELDS
from tenet_byoc.models import from_pretrained

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)

ATOL = 1e-4
IDS = [3, 17, 0, 88, 42, 42, 8, 63, 1, 70, 5, 29, 91, 14]
PROMPT = 8  # then decode the rest, one token at a time

_SHARED = {"vocab_size": 101, "hidden_size": 48, "intermediate_size": 80,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
           "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}
#: Gemma-2: sliding, full, sliding layers (its default alternation); small caps so that
#: tanh bends the scores and logits; a query_pre_attn_scalar that is not head_dim.
TINY_GEMMA2 = {**_SHARED, "sliding_window": 5, "attn_logit_softcapping": 4.0,
               "final_logit_softcapping": 6.0, "query_pre_attn_scalar": 20,
               "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}}
#: Gemma-3: QK norm, two sliding layers before a full one, the full layer's rotary with
#: its own base and linear scaling, the sliding ones' with the local base.
TINY_GEMMA3 = {**_SHARED, "sliding_window": 4, "query_pre_attn_scalar": 16,
               "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
               "rope_parameters": {
                   "full_attention": {"rope_type": "linear", "factor": 4.0,
                                      "rope_theta": 50000.0},
                   "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}}
CASES = {"gemma2": ("Gemma2Config", "Gemma2ForCausalLM", TINY_GEMMA2),
         "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", TINY_GEMMA3)}


def _hf_model(name: str):
    import torch
    import transformers

    config_class, model_class, values = CASES[name]
    config = getattr(transformers, config_class)(**values, attn_implementation="eager")
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():  # norms' w around 0 (scale 1 + w), every weight visible in the logits
        for _, p in model.named_parameters():
            p.copy_(0.2 * torch.randn_like(p) if p.ndim == 1
                    else torch.randn_like(p) * p.shape[1] ** -0.5)
    return model


# One build per case (~10 s on 2 busy cores): Gemma-3 and the quantized cache (whose writes
# a sliding layer's window view must not hide) in the slow run.
@pytest.mark.parametrize("name, scheme", [
    ("gemma2", "none"), pytest.param("gemma3", "none", marks=pytest.mark.slow),
    pytest.param("gemma2", "per_token+kv4/head", marks=pytest.mark.slow),
    pytest.param("gemma3", "w4a16_group128+kv8", marks=pytest.mark.slow)])
def test_logits_and_ledger_match_transformers_and_estimate(name, scheme, tmp_path):
    import torch

    model = _hf_model(name)
    model.save_pretrained(tmp_path)
    runner = from_pretrained(tmp_path, bind_params=True, build=lambda mod: tenet_byoc.build(
        tenet_byoc.quantize(mod, scheme), accelerator="ws16"))
    with torch.no_grad():  # the whole sequence at once, no cache
        want = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(want).max() > 1.0  # not a comparison of near-zeros
    atol = ATOL if scheme == "none" else np.inf  # a quantized run: its ledger is checked
    vm = runner.vm
    tenet_byoc.set_phase(vm, "prefill")
    logits, cache = runner.prefill(IDS[:PROMPT])
    np.testing.assert_allclose(logits, want[:PROMPT], rtol=0, atol=atol)
    tenet_byoc.set_phase(vm, "decode")
    for pos in range(PROMPT, len(IDS)):  # past the window of the sliding layers
        step, cache = runner.decode(IDS[pos], cache)
        np.testing.assert_allclose(step, want[pos], rtol=0, atol=atol)
    # Sliding layers beside full ones keep every token (attending to the last W).
    assert {int(t.shape[2]) for t in cache.tensors} == {len(IDS)}

    real = tenet_byoc.ledger(vm)
    est = tenet_byoc.estimate(tmp_path, scheme, "ws16", prompt_len=PROMPT,
                              decode_steps=len(IDS) - PROMPT)
    assert len(est.entries) == len(real.entries)
    ops = {e.op for e in real.entries if e.unit == "vector"}
    assert {"gelu_tanh", "rms_norm"} <= ops and ("tanh" in ops) == (name == "gemma2")
    for i, (r, e) in enumerate(zip(real.entries, est.entries, strict=True)):
        assert type(e) is type(r), (i, r.name, e.name)
        fields = ["phase", "scheme", *sorted(f for f in _CHARGE_FIELDS if f in r._fields)]
        got, want_charge = ({f: getattr(x, f) for f in fields} for x in (e, r))
        assert got == want_charge, (i, r.name, e.name,
                                    {f for f in fields if got[f] != want_charge[f]})
    # The sliding layers' decode attention read the last W keys, the full layers' all (the
    # estimate's names on the run's charges).
    qk = [(e.name, e.n) for e in est.entries if e.phase == "decode"
          and e.name.endswith("attn.qk")][-3:]
    window = runner.config.sliding_window
    assert [n for _, n in qk] == [len(IDS) if t == "full_attention" else window
                                  for t in runner.config.layer_types]


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_a_chunks_attention_spans_the_keys_transformers_attends_to(name):
    # transformers' eager attention of a 6-token chunk after 20 cached tokens: a full layer's
    # rows attend to all 26 keys, a sliding layer's (window W) to the W - 1 cached keys its
    # first row sees and the 6 new ones. The plan's attn.qk of the chunk spans as many.
    from llama_testing import chunk_keys

    from tenet_byoc.models.llama import LlamaConfig

    model = _hf_model(name)
    config = LlamaConfig.from_hf_dict(model.config.to_dict())
    want, planned = chunk_keys(model, config, (IDS * 2)[:26], 20)
    assert want == ([10, 26, 10] if name == "gemma2" else [9, 9, 26])
    assert planned == want
