"""Run GPT-2 on the Relax VM: prefill a prompt, decode greedily, print MACs and timings."""

from __future__ import annotations

import argparse
import time

from tenet_byoc.models.gemms import total_macs
from tenet_byoc.models.gpt2 import (
    PRESETS,
    GPT2Config,
    GPT2Runner,
    load_hf_checkpoint,
    random_params,
)


def main() -> None:
    """Parse the command line and run one prompt."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument(
        "--checkpoint", help="local Hugging Face GPT-2 folder (config.json + model.safetensors)"
    )
    parser.add_argument("--prompt", default="464,2068,7586,21831", help="comma-separated ids")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.checkpoint:
        config, params = load_hf_checkpoint(args.checkpoint)
    else:
        config = GPT2Config.preset(args.preset)
        params = random_params(config, seed=args.seed)
    prompt = [int(t) % config.vocab_size for t in args.prompt.split(",")]
    weights = "checkpoint " + args.checkpoint if args.checkpoint else "random weights"
    print(f"GPT-2 {config.name}: {config.n_layer} layers, d={config.n_embd}, {weights}")

    start = time.perf_counter()
    # TVM's own CPU build; pass build= to offload the matmuls to another backend.
    runner = GPT2Runner(config, params)
    print(f"built in {time.perf_counter() - start:.1f} s")

    start = time.perf_counter()
    logits, cache = runner.prefill(prompt)
    prefill_s = time.perf_counter() - start
    macs = total_macs(config, "prefill", len(prompt))
    print(f"prefill {len(prompt)} tokens: {prefill_s * 1e3:.1f} ms, {macs / 1e6:.1f} M MACs")

    tokens = [int(logits[-1].argmax())]
    for _ in range(args.new_tokens - 1):
        start = time.perf_counter()
        past = cache.length
        step, cache = runner.decode(tokens[-1], cache)
        macs = total_macs(config, "decode", past)
        print(
            f"decode at L={past}: {(time.perf_counter() - start) * 1e3:.1f} ms, "
            f"{macs / 1e6:.1f} M MACs"
        )
        tokens.append(int(step.argmax()))
    print("generated ids:", tokens)


if __name__ == "__main__":
    main()
