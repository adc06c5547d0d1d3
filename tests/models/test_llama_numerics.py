"""Tiny Llama and Qwen2 checkpoints through from_pretrained, offloaded, against numpy (no torch)."""

from __future__ import annotations

import numpy as np
import pytest
from llama_testing import (
    TINY_LLAMA,
    TINY_MISTRAL,
    TINY_QWEN2,
    make_llama_weights,
    numpy_llama_logits,
    rounded,
    write_checkpoint,
)

import tenet_byoc
from ledger_testing import ir_matmul_shapes
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.gemms import model_gemms
from tenet_byoc.models.llama import (
    LlamaForCausalLM,
    export_llama,
    load_checkpoint,
    param_count,
    param_shapes,
)

ATOL = 1e-4
PROMPT = [5, 17, 0, 88, 42, 42, 8, 63, 1]
CONFIGS = {"llama": TINY_LLAMA, "qwen2": TINY_QWEN2, "mistral": TINY_MISTRAL}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """``(hf config, HF-named weights, offloaded runner from from_pretrained)``."""
    cfg = CONFIGS[request.param]
    weights = make_llama_weights(cfg)
    folder = write_checkpoint(tmp_path_factory.mktemp(request.param), cfg, weights)
    return cfg, weights, from_pretrained(folder, build=tenet_byoc.build)


def test_prefill_matches_numpy(case):
    cfg, weights, runner = case
    logits, cache = runner.prefill(PROMPT)
    expected = numpy_llama_logits(weights, cfg, PROMPT)
    assert logits.shape == (len(PROMPT), cfg["vocab_size"])
    assert np.abs(expected).max() > 1.0  # not a comparison of near-zeros
    np.testing.assert_allclose(logits, expected, rtol=0, atol=ATOL)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    shape = (1, cfg["num_key_value_heads"], len(PROMPT), hd)  # within any window
    assert [t.shape for t in cache.tensors] == [shape] * (2 * cfg["num_hidden_layers"])


def test_decode_steps_match_numpy_up_to_the_context_end(case):
    cfg, weights, runner = case
    n = cfg["max_position_embeddings"]  # Mistral's is 4 times its sliding window
    ids = [(7 * i + 3) % cfg["vocab_size"] for i in range(n)]
    expected = numpy_llama_logits(weights, cfg, ids)
    _, cache = runner.prefill(ids[:3])
    for pos in [*range(3, 6), n - 1]:
        if pos == n - 1:  # jump: a prefill of all but the last token, then one step
            _, cache = runner.prefill(ids[:pos])
        step, cache = runner.decode(ids[pos], cache)
        np.testing.assert_allclose(step, expected[pos], rtol=0, atol=ATOL)
    assert cache.length == n
    with pytest.raises(ValueError, match=f"{n + 1} tokens .* max_position_embeddings={n}"):
        runner.decode(1, cache)


def test_decode_across_the_sliding_window(case):
    # Mistral's window is 16: steps 10..20 cross it, the cache rolling from 16 tokens on.
    cfg, weights, runner = case
    ids = [(5 * i + 2) % cfg["vocab_size"] for i in range(21)]
    expected = numpy_llama_logits(weights, cfg, ids)
    _, cache = runner.prefill(ids[:10])
    for pos in range(10, 21):
        step, cache = runner.decode(ids[pos], cache)
        np.testing.assert_allclose(step, expected[pos], rtol=0, atol=ATOL)
    kept = min(21, cfg.get("sliding_window") or 21)
    assert cache.length == 21 and cache.tensors[0].shape[2] == kept


def test_every_matmul_is_offloaded_and_charged(case):
    cfg, _, runner = case
    config = runner.config
    mod = export_llama(config)
    ir = ir_matmul_shapes(mod, "prefill", {"seq_len": 6}) + ir_matmul_shapes(
        mod, "decode", {"past_len": 6}
    )
    assert len(ir) == 2 * (9 * cfg["num_hidden_layers"] + 1)
    # Partitioned, no R.matmul is left in either function: each went to a tenet composite.
    part = tenet_byoc.partition_for_tenet(mod)
    assert ir_matmul_shapes(part, "prefill", {"seq_len": 6}) == []
    assert ir_matmul_shapes(part, "decode", {"past_len": 6}) == []
    before = len(tenet_byoc.ledger(runner.vm).entries)
    tenet_byoc.set_phase(runner.vm, "prefill")
    _, cache = runner.prefill(PROMPT[:6])
    tenet_byoc.set_phase(runner.vm, "decode")
    runner.decode(PROMPT[6], cache)
    entries = [e for e in tenet_byoc.ledger(runner.vm).entries[before:] if e.unit == "array"]
    expected = model_gemms(config, "prefill", 6) + model_gemms(config, "decode", 6)
    assert [(e.batch, e.m, e.n, e.k) for e in entries] == [
        (x.batch, x.m, x.n, x.k) for x in expected
    ]
    assert [(x.batch, x.m, x.n, x.k) for x in expected] == ir
    assert [e.phase for e in entries] == ["prefill"] * (len(expected) // 2) + ["decode"] * (
        len(expected) // 2
    )
    assert sum(e.macs for e in entries) == sum(x.macs for x in expected)


