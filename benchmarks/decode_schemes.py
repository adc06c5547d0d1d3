"""CPU time of one GPT-2 decode step per quantization scheme, against float32 in the same run.

Every scheme's model is built once (weights bound as constants, quantized by
``tenet_byoc.quantize``, offloaded to tenet); after a prefill of the prompt, decode steps at
the same context length are timed in alternating rounds over the schemes, in one process,
so all see the same machine state. Prints a markdown table of medians and their ratio to
float32's; asserts nothing.

Run: python benchmarks/decode_schemes.py [--preset small] [--context 128] [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tenet_byoc
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params
from tenet_byoc.quantization import SCHEMES, quantize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="small", help="GPT-2 preset (tiny, small, ...)")
    parser.add_argument("--context", type=int, default=128, help="tokens in the cache")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated")
    args = parser.parse_args()
    info = tenet_byoc.cpu_info()
    config = GPT2Config.preset(args.preset)
    params = random_params(config, seed=0)
    prompt = list(np.random.default_rng(0).integers(0, config.vocab_size, args.context))
    print(f"GPT-2 {config.name}, decode at context {args.context}; CPU ISA {info.isa}, "
          f"int8 path {info.int8_path}, {info.threads} threads\n")

    steps = {}
    for scheme in args.schemes.split(","):
        start = time.perf_counter()
        runner = GPT2Runner(
            config, params, bind_params=True,
            build=lambda mod, scheme=scheme: tenet_byoc.build(quantize(mod, scheme)),
        )
        logits, cache = runner.prefill(prompt)
        token = int(logits[-1].argmax())
        steps[scheme] = lambda runner=runner, cache=cache, token=token: runner.decode(token, cache)
        steps[scheme]()  # warm-up
        print(f"built {scheme} in {time.perf_counter() - start:.1f} s", flush=True)

    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["none"]) if "none" in times else None
    print("\n| scheme | decode step ms (median) | / float32 |")
    print("|---|---:|---:|")
    for name, t in times.items():
        med = statistics.median(t)
        ratio = f"{med / base:.2f}x" if base else "-"
        print(f"| {name} | {med * 1e3:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
