"""How long `tenet-byoc --help` and a bad name take as whole processes, against what loading
TVM costs (``import tenet_byoc``) and a bare interpreter, measured alternately in the same run
(asserts nothing).

Target (issue 24, item 11): help and argument errors answer in well under a second. Each
figure is the wall time of one process, from start to exit, median of the repeats:

* ``tenet-byoc --help``: the console script (``tenet_byoc_cli:main``; ``python -m
  tenet_byoc_cli`` when the script is not on PATH);
* ``tenet-byoc run --scheme w8a8_per_chanel``: a bad name, refused with exit code 2;
* ``python -c "import tenet_byoc"``: the package's ``__init__`` (TVM, the C++ runtime, the
  codegen registered), which the console script paid before it parsed without the package;
* ``python -c pass``: what starting Python costs.

In an editable install (``pip install -e .`` with ``editable.rebuild``) importing
``tenet_byoc`` also checks that the C++ is built (a ``cmake --build`` with nothing to do),
which the import's figure includes and a wheel install does not pay.

Run: python benchmarks/cli_help.py [--repeats N]
Writes benchmarks/results/cli_help.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import describe, load_now


def _wall(argv: list[str], code: int) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != code:
        raise RuntimeError(f"{argv}: exit {proc.returncode}, expected {code}: "
                           f"{proc.stderr[-1000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    script = shutil.which("tenet-byoc")
    entry = [script] if script else [sys.executable, "-m", "tenet_byoc_cli"]
    env_note = "" if script else " (no console script on PATH: python -m tenet_byoc_cli)"
    cases = [
        ("`tenet-byoc --help`" + env_note, [*entry, "--help"], 0),
        ("`tenet-byoc run --scheme w8a8_per_chanel` (exit 2)",
         [*entry, "run", "--scheme", "w8a8_per_chanel"], 2),
        ('loading TVM: `python -c "import tenet_byoc"`',
         [sys.executable, "-c", "import tenet_byoc"], 0),
        ("`python -c pass`", [sys.executable, "-c", "pass"], 0),
    ]
    machine = describe()
    os.environ.setdefault("SKBUILD_EDITABLE_VERBOSE", "0")
    for _, argv, code in cases:  # warm the file cache and the .pyc files once
        _wall(argv, code)
    walls: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(args.repeats):
        for name, argv, code in cases:
            walls[name].append(_wall(argv, code))
    after = load_now()
    med = {name: statistics.median(w) for name, w in walls.items()}
    new, old = med[cases[0][0]], med[cases[2][0]]
    lines = [
        "# `tenet-byoc --help`: whole-process wall time",
        "",
        machine.line(after) + f"; {args.repeats} repeats, cases alternating, medians.",
        "",
        "| process | median wall (s) | each run (s) |",
        "|---|---:|---|",
        *(f"| {name} | {med[name]:.3f} | {', '.join(f'{w:.2f}' for w in walls[name])} |"
          for name, _, _ in cases),
        "",
        (f"import tenet_byoc / new entry: {old / new:.0f}x ({old - new:+.2f} s). New entry / bare "
         f"interpreter: {new / med[cases[3][0]]:.1f}x."),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).parent / "results" / "cli_help.md"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
