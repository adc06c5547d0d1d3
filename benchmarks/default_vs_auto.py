"""How far the default tiler is from the mapping search: per preset, each Llama-3 linear
layer's latency with the preset's default mapping over its latency with ``mapping="auto"``.

Issue 31 asks for ``mapping="auto"`` by default or a default tiler never over 1.1x auto; this
prints the ratio per layer and the worst per preset (bf16, M = 1 and 2,048 rows).

Usage::

    python benchmarks/default_vs_auto.py [PRESET ...]
"""

from __future__ import annotations

import sys

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset

#: (name, N, K) of Llama-3-8B's and Llama-3-70B's linear layers.
LAYERS = [("8b.qkv", 6144, 4096), ("8b.o", 4096, 4096), ("8b.gate_up", 28672, 4096),
          ("8b.down", 4096, 14336), ("70b.qkv", 10240, 8192), ("70b.down", 8192, 28672)]
DEFAULT = ["os16", "ws16", "os128", "ws128", "tpu_v1", "tpu_v5e", "a100", "h200"]


def main(argv: list[str]) -> int:
    names = argv or DEFAULT
    print("| preset | M | " + " | ".join(n for n, _, _ in LAYERS) + " | worst |")
    print("|---|---:|" + "---:|" * (len(LAYERS) + 1))
    for name in names:
        fixed, auto = preset(name), preset(name, mapping="auto")
        bits = 8 if name == "tpu_v1" else 16
        for m in (1, 2048):
            ratios = []
            for _, n, k in LAYERS:
                call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=bits)
                ratios.append(cm.charge(call, fixed).memory.cycles
                              / cm.charge(call, auto).memory.cycles)
            print(f"| {name} | {m} | " + " | ".join(f"{r:.2f}" for r in ratios)
                  + f" | {max(ratios):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
