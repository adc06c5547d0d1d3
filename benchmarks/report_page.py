"""How big the report page of a run is and how fast headless Chromium opens it, against a
near-empty page opened the same way in the same run (asserts nothing).

Targets (issue 23): the page of the main job (`tenet-byoc sweep --out results`) under 10 MB
and open in under 2 s. Figures per page, median of the repeats:

* first screen: navigation start to the first screen's tables and plots drawn, by the
  page's own clock (``performance.now()`` in its self-check): what a reader waits for;
* all drawn: to every plot drawn and every table row made (parts below the first screen are
  drawn in later tasks); plotly.js loaded is shown too;
* wall and CPU: Chromium's whole ``--dump-dom`` run (start, load, draw, exit) and its
  processes' CPU time, and the same for a near-empty peer page: their difference is what the
  page adds to opening a browser.

Chromium runs with the network blocked. The wall figures scale with the machine's load,
printed beside them (2 cores shared with others); the CPU figures much less.

Run: python benchmarks/report_page.py [DIR] [--repeats N]   (DIR default: results)
Writes DIR/report.html and benchmarks/results/report_page.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import tenet_byoc
from tenet_byoc.experiments.report import browser_check, chromium_path, write_report

RESULTS = Path(__file__).parent / "results" / "report_page.md"

# The peer: no plotly, no data, only the self-check element filled in at once.
_EMPTY_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>empty</title></head>
<body><pre id="tenet-self-check" hidden></pre><script>
document.getElementById('tenet-self-check').textContent = JSON.stringify({plots: {},
  tables: {}, errors: [], resources: [], plotly_ms: 0, first_ms: performance.now(),
  ready_ms: performance.now()});
</script></body></html>
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="results",
                        help="a folder written by a tenet-byoc command with --out")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if chromium_path() is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install chromium)")

    start = time.perf_counter()
    page = write_report(args.dir)
    build_s = time.perf_counter() - start
    size_mb = page.stat().st_size / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.html"
        empty.write_text(_EMPTY_PAGE)
        pages, peers = [], []
        for _ in range(args.repeats):  # alternate, so load changes hit both alike
            pages.append(browser_check(page))
            peers.append(browser_check(empty))
    first_check = pages[0]
    problems = [k for k, (w, h, _) in first_check.plots.items() if not (w > 0 and h > 0)]
    med = statistics.median
    ready = med(c.ready_ms for c in pages) / 1e3
    wall, wall_peer = med(c.wall_s for c in pages), med(c.wall_s for c in peers)
    cpu = tenet_byoc.cpu_info()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    first = med(c.first_ms for c in pages) / 1e3
    cpu_page, cpu_peer = med(c.cpu_s for c in pages), med(c.cpu_s for c in peers)
    lines = [
        "# Report page: size and opening time in headless Chromium",
        "",
        (f"{cpu.model} ({cpu.isa}), {os.cpu_count()} cores, load average {load}; "
         f"{platform.platform()}; {args.repeats} repeats, medians."),
        "",
        ("| page | size (MB) | plots | table rows | plotly.js loaded (s) | first screen (s) "
         "| all drawn (s) | Chromium wall (s) | Chromium CPU (s) |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        (f"| {page} | {size_mb:.2f} | {len(first_check.plots)} | "
         f"{sum(r for r, _ in first_check.tables.values()):,} | "
         f"{med(c.plotly_ms for c in pages) / 1e3:.2f} | {first:.2f} | {ready:.2f} | "
         f"{wall:.2f} | {cpu_page:.2f} |"),
        (f"| near-empty peer | - | 0 | 0 | - | {med(c.first_ms for c in peers) / 1e3:.2f} | "
         f"{med(c.ready_ms for c in peers) / 1e3:.2f} | {wall_peer:.2f} | {cpu_peer:.2f} |"),
        "",
        (f"Page / peer: wall {wall / wall_peer:.2f}x (+{wall - wall_peer:.2f} s), CPU "
         f"{cpu_page / cpu_peer:.2f}x (+{cpu_page - cpu_peer:.2f} s). Targets: size under 10 MB "
         f"({'met' if size_mb < 10 else 'NOT met'}); first screen under 2 s "
         f"({'met' if first < 2 else 'NOT met'} at this load). Page written in "
         f"{build_s:.2f} s. Errors caught: {len(first_check.errors)}; URLs fetched: "
         f"{len(first_check.resources)}; plots with zero size: {len(problems)}."),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
