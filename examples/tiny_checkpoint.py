"""Write a tiny random GPT-2 checkpoint with its own tokenizer.json, to try `tenet-byoc eval`.

The folder is what Hugging Face saves (`config.json`, `model.safetensors`, `tokenizer.json`),
made offline: transformers' `save_pretrained` writes the model (2 layers, d = 64, 4 heads,
context 128, seeded random weights scaled so its logits are not flat) and the `tokenizers`
library trains a 512-token byte-level BPE on the text you give. The model has learnt
nothing: its perplexity shows how far each scheme moves one model's loss, not a real one's.
Needs torch, transformers and tokenizers: `python -m pip install ".[test]"` (the test extra).
The folder appears whole or not at all: everything is written into a temporary folder beside
it, which is moved into place only once the tokenizer and the model are both saved.

    python examples/tiny_checkpoint.py tiny-gpt2 --text README.md
    tenet-byoc eval --checkpoint tiny-gpt2 --text README.md --window 128 --max-tokens 1024 \
        --schemes none,w8a8_per_channel_per_token,q4f16_1,mxfp4,per_token+kv4
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path


def write_tokenizer(folder: Path, text: str, vocab_size: int) -> int:
    """Train a byte-level BPE on ``text``, save ``folder/tokenizer.json``, return its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def write_model(folder: Path, vocab_size: int, seed: int) -> None:
    """A seeded random GPT-2 whose weights are scaled like a trained one's (unit-variance
    pre-activations), saved with save_pretrained."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128,
                                     vocab_size=vocab_size, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "ln" in name and "bias" not in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
    model.save_pretrained(folder)


def _check_dependencies() -> None:
    missing = []
    for module in ("torch", "transformers", "tokenizers"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise SystemExit(f"tiny_checkpoint.py needs {', '.join(missing)}: install the test "
                         "extra with `python -m pip install \".[test]\"`; nothing was written")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to write (must not exist yet)")
    ap.add_argument("--text", type=Path, required=True, help="UTF-8 text to train the BPE on")
    ap.add_argument("--vocab", type=int, default=512, help="BPE vocabulary (default 512)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out} already exists; give a new folder name")
    try:
        text = args.text.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SystemExit(f"--text {args.text}: cannot read it as UTF-8 text ({err})") from None
    if not text.strip():
        raise SystemExit(f"--text {args.text}: empty text")
    _check_dependencies()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # A failure halfway (a missing package, an interrupt) leaves no half-written folder.
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}-", dir=args.out.parent))
    try:
        size = write_tokenizer(staging, text, args.vocab)
        write_model(staging, size, args.seed)
        staging.rename(args.out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {args.out}/: config.json, model.safetensors, tokenizer.json ({size} tokens)")


if __name__ == "__main__":
    main()