def test_loader_reads_config_and_names(case):
    cfg, weights, runner = case
    config = runner.config
    assert config.num_key_value_heads == cfg["num_key_value_heads"]
    assert config.rope_theta == {"llama": 1000.0, "qwen2": 20000.0, "mistral": 10000.0}[
        cfg["model_type"]]
    assert config.tie_word_embeddings == cfg["tie_word_embeddings"]
    assert config.qkv_bias == (cfg is TINY_QWEN2) and not config.o_bias
    model = LlamaForCausalLM(config)
    built = {n: tuple(int(d) for d in p.shape) for n, p in model.named_parameters()}
    assert built == param_shapes(config)  # the closed-form list is the module's
    assert param_count(config) == (len(built), sum(int(np.prod(s)) for s in built.values()))
    stored = {k.removeprefix("model.") for k in weights}
    assert stored == set(built)


@pytest.mark.parametrize(
    "shards,dtype", [(3, "float32"), (1, "bfloat16"), (2, "bfloat16"), (1, "float16")]
)
def test_sharded_bf16_and_fp16_checkpoints_load_exactly(tmp_path, shards, dtype):
    weights = make_llama_weights(TINY_LLAMA, seed=5)
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights, shards=shards, dtype=dtype)
    assert (folder / "model.safetensors.index.json").exists() == (shards > 1)
    config, params = load_checkpoint(folder)
    want = rounded(weights, dtype)
    assert list(params) == list(param_shapes(config))
    for name, value in params.items():
        assert value.dtype == np.float32 and value.flags.c_contiguous
        ref = want.get("model." + name, want.get(name))
        np.testing.assert_array_equal(value, ref, err_msg=name)
    if dtype != "float32":  # the conversion is not a no-op: rounding changed the weights
        assert not np.array_equal(params["norm.weight"], weights["model.norm.weight"])


@pytest.mark.parametrize(
    "scheme,against_tvm",
    [
        ("w8a8_per_channel_per_token", False),
        ("w4a16_group32", False),
        # TVM's own build of the quantized forms takes 5-30 s on 2 cores (tests/quantization
        # compares each offloaded form against it in the default run).
        pytest.param("w8a8_per_channel_per_token", True, marks=pytest.mark.slow),
        pytest.param("w4a16_group32", True, marks=pytest.mark.slow),
    ],
)
def test_quantized_build_matches_tvm_and_stays_close(tmp_path, scheme, against_tvm):
    weights = make_llama_weights(TINY_LLAMA)
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights)
    expected = numpy_llama_logits(weights, TINY_LLAMA, PROMPT)

    def run(offload: bool):
        runner = from_pretrained(folder, bind_params=True, build=lambda mod: tenet_byoc.build(
            tenet_byoc.quantize(mod, scheme), offload=offload))
        logits, cache = runner.prefill(PROMPT[:-1])
        step, _ = runner.decode(PROMPT[-1], cache)
        return runner, np.vstack([logits, step])

    runner, got = run(offload=True)
    if against_tvm:
        _, tvm_only = run(offload=False)  # the same quantized module, all on TVM
        np.testing.assert_allclose(got, tvm_only, rtol=0, atol=1e-3)
    # The quantization error is real but small against O(1) logits.
    err = np.abs(got - expected).max()
    assert 1e-3 < err < 0.25 * np.abs(expected).max()
    entries = [e for e in tenet_byoc.ledger(runner.vm).entries if e.unit == "array"]
    gemms = model_gemms(runner.config, "prefill", len(PROMPT) - 1) + model_gemms(
        runner.config, "decode", len(PROMPT) - 1)
    assert [(e.batch, e.m, e.n, e.k) for e in entries] == [(g.batch, g.m, g.n, g.k) for g in gemms]
    # The weight GEMMs are quantized; attention (activations only) stays float.
    assert [e.scheme for e in entries] == [scheme if g.weight else "none" for g in gemms]
