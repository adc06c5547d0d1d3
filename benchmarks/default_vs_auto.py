"""How far the default tiler is from the mapping search, and what the search costs.

Issue 31 asks for ``mapping="auto"`` by default or a default tiler never over 1.1x auto.
Per preset this prints (1) each Llama-3 linear layer's cycles with each call's default tiles
(``mapping="default"``) over its cycles with the search (``mapping="auto"``), bf16 (tpu_v1
int8), at M = 1 and 2,048 rows, and the worst; (2) whole-model ``estimate`` latency, prefill
of 2,048 tokens and 16 decode steps, default over auto, with the wall time of each estimate
(the search's cost in estimate speed); (3) the worst ratio of all.

Usage::

    python benchmarks/default_vs_auto.py [PRESET ...]
"""

from __future__ import annotations

import sys
import time

import tenet_byoc
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset

#: (name, N, K) of Llama-3-8B's and Llama-3-70B's linear layers.
LAYERS = [("8b.qkv", 6144, 4096), ("8b.o", 4096, 4096), ("8b.gate_up", 28672, 4096),
          ("8b.down", 4096, 14336), ("70b.qkv", 10240, 8192), ("70b.down", 8192, 28672)]
DEFAULT = ["os16", "ws16", "os128", "ws128", "tpu_v1", "tpu_v5e", "a100", "h200"]
MODELS, PROMPT, STEPS = ("llama-3-8b", "llama-3-70b"), 2048, 16


def _layers(names: list[str]) -> float:
    print("| preset | M | " + " | ".join(n for n, _, _ in LAYERS) + " | worst |")
    print("|---|---:|" + "---:|" * (len(LAYERS) + 1))
    worst = 0.0
    for name in names:
        fixed, auto = preset(name, mapping="default"), preset(name, mapping="auto")
        bits = 8 if name == "tpu_v1" else 16
        for m in (1, 2048):
            ratios = []
            for _, n, k in LAYERS:
                call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits)
                ratios.append(cm.charge(call, fixed).memory.cycles
                              / cm.charge(call, auto).memory.cycles)
            worst = max(worst, *ratios)
            print(f"| {name} | {m} | " + " | ".join(f"{r:.2f}" for r in ratios)
                  + f" | {max(ratios):.2f} |")
    return worst


def _models(names: list[str]) -> float:
    print(f"\n| preset | model | prefill {PROMPT} default / auto | {STEPS} decode steps default "
          "/ auto | estimate s, default | estimate s, auto |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for name in names:
        scheme = "per_token" if name == "tpu_v1" else "none"
        for model in MODELS:
            phases, wall = {}, {}
            for mapping in ("default", "auto"):
                start = time.perf_counter()
                book = tenet_byoc.estimate(model, scheme, preset(name, mapping=mapping),
                                           prompt_len=PROMPT, decode_steps=STEPS)
                phases[mapping] = {k: v.cycles for k, v in book.group_by("phase").items()}
                wall[mapping] = time.perf_counter() - start
            ratios = [phases["default"][p] / phases["auto"][p] for p in ("prefill", "decode")]
            worst = max(worst, *ratios)
            print(f"| {name} | {model} | {ratios[0]:.2f} | {ratios[1]:.2f} | "
                  f"{wall['default']:.2f} | {wall['auto']:.2f} |")
    return worst


def main(argv: list[str]) -> int:
    names = argv or DEFAULT
    worst = max(_layers(names), _models(names))
    print(f"\nworst default / auto: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
