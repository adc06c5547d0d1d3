"""Wall time of the serving simulator: 10^4 requests over 10 minutes of Poisson arrivals, per scheme, against the whole-step plan cost in the same run.

Llama-3-8B on ``h100_sxm`` with 80 GB, ShareGPT-like lengths (``serving.SHAREGPT_LIKE``),
vLLM-style scheduling (2,048-token budget, 256 sequences, blocks of 16). Per scheme the
simulation starts with a cold cost (the split cost's dense and attention terms are charged
as they first occur) and is timed whole (cost terms included). For the first scheme the
warm loop is then timed with and without fast-forward (the peer of the loop alone), its
figures compared. The peer is the same
simulator asking ``estimate_step`` (plan -> charge -> compose of every whole step, cached per
exact step shape) on ``--peer-requests`` requests of 128 prompt and 32 output tokens at the
same rate: its time per iteration against the split cost's, and how far the two costs'
finish and first-token times are apart (vLLM-style with a 48-token budget there, so every
prompt is cut into chunks: each later chunk is the plan's ``StepSequence(n, context)``).
Prints the CPU, the load average and markdown tables; asserts nothing.

Run: python benchmarks/serving_speed.py [--requests 10000] [--peer-requests 40]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tenet_byoc._loader import _cpu_model
from tenet_byoc.estimate import Charges, estimate_step
from tenet_byoc.accelerators import resolve
from tenet_byoc.serving import (
    SHAREGPT_LIKE,
    CachedStepCost,
    FixedLengths,
    SchedulerConfig,
    cache_sizing,
    poisson_trace,
    serving_metrics,
    simulate,
)
from tenet_byoc.serving.cost import model_step_cost

MODEL, ACC, MEMORY = "llama-3-8b", "h100_sxm", 80e9
SCHEMES = ["q0f16+kv16", "w8a8_per_channel_per_token+kv16", "w4a16_group128+kv16",
           "w4a16_group128+kv4"]




def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--peer-requests", type=int, default=40)
    ap.add_argument("--peer-only", action="store_true")
    args = ap.parse_args()
    rate = args.requests / 600.0
    trace = poisson_trace(rate, args.requests, SHAREGPT_LIKE, seed=0)
    sched = SchedulerConfig("vllm", 2048, 256)
    acc = resolve(ACC)
    print(f"CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start")
    print(f"{MODEL} on {ACC} ({MEMORY / 1e9:.0f} GB), {args.requests} requests at "
          f"{rate:.2f}/s (10 minutes), {SHAREGPT_LIKE.describe()}\n")
    print("| scheme | wall (s) | CPU (s) | iterations | cost terms charged | mean batch | "
          "tokens/s simulated | p90 TTFT (ms) | p90 TPOT (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scheme in [] if args.peer_only else SCHEMES:
        start, cpu = time.perf_counter(), time.process_time()
        cost = model_step_cost(MODEL, scheme, acc)
        sizing = cache_sizing(cost_config(), scheme, MEMORY)
        run = simulate(trace, cost, scheduler=sched, kv_blocks=sizing.blocks)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        m = serving_metrics(run)
        print(f"| {scheme} | {wall:.2f} | {cpu:.2f} | {run.iterations:,} | {cost.misses:,} | "
              f"{m.batch_mean:.1f} | {m.tokens_per_s:,.0f} | {m.ttft_ms_p90:,.1f} | "
              f"{m.tpot_ms_p90:.2f} |")
        if scheme == SCHEMES[0]:
            warm = cost  # every term charged: the loop alone, both ways, the same figures
            loops = {}
            for fast in (True, False):
                cpu = time.process_time()
                loops[fast] = simulate(trace, warm, scheduler=sched, kv_blocks=sizing.blocks,
                                       fast_forward=fast)
                loops[fast] = (loops[fast], time.process_time() - cpu)
            same = all(np.array_equal(getattr(loops[True][0], f), getattr(loops[False][0], f),
                                      equal_nan=True) for f in ("first_token_s", "finish_s"))
            warm_line = (f"\nWarm loop ({scheme}, every term cached): fast-forward "
                         f"{loops[True][1]:.2f} CPU s, iteration by iteration "
                         f"{loops[False][1]:.2f} CPU s ({loops[False][1] / loops[True][1]:.1f}x); "
                         f"first_token_s and finish_s {'equal' if same else 'DIFFER'}\n")
    if not args.peer_only:
        print(warm_line)
    # A 48-token budget cuts every 128-token prompt into chunks beside the decodes (chunked
    # prefill); fixed lengths keep the peer to minutes.
    sched = SchedulerConfig("vllm", 48, 256)
    few = poisson_trace(rate, args.peer_requests, FixedLengths(128, 32), seed=0)
    print(f"\nPeer: {args.peer_requests} requests of 128 + 32 tokens at {rate:.2f}/s, "
          f"{SCHEMES[0]}, vLLM-style with a 48-token budget (prompts in chunks):\n")
    sizing = cache_sizing(cost_config(), SCHEMES[0], MEMORY)
    charges = Charges(acc)
    peer_cost = CachedStepCost(lambda step: estimate_step(  # attention as serving plans it
        MODEL, step, SCHEMES[0], acc, charges=charges, entries=False,
        attention="unfused")[0].seconds)
    t = time.perf_counter()
    peer = simulate(few, peer_cost, scheduler=sched, kv_blocks=sizing.blocks)
    peer_s = time.perf_counter() - t
    print("| cost | wall (s) | iterations | ms per iteration | finish apart, median / max "
          "(% of e2e) | first token apart, median / max (% of TTFT) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| estimate_step per whole step (peer, {peer_cost.misses:,} shapes) | {peer_s:.2f} | "
          f"{peer.iterations:,} | {1e3 * peer_s / peer.iterations:.2f} | - | - |")
    for label, grain in (("split cost (serving default: rounded to 16)", 16),
                         ("split cost, no rounding", 1)):
        t = time.perf_counter()
        mine = simulate(few, model_step_cost(MODEL, SCHEMES[0], acc, context_granularity=grain,
                                             token_granularity=grain),
                        scheduler=sched, kv_blocks=sizing.blocks)
        mine_s = time.perf_counter() - t
        gap = np.abs(mine.finish_s - peer.finish_s) / (peer.finish_s - peer.arrival_s)
        first = np.abs(mine.first_token_s - peer.first_token_s) / (peer.first_token_s
                                                                    - peer.arrival_s)
        print(f"| {label} | {mine_s:.2f} | {mine.iterations:,} | "
              f"{1e3 * mine_s / mine.iterations:.3f} | {100 * np.median(gap):.2f} / "
              f"{100 * gap.max():.2f} | {100 * np.median(first):.2f} / {100 * first.max():.2f} |")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


def cost_config():
    from tenet_byoc.plan import model_config

    return model_config(MODEL)


if __name__ == "__main__":
    main()
