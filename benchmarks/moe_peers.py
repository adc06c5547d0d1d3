"""Mixture-of-experts estimates beside GenZ's: Mixtral 8x7B and DeepSeek-V3 on one chip.

For each model, a prefill of ``--prompt`` tokens and a decode step after as many cached
tokens, at batch 1 and ``--batch``, are estimated two ways on the same chip (``os128``, the
setting of ``llm_peers.py``: GenZ's ``System`` given the same peak MAC/s, DRAM bandwidth and
clock, unbounded memory), float32 (GenZ ``bits="f32"``):

* ours: ``tenet_byoc.estimate`` (``plan.plan``: the router, the host's top-k and
  combine, each expert that receives tokens over exactly its rows, by default the expected
  uniform routing: E x (1 - (1 - k/E)^T) distinct experts for T tokens; DeepSeek-V3's
  latent attention expanded in prefill, absorbed in decode);
* GenZ (``genz-llm`` 0.0.16) with its own configs of the two models
  (``mistralai/Mixtral-8x7B``, ``deepseek-ai/DeepSeek-V3-Base``).

A second GenZ column gives GenZ its config with ``intermediate_size`` set to the routed
experts' width (see below); ours' DRAM bytes are the ledger's. Prints markdown (and writes it with ``--out``); asserts nothing.

Run: python benchmarks/moe_peers.py [--prompt 512] [--batch 16] [--out benchmarks/results/moe_peers.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
import warnings

from llm_peers import genz_system

import tenet_byoc

MODELS = {"mixtral-8x7b": "mistralai/Mixtral-8x7B",
          "deepseek-v3": "deepseek-ai/DeepSeek-V3-Base"}
CHIP = "os128"

EXPLANATION = """\
Why the columns differ (structural: they hold for any --prompt):

- Mixtral, decode at batch 1 (1.00x): both read the attention weights, the router and the
  k = 2 chosen experts once (ours 51.1 GB: the 12.9 B active parameters at 4 bytes); the step
  is DRAM-bound on both. Ours adds the vector unit's steps (norms, rotary, softmax, the
  host's top-k and combine charged on it) and the buffer level's refetches.
- Mixtral, prefill (1.10x): as for the dense models of ``llm_peers.md``: ours charges the
  buffer level (tiles that refetch A or B, activations to DRAM where they do not fit on chip
  beside the tiles: 202.8 GB moved against the 187 GB of weights) and the vector unit; GenZ
  keeps every activation on chip. Both reach every
  expert at 512 tokens (GenZ spreads T k / E rows over each, ours the expected distinct
  experts E (1 - (1 - k/E)^T) = 8, each 128 rows).
- Decode at batch 16 (Mixtral 3.56x, DeepSeek-V3 9.60x against GenZ at the experts' width):
  GenZ 0.0.16 reads k experts' weights per layer whatever the batch (its ``ffn_decode``
  takes the activated experts as k, with a TODO for more), so its step barely grows from
  batch 1; ours charges the expected distinct experts 16 independently routed tokens reach,
  E (1 - (1 - k/E)^16): all 8 of Mixtral's (4x the expert weights of batch 1), 102 of
  DeepSeek-V3's 256 (12.75x k). GenZ's is the optimistic figure: a batch does reach that many.
- DeepSeek-V3 with GenZ's own config (0.12x prefill, 0.18x decode): GenZ 0.0.16 sizes every
  routed expert by ``intermediate_size``, the dense layers' 18,432, not the experts' 2,048
  (9x the expert weights: its prefill's up+gate GEMM is 256 x 2 x 18,432 wide), and applies
  it in all 61 layers. The second GenZ column sets ``intermediate_size`` to 2,048: then ours
  is 1.03x (prefill) and 1.27x (decode) of GenZ. What remains: GenZ's config has
  grouped-query attention with 2 KV heads of width 56 (no latent attention), no shared
  expert in the mixture layers and no dense first layers; ours follows ``config.json``: MLA
  (q_lora 1536, kv_lora 512, 128 heads of 128 + 64 rotary, absorbed in decode), one shared
  expert of 2,048 and 3 dense layers of 18,432 (147 GB read at batch 1: the 37 B active
  parameters at 4 bytes).
"""


def genz_config(name: str, expert_width: bool):
    """GenZ's own config of ``name``; ``expert_width``: its ``intermediate_size`` set to the
    model's routed-expert width (GenZ 0.0.16 sizes every expert, and DeepSeek-V3's decode
    MLP, by ``intermediate_size``, the dense layers' 18,432 for DeepSeek-V3)."""
    import copy

    from GenZ.Models import get_configs

    config = copy.deepcopy(get_configs(name))
    if expert_width and config.moe_intermediate_size:
        config.intermediate_size = config.moe_intermediate_size
    return config


def genz_phase(model, bits: str, tokens: int, batch: int, phase: str) -> float:
    """GenZ's latency (ms) of one phase."""
    from GenZ import decode_moddeling, prefill_moddeling

    system = genz_system(CHIP, bits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if phase == "prefill":
            out = prefill_moddeling(model=model, batch_size=batch, input_tokens=tokens,
                                    system_name=system, bits=bits)
        else:
            out = decode_moddeling(model=model, batch_size=batch, input_tokens=tokens,
                                   output_tokens=0, Bb=1, system_name=system, bits=bits)
    return float(out["Latency"])


def ours_phase(model: str, tokens: int, batch: int, phase: str) -> tuple[float, float, float]:
    """Our latency (ms), DRAM bytes (GB) and seconds taken to estimate one phase."""
    start = time.perf_counter()
    if phase == "prefill":
        book = tenet_byoc.estimate(model, "none", CHIP, prompt_len=tokens, decode_steps=0,
                                   batch=batch)
    else:
        book = tenet_byoc.estimate(model, "none", CHIP, prompt_len=0, context_len=tokens,
                                   decode_steps=1, batch=batch)
    totals = book.group_by("phase")[phase]
    return totals.latency_us / 1e3, totals.dram_bytes / 1e9, time.perf_counter() - start


def comparison(prompt: int, batch: int) -> list[str]:
    lines = [
        "| model | phase | batch | ours (ms) | GenZ (ms) | ours / GenZ | GenZ, experts at "
        "their width (ms) | ours / that | ours DRAM (GB) | ours estimated in (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ours_name, genz_name in MODELS.items():
        own, fixed = genz_config(genz_name, False), genz_config(genz_name, True)
        for phase, b in (("prefill", 1), ("decode", 1), ("decode", batch)):
            ours, moved, took = ours_phase(ours_name, prompt, b, phase)
            genz = genz_phase(own, "f32", prompt, b, phase)
            width = genz_phase(fixed, "f32", prompt, b, phase)
            lines.append(f"| {ours_name} | {phase} | {b} | {ours:,.2f} | {genz:,.2f} | "
                         f"{ours / genz:.2f}x | {width:,.2f} | {ours / width:.2f}x | "
                         f"{moved:,.1f} | {took:.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out")
    args = parser.parse_args()
    from tenet_byoc._loader import _cpu_model

    head = [f"# Mixture-of-experts estimates beside GenZ ({CHIP}, float32)", "",
            f"{datetime.date.today()}, {_cpu_model()} ({os.cpu_count()} vCPUs; the estimates' "
            "speed only: the figures are the models', not this machine's); "
            f"prompt / context {args.prompt}; `python benchmarks/moe_peers.py --prompt "
            f"{args.prompt} --batch {args.batch}`.", ""]
    text = "\n".join(head + comparison(args.prompt, args.batch) + ["", EXPLANATION])
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
