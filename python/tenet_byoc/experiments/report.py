"""The self-contained page of a run: ``tenet-byoc report DIR`` reads what a command wrote into
DIR (CSV, JSON, ``manifest.json``) and writes ``DIR/report.html``.

The page opens offline: plotly's own bundled plotly.js is inlined once, the tables and figures
travel as JSON inside the file, and a little inline script of our own makes the tables
sortable and filterable. It opens fast: the header and the tables' first rows are painted
before plotly.js is compiled, plots are drawn as they near the screen and table rows as they
are scrolled to. Sections follow the files found; a missing file leaves its section out.
Opened with ``#tenet-check`` at the end of its address, the page scrolls itself through every
plot and table and records every plot's size, every table's row count, the errors it caught,
the URLs it fetched and its timings, and logs them to the console, where :func:`browser_check`
reads them back from headless Chromium's log.
"""

from __future__ import annotations

import contextlib
import csv
import html
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .plots import BLOCK, panel_unit, spans_decades
from .results import MANIFEST

__all__ = ["DSE_FRONTS", "REPORT", "SOURCES", "PageCheck", "browser_check", "build_report",
           "chromium_path", "write_report"]

#: The page's file name inside the run folder.
REPORT = "report.html"

#: The files a report is made from (``layers_*.csv``, ``ledger_*.csv``: one per estimated
#: scheme, per layer and per call).
SOURCES = ("sweep.csv", "run.csv", "layers.csv", "sweep.json", "run.json", "eval.csv",
           "eval.json", "estimate.csv", "layers_*.csv", "ledger_*.csv", "sweep_context.csv",
           "sweep_batch.csv", "dse.csv", "serving.csv", "timeline.csv", MANIFEST)

# Column labels with units, for every column the commands write; others show their own name.
_LABELS = {
    "latency_us": "est. latency (µs)", "latency_ms": "TTFT / TPOT (ms)", "tpot_ms": "TPOT (ms)",
    "cycles": "est. cycles", "roofline_cycles": "roofline cycles", "macs": "MACs",
    "pe_utilization": "PE util (%)", "weight_bytes": "weight bytes (B)",
    "offchip_bytes": "buffer↔array bytes (B)", "dram_bytes": "DRAM bytes (B)",
    "energy_pj": "energy (pJ)", "bandwidth_gbps": "bandwidth (GB/s)",
    "max_abs_error": "max abs error", "rel_error": "rel. error", "top1_agreement": "top-1 agree (0-1)",
    "accuracy": "accuracy (0-1)", "build_s": "build (s)", "wall_s": "CPU wall (s)",
    "tokens_per_s": "tokens/s", "energy_per_token_mj": "energy/token (mJ)",
    "static_mj_per_token": "of it static (mJ)",
    "dram_bytes_per_token": "DRAM bytes/token (B)", "roofline_ratio": "× roofline",
    "context_len": "context (tokens)", "delta_vs_float32": "Δ perplexity vs float32",
    "mean_nll": "mean NLL (nats)", "dram_read_bytes": "DRAM read (B)",
    "dram_write_bytes": "DRAM write (B)", "buffer_read_bytes": "buffer→array (B)",
    "buffer_write_bytes": "array→buffer (B)", "mac_pj": "MAC energy (pJ)",
    "register_pj": "register energy (pJ)", "buffer_pj": "buffer energy (pJ)",
    "dram_pj": "DRAM energy (pJ)", "m": "M", "n": "N", "k": "K",
    "requests_per_s": "requests/s", "ttft_ms_mean": "TTFT mean (ms)",
    "ttft_ms_max": "TTFT worst (ms)", "tpot_ms_mean": "TPOT mean (ms)",
    "tpot_ms_max": "TPOT worst (ms)", "padded_share": "padded slots (0-1)",
    **{f"{m}_ms_{q}": f"{m.upper()} {q} (ms)" for m in ("ttft", "tpot")
       for q in ("p50", "p90", "p99")},
    "e2e_ms_p90": "end-to-end p90 (ms)", "goodput_rps": "goodput (req/s)",
    "batch_mean": "mean batch", "batch_max": "max batch", "kv_use_mean": "mean KV use (0-1)",
    "kv_tokens": "KV cache (tokens)", "max_rate": "max rate at targets (req/s)",
}

# The per-call columns of a ledger shown on the page: the call, its mapping and its DRAM /
# buffer / energy split (the CSV keeps all of them).
_LEDGER_COLUMNS = ("call_index", "name", "phase", "scheme", "batch", "m", "n", "k", "bits_a",
                   "bits_b", "mapping", "macs", "cycles", "roofline_cycles", "latency_us",
                   "pe_utilization", "dram_read_bytes", "dram_write_bytes",
                   "buffer_read_bytes", "buffer_write_bytes", "energy_pj", "mac_pj",
                   "register_pj", "buffer_pj", "dram_pj")
_ENERGY_PARTS = ("mac_pj", "register_pj", "buffer_pj", "dram_pj")


# ----------------------------------------------------------------------------------------
# Reading the folder
# ----------------------------------------------------------------------------------------


def _value(text: str) -> int | float | str | None:
    if text == "":
        return None
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


@dataclass(frozen=True)
class _Csv:
    """One CSV file: its name, header and rows (numbers parsed, empty cells None)."""

    name: str
    columns: list[str]
    rows: list[dict[str, Any]]


def _read_csv(path: Path) -> _Csv:
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{str(path)!r} is empty (expected a header line)")
            # folders written before the column was renamed call it "hardware"
            header = ["accelerator" if c == "hardware" else c for c in header]
            rows = []
            for i, line in enumerate(reader, start=2):
                if len(line) != len(header):
                    raise ValueError(f"{str(path)!r} line {i}: {len(line)} fields, the header "
                                     f"has {len(header)}")
                rows.append({c: _value(v) for c, v in zip(header, line)})
    except UnicodeDecodeError as err:
        raise ValueError(f"{str(path)!r} is not a UTF-8 CSV file: {err}") from None
    return _Csv(path.name, header, rows)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{str(path)!r} is not a JSON file: {err}") from None


