"""Plots of a sweep (matplotlib, Agg, PNG): per-layer cost, prefill vs decode, cost vs error."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .results import LayerCost, SweepResult, SweepRow, si

# Figures are made with matplotlib's object API, not pyplot: no global backend or figure
# state is touched, and PNGs are drawn with Agg whatever backend the caller's pyplot uses.

__all__ = ["BLOCK", "LOG_SPAN", "label_axes", "panel_unit", "plot_cost_vs_error",
           "plot_layer_breakdown", "plot_prefill_decode", "save_figure", "save_plots",
           "spans_decades"]

_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
#: A decoder block's calls ("h.3.mlp.c_fc", "layers.3.self_attn.q_proj"): block, part.
BLOCK = re.compile(r"^((?:h|layers)\.\d+)\.(.+)$")


# Costs as plotted: the metric's name and unit ladder (name, scale to the unit). A figure
# shows each quantity in the one unit in which its largest value reads 1-999.
_UNITS = {
    "latency_us": ("est. latency", (("s", 1e-6), ("ms", 1e-3), ("µs", 1.0), ("ns", 1e3))),
    "energy_pj": ("est. energy", (("J", 1e-12), ("mJ", 1e-9), ("µJ", 1e-6), ("nJ", 1e-3),
                                  ("pJ", 1.0))),
    "offchip_bytes": ("off-chip", (("GB", 1e-9), ("MB", 1e-6), ("kB", 1e-3), ("B", 1.0))),
    "dram_bytes": ("DRAM", (("GB", 1e-9), ("MB", 1e-6), ("kB", 1e-3), ("B", 1.0))),
    "tpot_ms": ("TPOT", (("s", 1e-3), ("ms", 1.0))),
    "energy_per_token_mj": ("energy / token", (("J", 1e-3), ("mJ", 1.0), ("µJ", 1e3))),
    "cycles": ("est. cycles", ()),
    "macs": ("MACs", ()),
}


def panel_unit(metric: str, values: Sequence[float]) -> tuple[float, str]:
    """The scale and axis label for one figure's ``metric`` values (in the metric's own
    unit, e.g. µs for ``latency_us``): the largest unit in which the largest value is at
    least 1, so every panel of a figure reads in one unit."""
    name, ladder = _UNITS.get(metric, (metric, ()))
    top = max((abs(float(v)) for v in values), default=0.0)
    for unit, scale in ladder:
        if top * scale >= 1.0 or scale == ladder[-1][1]:
            return scale, f"{name} ({unit})"
    return 1.0, name


#: A log axis only where the values span at least this ratio (two decades): over less, a
#: log axis flattens the differences a reader is looking for.
LOG_SPAN = 100.0

def spans_decades(values: Sequence[float], ratio: float = LOG_SPAN) -> bool:
    """Whether positive ``values`` span ``ratio`` or more, the one case a log axis is for."""
    positive = [float(v) for v in values if v is not None and float(v) > 0]
    return bool(positive) and max(positive) / min(positive) >= ratio and \
        len(positive) == len([v for v in values if v is not None])


def label_axes(ax, xs: Sequence[float], ys: Sequence[float], xlabel: str, ylabel: str, *,
               swept: bool = False) -> None:
    """Scale both axes of a line or point plot (bars keep matplotlib's linear axis), label
    them and draw the grid. An axis is log only when its values span :data:`LOG_SPAN` (two
    decades; ``swept``: ``xs`` are a swept variable's values, powers of two, log from 8x,
    each value a tick as written), with plain numbers as tick labels; a linear y axis starts
    at zero."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    xs = sorted(set(xs)) if swept else xs
    for axis, values, ticks, ratio in (("x", xs, xs if swept else None, 8 if swept else LOG_SPAN),
                                       ("y", ys, None, LOG_SPAN)):
        log = spans_decades(values, ratio)
        target = ax.xaxis if axis == "x" else ax.yaxis
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log" if log else "linear")
        if log:
            target.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
            target.set_minor_formatter(NullFormatter())
        if ticks is not None:
            (ax.set_xticks if axis == "x" else ax.set_yticks)(list(ticks))
            # the swept values as written (2,048, not 2.05 k)
            target.set_major_formatter(FuncFormatter(
                lambda v, _: f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"))
            target.set_minor_formatter(NullFormatter())
        elif not log and axis == "y":
            finite = [float(v) for v in values if v is not None and np.isfinite(v)]
            top = max(finite, default=0.0)
            # from zero, with room above the highest point (a marker on it stays whole)
            ax.set_ylim(0, top * 1.08 if top > 0 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def _short(scheme: str) -> str:
    """A scheme's name on two or three lines, for tick labels."""
    head, _, rest = scheme.partition("_")
    for word in ("tensor", "channel", "token"):
        rest = rest.replace(f"per_{word}", f"per-{word}")
    return "\n".join([head, *rest.split("_")]) if rest else head


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` (its folder made if missing), cropped to its content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def plot_layer_breakdown(layers: Sequence[LayerCost], path: str | Path, *,
                         metric: str = "latency_us") -> Path:
    """Stacked bars of one run's est. cost per layer (GPT-2: per block, by matmul), written to
    the PNG ``path``. ``layers``: the calls of one run and phase (one model, scheme,
    accelerator, phase); ``metric``: a numeric :class:`LayerCost` field (``latency_us``,
    ``cycles``, ``offchip_bytes``, ``macs``)."""
    if not layers:
        raise ValueError("plot_layer_breakdown needs the calls of one run, got none")
    runs = {(c.model, c.scheme, c.accelerator, c.phase) for c in layers}
    if len(runs) != 1:
        raise ValueError(f"plot_layer_breakdown takes one run's calls, got {sorted(runs)}")
    model, scheme, accelerator, phase = runs.pop()
    # Group GPT-2's calls into blocks ("h.3") stacked by matmul ("mlp.c_fc"); others stand alone.
    groups: dict[str, dict[str, float]] = {}
    parts: dict[str, None] = {}  # in the order met
    for c in layers:
        m = BLOCK.match(c.layer)
        group, part = (m.group(1), m.group(2)) if m else (c.layer, c.layer)
        parts.setdefault(part)
        sums = groups.setdefault(group, {})
        sums[part] = sums.get(part, 0.0) + float(getattr(c, metric))
    names = list(groups)
    scale, label = panel_unit(metric, [sum(groups[g].values()) for g in names])
    fig = Figure(figsize=(max(6.0, 0.5 * len(names) + 2.5), 4.2))
    ax = fig.subplots()
    bottom = np.zeros(len(names))
    cmap = colormaps["tab10"]
    for i, part in enumerate(parts):
        values = scale * np.array([groups[g].get(part, 0.0) for g in names])
        if not values.any():
            continue
        ax.bar(names, values, bottom=bottom, label=part, color=cmap(i % 10), width=0.75)
        bottom += values
    ax.set_ylabel(label)
    ax.set_ylim(0, 1.08 * bottom.max())  # room above the tallest stack
    name, _, unit = label.partition(" (")
    ax.set_title(f"{model} {phase}: {name} per layer (offloaded GEMMs), {scheme} on "
                 f"{accelerator}\ntotal {bottom.sum():,.3g} {unit.rstrip(')')}".rstrip())
    ax.tick_params(axis="x", rotation=60 if len(names) > 8 else 0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if len(parts) > 1:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def plot_prefill_decode(rows: Sequence[SweepRow], path: str | Path, *, model: str = "gpt2",
                        metric: str = "latency_us") -> Path:
    """Bars per scheme (one per accelerator), one panel per phase, for ``model``."""
    mine = [r for r in rows if r.model == model]
    if not mine:
        raise ValueError(f"plot_prefill_decode: no rows of model {model!r}")
    phases = list(dict.fromkeys(r.phase for r in mine))
    schemes = list(dict.fromkeys(r.scheme for r in mine))
    accelerators = list(dict.fromkeys(r.accelerator for r in mine))
    # an inch per scheme at least: two-line names ("per-channel") side by side stay apart
    fig = Figure(figsize=(max(6.0, 1.0 * len(schemes)) * len(phases), 4.2))
    axes = fig.subplots(1, len(phases), squeeze=False)
    width = 0.8 / len(accelerators)
    x = np.arange(len(schemes))
    scale, label = panel_unit(metric, [float(getattr(r, metric)) for r in mine])
    value = {(r.phase, r.scheme, r.accelerator): scale * float(getattr(r, metric))
             for r in reversed(mine)}  # the first row of each, as the sweep has one
    for ax, phase in zip(axes[0], phases):
        for i, hw in enumerate(accelerators):
            values = [value.get((phase, s, hw), 0.0) for s in schemes]
            ax.bar(x + (i - (len(accelerators) - 1) / 2) * width, values, width, label=hw)
        tokens = next(r.tokens for r in mine if r.phase == phase)
        what = {"prefill": f"prefill of {tokens} tokens", "decode": f"decode at L={tokens}"}
        ax.set_title(f"{model} {what.get(phase, phase)}")
        ax.set_xticks(x, [_short(s) for s in schemes], fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0][-1].legend(title="accelerator", fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{model}: {label} per quantization scheme, prefill vs decode "
                 "(offloaded GEMMs only)")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_cost_vs_error(rows: Sequence[SweepRow], path: str | Path, *,
                       cost: str = "latency_us", error: str = "rel_error") -> Path:
    """Scatter of cost against output error: one panel per model and phase, one marker per
    scheme (shape) per accelerator (colour)."""
    if not rows:
        raise ValueError("plot_cost_vs_error needs sweep rows, got none")
    panels = list(dict.fromkeys((r.model, r.phase) for r in rows))
    schemes = list(dict.fromkeys(r.scheme for r in rows))
    accelerators = list(dict.fromkeys(r.accelerator for r in rows))
    cmap = colormaps["tab10"]
    fig = Figure(figsize=(4.8 * len(panels), 4.2))
    axes = fig.subplots(1, len(panels), squeeze=False)
    error_label = {"rel_error": "max |error| / max |float32 output|",
                   "max_abs_error": "max |error| vs float32",
                   "top1_agreement": "top-1 agreement with float32"}.get(error, error)
    # Close schemes land on the same spot (group64 / group128, the two w8a8 schemes):
    # markers are hollow and sized by scheme, larger first, so a coincident pair shows as
    # two nested outlines of different shapes rather than one hiding the other.
    sizes = {s: 30 + 22 * (len(schemes) - 1 - i) for i, s in enumerate(schemes)}
    scale, cost_label = panel_unit(cost, [float(getattr(r, cost)) for r in rows])
    for ax, (model, phase) in zip(axes[0], panels):
        mine = [r for r in rows if (r.model, r.phase) == (model, phase)]
        for r in sorted(mine, key=lambda r: -sizes[r.scheme]):
            ax.scatter(scale * float(getattr(r, cost)), float(getattr(r, error)),
                       marker=_MARKERS[schemes.index(r.scheme) % len(_MARKERS)],
                       facecolors="none", s=sizes[r.scheme],
                       edgecolors=cmap(accelerators.index(r.accelerator) % 10), linewidths=1.3)
        ax.set_title(f"{model} {phase}")
        # from zero: a 10% saving must not look like a factor of ten
        ax.set_xlim(0, 1.08 * scale * max(float(getattr(r, cost)) for r in mine))
        ax.set_xlabel(cost_label)
        ax.set_ylabel(error_label)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], marker=_MARKERS[i % len(_MARKERS)], linestyle="",
                      markerfacecolor="none", markeredgecolor="black", label=s)
               for i, s in enumerate(schemes)]
    handles += [Line2D([], [], marker="o", linestyle="", color=cmap(i % 10), label=h)
                for i, h in enumerate(accelerators)]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle("accelerator cost (offloaded GEMMs only) against output error across "
                 "quantization schemes")
    fig.tight_layout()
    return save_figure(fig, path)


def save_plots(result: SweepResult, out_dir: str | Path) -> list[Path]:
    """Write the three kinds of plot of a sweep into ``out_dir``; return their paths.

    The per-layer breakdown is drawn for the first accelerator's float32 run (or the first
    scheme's) of each model and phase; prefill vs decode for GPT-2 when it was swept.
    """
    out = Path(out_dir)
    paths: list[Path] = []
    if not result.rows:
        return paths
    first_hw = result.rows[0].accelerator
    for model, phase in dict.fromkeys((r.model, r.phase) for r in result.rows):
        schemes = [r.scheme for r in result.rows if r.model == model]
        scheme = "none" if "none" in schemes else schemes[0]
        calls = [c for c in result.layers
                 if (c.model, c.scheme, c.accelerator, c.phase) == (model, scheme, first_hw, phase)]
        if calls:
            paths.append(plot_layer_breakdown(
                calls, out / f"layers_{model}_{phase}_{scheme}_{first_hw}.png"))
    if any(r.model == "gpt2" for r in result.rows):
        paths.append(plot_prefill_decode(result.rows, out / "prefill_vs_decode.png"))
    paths.append(plot_cost_vs_error(result.rows, out / "cost_vs_error.png"))
    # Energy, not only latency: a scheme can save energy (fewer DRAM bits) without time.
    paths.append(plot_cost_vs_error(result.rows, out / "energy_vs_error.png", cost="energy_pj"))
    return paths
