"""Our serving simulator beside Vidur's published run: Llama-3-8B on one A100 80 GB, the Splitwise conversation trace's lengths, about 6.45 requests/s, Sarathi-Serve scheduling with 512-token chunks, 512 requests.

Vidur (Agrawal et al., MLSys 2024; ``vidur`` 0.0.26 on PyPI) cannot run on this machine:
the wheel's execution-time predictor fetches its operator profiles with
``huggingface_hub.snapshot_download`` at run time (the datasets named by
``model_profiling_dataset`` / ``network_profiling_dataset``, each a ``config.json`` with
``mlp.csv.xz``, ``attention.csv.xz``, ``all_reduce.csv.xz``, ``send_recv.csv.xz``), and this
machine reaches PyPI and Debian only. The GitHub repository's own copy keeps the profiles as
``data/profiling/compute/<sku>/<model>/{mlp,attention}.csv``: every ``attention.csv`` there
is a large-file object absent from the copy this machine can read (the ``mlp.csv`` files and
the Splitwise traces are present), and it has no H100 profile of Llama-3-8B.

What Vidur publishes for this setting are the four CDFs in its README (``assets/``: TTFT,
decode time per output token, end-to-end latency, batch size), of
``python -m vidur.main`` on ``meta-llama/Meta-Llama-3-8B``, one ``a100`` replica, TP 1, PP 1,
512 synthetic requests with lengths from ``data/processed_traces/splitwise_conv.csv``,
Poisson intervals at 6.45 QPS, the ``sarathi`` scheduler with ``chunk_size`` 512 and
``batch_size_cap`` 512. :data:`PUBLISHED` holds their percentiles, read off the figures'
pixels (the curve's first pixel at each level, axes from the grid lines: about 1% of each
axis's span).

This script runs the same setting in our simulator (``policy="vllm"`` is Sarathi-Serve's
stall-free batching: decodes first, then prompt chunks up to the token budget) twice:

* ``ours``: each iteration costs what our call plan composes on the ``a100`` preset
  (``serving.cost.model_step_cost``, fp16 weights and cache: ``q0f16+kv16``);
* ``vidur mlp``: the token-level operators cost Vidur's own A100 profile of Llama-3-8B
  (``mlp.csv``, TP 1 rows, per-layer medians of the projections, RoPE, norms, activation and
  residual adds, linear in the token count between profiled counts, times 32 layers, no
  embedding or head, as Vidur's ``ExecutionTime.model_time`` adds them), attention ours
  (Vidur's ``attention.csv`` is the file that is missing).

Requests as Vidur makes them: the trace shuffled as ``DataFrame.sample(frac=1,
random_state=42)`` does (``RandomState(42).permutation``), the first 512; gaps ``-log(1 -
U) / qps`` capped at three mean gaps (Vidur's ``PoissonRequestIntervalGenerator``, which
raises the mean rate by 1 / (1 - e^-3), to 6.79 req/s), from Python's ``random`` seeded 42
(Vidur seeds the same generator, but its draws may interleave with others). The cache: 80 GiB
x 0.9 less the weights, blocks of 16. TPOT here is Vidur's ``decode_time_execution_plus_
preemption_normalized``: (finish - first token) / output tokens.

Run: python benchmarks/serving_vidur.py --trace-csv splitwise_conv.csv [--mlp-csv mlp.csv]
(both files from a Vidur checkout: ``git show HEAD:data/processed_traces/splitwise_conv.csv``
and ``HEAD:data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv``). Asserts
nothing; the figures are simulated and do not depend on the machine.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
import time

import numpy as np

from tenet_byoc.plan import model_config
from tenet_byoc.serving import SchedulerConfig, SplitStepCost, TraceRequest, cache_sizing, simulate
from tenet_byoc.serving.cost import model_step_cost

#: Vidur's README figures for this run, read off their pixels: (p50, p90, p99).
PUBLISHED = {
    "TTFT (s)": (0.749, 1.672, 2.607),
    "TPOT (ms)": (46.1, 52.0, 52.8),
    "E2E (s)": (7.31, 21.08, 29.10),
    "batch size": (55.9, 76.9, 86.1),
}

#: The token-level operators Vidur's ExecutionTime adds per layer (TP 1: no all-reduce).
MLP_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
           "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def vidur_requests(trace_csv: str, n: int, qps: float, max_tokens: int = 16384,
                   seed: int = 42) -> list[TraceRequest]:
    """``n`` requests as Vidur's synthetic generator draws them from a length trace."""
    with open(trace_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    prompt = np.array([int(float(r["num_prefill_tokens"])) for r in rows])
    output = np.array([int(float(r["num_decode_tokens"])) for r in rows])
    total = prompt + output
    over = np.clip(total - max_tokens, 0, None)  # Vidur's proportional trim (none here)
    prompt = np.maximum(prompt - np.ceil(over * prompt / total).astype(int), 1)
    output = np.maximum(output - np.ceil(over * output / total).astype(int), 1)
    order = np.random.RandomState(seed).permutation(len(rows))[:n]
    draw = random.Random(seed)
    now = 0.0
    out = []
    for i in order:
        now += min(-math.log(1.0 - draw.random()) / qps, 3.0 / qps)
        out.append(TraceRequest(now, int(prompt[i]), int(output[i])))
    return out


def vidur_dense(mlp_csv: str, layers: int = 32):
    """Vidur's profiled token-level time of a step of ``T`` tokens (seconds)."""
    with open(mlp_csv, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["num_tensor_parallel_workers"] == "1"]
    by_tokens: dict[int, list[float]] = {}
    for r in rows:
        ms = sum(float(r[f"time_stats.{op}.median"]) for op in MLP_OPS)
        by_tokens.setdefault(int(r["num_tokens"]), []).append(ms)
    tokens = np.array(sorted(by_tokens))
    per_layer_ms = np.array([np.mean(by_tokens[t]) for t in tokens])

    def dense(t: int) -> float:
        return float(np.interp(t, tokens, per_layer_ms)) * layers * 1e-3
    return dense


def figures(run) -> dict[str, np.ndarray]:
    ttft = run.first_token_s - run.arrival_s
    tpot = (run.finish_s - run.first_token_s) / run.output_tokens * 1e3
    return {"TTFT (s)": ttft, "TPOT (ms)": tpot, "E2E (s)": run.finish_s - run.arrival_s,
            "batch size": run.step_sequences.astype(float)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace-csv", required=True, help="Vidur's splitwise_conv.csv")
    ap.add_argument("--mlp-csv", help="Vidur's a100 Meta-Llama-3-8B mlp.csv")
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--qps", type=float, default=6.45)
    ap.add_argument("--spread", type=int, default=0,
                    help="also run 'vidur mlp' at this many other seeds (43, 44, ...)")
    args = ap.parse_args()
    reqs = vidur_requests(args.trace_csv, args.requests, args.qps)
    config = model_config("llama-3-8b")
    scheme = "q0f16+kv16"
    sizing = cache_sizing(config, scheme, 80 * 2**30, 16, 0.9)
    sched = SchedulerConfig("vllm", token_budget=512, max_seqs=512)
    prompts = np.array([r.prompt_tokens for r in reqs])
    outputs = np.array([r.output_tokens for r in reqs])
    print(f"llama-3-8b, one a100 (80 GiB x 0.9: {sizing.blocks:,} blocks of 16), "
          f"{len(reqs)} requests of Vidur's splitwise_conv lengths (prompt mean "
          f"{prompts.mean():.0f} / median {np.median(prompts):.0f}, output mean "
          f"{outputs.mean():.0f} / median {np.median(outputs):.0f}), mean rate "
          f"{len(reqs) / reqs[-1].arrival_s:.2f} req/s; Sarathi-style chunks of 512, 512 "
          f"sequences; load average {os.getloadavg()[0]:.1f}\n")
    ours = model_step_cost(config, scheme, "a100")
    costs = {"ours": ours}
    if args.mlp_csv:
        dense = vidur_dense(args.mlp_csv, config.num_hidden_layers)
        costs["vidur mlp"] = SplitStepCost(dense, ours.attention, 16, 1)
        print("| tokens | our dense part (ms) | Vidur's profile, token-level ops (ms) | ours / Vidur |")
        print("|---:|---:|---:|---:|")
        for t in (1, 16, 64, 128, 256, 512):
            a, b = ours.dense(t) * 1e3, dense(t) * 1e3
            print(f"| {t} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
        print()
    results = {}
    for name, cost in costs.items():
        t0 = time.perf_counter()
        run = simulate(reqs, cost, scheduler=sched, kv_blocks=sizing.blocks, block_size=16)
        results[name] = (figures(run), run, time.perf_counter() - t0)
    names = list(results)
    head = " | ".join(f"{n} | {n} / Vidur" for n in names)
    print(f"| figure | percentile | Vidur (published) | {head} |")
    print("|---|---:|---:|" + "---:|---:|" * len(names))
    for fig, pub in PUBLISHED.items():
        for q, p in zip((50, 90, 99), pub, strict=True):
            cells = []
            for n in names:
                v = float(np.percentile(results[n][0][fig], q))
                cells.append(f"{v:.3g} | {v / p:.2f}")
            print(f"| {fig} | p{q} | {p:.3g} | " + " | ".join(cells) + " |")
    print()
    for n in names:
        figs, run, wall = results[n]
        busy = run.step_seconds.sum() / (run.finish_s.max() - run.arrival_s.min())
        print(f"{n}: {run.iterations:,} iterations, mean iteration {run.step_seconds.mean() * 1e3:.1f} "
              f"ms, engine busy {busy:.0%}, peak KV blocks {run.step_kv_blocks.max():,} of "
              f"{run.kv_blocks:,}, preemptions {int(run.preemptions.sum())}, wall {wall:.1f} s")
    if args.spread and "vidur mlp" in costs:
        # How much the draws alone move the figures: other seeds of the same generator.
        runs = [figures(simulate(vidur_requests(args.trace_csv, args.requests, args.qps,
                                                seed=42 + i), costs["vidur mlp"],
                                 scheduler=sched, kv_blocks=sizing.blocks, block_size=16))
                for i in range(args.spread + 1)]
        print(f"\n'vidur mlp' over seeds 42-{42 + args.spread}, min - max / Vidur:")
        for fig, pub in PUBLISHED.items():
            cells = []
            for q, p in zip((50, 90, 99), pub, strict=True):
                v = [float(np.percentile(r[fig], q)) for r in runs]
                cells.append(f"p{q} {min(v) / p:.2f}-{max(v) / p:.2f}")
            print(f"- {fig}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
