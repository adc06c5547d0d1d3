"""Quantization through capacity: the largest Poisson rate a chip serves Llama-3-8B at under p90 targets, per scheme, with the batch it reaches and what binds.

Per scheme the paged KV cache holds what the chip's memory (x utilization) leaves after the
scheme's weights, at the cache's width (``serving.cache_sizing``); each iteration costs what the
call plan composes (``serving.cost.model_step_cost``); requests are ShareGPT-like
(``serving.SHAREGPT_LIKE``: log-normal, means 161 / 338 tokens, sigma 1), Poisson arrivals of
one seed at each rate tried; vLLM-style scheduling (chunked prefill, 2,048-token budget, 256
sequences, blocks of 16). ``serving.rate_search.max_rate`` brackets and bisects the rate to 2%.
For the rate found it prints the batch (time-weighted mean and peak), the KV cache's use,
preemptions, the p90 figures, and at the next rate tried above it which target failed.
Asserts nothing.

Run: python benchmarks/serving_capacity.py [--accelerator h100_sxm] [--memory-gb 80]
     [--requests 2000] [--schemes a,b,...] [--max-seqs 256]
"""

from __future__ import annotations

import argparse
import os
import time

from tenet_byoc.serving import SHAREGPT_LIKE, SchedulerConfig
from tenet_byoc.serving.study import serve

SCHEMES = "q0f16+kv16,w8a8_per_channel_per_token+kv16,w4a16_group128+kv16,w4a16_group128+kv4"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--accelerator", default="h100_sxm")
    ap.add_argument("--memory-gb", type=float, default=80.0)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--schemes", default=SCHEMES)
    ap.add_argument("--max-seqs", type=int, default=256)
    ap.add_argument("--ttft-ms", type=float, default=500.0)
    ap.add_argument("--tpot-ms", type=float, default=50.0)
    args = ap.parse_args()
    print(f"{args.model} on {args.accelerator} ({args.memory_gb:g} GB, 90% used), "
          f"{args.requests} requests per rate, {SHAREGPT_LIKE.describe()}; p90 targets TTFT "
          f"{args.ttft_ms:g} ms, TPOT {args.tpot_ms:g} ms; vLLM-style, 2048-token budget, "
          f"{args.max_seqs} sequences; load average {os.getloadavg()[0]:.1f}\n")
    print("| scheme | weights (GB) | KV bytes/token | KV capacity (tokens) | max rate (req/s) | "
          "tokens/s | mean / peak batch | mean / peak KV use | preempted | p90 TTFT (ms) | "
          "p90 TPOT (ms) | above it, failed | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for scheme in args.schemes.split(","):
        t = time.perf_counter()
        try:
            (s,) = serve(args.model, args.accelerator, [scheme], rate=1.0,
                         requests=args.requests, lengths=SHAREGPT_LIKE, seed=0,
                         ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms,
                         scheduler=SchedulerConfig("vllm", 2048, args.max_seqs),
                         memory_bytes=args.memory_gb * 1e9)
        except ValueError as err:  # the weights do not fit
            print(f"| {scheme} | {err} |")
            continue
        wall = time.perf_counter() - t
        z, search = s.sizing, s.search
        if search.rate is None:
            print(f"| {scheme} | {z.weight_bytes / 1e9:.2f} | {z.kv_bytes_per_token:,.0f} | "
                  f"{z.tokens:,} | none | | | | | | | | {wall:.0f} |")
            continue
        m = search.metrics
        above = [(r, x) for r, x, ok in search.tried if r > search.rate and not ok]
        failed = "-"
        if above:
            r, x = min(above, key=lambda a: a[0])
            why = [name for name, value, target in (("TTFT", x.ttft_ms_p90, args.ttft_ms),
                                                     ("TPOT", x.tpot_ms_p90, args.tpot_ms))
                   if value > target]
            failed = (f"{'+'.join(why)} at {r:.2f}/s ({x.ttft_ms_p90:,.0f} / "
                      f"{x.tpot_ms_p90:.1f} ms, batch {x.batch_mean:.0f}, KV "
                      f"{100 * x.kv_use_max:.0f}%)")
        print(f"| {scheme} | {z.weight_bytes / 1e9:.2f} | {z.kv_bytes_per_token:,.0f} | "
              f"{z.tokens:,} | {search.rate:.2f} | {m.tokens_per_s:,.0f} | "
              f"{m.batch_mean:.1f} / {m.batch_max} | {100 * m.kv_use_mean:.0f}% / "
              f"{100 * m.kv_use_max:.0f}% | {m.preemptions} | {m.ttft_ms_p90:,.1f} | "
              f"{m.tpot_ms_p90:.1f} | {failed} | {wall:.0f} |")


if __name__ == "__main__":
    main()
