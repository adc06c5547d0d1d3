"""estimate's speed beside GenZ: Llama-3-70B, prompt 2048 + 128 decode steps, os128.

Per scheme, in one run on one machine, each timed from a fresh estimate:

* ours, totals: ``estimate`` and its per-phase figures (``group_by("phase")``);
* ours, per-layer table: ``estimate`` and ``group_by("layer")`` (numpy over the columns);
* ours, every entry: ``estimate`` and a loop over the ledger reading each entry's cycles
  (every ``GemmEntry`` / ``VectorEntry`` made from the columns);
* GenZ 0.0.16 (``genz-llm``): ``prefill_moddeling`` once and ``decode_moddeling`` for each of
  the 128 decode steps, on the System ``llm_peers.genz_system`` makes equivalent (the same 129
  modellings). GenZ takes one ``bits`` for all tensors: f32, int8, int4 stand for none,
  per_token, q4f16_1.

Prints a markdown table with GenZ's time over ours for each; ``--out`` writes it (with the
machine, date and load average) to a file, ``benchmarks/results/estimate_speed.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tenet_byoc  # noqa: E402
from llm_peers import SCHEMES, genz_model, genz_ms  # noqa: E402

MODEL, ACCELERATOR, PROMPT, STEPS = "llama-3-70b", "os128", 2048, 128


def _ours(scheme: str, read) -> tuple[float, int]:
    start = time.perf_counter()
    book = tenet_byoc.estimate(MODEL, scheme, ACCELERATOR, prompt_len=PROMPT,
                               decode_steps=STEPS)
    read(book)
    return time.perf_counter() - start, len(book)


def _every_entry(book) -> None:
    cycles = 0
    for e in book:
        cycles += e.cycles
    assert cycles > 0


def _genz(model, bits: str) -> float:
    start = time.perf_counter()
    genz_ms(model, ACCELERATOR, bits, PROMPT, "prefill")
    for i in range(STEPS):
        genz_ms(model, ACCELERATOR, bits, PROMPT + i, "decode")
    return time.perf_counter() - start


def timing() -> list[str]:
    model = genz_model(MODEL)
    rows = [
        ("| Llama-3-70B, prompt 2048 + 128 decode steps, os128 | calls | ours: phase totals "
         "(s) | ours: per-layer table (s) | ours: every entry read (s) | GenZ 0.0.16, 129 "
         "modellings (s) | GenZ / ours totals | GenZ / ours per layer | GenZ / ours every "
         "entry |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scheme, bits in SCHEMES.items():
        totals, calls = _ours(scheme, lambda b: b.group_by("phase"))
        layers, _ = _ours(scheme, lambda b: b.group_by("layer"))
        entries, _ = _ours(scheme, _every_entry)
        genz = _genz(model, bits)
        rows.append(f"| {scheme} (GenZ {bits}) | {calls:,} | {totals:.2f} | {layers:.2f} | "
                    f"{entries:.2f} | {genz:.2f} | {genz / totals:.1f}x | {genz / layers:.1f}x "
                    f"| {genz / entries:.1f}x |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args()
    info = tenet_byoc.cpu_info()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{date}, CPU {info.model}, ISA {info.isa} ({info.threads} threads), load average "
          f"{before}\n")
    rows = timing()
    after = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    head = (f"{date}, CPU {info.model}, ISA {info.isa} ({info.threads} threads), load average "
            f"{before} at the start and {after} at the end (a machine shared with other "
            "work: wall times move with it, the ratios are from the same run).")
    if args.out:
        # The heading names the table README.md takes (docs/readme_tables.py).
        Path(args.out).write_text("# estimate's speed beside GenZ\n\n" + head + "\n\n## speed\n\n"
                                  + "\n".join(rows) + "\n\n" + EXPLANATION)


EXPLANATION = """\
What it says: `estimate` plans each step once (two decoder layers walked, the other 78
standing in), charges each distinct call once and stores its ledger by columns
(`tenet_byoc.ledger.LedgerColumns`: each distinct charge once, per call numpy columns of
charge, name, phase, chip). Per-phase and per-layer figures are numpy sums over those
columns; reading the ledger makes each entry then, a `GemmEntry` / `VectorEntry` of the call's
names and its shared charge, in C loops. GenZ models the 129 steps one by one.
"""


if __name__ == "__main__":
    main()
