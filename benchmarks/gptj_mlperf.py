"""GPT-J 6B on four tpu_v5e chips beside MLPerf Inference v4.0's measured 10.15 samples/s.

The measurement: Google's closed-division result for system ``tpu_v5e_x4``, benchmark
``gptj-99``, Offline scenario, 10.1502 samples/s (MLCommons ``inference_results_v4.0``,
``closed/Google/results/tpu_v5e_x4/gptj-99/offline/performance/run_1/mlperf_log_summary.txt``),
served by Saxml with the model config ``GPTJ4TokenizedINT8BS32XLAWait40MB6Offline``
(``closed/Google/code/gptj/gptj_using_saxml_loadgen/README.md``). Its base class in Saxml
(``saxml/server/pax/lm/params/gptj.py``: ``GPTJ``, ``GPTJ4BF16BS32``) sets what is modelled
here: one model replica over the 4 chips, tensor-parallel (``ICI_MESH_SHAPE = [1, 1, 4]``,
one ``REPLICA``), batches of 32 samples, beam search with 4 beams and no early exit, inputs
up to 1,919 tokens (``INPUT_SEQ_LEN``, in buckets of 512 / 1,024 / 1,919), at most 128
generated tokens (``MAX_DECODE_STEPS``), the parallel attention + MLP block.

How the run is modelled (each an assumption, named in the table):

* the model: the built-in ``gpt-j-6b``, GPT-J's GEMMs through the GPT-2 family (its note in
  ``tenet_byoc.models.configs.BUILTIN`` names the differences: fused QKV, two all-reduces per
  layer where GPT-J's parallel block needs one);
* the system: ``System(preset("tpu_v5e"), chips=4, tensor_parallel=4)`` on a 2-D torus
  (2 x 2), 100 GB/s per chip and direction along each dimension (400 GB/s bidirectional ICI
  per chip over 4 ports: two 50 GB/s ports to each neighbour), 1 us per hop (assumed);
  every call's buffer tiles searched (``mapping="auto"``);
* quantization: int8 weights with bf16 activations (``w8a16_per_channel``; Saxml's int8
  serving configs quantize weights: assumed), KV cache in bf16 (``+kv16``);
* one batch: 32 samples prefilled together (``estimate(prompt_len=P, batch=32)``), then
  128 decode steps (beam search without early exit runs every step) of 32 x 4 = 128 rows
  (``estimate(context_len=P, decode_steps=128, batch=128)``: each beam a sequence with its
  own copy of the prompt's keys and values); samples/s = 32 / (prefill + decode seconds),
  each the critical path of ``SystemLedger.steps``;
* input length: the dataset's mean of about 800 tokens (assumed; Saxml's buckets group
  samples of similar length, so a batch is padded little), or 1,919 (every sample padded to
  the largest bucket) as a bound.

The variant "beams share the prompt's KV" charges each decode step's attention as Saxml's
``FPROP_FOR_PREFIX`` lays it out: the 4 beams of a sample as 4 query rows against one copy
of the keys and values (per chip: 32 samples x 4 heads products of 4 rows), the rest of the
step as in the main setting. The error is reported, not asserted: the model has no
non-GEMM work (beam bookkeeping, softmax, layer norms), no host time and no batching
waits, and its weight-stationary fold model charges every 128 x 128 tile's fill and drain.

Run: python benchmarks/gptj_mlperf.py [--out benchmarks/results/gptj_mlperf.md]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from machine import describe

import tenet_byoc
from tenet_byoc import cost_model as cm
from tenet_byoc.codegen import gemm_charging
from tenet_byoc.accelerators import preset, resolve
from tenet_byoc.quantization import get_scheme
from tenet_byoc.system import Link, System

#: MLPerf Inference v4.0, closed, Google tpu_v5e_x4, gptj-99 Offline (mlperf_log_summary.txt).
MLPERF_SAMPLES_PER_S = 10.1502
MODEL = "gpt-j-6b"
BATCH, BEAMS, CHIPS = 32, 4, 4
HEADS, HEAD_DIM, LAYERS = 16, 256, 28
# 16 GB of HBM per chip less a quarter of the ~6 GB of int8 weights.
HBM_LEFT = 16e9 / 2**30 - 1.5
FULL = " (does not fit beside the weights)"


@dataclass(frozen=True)
class Setting:
    """One set of assumptions: input and output lengths, scheme, how beams share the KV."""

    name: str
    prompt_len: int = 800
    decode_steps: int = 128
    scheme: str = "w8a16_per_channel+kv16"
    shared_prefix: bool = False


SETTINGS = (
    Setting("main: input 800, 128 steps, beams x4 as rows with own KV, w8a16 + bf16 KV"),
    Setting("beams share the prompt's KV (4 query rows per sample)", shared_prefix=True),
    Setting("inputs padded to 1,919 (largest bucket)", prompt_len=1919),
    Setting("inputs 1,919, beams share the prompt's KV", prompt_len=1919, shared_prefix=True),
    Setting("int8 activations too (w8a8 per-token)", scheme="w8a8_per_channel_per_token+kv16"),
    Setting("64 generated tokens (early exit, not Saxml's setting)", decode_steps=64),
)


def tpu_v5e_x4() -> System:
    """The four chips as the module describes them."""
    return System(preset("tpu_v5e"), chips=CHIPS, tensor_parallel=CHIPS,
                  link=Link(bandwidth_gbps=100.0, latency_us=1.0, topology="torus2d"))


def _shared_prefix_attention_seconds(setting: Setting, context: int) -> float:
    """One decode step's attention on one chip with the beams as 4 rows of one product."""
    acc = resolve(preset("tpu_v5e"), mapping="auto")
    quant = get_scheme(setting.scheme)
    seconds = 0.0
    keys = context + 1
    for role, (n, k) in (("key", (keys, HEAD_DIM)), ("value", (HEAD_DIM, keys))):
        how = gemm_charging(quant, role)
        k = -(-k // how.k_multiple) * how.k_multiple
        call = cm.GemmCall(m=BEAMS, n=n, k=k, batch=BATCH * HEADS // CHIPS, bits_a=how.bits[0],
                           bits_b=how.bits[1], bits_c=how.bits[2], scheme=how.scheme,
                           recipe=how.recipe)
        seconds += cm.charge(call, acc).ledger_fields()["latency_us"] * 1e-6
    return LAYERS * seconds


def run(setting: Setting) -> dict:
    """Prefill and decode seconds of one batch, samples/s and the KV bytes per chip."""
    system = tpu_v5e_x4()
    prefill = tenet_byoc.estimate(MODEL, setting.scheme, system=system, mapping="auto",
                                  prompt_len=setting.prompt_len, decode_steps=0, batch=BATCH)
    decode = tenet_byoc.estimate(MODEL, setting.scheme, system=system, mapping="auto",
                                 prompt_len=0, context_len=setting.prompt_len,
                                 decode_steps=setting.decode_steps, batch=BATCH * BEAMS)
    decode_s = decode.latency_s("decode")
    if setting.shared_prefix:
        # Replace each step's attention (chip 0's entries: every chip does the same) by the
        # shared-prefix form; the rest of the step (weights, all-reduces) stays.
        per_step: dict[int, float] = {}
        for e in decode.entries:
            if e.chip == 0 and e.name.endswith(("attn.qk", "attn.pv")):
                per_step[e.n if e.name.endswith("qk") else e.k] = (
                    per_step.get(e.n if e.name.endswith("qk") else e.k, 0.0)
                    + e.latency_us * 1e-6)
        for keys, seconds in per_step.items():
            decode_s += _shared_prefix_attention_seconds(setting, keys - 1) - seconds
    total = prefill.latency_s("prefill") + decode_s
    # bf16 keys and values per chip: the prompt's once per sample (shared) or per beam, and
    # each beam's own generated tokens.
    prompt_copies = 1 if setting.shared_prefix else BEAMS
    tokens = BATCH * (prompt_copies * setting.prompt_len + BEAMS * setting.decode_steps)
    kv_bytes = 2 * LAYERS * (HEADS // CHIPS) * HEAD_DIM * 2 * tokens
    return {"prefill_s": prefill.latency_s("prefill"), "decode_s": decode_s,
            "samples_per_s": BATCH / total, "kv_gib_per_chip": kv_bytes / 2**30}


def table() -> str:
    """The markdown comparison, one row per setting."""
    lines = [
        (f"GPT-J 6B, MLPerf CNN/DailyMail Offline, 4 x tpu_v5e (TP=4), batch {BATCH} x "
        f"{BEAMS} beams; MLPerf v4.0 measured {MLPERF_SAMPLES_PER_S} samples/s."),
        "",
        "## settings",
        "",
        ("| setting | prefill s / batch | decode s / batch | samples/s model | vs MLPerf | "
        "KV GiB per chip (of 16) |"),
        "|---|---|---|---|---|---|",
    ]
    for setting in SETTINGS:
        r = run(setting)
        lines.append(
            f"| {setting.name} | {r['prefill_s']:.3f} | {r['decode_s']:.3f} | "
            f"{r['samples_per_s']:.2f} | {r['samples_per_s'] / MLPERF_SAMPLES_PER_S - 1:+.0%} "
            f"| {r['kv_gib_per_chip']:.1f}{'' if r['kv_gib_per_chip'] < HBM_LEFT else FULL} |")
    return "\n".join(lines)


def decode_split() -> str:
    """Where the main setting's decode time goes on one chip: attention, the linear layers and
    the links; and one attention call's cycles beside its DRAM roofline (the KV reads)."""
    s = SETTINGS[0]
    book = tenet_byoc.estimate(MODEL, s.scheme, system=tpu_v5e_x4(), mapping="auto",
                               prompt_len=0, context_len=s.prompt_len,
                               decode_steps=s.decode_steps, batch=BATCH * BEAMS)
    parts: dict[str, float] = {}
    for e in book.entries:
        if e.chip != 0 or (e.unit == "vector" and e.fused):
            continue
        kind = ("attention (qk, pv)" if e.name.endswith(("attn.qk", "attn.pv"))
                else "linear layers" if e.unit == "array" else f"{e.unit} unit")
        parts[kind] = parts.get(kind, 0.0) + e.cycles
    total = sum(parts.values())
    qk = next(e for e in book.entries if e.chip == 0 and e.name == "h.0.attn.qk")
    lines = ["## decode split", "",
             "| chip 0, main setting, 128 decode steps | cycles | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:,.0f} | {v / total:.1%} |" for k, v in parts.items()]
    lines += ["", (f"One attention call (`h.0.attn.qk` at the first step: {qk.batch} products of "
                   f"{qk.m} x {qk.n} x {qk.k}): {qk.cycles:,} cycles, {qk.folds:,} folds of the "
                   f"128 x 128 array ({qk.array_cycles / qk.folds:,.0f} array cycles a fold for "
                   f"one row of work); its DRAM roofline (reading its keys, "
                   f"{qk.dram_read_bytes / 1e6:,.0f} MB) is {qk.roofline_cycles:,} cycles, "
                   f"{qk.roofline_cycles / qk.cycles:.0%} of it.")]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    args = parser.parse_args()
    machine, start = describe(), time.process_time()
    text = table() + "\n\n" + decode_split()
    text += (f"\n\nEstimated in {time.process_time() - start:.1f} s of CPU, "
             f"{machine.line()}.")
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
