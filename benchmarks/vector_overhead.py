"""CPU time of a GPT-2 small prefill and decode step with and without the vector unit's charge
call (issue 20): the same model built twice, once as partition_for_tenet builds it now (one
``tenet_vector.<function>`` call per model call, fused epilogues charged with their GEMMs)
and once with the charge call left out; rounds alternate so both see the same machine load.
Prints the ratio (with / without) of the median process CPU time per call; asserts nothing.

Run: python benchmarks/vector_overhead.py [--prompt 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import tenet_byoc  # first: oneDNN's OpenMP before anything else loads one
from tenet_byoc import partition
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params


def runner(charge_call: bool) -> GPT2Runner:
    config = GPT2Config.preset("small")
    original = partition.insert_charge_calls
    if not charge_call:
        partition.insert_charge_calls = lambda mod, *a: (mod, "[]")
    try:
        return GPT2Runner(config, random_params(config, seed=0), bind_params=True,
                          build=lambda mod: tenet_byoc.build(mod, accelerator="os16"))
    finally:
        partition.insert_charge_calls = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runners = {"with": runner(True), "without": runner(False)}
    prompt = [(7 * i + 3) % 50000 for i in range(args.prompt)]
    times = {(k, p): [] for k in runners for p in ("prefill", "decode")}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, run in (runners.items() if r % 2 else reversed(runners.items())):
            t0 = time.process_time()
            _, cache = run.prefill(prompt)
            t1 = time.process_time()
            run.decode(11, cache)
            t2 = time.process_time()
            if r:
                times[(name, "prefill")].append(t1 - t0)
                times[(name, "decode")].append(t2 - t1)
    print(f"GPT-2 small, prompt {args.prompt}, {args.rounds} alternating rounds, "
          f"process CPU time (load {os.getloadavg()[0]:.1f})\n")
    print("| phase | with charge call (ms) | without (ms) | ratio |")
    print("|---|---:|---:|---:|")
    for phase in ("prefill", "decode"):
        w = statistics.median(times[("with", phase)]) * 1e3
        wo = statistics.median(times[("without", phase)]) * 1e3
        print(f"| {phase} | {w:,.1f} | {wo:,.1f} | {w / wo:.3f}x |")
    book = tenet_byoc.ledger(runners["with"].vm)
    print(f"\nledger: {sum(e.unit == 'vector' for e in book)} vector entries of {len(book)}")


if __name__ == "__main__":
    main()
