"""The vector unit's share of a GPT-2 prefill and decode step, from shapes (issue 20, stage 1).

The GEMMs are charged by ``tenet_byoc.estimate`` (what a real run's ledger holds); the
operators the runtime does not charge yet - embedding lookup, position add, layer norms,
attention scale, causal mask, softmax, residual adds, GELU, KV-cache writes - are listed
here from GPT-2's structure (models/gpt2.py) and charged with ``cost_model.charge_vector``
on the accelerator's vector unit. Vector work is added after the GEMMs (the ``serial``
schedule; a ``pipelined`` unit hides part of it behind the array, which the runtime stage
will charge). Prints a markdown table; asserts nothing.

Run: python benchmarks/vector_share.py [--model gpt2] [--prompt 128] [--presets os16,os128,tpu_v1]
     [--schemes none,w8a8_per_channel_per_token,w4a16_group128]
"""

from __future__ import annotations

import argparse

from tenet_byoc import cost_model as cm
from tenet_byoc.estimate import estimate
from tenet_byoc.hardware import preset
from tenet_byoc.models.configs import resolve_config


def gpt2_vector_calls(config, tokens: int, keys: int, prefill: bool) -> list[cm.VectorCall]:
    """GPT-2's non-GEMM operators of one call: ``tokens`` new tokens attending to ``keys``."""
    h, heads, d, ff = config.n_embd, config.n_head, config.head_dim, config.inner_dim
    act = (1, tokens, h)
    scores = (1, heads, tokens, keys)
    calls = [cm.VectorCall("take", act), cm.VectorCall("add", act)]  # wte rows + wpe rows
    for _ in range(config.n_layer):
        calls += [cm.VectorCall("layer_norm", act),
                  cm.VectorCall("kv_write", (1, heads, tokens, d)),  # K
                  cm.VectorCall("kv_write", (1, heads, tokens, d)),  # V
                  cm.VectorCall("multiply", scores, operand_elements=1)]  # 1 / sqrt(d)
        if prefill:
            calls += [cm.VectorCall("mask", (tokens, keys)),
                      cm.VectorCall("add", scores, operand_elements=tokens * keys)]
        calls += [cm.VectorCall("softmax", scores), cm.VectorCall("add", act),
                  cm.VectorCall("layer_norm", act), cm.VectorCall("gelu_tanh", (1, tokens, ff)),
                  cm.VectorCall("add", act)]
    return calls + [cm.VectorCall("layer_norm", act)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--presets", default="os16,os128,tpu_v1")
    parser.add_argument("--schemes", default="none,w8a8_per_channel_per_token,w4a16_group128")
    args = parser.parse_args()
    config = resolve_config(args.model)
    print(f"{config.name}: prefill {args.prompt} tokens, decode at context {args.prompt}\n")
    print("| preset | scheme | phase | GEMM cycles | vector cycles | vector share "
          "| GEMM energy (mJ) | vector energy (mJ) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name in args.presets.split(","):
        acc = preset(name)
        for scheme in args.schemes.split(","):
            book = estimate(config, scheme, acc, prompt_len=args.prompt, decode_steps=1)
            for phase, tokens, keys in (("prefill", args.prompt, args.prompt),
                                        ("decode", 1, args.prompt + 1)):
                gemm = [e for e in book.entries if e.phase == phase]
                g_cyc = sum(e.cycles for e in gemm)
                g_pj = sum(e.energy_pj for e in gemm)
                vec = [cm.charge_vector(c, acc)
                       for c in gpt2_vector_calls(config, tokens, keys, phase == "prefill")]
                v_cyc = sum(v.cycles for v in vec)
                v_pj = sum(v.energy_pj for v in vec)
                print(f"| {name} | {scheme} | {phase} | {g_cyc / 1e6:.2f} M | "
                      f"{v_cyc / 1e6:.3f} M | {v_cyc / (g_cyc + v_cyc):.1%} | "
                      f"{g_pj / 1e9:.2f} | {v_pj / 1e9:.3f} |")


if __name__ == "__main__":
    main()
