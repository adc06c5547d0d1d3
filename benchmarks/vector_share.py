"""The vector unit's share of a GPT-2 or Llama prefill and decode step, and how it moves the
quantization verdicts (issue 20): TTFT and TPOT per scheme with and without the vector work.

Everything comes from ``tenet_byoc.estimate``, whose ledger now holds the vector entries a
real run charges (``tests/estimate`` checks it entry for entry against runs): the GEMMs'
fused epilogues and the operators TVM runs (norms, softmax, residuals, rotary, masks,
activation quantization, KV-cache writes). Latency follows the ledger's one rule
(``ledger.step_cycles``): under the presets' ``pipelined`` vector unit a GEMM's fused
epilogue hides behind it, the rest adds. Prints markdown tables; asserts nothing.

Run: python benchmarks/vector_share.py [--models gpt2,llama-3-8b] [--prompt 128]
     [--presets os16,os128,tpu_v1] [--schemes none,w8a8_per_channel_per_token,w4a16_group128]
"""

from __future__ import annotations

import argparse

from tenet_byoc.estimate import estimate
from tenet_byoc.ledger import totals


def _phase(book, phase: str):
    entries = [e for e in book.entries if e.phase == phase]
    gemm = [e for e in entries if e.unit == "array"]
    return totals(entries), totals(gemm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="gpt2,llama-3-8b")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--presets", default="os16,os128,tpu_v1")
    parser.add_argument("--schemes", default="none,w8a8_per_channel_per_token,w4a16_group128")
    args = parser.parse_args()
    print(f"prefill {args.prompt} tokens (TTFT), one decode step at context {args.prompt} "
          "(TPOT); vector share = vector cycles / step cycles; speedup over `none` with all "
          "entries (GEMMs alone)\n")
    print("## shares\n")  # the headings name the tables README.md takes (docs/readme_tables.py)
    print("| model | preset | scheme | TTFT (us) | vector share | speedup | TPOT (us) "
          "| vector share | speedup |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    roofline = []
    for model in args.models.split(","):
        for name in args.presets.split(","):
            base = None
            for scheme in args.schemes.split(","):
                book = estimate(model, scheme, name, prompt_len=args.prompt, decode_steps=1)
                cells = []
                for phase in ("prefill", "decode"):
                    every, gemm = _phase(book, phase)
                    vector = sum(e.cycles for e in book.entries
                                 if e.phase == phase and e.unit == "vector")
                    cells.append((every, gemm, vector))
                if base is None:
                    base = cells
                row = f"| {model} | {name} | {scheme} |"
                for (every, gemm, vector), (b_every, b_gemm, _) in zip(cells, base, strict=True):
                    row += (f" {every.latency_us:,.1f} | {vector / every.cycles:.1%} | "
                            f"{b_every.cycles / every.cycles:.2f}x "
                            f"({b_gemm.cycles / gemm.cycles:.2f}x) |")
                print(row)
                if name == "os16" and scheme.startswith("w4a16"):
                    _, gemm, _ = cells[1]
                    roofline.append((model, scheme, gemm.cycles, gemm.roofline_cycles))
    print("\n## gemm-roofline\n")
    print("w4a16 decode on os16, the GEMMs against their roofline (edge dequantizer on):\n")
    print("| model | scheme | GEMM cycles | roofline cycles | ratio |")
    print("|---|---|---:|---:|---:|")
    for model, scheme, cycles, roof in roofline:
        print(f"| {model} | {scheme} | {cycles:,} | {roof:,} | {cycles / roof:.2f}x |")


if __name__ == "__main__":
    main()
