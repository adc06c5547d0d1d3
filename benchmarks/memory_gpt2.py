"""GPT-2 small on an os16 accelerator with a memory hierarchy: cycles against the roofline, DRAM
traffic and energy per phase and operand widths, with DefaultTileMapping (no search).

os16: 16 x 16 output-stationary array at 1 GHz, 1 MiB double-buffered buffer feeding an
array edge of A and of B and one of C per cycle, DRAM 256 bits per cycle; Horowitz 45 nm
energies. Widths stand for the schemes: float32 (32/32/32), w8a8 (8/8/16), w4a16 (16/4/16).
12 layers, attention as 12 heads (the batch), the tied lm_head once (the issue's roofline
figures: 62.9 ms prefill, 15.8 ms float32 decode). The ledger charges the same model with the
`os16` preset (tests/cost_model/test_charge_memory.py checks float32 prefill <= 1.5x roofline).

    python benchmarks/memory_gpt2.py [--out benchmarks/results/memory_gpt2.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tenet_byoc import cost_model as cm

PREFILL = [("qkv", 128, 2304, 768, 1), ("attn proj", 128, 768, 768, 1),
           ("fc", 128, 3072, 768, 1), ("fc proj", 128, 768, 3072, 1),
           ("QK^T", 128, 128, 64, 12), ("PV", 128, 64, 128, 12)]
DECODE_LM_HEAD = ("lm_head", 1, 50257, 768, 1)
PREFILL_LM_HEAD = ("lm_head", 128, 50257, 768, 1)
DECODE = [("qkv", 1, 2304, 768, 1), ("attn proj", 1, 768, 768, 1), ("fc", 1, 3072, 768, 1),
          ("fc proj", 1, 768, 3072, 1), ("QK^T", 1, 129, 64, 12), ("PV", 1, 64, 129, 12)]
WIDTHS = {"float32": (32, 32, 32), "w8a8": (8, 8, 16), "w4a16": (16, 4, 16)}
LAYERS = 12


def phase(gemms, bits) -> dict:
    a, b, c = bits
    hw = cm.Hardware.systolic(16, 16)
    df = cm.Dataflow.preset("os", rows=16, cols=16)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20,
                             buffer_bandwidth_bits=16 * (a + b + c))
    acc = cm.Accelerator("os16", hw, df, memory=mem)
    mac = cm.PrecisionTable.horowitz_45nm().lookup(a, b)
    total = {"cycles": 0, "roofline": 0, "dram_bytes": 0.0, "pj": 0.0}
    worst = (0.0, "")
    for name, M, N, K, batch in gemms:
        t = cm.default_tile_mapping(M, N, K, mem, 16, 16, batch=batch, bits_a=a, bits_b=b,
                                    bits_c=c)
        r = cm.analyze_memory(
            cm.GemmCall(m=M, n=N, k=K, batch=batch, bits_a=a, bits_b=b, bits_c=c), acc, t)
        e = cm.call_energy(r, mem, mac)
        times = 1 if name == "lm_head" else LAYERS
        total["cycles"] += times * r.cycles
        total["roofline"] += times * r.roofline_cycles
        total["dram_bytes"] += times * (r.dram_read_bytes + r.dram_write_bytes)
        total["pj"] += times * e.total_pj
        worst = max(worst, (r.cycles / r.roofline_cycles, name))
    total["worst"] = worst
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    lines = [("| phase | widths A/B/C | cycles (ms at 1 GHz) | roofline (ms) | ratio | worst GEMM "
              "| DRAM MB | energy mJ |"), "|---|---|---:|---:|---:|---|---:|---:|"]
    for label, gemms in (("prefill 128", PREFILL + [PREFILL_LM_HEAD]),
                         ("decode at 128", DECODE + [DECODE_LM_HEAD])):
        for scheme, bits in WIDTHS.items():
            t = phase(gemms, bits)
            lines.append(
                f"| {label} | {scheme} {'/'.join(map(str, bits))} | {t['cycles'] / 1e6:.3f} | "
                f"{t['roofline'] / 1e6:.3f} | {t['cycles'] / t['roofline']:.2f} | "
                f"{t['worst'][1]} {t['worst'][0]:.2f} | {t['dram_bytes'] / 1e6:.1f} | "
                f"{t['pj'] / 1e9:.2f} |")
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
