"""Bad input to estimate() fails before anything is charged, naming the argument."""

from __future__ import annotations

import json

import pytest

import tenet_byoc


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"model": "llama-4"}, ValueError, r"'llama-4' is neither a built-in name .*llama-3-70b"),
    ({"model": 7}, TypeError, "model must be a built-in name"),
    ({"prompt_len": 1025}, ValueError, "prompt_len=1025 .* n_positions=1024"),
    ({"prompt_len": 8, "context_len": 1000, "decode_steps": 25}, ValueError,
     r"context_len=1000 \+ decode_steps=25 .* n_positions=1024"),
    ({"prompt_len": -1}, ValueError, "prompt_len=-1 must be >= 0"),
    ({"batch": 0}, ValueError, "batch=0 must be >= 1"),
    # The first GEMM's rows are prompt_len x batch = 128 x 10^12, past int32's 2^31 - 1.
    ({"batch": 10**12}, ValueError,
     (r"batch=1000000000000 makes prefill GEMM 'h.0.attn.c_attn' M = 128,000,000,000,000, "
      r"above the cost model's limit of 2,147,483,647")),
    # 2^24 sequences of 128 tokens: 2^31 rows, one past the limit.
    ({"batch": 2**24}, ValueError, r"batch=16777216 makes .* M = 2,147,483,648"),
    ({"decode_steps": 1.5}, TypeError, "decode_steps=1.5 must be an integer"),
    ({"context_len": True}, TypeError, "context_len=True must be an integer"),
    ({"prompt_len": 0, "decode_steps": 0}, ValueError, "nothing to estimate"),
    ({"scheme": "w3a3"}, ValueError, "unknown quantization scheme 'w3a3'"),
    ({"accelerator": "h100"}, ValueError, "unknown accelerator preset 'h100'"),
])
def test_bad_arguments(kwargs, error, match):
    args = {"model": "gpt2", **kwargs}
    with pytest.raises(error, match=match):
        tenet_byoc.estimate(**args)


def test_llama_context_names_its_field():
    with pytest.raises(ValueError, match="max_position_embeddings=8192"):
        tenet_byoc.estimate("llama-3-8b", prompt_len=8192, decode_steps=1)
    ledger = tenet_byoc.estimate("llama-3-8b", prompt_len=8192, decode_steps=0)
    assert sum(e.unit == 'array' for e in ledger) == 32 * 9 + 1  # the whole context is a valid prompt


def test_config_files(tmp_path):
    cfg = {"model_type": "bert", "hidden_size": 8}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="model_type='bert' is not supported"):
        tenet_byoc.estimate(tmp_path)
    with pytest.raises(ValueError, match="neither a built-in name"):
        tenet_byoc.estimate(tmp_path / "missing" / "config.json")


def test_mapping_choices():
    # A preset searches each call's mapping unless told "default" (each call's default
    # tiles), which the latency search never loses to; an unknown choice names the field.
    fixed = tenet_byoc.estimate("gpt2", prompt_len=4, mapping="default")
    plain = tenet_byoc.estimate("gpt2", prompt_len=4)
    auto = tenet_byoc.estimate("gpt2", prompt_len=4, mapping="auto")
    assert [e.cycles for e in auto.entries] == [e.cycles for e in plain.entries]
    assert all(a.cycles <= f.cycles for a, f in zip(plain.entries, fixed.entries, strict=True))
    assert sum(e.cycles for e in plain) < sum(e.cycles for e in fixed)
    assert sum(e.unit == 'array' for e in plain) == 2 * (12 * 6 + 1)  # c_attn, qk, pv, c_proj, c_fc, mlp.c_proj; head
    with pytest.raises(ValueError, match="mapping"):
        tenet_byoc.estimate("gpt2", prompt_len=4, mapping="best")


def test_calls_an_enumerated_dataflow_cannot_cost_are_refused_by_name(tmp_path):
    from llama_testing import TINY_LLAMA

    from tenet_byoc import Accelerator
    from tenet_byoc import cost_model as cm

    # Not a preset's time map, so every call is enumerated (at most 4,000,000 instances),
    # as tenet_byoc.build refuses a larger static GEMM at build time.
    flat = cm.Dataflow(space="{S[i,j,k]->PE[i%8, j%8]}",
                       time="{S[i,j,k]->T[floor(i/8), floor(j/8), k]}", name="flat")
    acc = Accelerator("flat8", cm.Hardware.systolic(8, 8, name="flat8"), flat)
    with pytest.raises(ValueError, match=r"'h.0.mlp.c_fc' of 2 x 3072 x 768 = 4,718,592"):
        tenet_byoc.estimate("gpt2", accelerator=acc, prompt_len=2)
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    ledger = tenet_byoc.estimate(tmp_path / "config.json", accelerator=acc, prompt_len=3)
    assert ledger.accelerator == "flat8" and sum(e.unit == "array" for e in ledger) == 2 * (2 * 9 + 1)
