"""How big the report page of a run is and how fast headless Chromium opens it, against a
near-empty page opened the same way in the same run (asserts nothing).

Targets (issue 23): the page of the main job (`tenet-byoc sweep --out results`) under 10 MB
and open in under 2 s. Figures per page, median of the repeats, all from navigation start by
the page's own clock (``performance.now()``, recorded by its self-check):

* opens: the header and every table's first rows painted, sorting and filtering working
  (the later of the browser's first contentful paint and the first frame after the tables
  were made; ``performance.mark('tenet-open')``, ``window.__tenetReady``). This is what the
  2 s target is checked against;
* plotly.js loaded: its 4.9 MB compiled and run (after the page opened);
* first screen: the plots in the first window (1280x1600) drawn too;
* all plots: the page scrolled itself to every plot (each drawn as it nears the screen);
* all rows: then to the end of every table too (rows made as they are scrolled to);
* wall and CPU: from starting Chromium to the page's self-check done, and the CPU time its
  processes (renderer included) used by then.

Peers opened the same way in the same run, alternating with the page: the same page with
plotly.js as an ordinary script in its head (so it runs before anything is shown, as the
page was first made; all else equal), and a near-empty page (what opening a browser costs).
Chromium reads the page's self-check from its log, so the page runs in real time.

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

import plotly.offline

import tenet_byoc
from tenet_byoc.experiments.report import browser_check, chromium_path, write_report

RESULTS = Path(__file__).parent / "results" / "report_page.md"

# The peer: no plotly, no data, only the self-check logged at once.
_EMPTY_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>empty</title></head>
<body><script>
console.log('tenet-self-check ' + JSON.stringify({plots: {},
  tables: {}, errors: [], resources: [], plotly_ms: 0, open_ms: performance.now(),
  first_ms: performance.now(), plots_ms: performance.now(), ready_ms: performance.now()}));
</script></body></html>
"""


def _plotly_in_head(text: str) -> str:
    """The page with plotly.js as an ordinary script at the end of its head."""
    js = plotly.offline.get_plotlyjs()
    block = f'<script type="text/plain" id="plotly-js">{js}</script>'
    if text.count(block) != 1:
        raise SystemExit("the page does not hold plotly.js as one text/plain block")
    return text.replace(block, "").replace("</head>", f"<script>{js}</script></head>", 1)


def _runs(checks: list, name: str) -> str:
    return ", ".join(f"{getattr(c, name) / 1e3:.2f}" for c in checks)


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
        head_first = Path(tmp) / "plotly_in_head.html"
        head_first.write_text(_plotly_in_head(page.read_text(encoding="utf-8")),
                              encoding="utf-8")
        pages, heads, peers = [], [], []
        for _ in range(args.repeats):  # alternate, so load changes hit all alike
            pages.append(browser_check(page))
            heads.append(browser_check(head_first))
            peers.append(browser_check(empty))
        head_mb = head_first.stat().st_size / 1e6
    first_check = pages[0]
    problems = [k for k, (w, h, _) in first_check.plots.items() if not (w > 0 and h > 0)]
    plotly_mb = len(plotly.offline.get_plotlyjs().encode()) / 1e6

    def sec(checks: list, name: str) -> float:
        return statistics.median(getattr(c, name) for c in checks) / 1e3

    med = statistics.median
    opened = sec(pages, "open_ms")
    wall, wall_peer = med(c.wall_s for c in pages), med(c.wall_s for c in peers)
    cpu_page, cpu_peer = med(c.cpu_s for c in pages), med(c.cpu_s for c in peers)
    cpu = tenet_byoc.cpu_info()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "# Report page: size and opening time in headless Chromium",
        "",
        (f"{cpu.model} ({cpu.isa}), {os.cpu_count()} cores, load average {load} (1, 5, 15 "
         f"min, at the end); {platform.platform()}; {args.repeats} repeats, page and peer "
         "alternating, medians."),
        "",
        ("| page | size (MB) | plots | table rows | opens: header + tables painted (s) "
         "| plotly.js loaded (s) | first screen with its plots (s) | all plots (s) | all rows "
         "(s) | Chromium wall (s) | Chromium CPU (s) |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (f"| {page} | {size_mb:.2f} | {len(first_check.plots)} | "
         f"{sum(r for r, _ in first_check.tables.values()):,} | {opened:.2f} | "
         f"{sec(pages, 'plotly_ms'):.2f} | {sec(pages, 'first_ms'):.2f} | "
         f"{sec(pages, 'plots_ms'):.2f} | {sec(pages, 'ready_ms'):.2f} | {wall:.2f} | "
         f"{cpu_page:.2f} |"),
        (f"| same page, plotly.js in its head | {head_mb:.2f} | "
         f"{len(heads[0].plots)} | {sum(r for r, _ in heads[0].tables.values()):,} | "
         f"{sec(heads, 'open_ms'):.2f} | {sec(heads, 'plotly_ms'):.2f} | "
         f"{sec(heads, 'first_ms'):.2f} | {sec(heads, 'plots_ms'):.2f} | "
         f"{sec(heads, 'ready_ms'):.2f} | "
         f"{med(c.wall_s for c in heads):.2f} | {med(c.cpu_s for c in heads):.2f} |"),
        (f"| near-empty peer | - | 0 | 0 | {sec(peers, 'open_ms'):.2f} | - | "
         f"{sec(peers, 'first_ms'):.2f} | {sec(peers, 'plots_ms'):.2f} | "
         f"{sec(peers, 'ready_ms'):.2f} | {wall_peer:.2f} | "
         f"{cpu_peer:.2f} |"),
        "",
        (f"Each run of the page (s): opens {_runs(pages, 'open_ms')}; first screen "
         f"{_runs(pages, 'first_ms')}; all plots {_runs(pages, 'plots_ms')}; all rows "
         f"{_runs(pages, 'ready_ms')}. With plotly.js "
         f"in its head: opens {_runs(heads, 'open_ms')}; first screen "
         f"{_runs(heads, 'first_ms')}."),
        "",
        (f"Opens: the page / plotly.js in its head {opened / sec(heads, 'open_ms'):.2f}x; first "
         f"screen {sec(pages, 'first_ms') / sec(heads, 'first_ms'):.2f}x."),
        "",
        (f"Page / peer: wall {wall / wall_peer:.2f}x (+{wall - wall_peer:.2f} s), CPU "
         f"{cpu_page / cpu_peer:.2f}x (+{cpu_page - cpu_peer:.2f} s). plotly.js is "
         f"{plotly_mb:.2f} MB of the page. Targets: size under 10 MB "
         f"({'met' if size_mb < 10 else 'NOT met'}); opens in under 2 s "
         f"({'met' if opened < 2 else 'NOT met'} at this load). Page written in "
         f"{build_s:.2f} s. Errors caught: {len(first_check.errors)}; URLs fetched: "
         f"{len(first_check.resources)}; plots with zero size: {len(problems)}."),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
