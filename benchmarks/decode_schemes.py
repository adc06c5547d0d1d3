"""CPU time of one GPT-2 decode step per quantization scheme, against float32 in the same run.

Every scheme's model is built once (weights bound as constants, quantized by
``tenet_byoc.quantize``, offloaded to tenet); after a prefill of the prompt, decode steps at
the same context length are timed in alternating rounds, in one process, so that a scheme
and float32 see the same machine state. A GPT-2 small model holds about 0.5 GB of float32
weights (the emulated formats' codes too), so the schemes are timed a few at a time, each
batch alternating with the one float32 model kept throughout, and each ratio is against
float32's median in the same rounds. Prints the CPU, its ISA, the load average and a
markdown table of medians; asserts nothing.

Run: python benchmarks/decode_schemes.py [--preset small] [--context 128] [--rounds 20]
     [--schemes a,b,...] [--batch 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import time
from datetime import date

import numpy as np

import tenet_byoc
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params
from tenet_byoc.quantization import SCHEMES, get_scheme, quantize


def decode_step(config, params, prompt, scheme):
    """A callable running one decode step of GPT-2 built with ``scheme`` (after a prefill)."""
    runner = GPT2Runner(config, params, bind_params=True,
                        build=lambda mod: tenet_byoc.build(quantize(mod, scheme)))
    logits, cache = runner.prefill(prompt)
    token = int(logits[-1].argmax())
    def step():
        return runner.decode(token, cache)

    step()  # warm-up: oneDNN primitives, thread team
    return step


def time_rounds(steps: dict, rounds: int) -> dict[str, list[float]]:
    """Each step timed once per round, the order reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="small", help="GPT-2 preset (tiny, small, ...)")
    parser.add_argument("--context", type=int, default=128, help="tokens in the cache")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--schemes", default=",".join(s for s in SCHEMES if s != "none"),
                        help="comma-separated (float32 is always measured)")
    parser.add_argument("--batch", type=int, default=4, help="schemes held in memory at once")
    args = parser.parse_args()
    info = tenet_byoc.cpu_info()
    config = GPT2Config.preset(args.preset)
    params = random_params(config, seed=0)
    prompt = list(np.random.default_rng(0).integers(0, config.vocab_size, args.context))
    load = os.getloadavg()
    print(f"GPT-2 {config.name}, decode at context {args.context}, {date.today()}\n"
          f"CPU {tenet_byoc.cpu_info().model}, {os.cpu_count()} logical cores; oneDNN ISA {info.isa}, int8 "
          f"path {info.int8_path}, {info.threads} threads; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n", flush=True)

    baseline = decode_step(config, params, prompt, "none")
    schemes = [s for s in args.schemes.split(",") if s and s != "none"]
    rows = []
    for start in range(0, len(schemes), args.batch):
        batch = schemes[start:start + args.batch]
        steps = {"none": baseline}
        for scheme in batch:
            t0 = time.perf_counter()
            steps[scheme] = decode_step(config, params, prompt, scheme)
            print(f"built {scheme} in {time.perf_counter() - t0:.1f} s", flush=True)
        times = time_rounds(steps, args.rounds)
        base = statistics.median(times["none"])
        rows.append(("none", base, 1.0))
        rows += [(s, statistics.median(times[s]), statistics.median(times[s]) / base)
                 for s in batch]
        del steps, times
        gc.collect()  # the batch's weights, before the next batch is built

    load = os.getloadavg()
    print(f"\nload average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| scheme | kernel | decode step ms (median) | / float32 (same rounds) |")
    print("|---|---|---:|---:|")
    float_ms = [ms for name, ms, _ in rows if name == "none"]
    print(f"| none | float | {statistics.median(float_ms) * 1e3:.1f} "
          f"(batches: {min(float_ms) * 1e3:.1f} to {max(float_ms) * 1e3:.1f}) | 1.00x |")
    for name, ms, ratio in rows:
        if name != "none":
            # Built without calibration data, a static scheme runs as its dynamic form.
            kernel = dataclasses.replace(get_scheme(name), activation_static=False).kernel
            print(f"| {name} | {kernel} | {ms * 1e3:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