def _positive_number(value: Any, integer: bool = False) -> bool:
    kinds = int if integer else int | float
    return (isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _check_manifest(path: Path, doc: Any) -> dict:
    """``doc``, the manifest read from ``path``, with every field the page shows checked for
    its type (the file may have been edited by hand, or made to inject script into the page).

    Raises
    ------
    ValueError
        Naming the file, the field (as the file spells it) and what it should hold.
    """
    def bad(where: str, value: Any, want: str) -> ValueError:
        return ValueError(f"{str(path)!r}: {where} is {value!r:.80}; expected {want}")

    if not isinstance(doc, dict):
        raise ValueError(f"{str(path)!r} should hold a JSON object")
    for key in ("command", "command_line", "platform", "date"):
        if key in doc and not isinstance(doc[key], str):
            raise bad(key, doc[key], "a string")
    for key in ("models", "schemes"):
        if key in doc and not (isinstance(doc[key], list)
                               and all(isinstance(v, str) for v in doc[key])):
            raise bad(key, doc[key], "a list of strings")
    for key in ("cpu", "versions"):
        if key in doc and not (isinstance(doc[key], dict) and all(
                isinstance(v, str | int | float | bool) or v is None for v in doc[key].values())):
            raise bad(key, doc[key], "an object of strings, numbers or booleans")
    accelerators = doc.get("accelerators", [])
    if not isinstance(accelerators, list):
        raise bad("accelerators", accelerators, "a list of objects")
    for i, acc in enumerate(accelerators):
        where = f"accelerators[{i}]"
        if not isinstance(acc, dict):
            raise bad(where, acc, "an object")
        for key in ("name", "num_pes", "macs_per_pe_per_cycle", "dram_bytes_per_cycle",
                    "clock_ghz"):
            if key not in acc:
                raise ValueError(f"{str(path)!r}: {where} has no {key!r}")
        if not isinstance(acc["name"], str):
            raise bad(f"{where}.name", acc["name"], "a string")
        if not _positive_number(acc["num_pes"], integer=True):
            raise bad(f"{where}.num_pes", acc["num_pes"], "a positive integer")
        for key in ("dram_bytes_per_cycle", "clock_ghz"):
            if not _positive_number(acc[key]):
                raise bad(f"{where}.{key}", acc[key], "a positive finite number")
        rates = acc["macs_per_pe_per_cycle"]
        if not (isinstance(rates, dict) and rates and all(
                (k == "all" or k.isdigit()) and _positive_number(v) for k, v in rates.items())):
            raise bad(f"{where}.macs_per_pe_per_cycle", rates, "an object of positive finite "
                      "numbers keyed by operand bits (or 'all')")
    return doc


# ----------------------------------------------------------------------------------------
# The page's parts: tables and figures (plotly's JSON form, built as plain dicts)
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    key: str
    source: _Csv
    columns: Sequence[str]


@dataclass(frozen=True)
class _Figure:
    key: str
    data: list[dict]
    layout: dict

    def __post_init__(self) -> None:
        honest_axes(self.data, self.layout)


def honest_axes(data: Sequence[dict], layout: dict) -> None:
    """Keep a log axis only where a reader is helped by one: never under bars (a 7.5x ratio
    must not look 20x), and only for values spanning two decades
    (:data:`~tenet_byoc.experiments.plots.LOG_SPAN`); elsewhere the axis is linear, a value
    axis from zero. Changes ``layout`` in place."""
    bars = any(t.get("type") == "bar" for t in data)
    for axis, key in (("xaxis", "x"), ("yaxis", "y")):
        spec = layout.get(axis)
        if not isinstance(spec, dict) or spec.get("type") != "log":
            continue
        values = [v for t in data for v in (t.get(key) or [])
                  if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if bars or not spans_decades(values):
            spec["type"] = "-"
            if key == "y" or bars:
                spec["rangemode"] = "tozero"
        else:
            spec["dtick"] = 1  # a label per decade, none on the minor ticks (2, 3, ... 9)


@dataclass
class _Section:
    title: str
    intro: str = ""
    parts: list[_Table | _Figure] = field(default_factory=list)


#: Columns the files keep as fractions and the page shows in percent, as the command line
#: prints them (PE utilization in one unit everywhere).
_PERCENT = ("pe_utilization",)


def _shown(column: str, value: Any) -> Any:
    """A cell as the page shows it: ``_PERCENT`` columns times 100."""
    if column in _PERCENT and isinstance(value, (int, float)) and not isinstance(value, bool):
        return 100.0 * value
    return value


def _layout(title: str, x: str, y: str, *, xlog: bool = False, ylog: bool = False,
            **extra: Any) -> dict:
    layout = {
        "title": {"text": title, "font": {"size": 15}},
        **{f"{axis}axis": {"title": {"text": text}, "type": "log" if log else "-",
                           "automargin": True}
           for axis, text, log in (("x", x, xlog), ("y", y, ylog))},
        "hovermode": "closest", "height": 430, "margin": {"t": 50, "r": 20},
        "legend": {"title": {"text": "click to hide / show"}},
        "template": {"layout": {"font": {"family": "system-ui, sans-serif"}}},
    }
    layout.update(extra)
    return layout


def _groups(rows: Sequence[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def _lines(rows: Sequence[dict], x: str, y: str, hover: str, **trace: Any) -> list[dict]:
    """A line per scheme of ``rows``: ``y`` against ``x``, ``hover`` its points' text
    (the scheme's name added); ``trace``, further keys of each line (a callable is given
    the scheme's rows)."""
    return [{"type": "scatter", "mode": "lines+markers", "name": str(scheme),
             "x": [p[x] for p in pts], "y": [p[y] for p in pts],
             "hovertemplate": hover + "<extra>%{fullData.name}</extra>",
             **{k: v(pts) if callable(v) else v for k, v in trace.items()}}
            for (scheme,), pts in _groups(rows, "scheme").items()]


def _per_block(rows: Sequence[dict], name: str, columns: Sequence[str]) -> dict[str, dict]:
    """``columns`` of ``rows`` summed per decoder block ("h.3": its GEMMs, vector steps and
    links; a call outside the blocks, such as the head, stands alone), in the order met, with
    the number of rows summed as ``rows``: a bar per block stays readable where one per call
    (hundreds) does not."""
    out: dict[str, dict] = {}
    for r in rows:
        m = BLOCK.match(str(r[name]))
        sums = out.setdefault(m.group(1) if m else str(r[name]), dict.fromkeys(columns, 0.0))
        for c in columns:
            sums[c] += r.get(c) or 0.0
        sums["rows"] = sums.get("rows", 0) + 1
    return out


def _block_bars(key: str, title: str, runs: dict[str, Sequence[dict]], name: str,
                metric: str = "latency_us", **layout: Any) -> _Figure:
    """Grouped bars of ``metric`` per decoder block, a trace per run (hover: energy, DRAM
    bytes, calls), in one unit that suits the largest bar."""
    sums = {run: _per_block(rows, name, (metric, "energy_pj", "dram_bytes"))
            for run, rows in runs.items()}
    scale, label = panel_unit(metric, [v[metric] for b in sums.values() for v in b.values()])
    data = [{
        "type": "bar", "name": str(run), "x": list(blocks),
        "y": [v[metric] * scale for v in blocks.values()],
        "customdata": [[v["energy_pj"] / 1e6, v["dram_bytes"], v["rows"]]
                       for v in blocks.values()],
        "hovertemplate": "%{x}<br>" + label + " %{y:.4g}<br>energy %{customdata[0]:.4g} µJ"
        "<br>DRAM %{customdata[1]:,} B<br>%{customdata[2]} row(s) summed"
        "<extra>%{fullData.name}</extra>",
        "visible": True if i < 2 else "legendonly",
    } for i, (run, blocks) in enumerate(sums.items())]
    return _Figure(key, data, _layout(title, "decoder block (its calls summed)", label,
                                      barmode="group", **layout))


def _cost_vs_error(rows: Sequence[dict], key: str, cost: str) -> list[_Figure]:
    """One scatter per (model, phase): each scheme's cost against its output error, a
    colour per scheme and a marker per accelerator; the cost in one unit for every plot,
    from zero (a 10% saving must not look like a factor of ten)."""
    scale, cost_label = panel_unit(cost, [r[cost] for r in rows])
    symbols = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "pentagon"]
    figures = []
    for (model, phase), mine in _groups(rows, "model", "phase").items():
        hws = list(dict.fromkeys(p["accelerator"] for p in mine))
        data = [{
            "type": "scatter", "mode": "markers", "name": str(scheme),
            "x": [p["rel_error"] for p in pts], "y": [p[cost] * scale for p in pts],
            "text": [p["accelerator"] for p in pts],
            "marker": {"size": 11, "opacity": 0.85, "symbol": [
                symbols[hws.index(p["accelerator"]) % len(symbols)] for p in pts]},
            "hovertemplate": "%{fullData.name} @ %{text}<br>rel. error %{x:.4g}<br>"
            + cost_label + " %{y:.4g}<extra></extra>",
        } for (scheme,), pts in _groups(mine, "scheme").items()]
        marks = ", ".join(f"{h}: {symbols[i % len(symbols)]}" for i, h in enumerate(hws))
        figures.append(_Figure(f"{key}-{model}-{phase}", data, _layout(
            f"{model} {phase}: {cost_label} vs output error ({marks})", "rel. error of the "
            "output (max |err| / max |float32|)", cost_label,
            yaxis={"title": {"text": cost_label}, "rangemode": "tozero",
                   "automargin": True})))
    return figures


def _summary_section(summary: _Csv) -> _Section:
    rows = summary.rows
    sec = _Section("Summary", f"One row per model, scheme, accelerator and phase "
                   f"(<code>{summary.name}</code>). Costs are sums over the phase's offloaded "
                   "calls: the GEMMs only, not the vector unit (an <code>estimate</code> "
                   "gives the whole model); errors compare the output with the float32 "
                   "build's.")
    sec.parts.append(_Table("summary", summary, summary.columns))
    gpt2 = [r for r in rows if r.get("phase") in ("prefill", "decode")]
    if {"prefill", "decode"} <= {r["phase"] for r in gpt2}:
        scale, label = panel_unit("latency_us", [p["latency_us"] for p in gpt2])
        data = [{
            "type": "bar", "name": f"{model} {phase} @ {hw}",
            "x": [p["scheme"] for p in pts], "y": [p["latency_us"] * scale for p in pts],
            "customdata": [[p["energy_pj"] / 1e6, p["tokens"]] for p in pts],
            "hovertemplate": "%{x}<br>" + label + " %{y:.4g}<br>energy "
            "%{customdata[0]:.4g} µJ<br>tokens %{customdata[1]}<extra>%{fullData.name}</extra>",
        } for (model, phase, hw), pts in _groups(gpt2, "model", "phase", "accelerator").items()]
        sec.parts.append(_Figure("prefill-decode", data, _layout(
            "Prefill vs decode: est. latency per scheme", "scheme", label, barmode="group")))
    if all("rel_error" in r for r in rows[:1]):
        sec.parts += _cost_vs_error(rows, "cost-error", "latency_us")
        sec.parts += _cost_vs_error(rows, "energy-error", "energy_pj")
    return sec


def _roofs(manifest: dict | None, accelerator: str, macs: Sequence[float],
           intensity: Sequence[float]) -> list[dict]:
    """The accelerator's roofs (one per MAC rate) over the points' intensity range."""
    accs = {a.get("name"): a for a in (manifest or {}).get("accelerators", [])}
    acc = accs.get(accelerator)
    xs = [x for x in intensity if x and x > 0]
    if acc is None or not xs or not macs:
        return []
    lo, hi = min(xs) / 2, max(xs) * 2
    bw = float(acc["dram_bytes_per_cycle"])
    out = []
    for bits, rate in acc["macs_per_pe_per_cycle"].items():
        peak = float(acc["num_pes"]) * float(rate)
        knee = peak / bw
        xr = sorted({_round(x) for x in (lo, hi, min(max(knee, lo), hi))})
        out.append({
            "type": "scatter", "mode": "lines", "name": f"roof {accelerator}"
            + ("" if bits == "all" else f" ({bits}-bit)"),
            "x": xr, "y": [min(peak, bw * x) for x in xr],
            "line": {"dash": "dot", "width": 1.5},
            "hovertemplate": f"peak {peak:g} MACs/cycle, DRAM {bw:g} B/cycle<extra></extra>",
        })
    return out


def _shape(call: dict) -> str:
    if call.get("m") in (None, ""):
        return ""
    return f" {call['batch']}×{call['m']}×{call['n']}×{call['k']}"


def _roofline(key: str, title: str, rows: Sequence[dict], series: str, accelerator: str | None,
              manifest: dict | None, label: str = "name") -> _Figure:
    """Each call as a point: MACs per DRAM byte against attained MACs per cycle."""
    data = []
    for (name,), pts in _groups(rows, series).items():
        # calls with MACs: a ledger's vector and link rows carry none (empty in the CSV)
        pts = [p for p in pts if p["cycles"] and p["macs"] is not None]
        data.append({
            "type": "scatter", "mode": "markers", "name": str(name),
            "x": [p["macs"] / p["dram_bytes"] if p["dram_bytes"] else None for p in pts],
            "y": [p["macs"] / p["cycles"] for p in pts],
            "text": [f"{p[label]}{_shape(p)}<br>{p['mapping']}" for p in pts],
            "marker": {"size": 7, "opacity": 0.8},
            "hovertemplate": "%{text}<br>%{x:.3g} MACs/DRAM byte<br>%{y:.4g} MACs/cycle"
            "<extra>%{fullData.name}</extra>",
        })
    if accelerator is not None:
        all_x = [x for t in data for x in t["x"]]
        data += _roofs(manifest, accelerator, [y for t in data for y in t["y"]], all_x)
    return _Figure(key, data, _layout(title, "arithmetic intensity (MACs / DRAM byte)",
                                      "attained MACs / cycle", xlog=True, ylog=True))


def _layers_section(layers: _Csv, manifest: dict | None) -> _Section:
    sec = _Section("Per layer", f"Every offloaded call of every run (<code>{layers.name}"
                   "</code>): its shape, mapping (dataflow, buffer tiles, loop order), DRAM "
                   "and buffer↔array traffic and energy. In the plots, click a legend entry "
                   "to show or hide a run.")
    for (model, phase), calls in _groups(layers.rows, "model", "phase").items():
        sec.parts.append(_block_bars(
            f"layers-{model}-{phase}", f"{model} {phase}: est. latency per layer",
            {f"{scheme} @ {hw}": mine
             for (scheme, hw), mine in _groups(calls, "scheme", "accelerator").items()},
            "layer"))
        for (hw,), mine in _groups(calls, "accelerator").items():
            sec.parts.append(_roofline(
                f"roofline-{model}-{phase}-{hw}", f"{model} {phase} on {hw}: roofline, each "
                "call a point", mine, "scheme", hw, manifest, label="layer"))
    sec.parts.append(_Table("layers", layers, layers.columns))
    return sec


def _eval_section(ev: _Csv) -> _Section:
    sec = _Section("Perplexity per scheme", f"<code>{ev.name}</code>: perplexity of the text "
                   "under each scheme, its change against float32, and what the run cost.")
    sec.parts.append(_Table("eval", ev, ev.columns))
    data = [{
        "type": "scatter", "mode": "markers+text", "name": name,
        "x": [r.get("delta_vs_float32") for r in ev.rows],
        "y": [r.get(col) * scale for r in ev.rows], "text": [r.get("scheme") for r in ev.rows],
        "textposition": "top center", "marker": {"size": 10},
        "hovertemplate": "%{text}<br>Δ perplexity %{x:.4g}<br>" + name + " %{y:.4g}"
        "<extra></extra>", "yaxis": axis,
    } for name, col, scale, axis in (("est. latency (ms)", "latency_us", 1e-3, "y"),
                                     ("energy (mJ)", "energy_pj", 1e-9, "y2"))]
    sec.parts.append(_Figure("eval-cost-error", data, _layout(
        "Cost vs perplexity change", "Δ perplexity vs float32", "est. latency (ms)",
        yaxis2={"title": {"text": "energy (mJ)"}, "overlaying": "y", "side": "right"})))
    return sec


def _estimate_section(est: _Csv | None, layer_sums: list[_Csv], ledgers: list[_Csv],
                      manifest: dict | None) -> _Section:
    sec = _Section("Estimate", "The whole model: GEMMs on the array, the vector unit's "
                   "steps and, on several chips, the links. "
                   "Per phase (<code>estimate.csv</code>): TTFT for the prefill, "
                   "TPOT (mean per step) for decode; per layer (<code>layers_SCHEME.csv</code>"
                   "): each layer's calls summed over the phase; with <code>--ledger</code>, "
                   "each scheme's ledger, one row per call, with its mapping and its DRAM / "
                   "buffer / energy split.")
    if est is not None:
        sec.parts.append(_Table("estimate", est, est.columns))
    accelerator = ((manifest or {}).get("accelerators") or [{}])[0].get("name")  # the first
    per_layer = [r for src in layer_sums for r in src.rows]
    for (phase,), rows in _groups(per_layer, "phase").items():
        sec.parts.append(_block_bars(
            f"estimate-layers-{phase}", f"{phase}: est. latency per layer (its calls summed)",
            {scheme: mine for (scheme,), mine in _groups(rows, "scheme").items()}, "layer"))
    with_ledger = {led.name.removeprefix("ledger_").removesuffix(".csv") for led in ledgers}
    for src in layer_sums:
        scheme = src.name.removeprefix("layers_").removesuffix(".csv")
        if scheme not in with_ledger:  # without the ledger, each layer is a point
            rows = [dict(r, mapping=f"{r['calls']} call(s)") for r in src.rows]
            sec.parts.append(_roofline(f"roofline-{scheme}", f"{scheme}: roofline, each "
                                       "layer (its calls summed) a point", rows, "phase",
                                       accelerator, manifest, label="layer"))
        sec.parts.append(_Table(f"layers-{scheme}", src, src.columns))
    for led in ledgers:
        scheme = led.name.removeprefix("ledger_").removesuffix(".csv")
        for (phase,), calls in _groups(led.rows, "phase").items():
            blocks = _per_block(calls, "name", _ENERGY_PARTS)  # decode steps summed too
            scale, label = panel_unit("energy_pj", [sum(b[p] for p in _ENERGY_PARTS)
                                                    for b in blocks.values()])
            data = [{"type": "bar", "name": _LABELS[p].removesuffix(" (pJ)"), "x": list(blocks),
                     "y": [b[p] * scale for b in blocks.values()],
                     "hovertemplate": "%{x}<br>%{y:.4g} " + label.split("(")[-1].rstrip(")")
                     + "<extra>%{fullData.name}</extra>"}
                    for p in _ENERGY_PARTS]
            sec.parts.append(_Figure(f"energy-{scheme}-{phase}", data, _layout(
                f"{scheme} {phase}: energy per layer by where it is spent",
                "decoder block (its calls summed)", label, barmode="stack")))
        # The GEMMs (a vector or link entry has no MACs: its cell is empty).
        rows = [dict(r, dram_bytes=(r["dram_read_bytes"] or 0) + (r["dram_write_bytes"] or 0))
                for r in led.rows if r.get("macs") is not None]
        sec.parts.append(_roofline(f"roofline-{scheme}", f"{scheme}: roofline, each call a "
                                   "point", rows, "phase", accelerator, manifest))
        sec.parts.append(_Table(f"ledger-{scheme}", led,
                                [c for c in _LEDGER_COLUMNS if c in led.columns]))
    return sec


def _sweeps_section(by_context: _Csv | None, by_batch: _Csv | None) -> _Section:
    sec = _Section("Decode step swept", "One decode step of each scheme at each context "
                   "length (tokens in the KV cache) and at each batch size.")
    for sweep, key, label in ((by_context, "context_len", "context length (tokens cached)"),
                              (by_batch, "batch", "batch (sequences per step)")):
        if sweep is None:
            continue
        for metric, ylabel in (("tpot_ms", "TPOT (ms)"),
                               ("energy_per_token_mj", "energy / token (mJ)")):
            data = _lines(sweep.rows, key, metric, f"{label} %{{x}}<br>{ylabel} %{{y:.4g}}"
                          "<br>tokens/s %{customdata[0]:.4g}<br>PE util %{customdata[1]:.2f}%",
                          customdata=lambda pts: [[p["tokens_per_s"], _shown(
                              "pe_utilization", p["pe_utilization"])] for p in pts])
            sec.parts.append(_Figure(f"sweep-{key}-{metric}", data, _layout(
                f"{ylabel} vs {label}", label, ylabel, xlog=True, ylog=True)))
        sec.parts.append(_Table(f"sweep-{key}", sweep, sweep.columns))
    return sec


#: The fronts dse marks against area (``tenet_byoc.dse.OBJECTIVE_PAIRS``), with their figure
#: (the page's and ``dse_fronts.png``'s).
DSE_FRONTS = (("tpot_area", "tpot_ms", "TPOT (ms)"), ("ttft_area", "ttft_ms", "TTFT (ms)"),
               ("energy_area", "energy_per_token_mj", "energy / token (mJ)"))
#: Off-front points drawn per scheme and plot; more are thinned evenly (fronts stay whole).
_DSE_CLOUD = 1500


def _design(r: dict) -> str:
    """A design point in words, for a plot's hover."""
    e = html.escape
    return (f"<b>{e(str(r['name']))}</b><br>{r['rows']}×{r['cols']} {e(str(r['dataflow']))}, "
            f"PE formats {e(str(r['pe_formats']))}<br>buffer {r['buffer_bytes']:,} B, DRAM "
            f"{r['dram_gbps']:g} GB/s, {r['clock_ghz']:g} GHz, {e(str(r['mapping']))} mapping"
            f"<br>area {r['area_mm2']:.4g} mm², TTFT {r['ttft_ms']:.4g} ms, TPOT "
            f"{r['tpot_ms']:.4g} ms, {r['energy_per_token_mj']:.4g} mJ/token, "
            f"{r['power_w']:.3g} W")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _dse_section(points: _Csv) -> _Section:
    sec = _Section("Design space", f"Every design point under each scheme (<code>{points.name}"
                   "</code>, written by <code>tenet-byoc dse</code>). In each plot a faint dot "
                   "is a feasible design and each scheme's line its Pareto front against area "
                   "(no design has both less area and a lower figure); hover a point for its "
                   "design. Designs refused (over a budget, or a dataflow the array cannot "
                   "run) stay in the table with their reason.")
    feasible = [r for r in points.rows if str(r.get("feasible")) == "True"]
    for front, metric, label in DSE_FRONTS:
        data = []
        for i, ((scheme,), mine) in enumerate(_groups(feasible, "scheme").items()):
            mine = [r for r in mine if _finite(r.get(metric)) and _finite(r.get("area_mm2"))]
            on = sorted((r for r in mine if front in str(r.get("fronts") or "").split(";")),
                        key=lambda r: r["area_mm2"])
            off = [r for r in mine if front not in str(r.get("fronts") or "").split(";")]
            shown = off[::math.ceil(len(off) / _DSE_CLOUD)] if len(off) > _DSE_CLOUD else off
            color = _COLORS[i % len(_COLORS)]
            name = str(scheme) + (f" ({len(shown):,} of {len(off):,} shown)"
                                  if len(shown) < len(off) else "")
            for rows, trace in (
                    (shown, {"mode": "markers", "name": name,
                             "marker": {"size": 5, "opacity": 0.3, "color": color}}),
                    (on, {"mode": "lines+markers", "name": f"{scheme}: front",
                          "line": {"shape": "hv", "color": color},
                          "marker": {"size": 8, "color": color}})):
                data.append({"type": "scatter", "legendgroup": str(scheme), **trace,
                             "x": [r["area_mm2"] for r in rows], "y": [r[metric] for r in rows],
                             "text": [_design(r) for r in rows],
                             "hovertemplate": "%{text}<extra>%{fullData.name}</extra>"})
        sec.parts.append(_Figure(f"dse-{front}", data, _layout(
            f"{label} vs area: each scheme's Pareto front", "area (mm²)", label, xlog=True,
            ylog=True)))
    if any(_finite(r.get("perplexity")) for r in feasible):
        data = [{"type": "scatter", "mode": "markers", "name": str(scheme),
                 "x": [r["area_mm2"] for r in mine], "y": [r["energy_per_token_mj"] for r in mine],
                 "text": [_design(r) + f"<br>perplexity {r['perplexity']:.4g}" for r in mine],
                 "hovertemplate": "%{text}<extra>%{fullData.name}</extra>",
                 "marker": {"size": 9}}
                for (scheme,), mine in _groups(
                    [r for r in feasible if "accuracy" in str(r.get("fronts") or "")],
                    "scheme").items()]
        if data:
            sec.parts.append(_Figure("dse-accuracy", data, _layout(
                "Front of perplexity, energy and area across schemes (which scheme on which "
                "design)", "area (mm²)", "energy / token (mJ)", xlog=True, ylog=True)))
    sec.parts.append(_Table("dse", points, points.columns))
    return sec


# plotly's own first colours, so a scheme's dots and front line match
_COLORS = ("#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692",
           "#B6E880", "#FF97FF", "#FECB52")


def _serving_section(serving: _Csv) -> _Section:
    sec = _Section("Serving", "A request mix served under static batching "
                   "(<code>serving.csv</code>, <code>estimate --serve</code>): each batch "
                   "prefilled padded to its longest prompt, then decoded to its longest "
                   "output; TTFT is a request's batch's prefill, TPOT its mean decode step.")
    for metric in ("tokens_per_s", "ttft_ms_max", "tpot_ms_max"):
        data = _lines(serving.rows, "batch", metric,
                      f"batch %{{x}}<br>{_LABELS[metric]} %{{y:.4g}}")
        sec.parts.append(_Figure(f"serving-{metric}", data, _layout(
            f"{_LABELS[metric]} vs batch", "batch (requests per static batch)", _LABELS[metric],
            xlog=True, ylog=True)))
    sec.parts.append(_Table("serving", serving, serving.columns))
    return sec


#: The summary.json figures of a ``serve`` run shown in its table, per scheme.
_SERVE_COLUMNS = ("scheme", "requests", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
                  "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "e2e_ms_p90", "tokens_per_s",
                  "requests_per_s", "goodput_rps", "batch_mean", "batch_max", "kv_use_mean",
                  "preemptions", "kv_tokens", "max_rate")
#: Points per scheme a timeline plot keeps (every n-th iteration past that).
_TIMELINE_POINTS = 4000


def _serve_section(doc: dict, timeline: _Csv) -> _Section:
    """``tenet-byoc serve --out``: latency percentiles against load per scheme, the batch and
    KV use over time, and the summary table (``summary.json``, ``timeline.csv``)."""
    schemes = doc["schemes"]
    if not isinstance(schemes, dict) or not schemes:
        raise ValueError("summary.json: 'schemes' must be an object of one entry per scheme")
    chips = doc.get("chips") or {}
    where = ""
    if chips.get("disaggregate"):
        where = f"; disaggregated, prefill:decode chips {chips['disaggregate']}"
    elif chips.get("tensor_parallel", 1) * chips.get("pipeline_parallel", 1) > 1:
        where = (f"; TP {chips['tensor_parallel']} x PP {chips['pipeline_parallel']}, "
                 f"{chips.get('link_gbps')} GB/s links")
    sec = _Section("Serving (continuous batching)", html.escape(
        f"{doc.get('model')} on {doc.get('accelerator')}{where}: {doc.get('arrivals')}, "
        f"{doc.get('policy')} scheduler, {doc.get('token_budget')} tokens and "
        f"{doc.get('max_seqs')} sequences per iteration (summary.json, timeline.csv). Each "
        "scheme's run at its measured load (p50 / p90 / p99), and the p90 at each rate the "
        "search tried when targets were given."))
    targets = {"ttft": doc.get("ttft_ms_target_p90"), "tpot": doc.get("tpot_ms_target_p90")}
    for metric, name in (("ttft", "TTFT"), ("tpot", "TPOT")):
        data = []
        for i, (scheme, e) in enumerate(schemes.items()):
            color = _COLORS[i % len(_COLORS)]  # one colour per scheme, a symbol per percentile
            for q in ("p50", "p90", "p99"):
                data.append({"type": "scatter", "mode": "markers", "name": f"{scheme} {q}",
                             "x": [e["requests_per_s"]], "y": [e[f"{metric}_ms_{q}"]],
                             "marker": {"size": 10, "color": color, "symbol": {
                                 "p50": "circle", "p90": "diamond", "p99": "x"}[q]},
                             "hovertemplate": f"{scheme} {q}<br>%{{x:.4g}} req/s<br>"
                             f"{name} %{{y:.4g}} ms<extra></extra>"})
            tried = sorted(e.get("rates_tried") or [], key=lambda t: t["rate"])
            if tried:
                data.append({"type": "scatter", "mode": "lines+markers",
                             "name": f"{scheme} p90 (rates tried)",
                             "line": {"color": color}, "marker": {"color": color},
                             "x": [t["rate"] for t in tried],
                             "y": [t[f"{metric}_ms_p90"] for t in tried],
                             "hovertemplate": f"{scheme}<br>%{{x:.4g}} req/s offered<br>"
                             f"p90 {name} %{{y:.4g}} ms<extra></extra>"})
        shapes = [] if targets[metric] is None else [
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": targets[metric],
             "y1": targets[metric], "line": {"dash": "dash", "color": "#888"}}]
        sec.parts.append(_Figure(f"serve-{metric}", data, _layout(
            f"{name} percentiles vs load" + (f" (p90 target {targets[metric]} ms dashed)"
                                              if targets[metric] is not None else ""),
            "load (requests/s)", f"{name} (ms)", shapes=shapes)))
    thinned = [r for rows in _groups(timeline.rows, "scheme").values()
               for r in rows[::max(1, -(-len(rows) // _TIMELINE_POINTS))]]
    for column, label in (("sequences", "batch (sequences per iteration)"),
                          ("kv_use", "KV cache in use (share of blocks)")):
        data = _lines(thinned, "start_s", column, f"%{{x:.4g}} s<br>{label} %{{y:.4g}}",
                      mode="lines", line={"shape": "hv"})
        sec.parts.append(_Figure(f"serve-{column}", data, _layout(
            f"{label} over time (the run as given)", "time (s)", label)))
    rows = [{**{c: e.get(c) for c in _SERVE_COLUMNS}, "scheme": scheme,
             "kv_tokens": (e.get("cache") or {}).get("tokens")} for scheme, e in schemes.items()]
    sec.parts.append(_Table("serve-summary", _Csv("summary.json", list(_SERVE_COLUMNS), rows),
                            _SERVE_COLUMNS))
    return sec


# ----------------------------------------------------------------------------------------
# The page
# ----------------------------------------------------------------------------------------


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: every ``<``, ``>`` and ``&`` (which only occur
    inside strings) written as a JSON escape, so no ``</script>`` can close the element and
    no ``<!--`` can open a comment, while the text stays valid JSON."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _round(x: float) -> float:
    """``x`` to 7 significant digits: a plot shows at most 4, and its JSON is half as long."""
    return float(f"{x:.7g}")


def _clean(value: Any, digits: bool = False) -> Any:
    """NaN and infinities as None (JSON has no such numbers); floats to 7 significant digits
    if ``digits`` (plots only: tables keep the CSV's values, to sort and show them exactly)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return _round(value) if digits else value
    if isinstance(value, dict):
        return {k: _clean(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, digits) for v in value]
    return value


def _header(folder: Path, manifest: dict | None, notes: list[str],
            found: list[str]) -> str:
    e = html.escape
    rows: list[tuple[str, str]] = []
    if manifest is None:
        rows.append(("run", (f"no <code>{MANIFEST}</code> in this folder (older tenet-byoc): "
                             "the command line, accelerators and CPU are unknown")))
    else:
        rows += [("command line", f"<code>{e(manifest.get('command_line', ''))}</code>"),
                 *((k, e(", ".join(map(str, manifest.get(k, []))))) for k in ("models", "schemes"))]
        system = manifest.get("system")
        if isinstance(system, dict) and system.get("chips", 1) != 1:
            link = system.get("link") or {}
            rows.append(("system", e(
                f"{system.get('chips')} chips: TP {system.get('tensor_parallel')} x PP "
                f"{system.get('pipeline_parallel')}, {system.get('micro_batches')} "
                f"micro-batch(es); {link.get('topology')} link {link.get('bandwidth_gbps')} "
                f"GB/s, {link.get('latency_us')} us a hop")))
        accs = []
        for a in manifest.get("accelerators", []):
            rates = a.get("macs_per_pe_per_cycle") or {}
            rate = (f"{rates['all']} MAC/PE/cycle" if list(rates) == ["all"] else
                    ", ".join(f"{r} MAC/PE/cycle at {b} bits" for b, r in rates.items()))
            accs.append(f"<details><summary>{e(str(a.get('name')))}: "
                        f"{e(str(a.get('num_pes')))} PEs, {e(rate)}, "
                        f"{e(str(a.get('dram_bytes_per_cycle')))} DRAM B/cycle, "
                        f"{e(str(a.get('clock_ghz')))} GHz (JSON)</summary><pre>"
                        f"{e(json.dumps(a.get('json'), indent=1))}</pre></details>")
        if accs:  # dse's designs and serve's chip are named in their sections
            rows.append(("accelerators", "".join(accs)))
        cpu = manifest.get("cpu", {})
        rows += [("CPU", e(", ".join(f"{k} {v}" for k, v in cpu.items())
                           + f"; {manifest.get('platform', '')}")),
                 ("versions", e(", ".join(f"{k} {v}" for k, v in
                                          manifest.get("versions", {}).items()))),
                 ("date", e(str(manifest.get("date", ""))))]
    rows += [("folder", f"<code>{e(str(folder))}</code>: " + e(", ".join(found))),
             *(("note", e(note)) for note in notes)]
    return "<table class='head'>" + "".join(
        f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _section(make, sources: Sequence[_Csv | None], *args: Any) -> _Section:
    """``make(*args)``, a file's missing column or a value of the wrong kind (a folder
    edited by hand) refused naming the files and the column, not as a bare KeyError."""
    names = ", ".join(repr(c.name) for c in sources if c is not None)
    try:
        return make(*args)
    except KeyError as err:
        raise ValueError(f"{names}: no column {err.args[0]!r}, which its section needs "
                         "(was the file edited by hand?)") from None
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as err:
        raise ValueError(f"{names}: a value its section cannot use ({err}); was the file "
                         "edited by hand?") from None


def build_report(folder: str | os.PathLike[str]) -> str:
    """The page of the run in ``folder``, as HTML text.

    Raises
    ------
    FileNotFoundError
        If ``folder`` is not a folder, or holds none of :data:`SOURCES` (all are named).
    ValueError
        If a file there is not the CSV / JSON it should be (the file is named).
    """
    import plotly.offline

    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"report folder {str(folder)!r} does not exist or is not a "
                                "folder")
    found = sorted(p.name for p in path.iterdir() if p.is_file() and any(
        p.match(s) for s in SOURCES))
    if not [f for f in found if f != MANIFEST]:
        raise FileNotFoundError(
            f"report folder {str(folder)!r} has none of the files a report is made from: "
            f"{', '.join(SOURCES)} (written by tenet-byoc sweep/run/estimate/eval/dse --out)")

    def csv_of(name: str) -> _Csv | None:
        return _read_csv(path / name) if (path / name).is_file() else None

    manifest = (_check_manifest(path / MANIFEST, _read_json(path / MANIFEST))
                if (path / MANIFEST).is_file() else None)
    notes: list[str] = []
    for name in ("sweep.json", "run.json", "eval.json"):
        if (path / name).is_file():
            doc = _read_json(path / name)
            if isinstance(doc, dict):
                notes += [str(n) for n in doc.get("notes", [])]
    sections = []
    for name, make, *extra in (("sweep.csv", _summary_section), ("run.csv", _summary_section),
                               ("layers.csv", _layers_section, manifest),
                               ("eval.csv", _eval_section)):
        source = csv_of(name)
        if source is not None and source.rows:
            sections.append(_section(make, [source], source, *extra))
    est = csv_of("estimate.csv")
    layer_sums = [_read_csv(path / n) for n in found if n.startswith("layers_")]
    ledgers = [_read_csv(path / n) for n in found if n.startswith("ledger_")]
    if est is not None or layer_sums or ledgers:
        sections.append(_section(_estimate_section, [est, *layer_sums, *ledgers], est,
                                         layer_sums, ledgers, manifest))
    by_context, by_batch = csv_of("sweep_context.csv"), csv_of("sweep_batch.csv")
    if by_context is not None or by_batch is not None:
        sections.append(_section(_sweeps_section, [by_context, by_batch], by_context,
                                         by_batch))
    for name, make in (("dse.csv", _dse_section), ("serving.csv", _serving_section)):
        source = csv_of(name)
        if source is not None and source.rows:
            sections.append(_section(make, [source], source))
    timeline = csv_of("timeline.csv")
    if timeline is not None:
        if not (path / "summary.json").is_file():
            raise FileNotFoundError(f"report folder {str(folder)!r} has timeline.csv (tenet-byoc "
                                    "serve) but no summary.json beside it")
        doc = _read_json(path / "summary.json")
        if not isinstance(doc, dict) or "schemes" not in doc:
            raise ValueError(f"{str(path / 'summary.json')!r}: expected tenet-byoc serve's "
                             "summary (an object with 'schemes')")
        sections.append(_section(_serve_section, [timeline, _Csv("summary.json", [], [])], doc,
                                 timeline))

    title = "tenet-byoc report"
    if manifest is not None:
        title += f": {manifest.get('command', '')} " + ", ".join(
            map(str, manifest.get("models", [])))
    figures, tables, body = {}, {}, []
    for s_index, sec in enumerate(sections):
        body.append(f"<section id='s{s_index}'><h2>{html.escape(sec.title)}</h2>"
                    f"<p>{sec.intro}</p>")
        for part in sec.parts:
            if isinstance(part, _Figure):
                figures[part.key] = {"data": _clean(part.data, digits=True), "layout": part.layout}
                body.append(f"<div class='plot' id='plot-{html.escape(part.key)}'></div>")
            else:
                tables[part.key] = {
                    "source": part.source.name,
                    "columns": list(part.columns),
                    "labels": [_LABELS.get(c, c) for c in part.columns],
                    "rows": _clean([[_shown(c, r.get(c)) for c in part.columns]
                                    for r in part.source.rows]),
                }
                body.append(f"<div class='table' id='table-{html.escape(part.key)}'></div>")
        body.append("</section>")
    pngs = sorted(p.name for p in path.glob("*.png"))
    if pngs:
        body.append("<section><h2>Static plots</h2><p>PNG files beside this page (for papers): "
                    + ", ".join(f"<code>{html.escape(n)}</code>" for n in pngs) + "</p></section>")
    toc = "".join(f"<a href='#s{i}'>{html.escape(s.title)}</a>" for i, s in enumerate(sections))
    return _PAGE.format(
        title=html.escape(title), style=_STYLE, capture=_CAPTURE,
        plotly=plotly.offline.get_plotlyjs(), header=_header(path, manifest, notes, found),
        toc=toc, body="\n".join(body), figures=_script_json(figures),
        tables=_script_json(tables), app=_APP,
    )


def write_report(folder: str | os.PathLike[str]) -> Path:
    """Write :func:`build_report`'s page to ``folder/report.html``."""
    target = Path(folder) / REPORT
    target.write_text(build_report(folder), encoding="utf-8")
    return target


# ----------------------------------------------------------------------------------------
# Checking the page in a real browser
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageCheck:
    """What the page's self-check recorded in headless Chromium.

    ``plots`` maps a plot's key to its drawn (width, height, points); ``tables`` maps a
    table's key to (rows drawn, source CSV); ``errors`` holds caught errors and
    console.error messages; ``resources`` the URLs the page fetched. Times from navigation
    start, in ms: ``paint_ms`` the browser's first contentful paint (None if it gave none),
    ``open_ms`` the header and every table's first rows painted and working (sort, filter):
    the later of the first paint and the first frame after the tables were made,
    ``plotly_ms`` plotly.js compiled and run, ``first_ms`` the plots on the first screen drawn
    too, ``plots_ms`` every plot drawn after the page scrolled itself to each, ``ready_ms``
    every table row made too (after it scrolled each table to its end). ``wall_s``: from starting Chromium to reading the finished self-check;
    ``cpu_s``: the CPU time its processes had used by then (all of them, renderer too). ``sorted_rows`` and ``filtered_rows``: the rows a table
    showed after :func:`browser_check`'s ``sort_by`` / ``filter_by`` (each cell its exact
    value for numbers, else its text), or None.
    """

    plots: dict[str, tuple[float, float, int]]
    tables: dict[str, tuple[int, str]]
    errors: list[str]
    resources: list[str]
    paint_ms: float | None
    open_ms: float
    plotly_ms: float
    first_ms: float
    plots_ms: float
    ready_ms: float
    wall_s: float
    cpu_s: float
    sorted_rows: list[list[str]] | None = None
    filtered_rows: list[list[str]] | None = None


def chromium_path() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``, ``google-chrome``) on PATH, if any."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)


def _session_cpu_s(session: int) -> float:
    """CPU time (user + system) of every live process of ``session`` (Chromium's renderer and
    GPU processes too)."""
    total = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == session:  # session id (field 6 of stat)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _logged_check(log: Path) -> str | None:
    """The JSON the page's self-check logged (``console.log``) into Chromium's ``log``, once
    its line is whole."""
    mark = b'"tenet-self-check '  # Chromium writes `"MESSAGE", source: URL (LINE)`
    text = log.read_bytes()
    at = text.find(mark)
    if at < 0 or b"\n" not in text[at:]:
        return None
    line = text[at + len(mark):].split(b"\n", 1)[0].decode(errors="replace")
    return line.rsplit('", source: ', 1)[0]


def browser_check(page: str | os.PathLike[str], *, chromium: str | None = None,
                  timeout: float = 180.0, sort_by: tuple[str, str] | None = None,
                  filter_by: tuple[str, str] | None = None) -> PageCheck:
    """Open ``page`` in headless Chromium with every network route blocked, wait (real time,
    up to ``timeout`` seconds) for the page's self-check and read it back.

    The page logs its self-check to the console, which Chromium writes into its log
    (``--enable-logging=stderr``), so the page runs in real time (the ``--dump-dom
    --virtual-time-budget`` way stops the page's clock while a task runs, and its timings
    mean nothing). The window, 1280 x 1600, is what the first screen holds.
    After its checks the page does what a reader would: ``sort_by=(table, column)`` clicks
    that column's header once (ascending), then ``filter_by=(table, words)`` types those
    words in that table's filter; each scrolls the table to its end, and the rows it then
    shows are in :attr:`PageCheck.sorted_rows` / :attr:`PageCheck.filtered_rows`. A table is
    named by its key (``summary``, ``layers``, ...).

    Raises
    ------
    ValueError
        If ``sort_by`` or ``filter_by`` is not a (table, text) pair of strings.
    FileNotFoundError
        If no Chromium is installed or ``page`` is missing.
    RuntimeError
        If Chromium fails or the page never finished its self-check in time.
    """
    query = [("tenet-check", "")]
    for name, action in (("sort_by", sort_by), ("filter_by", filter_by)):
        if action is None:
            continue
        if (not isinstance(action, tuple) or len(action) != 2
                or not all(isinstance(a, str) and a for a in action) or ":" in action[0]):
            raise ValueError(f"{name}={action!r}: expected a (table key, text) pair of "
                             "non-empty strings, the key without ':'")
        query.append((name.split("_")[0], f"{action[0]}:{action[1]}"))
    exe = chromium or chromium_path()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    page = Path(page).resolve()
    if not page.is_file():
        raise FileNotFoundError(f"page {str(page)!r} does not exist")
    url = page.as_uri() + "#" + urllib.parse.urlencode(query)
    with tempfile.TemporaryDirectory(prefix="tenet-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-extensions", "--disable-background-networking", "--disable-sync",
                 "--disable-component-update", "--disable-default-apps",
                 f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
                 "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                 "--window-size=1280,1600", "--enable-logging=stderr", url]
        log = Path(profile) / "stderr.txt"
        start = time.perf_counter()
        # A file in append mode, not a pipe: each process's line is written whole, so no
        # other process's message can land inside the self-check's (long) line.
        with open(log, "ab") as err:
            proc = subprocess.Popen([exe, *flags], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        try:
            while (text := _logged_check(log)) is None:
                if proc.poll() is not None:
                    tail = log.read_bytes()[-2000:].decode(errors="replace")
                    raise RuntimeError(f"chromium closed its pipe (exit {proc.returncode}) "
                                       f"before the page's self-check; stderr tail: {tail!r}")
                if time.perf_counter() - start > timeout:
                    raise RuntimeError(f"chromium on {str(page)!r}: the page's self-check "
                                       f"did not finish in {timeout:g} s")
                time.sleep(0.1)
            wall = time.perf_counter() - start
            cpu = _session_cpu_s(proc.pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its whole session: renderer too
            proc.wait()
    doc = json.loads(text)
    return PageCheck(
        plots={k: (v["width"], v["height"], v["points"]) for k, v in doc["plots"].items()},
        tables={k: (v["rows"], v["source"]) for k, v in doc["tables"].items()},
        errors=list(doc["errors"]), resources=list(doc["resources"]),
        paint_ms=None if doc.get("paint_ms") is None else float(doc["paint_ms"]),
        **{k: float(doc[k]) for k in ("open_ms", "plotly_ms", "first_ms", "plots_ms",
                                      "ready_ms")},
        wall_s=wall, cpu_s=cpu, sorted_rows=doc["sort"]["rows"] if "sort" in doc else None,
        filtered_rows=doc["filter"]["rows"] if "filter" in doc else None,
    )


# ----------------------------------------------------------------------------------------
# Page text: the template, its style and its scripts (ours, inline)
# ----------------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:0 1.2em 3em;
color:#1d232a}
h1{font-size:1.5em;margin:.8em 0 .3em}h2{border-bottom:2px solid #d8dee4;padding-bottom:.2em;
margin-top:1.6em}
nav a{margin-right:1.2em}code,pre{font-size:.9em}pre{background:#f6f8fa;padding:.6em;
max-height:22em;overflow:auto}
table.head{border-collapse:collapse;margin:.5em 0}table.head th{text-align:left;
vertical-align:top;padding:.2em 1em .2em 0;white-space:nowrap}table.head td{padding:.2em 0}
.plot{min-height:430px;margin:1em 0;border:1px solid #eef1f4}
.table{margin:1em 0}.table .bar{margin:.3em 0}.table input{width:22em;padding:.25em}
.table .scroll{max-height:34em;overflow:auto;border:1px solid #d8dee4}
.table table{border-collapse:collapse;font-size:.82em}
.table th{position:sticky;top:0;background:#eef1f4;cursor:pointer;padding:.35em .5em;
text-align:left;white-space:nowrap;user-select:none}
.table td{padding:.2em .5em;border-top:1px solid #eef1f4;white-space:nowrap}
.table td.num{text-align:right;font-variant-numeric:tabular-nums}
.table th.asc:after{content:" ▲"}.table th.desc:after{content:" ▼"}
"""

# Installed before plotly.js so that errors anywhere on the page are caught.
_CAPTURE = """
window.__tenetErrors = [];
window.addEventListener('error', function (e) {
  window.__tenetErrors.push('error: ' + e.message + ' at ' + e.filename + ':' + e.lineno);
});
window.addEventListener('unhandledrejection', function (e) {
  window.__tenetErrors.push('unhandled rejection: ' + e.reason);
});
(function () {
  var original = console.error.bind(console);
  console.error = function () {
    window.__tenetErrors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
    original.apply(null, arguments);
  };
})();
"""

_APP = r"""
(function () {
  // Order of work, so that the page opens fast: the tables' first rows are made at once
  // (header and tables painted and interactive: "open"), then plotly.js (most of the file)
  // is compiled from its inert text block, then each plot is drawn when it nears the screen.
  // With the address ending in #tenet-check (what browser_check opens) the page then scrolls
  // itself through every plot and every table's rows and records what it drew; with
  // &sort=TABLE:COLUMN and &filter=TABLE:WORDS too, it then clicks that header and types those
  // words as a reader would, and records the rows it then shows.
  var params = new URLSearchParams(location.hash.slice(1));
  var CHECK = params.has('tenet-check');
  var FIRST_ROWS = 50, MORE_ROWS = 200;  // rows made at once; more as a table is scrolled
  var tables = JSON.parse(document.getElementById('tables').textContent);
  var check = {plots: {}, tables: {}, errors: [], resources: []};

  function fmt(v) {
    if (v === null || v === undefined) return '';
    if (typeof v !== 'number') return String(v);
    var a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e15) return v.toLocaleString('en-US');
    if (a !== 0 && (a >= 1e9 || a < 1e-3)) return v.toPrecision(4);
    return v.toLocaleString('en-US', {maximumSignificantDigits: 5});
  }
  function esc(t) {
    return t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
            .replace(/"/g, '&quot;');
  }
  function nextTask() { return new Promise(function (r) { setTimeout(r, 0); }); }
  // Resolves after the browser has produced a frame (so what was made before is painted).
  function painted() {
    return new Promise(function (r) { requestAnimationFrame(function () { setTimeout(r, 0); }); });
  }

  // A sortable, filterable table. Sorting and filtering work on all its rows (the data); only
  // the rows scrolled to are made as HTML, so a table of thousands of rows opens at once.
  function makeTable(holder, spec) {
    var bar = document.createElement('div'); bar.className = 'bar';
    var input = document.createElement('input');
    input.type = 'search'; input.placeholder = 'filter rows (all words must match)';
    var count = document.createElement('span');
    bar.append(input, ' ', count, ' · from ' + spec.source + ' · click a header to sort');
    var scroll = document.createElement('div'); scroll.className = 'scroll';
    var table = document.createElement('table');
    var head = table.createTHead().insertRow();
    var body = table.createTBody();
    var rows = spec.rows;
    var numeric = spec.columns.map(function (_, j) {
      return rows.every(function (r) { return r[j] === null || typeof r[j] === 'number'; });
    });
    var texts = null;  // each row's shown text in lower case, made at the first filter
    var order = rows.map(function (_, i) { return i; });  // all rows, in the sort order
    var view = order;  // the rows the filter keeps, in the sort order
    var made = 0;      // view[0 .. made) are in the table body
    function rowHtml(i) {
      return '<tr data-i="' + i + '">' + rows[i].map(function (v, j) {
        return (numeric[j] ? '<td class="num">' : '<td>') + esc(fmt(v)) + '</td>';
      }).join('') + '</tr>';
    }
    // A number's exact value shows on hover: its title is set when the pointer first gets
    // there (a title per cell made up front would slow the making of big tables).
    function exact(td) {
      return String(rows[+td.parentNode.dataset.i][td.cellIndex]);
    }
    body.addEventListener('mouseover', function (e) {
      var td = e.target.closest('td.num');
      if (td && !td.title && td.textContent) td.title = exact(td);
    });
    function showCount() {
      count.textContent = view.length + ' of ' + rows.length + ' rows'
        + (made < view.length ? ' (first ' + made + ' shown: scroll for more)' : '');
    }
    // One HTML string per batch of rows: far faster than a DOM call per cell.
    function more(n) {
      var upto = Math.min(view.length, made + n), html = [];
      for (var i = made; i < upto; i++) html.push(rowHtml(view[i]));
      body.insertAdjacentHTML('beforeend', html.join(''));
      made = upto;
      showCount();
    }
    function restart() {
      body.textContent = ''; made = 0; scroll.scrollTop = 0;
      more(FIRST_ROWS);
    }
    scroll.addEventListener('scroll', function () {
      if (made < view.length
          && scroll.scrollTop + scroll.clientHeight > scroll.scrollHeight - 400) {
        more(MORE_ROWS);
      }
    });
    var words = [];
    function filter() {
      if (!words.length) { view = order; return; }
      if (texts === null) {
        texts = rows.map(function (r) { return r.map(fmt).join(' ').toLowerCase(); });
      }
      view = order.filter(function (i) {
        return words.every(function (w) { return texts[i].indexOf(w) >= 0; });
      });
    }
    var sortState = {col: -1, dir: 1};
    spec.labels.forEach(function (label, j) {
      var th = document.createElement('th'); th.textContent = label;
      th.title = spec.columns[j];
      th.addEventListener('click', function () {
        sortState.dir = sortState.col === j ? -sortState.dir : 1; sortState.col = j;
        head.querySelectorAll('th').forEach(function (h) { h.className = ''; });
        th.className = sortState.dir > 0 ? 'asc' : 'desc';
        order = order.slice().sort(function (a, b) {  // ties keep the CSV's order
          var x = rows[a][j], y = rows[b][j];
          if (x === y) return a - b;
          if (x === null) return 1;
          if (y === null) return -1;
          var c = numeric[j] ? x - y : String(x).localeCompare(String(y), 'en', {numeric: true});
          return c * sortState.dir || a - b;
        });
        filter(); restart();
      });
      head.appendChild(th);
    });
    input.addEventListener('input', function () {
      words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      filter(); restart();
    });
    more(FIRST_ROWS);
    scroll.appendChild(table); holder.appendChild(bar); holder.appendChild(scroll);
    // For the self-check: what a reader does (scroll to the end until every row is made,
    // click a header, type in the filter) and what the table then shows.
    return {
      scrollToEnd: function () {
        return new Promise(function (resolve) {
          // The scroll event is sent at once rather than at the next frame: headless
          // Chromium's virtual time makes frames only now and then when nothing else runs.
          function step(stalls) {
            if (made >= view.length || stalls > 3) return resolve(body.rows.length);
            var before = made;
            scroll.scrollTop = scroll.scrollHeight;
            scroll.dispatchEvent(new Event('scroll'));
            nextTask().then(function () { step(made === before ? stalls + 1 : 0); });
          }
          step(0);
        });
      },
      sortBy: function (column) {
        var j = spec.columns.indexOf(column);
        if (j < 0) throw new Error('table ' + spec.source + ' has no column ' + column);
        head.cells[j].click();
      },
      filterBy: function (text) {
        input.value = text;
        input.dispatchEvent(new Event('input'));
      },
      // Each row made, as its cells' exact values (a number's title) or texts.
      shown: function () {
        return Array.prototype.map.call(body.rows, function (tr) {
          return Array.prototype.map.call(tr.cells, function (td) {
            return td.className === 'num' && td.textContent ? exact(td) : td.textContent;
          });
        });
      },
    };
  }

  var scrollers = {};
  Object.keys(tables).forEach(function (key) {
    scrollers[key] = makeTable(document.getElementById('table-' + key), tables[key]);
  });

  var parsed = new Promise(function (r) {
    if (document.readyState !== 'loading') r();
    else document.addEventListener('DOMContentLoaded', function () { r(); });
  });
  var figures = null, plotEls = [], drawn = {}, waiting = {}, queue = [], busy = false;

  function drawNext() {
    if (busy || !queue.length) return;
    busy = true;
    var el = queue.shift(), key = el.id.slice('plot-'.length), f = figures[key];
    Promise.resolve().then(function () {
      return Plotly.newPlot(el, f.data, f.layout, {responsive: true, displaylogo: false});
    }).catch(function (e) {
      window.__tenetErrors.push(el.id + ': ' + e);
    }).then(function () {
      drawn[key] = performance.now();
      (waiting[key] || []).forEach(function (r) { r(); });
      return nextTask();
    }).then(function () { busy = false; drawNext(); });
  }
  function whenDrawn(key) {
    if (drawn[key] !== undefined) return Promise.resolve();
    return new Promise(function (r) { (waiting[key] = waiting[key] || []).push(r); });
  }
  function onScreen(el) {
    var r = el.getBoundingClientRect();
    return r.bottom > 0 && r.top < window.innerHeight;
  }

  painted().then(function () {
    check.open_ms = performance.now();
    performance.mark('tenet-open');
    window.__tenetReady = true;
    return parsed;
  }).then(function () {
    var source = document.getElementById('plotly-js');
    if (source !== null) {  // (a page made with plotly.js in its head has it already)
      var script = document.createElement('script');
      script.textContent = source.textContent;
      document.head.appendChild(script);  // runs plotly.js now
      // Both copies of its text go: the page holds 5 MB less.
      source.remove(); script.remove();
    }
    check.plotly_ms = performance.now();
    figures = JSON.parse(document.getElementById('figures').textContent);
    plotEls = Array.prototype.slice.call(document.querySelectorAll('.plot'));
    var first = plotEls.filter(onScreen);
    // Plots are drawn in page order as they come within a screen's height of the window.
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (e.isIntersecting) { observer.unobserve(e.target); queue.push(e.target); }
      });
      queue.sort(function (a, b) { return plotEls.indexOf(a) - plotEls.indexOf(b); });
      drawNext();
    }, {rootMargin: '100% 0px'});
    plotEls.forEach(function (el) { observer.observe(el); });
    return Promise.all(first.map(function (el) {
      return whenDrawn(el.id.slice('plot-'.length));
    }));
  }).then(function () {
    check.first_ms = performance.now();
    performance.mark('tenet-first-screen');
    if (!CHECK) return;
    return selfCheck();
  }).catch(function (e) {
    window.__tenetErrors.push('page: ' + e);
    if (CHECK) record();
  });

  // Scrolls to each plot in turn (each drawn as it comes into view) and through each table.
  function selfCheck() {
    var chain = Promise.resolve();
    plotEls.forEach(function (el) {
      var key = el.id.slice('plot-'.length);
      chain = chain.then(function () {
        if (drawn[key] !== undefined) return;
        el.scrollIntoView();
        // generous: on a busy machine the plots queued before it are drawn first
        var late = new Promise(function (r) { setTimeout(r, 30000); }).then(function () {
          if (drawn[key] === undefined) {
            window.__tenetErrors.push(el.id + ': not drawn after it was scrolled into view');
          }
        });
        return Promise.race([whenDrawn(key), late]);
      });
    });
    return chain.then(function () {
      check.plots_ms = performance.now();
      return Object.keys(scrollers).reduce(function (p, key) {
        return p.then(function () { return scrollers[key].scrollToEnd(); });
      }, Promise.resolve());
    }).then(function () {
      window.scrollTo(0, 0);
      Object.keys(figures).forEach(function (key) {
        var box = document.getElementById('plot-' + key).querySelector('.main-svg');
        var r = box ? box.getBoundingClientRect() : {width: 0, height: 0};
        var points = 0;
        figures[key].data.forEach(function (t) {
          if (t.mode !== 'lines') points += (t.x || []).length;
        });
        check.plots[key] = {width: r.width, height: r.height, points: points};
      });
      Object.keys(tables).forEach(function (key) {
        check.tables[key] = {
          rows: document.getElementById('table-' + key).querySelectorAll('tbody tr').length,
          source: tables[key].source};
      });
      check.ready_ms = performance.now();
      return actions();
    }).then(record);
  }
  // The reader's actions asked for in the address, each on a table, in this order.
  function actions() {
    var chain = Promise.resolve();
    ['sort', 'filter'].forEach(function (name) {
      var arg = params.get(name);
      if (arg === null) return;
      var key = arg.slice(0, arg.indexOf(':')), value = arg.slice(arg.indexOf(':') + 1);
      var table = scrollers[key];
      chain = chain.then(function () {
        if (table === undefined) throw new Error(name + ': no table ' + key);
        if (name === 'sort') table.sortBy(value); else table.filterBy(value);
        return table.scrollToEnd();
      }).then(function () {
        check[name] = {table: key, rows: table.shown()};
      });
    });
    return chain;
  }
  function record() {
    if (check.ready_ms === undefined) check.ready_ms = performance.now();
    var paint = performance.getEntriesByName('first-contentful-paint');
    check.paint_ms = paint.length ? paint[0].startTime : null;
    // The browser may present the frame after our task ran: open is the later of the two.
    check.open_ms = Math.max(check.open_ms, check.paint_ms || 0);
    check.errors = window.__tenetErrors;
    check.resources = performance.getEntriesByType('resource').map(function (e) {
      return e.name;
    });
    console.log('tenet-self-check ' + JSON.stringify(check));
  }
})();
"""

# The header and the tables come first and plotly.js last, as inert text (type text/plain)
# that the app compiles once the page is painted: the browser would otherwise parse and run
# plotly.js's 4.9 MB before showing anything.
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
<script>{capture}</script>
</head><body>
<h1>{title}</h1>
{header}
<nav>{toc}</nav>
{body}
<script type="application/json" id="tables">{tables}</script>
<script>{app}</script>
<script type="application/json" id="figures">{figures}</script>
<script type="text/plain" id="plotly-js">{plotly}</script>
</body></html>
"""
