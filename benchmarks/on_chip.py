"""What keeping activations on chip between calls moves, per preset (issue 31).

The plan flags every GEMM's A (an activation the step made) and C (used by the next calls,
but for the head's logits) as kept on chip; the cost model drops their DRAM traffic where
they fit the on-chip level (a one-core buffer beside the tiles, or a shared L2 / unified
buffer). Per preset this prints GPT-2 small and Llama-3-8B prefill (512 tokens) and one
decode step (context 512), scheme none (tpu_v1: per_token, its int8 array), with the
flags (after) and the same plan with every flag cleared (before: what the plan charged
until now), and how many GEMMs of the step keep their operands (the rest did not fit).

Usage::

    python benchmarks/on_chip.py [PRESET ...]
"""

from __future__ import annotations

import sys

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, preset
from tenet_byoc.compose import compose
from tenet_byoc.estimate import Charges
from tenet_byoc.plan import Step, plan

MODELS, PROMPT = ("gpt2", "llama-3-8b"), 512
STEPS = {"prefill": Step.prefill(PROMPT), "decode": Step.decode(PROMPT)}


def _plain(g):
    """The GEMM ``g`` with no operand kept on chip."""
    return cm.GemmCall(m=g.m, n=g.n, k=g.k, batch=g.batch, bits_a=g.bits_a, bits_b=g.bits_b,
                       bits_c=g.bits_c, scheme=g.scheme, recipe=g.recipe)


def _unflagged(p):
    """``p`` with every GEMM charged as before the rule."""
    return type(p)(p.step, p.phase, tuple(
        c._replace(call=_plain(c.call), key=c.key + ("before",)) if c.unit == "array" else c
        for c in p.calls))


def main(names: list[str]) -> None:
    print("| preset | model | phase | before s | after s | after / before | GEMMs kept |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in names:
        acc = preset(name)
        scheme = "per_token" if name == "tpu_v1" else "none"
        for model in MODELS:
            for phase, step in STEPS.items():
                p = plan(model, step, scheme)
                charges = Charges(acc)
                after = compose(p, charges.cost, charges.schedule, acc.hardware.clock_ghz)
                before = compose(_unflagged(p), charges.cost, charges.schedule,
                                 acc.hardware.clock_ghz)
                gemms = list({c.key: c.call for c in p.calls if c.unit == "array"}.values())
                kept = sum(cm.charge(g, acc).memory.compulsory_dram_bits
                           < cm.charge(_plain(g), acc).memory.compulsory_dram_bits
                           for g in gemms)
                print(f"| {name} | {model} | {phase} | {before.seconds:.4g} | "
                      f"{after.seconds:.4g} | {after.seconds / before.seconds:.3f} | "
                      f"{kept}/{len(gemms)} |")


if __name__ == "__main__":
    main(sys.argv[1:] or [n for n in PRESETS if not n.startswith("tenet_")])
