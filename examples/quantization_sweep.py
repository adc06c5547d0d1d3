"""The MLP and GPT-2 under every quantization scheme: accelerator cost against output error.

For each model and phase, prints one table row per scheme (weight bytes, off-chip bytes,
est. cycles and latency, PE utilisation, error against the float32 build, and FashionMNIST
test accuracy when ``--data`` holds the real files), and saves the cost-vs-error plot.

    python examples/quantization_sweep.py                      # GPT-2 small + MLP, os16
    python examples/quantization_sweep.py --data ~/fashion-mnist --gpt2-config tiny
"""

from __future__ import annotations

import argparse

from tenet_byoc.experiments.cases import gpt2_case, mlp_case
from tenet_byoc.experiments.plots import plot_cost_vs_error
from tenet_byoc.experiments.results import markdown_table
from tenet_byoc.experiments.sweep import sweep
from tenet_byoc.accelerators import PRESETS
from tenet_byoc.models.gpt2 import PRESETS as GPT2_PRESETS
from tenet_byoc.quantization import SCHEMES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="folder with the FashionMNIST IDX files (.gz or not)")
    parser.add_argument("--gpt2-config", default="small", choices=list(GPT2_PRESETS))
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--context-len", type=int, default=128)
    parser.add_argument("--accelerator", default="os16", choices=sorted(PRESETS))
    parser.add_argument("--plot", default="quantization_sweep.png", help="PNG to write")
    args = parser.parse_args()

    cases = [mlp_case(args.data),
             gpt2_case(args.gpt2_config, prompt_len=args.prompt_len,
                       context_len=args.context_len)]
    result = sweep(cases, list(SCHEMES), [args.accelerator])
    for note in result.notes:
        print(note)
    header = ["scheme", "weight bytes", "off-chip bytes", "est. cycles", "est. latency (us)",
              "PE util", "max abs error", "rel. error", "top-1 agreement", "accuracy"]
    for model, phase in dict.fromkeys((r.model, r.phase) for r in result.rows):
        rows = [r for r in result.rows if (r.model, r.phase) == (model, phase)]
        print(f"\n{model} {phase} ({rows[0].tokens} {'images' if model == 'mlp' else 'tokens'})"
              f" on {args.accelerator}")
        print(markdown_table(header, [
            [r.scheme, f"{r.weight_bytes:,.0f}", f"{r.offchip_bytes:,.0f}", f"{r.cycles:,}",
             f"{r.latency_us:,.1f}", f"{100 * r.pe_utilization:.1f}%", f"{r.max_abs_error:.4g}",
             f"{r.rel_error:.3g}", f"{100 * r.top1_agreement:.1f}%",
             "-" if r.accuracy is None else f"{100 * r.accuracy:.2f}%"]
            for r in rows
        ]))
    print(f"\nwrote {plot_cost_vs_error(result.rows, args.plot)} ({result.wall_s:.0f} s)")


if __name__ == "__main__":
    main()
