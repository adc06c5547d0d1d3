"""Run a Llama-family model offloaded to tenet: prefill, greedy decode, the ledger per phase.

With ``--checkpoint DIR`` a local Hugging Face folder (Llama, Mistral, Qwen2 or GPT-2) is
loaded through ``from_pretrained``; otherwise a built-in shape (``--model``) or a tiny
grouped-query Llama gets seeded random weights. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import time

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.configs import BUILTIN, resolve_config
from tenet_byoc.models.gemms import total_macs
from tenet_byoc.models.llama import LlamaConfig, LlamaRunner, random_params

TINY = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=256,
                   max_position_embeddings=64, name="tiny")


def main() -> None:
    """Parse the command line and run one prompt."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", help="local Hugging Face folder")
    llamas = sorted(n for n in BUILTIN if BUILTIN[n].values["model_type"] != "gpt2")
    parser.add_argument("--model", choices=llamas, help="a built-in shape, random weights")
    parser.add_argument("--scheme", default="none", help="a tenet_byoc.SCHEMES name")
    parser.add_argument("--accelerator", default="os16", help="an accelerator preset")
    parser.add_argument("--prompt", default="1,415,2936,9060", help="comma-separated ids")
    parser.add_argument("--new-tokens", type=int, default=4)
    args = parser.parse_args()

    def build(mod):
        if args.scheme != "none":
            mod = tenet_byoc.quantize(mod, args.scheme)
        return tenet_byoc.build(mod, accelerator=args.accelerator)

    start = time.perf_counter()
    if args.checkpoint:
        runner = from_pretrained(args.checkpoint, build=build, bind_params=True)
    else:
        config = resolve_config(args.model) if args.model else TINY
        runner = LlamaRunner(config, random_params(config), build=build, bind_params=True)
    config = runner.config
    print(f"{config.name}: built in {time.perf_counter() - start:.1f} s, scheme {args.scheme}")

    prompt = [int(t) % config.vocab_size for t in args.prompt.split(",")]
    tenet_byoc.set_phase(runner.vm, "prefill")
    logits, cache = runner.prefill(prompt)
    tokens = [int(logits[-1].argmax())]
    tenet_byoc.set_phase(runner.vm, "decode")
    while len(tokens) < args.new_tokens:
        step, cache = runner.decode(tokens[-1], cache)
        tokens.append(int(step.argmax()))
    print(f"prompt {prompt} -> greedy {tokens}")

    ledger = tenet_byoc.ledger(runner.vm)
    for phase, t in ledger.group_by("phase").items():
        print(f"{phase:8s} {t.calls:4d} calls  {t.macs:.3e} MACs  {t.cycles:.3e} cycles  "
              f"{t.latency_us / 1e3:.3f} ms  PE util {t.pe_utilization:.1%}  "
              f"{t.offchip_bytes / 1e6:.2f} MB off-chip")
    expected = total_macs(config, "prefill", len(prompt)) + sum(
        total_macs(config, "decode", len(prompt) + i) for i in range(args.new_tokens - 1))
    print(f"ledger MACs {sum(e.macs for e in ledger.entries if e.unit == 'array')}, from the config alone {expected}")


if __name__ == "__main__":
    main()
