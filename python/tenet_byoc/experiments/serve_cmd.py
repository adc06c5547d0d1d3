"""``tenet-byoc serve``: a model served by iterations (continuous batching) per scheme, its latency percentiles, throughput and goodput, files and plots.

The work is :func:`tenet_byoc.serving.study.serve`; this module reads the options, writes
``requests.csv`` (one row per request and scheme), ``summary.json`` (per scheme: TTFT, TPOT,
end-to-end p50 / p90 / p99 in ms, tokens/s, requests/s, goodput, the cache's size, the
largest rate meeting the p90 targets and every rate tried), ``timeline.csv`` (per
iteration: batch size, tokens, KV blocks in use), and plots of latency percentiles against
load and of the batch and KV use over time. Static batching stays ``estimate --serve``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import write_rows
from .results import markdown_table

__all__ = ["plot_latency_vs_load", "plot_timeline", "run_serve"]


def _lengths(args: argparse.Namespace) -> Any:
    from ..serving import SHAREGPT_LIKE, FixedLengths

    if args.trace is not None:
        for name in ("rate", "prompt_len", "output_len", "lengths"):
            if getattr(args, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} and --trace exclude each other "
                                 "(the trace file gives arrivals and lengths)")
        return None
    if args.rate is None:
        raise ValueError("give --rate R (Poisson arrivals, with --requests N) or --trace FILE")
    if (args.prompt_len is None) != (args.output_len is None):
        raise ValueError("--prompt-len and --output-len go together (fixed lengths); "
                         "leave both out for --lengths sharegpt")
    if args.prompt_len is not None:
        if args.lengths is not None:
            raise ValueError("--lengths and --prompt-len / --output-len exclude each other")
        return FixedLengths(args.prompt_len, args.output_len)
    return SHAREGPT_LIKE


def _pools(args: argparse.Namespace, acc: Any) -> tuple[Any, Any] | None:
    """The (prefill, decode) Systems of ``--disaggregate P:D``, or None."""
    text = getattr(args, "disaggregate", None)
    if text is None:
        return None
    if args.tp != 1 or args.pp != 1 or args.chips is not None:
        raise ValueError("--disaggregate P:D and --tp / --pp / --chips exclude each other "
                         "(P and D are each pool's tensor-parallel chips)")
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"--disaggregate {text!r}: expected P:D, two integers >= 1 (the "
                         "prefill and the decode pool's chips), e.g. 1:2")
    from ..models.configs import resolve_config
    from ..plan import check_tensor_parallel
    from ..system import Link, System

    config = resolve_config(args.model)
    link = Link(args.link_gbps, args.link_latency_us, args.topology)
    out = []
    for name, n in zip(("prefill", "decode"), (int(p) for p in parts), strict=True):
        try:
            check_tensor_parallel(config, n)
        except ValueError as err:
            raise ValueError(f"--disaggregate {text}: the {name} pool's {n} chips: "
                             f"{err}") from None
        out.append(System(acc, n, n, 1, 1, link))
    return out[0], out[1]


def run_serve(args: argparse.Namespace) -> int:
    """Run ``tenet-byoc serve`` as parsed (see the module); return the exit code."""
    from ..accelerators import resolve
    from ..serving import SchedulerConfig, read_trace
    from ..serving.study import serve
    from .estimate_cmd import chip_system

    lengths = _lengths(args)
    trace = read_trace(args.trace) if args.trace is not None else None
    acc = resolve(args.accelerator, args.mapping)
    memory = args.memory_gb * 1e9 if args.memory_gb is not None else None
    scheduler = SchedulerConfig(args.policy, args.token_budget, args.max_seqs)
    pools = _pools(args, acc)
    system = None if pools else chip_system(args, acc)

    def progress(label: str, total: int):
        from ..progress import progress_bar

        bar = progress_bar(total=total, desc=f"serve {label}", unit="request", leave=False)

        def update(n: int) -> None:
            bar.update(n)
            if bar.n >= total:
                bar.close()
        return update

    served = serve(args.model, acc, args.schemes, trace=trace, rate=args.rate,
                   requests=args.requests, lengths=lengths, seed=args.seed,
                   ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, scheduler=scheduler,
                   block_size=args.block_size, memory_bytes=memory,
                   utilization=args.memory_utilization, system=system,
                   progress=None if args.no_progress else progress, pools=pools)
    print(serve_table(served))
    out = Path(args.out)
    written = [out / "requests.csv", out / "timeline.csv"]  # a row per request, iteration
    write_rows(["scheme", "request", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
                "output_tokens", "preemptions"],
               ([s.scheme, i, f"{r.arrival_s[i]:.9g}", f"{r.first_token_s[i]:.9g}",
                 f"{r.finish_s[i]:.9g}", int(r.prompt_tokens[i]), int(r.output_tokens[i]),
                 int(r.preemptions[i])] for s in served for r in [s.run]
                for i in range(r.requests)), written[0])
    write_rows(["scheme", "start_s", "seconds", "sequences", "tokens", "kv_blocks", "kv_use"],
               ([s.scheme, f"{r.step_start_s[i]:.9g}", f"{r.step_seconds[i]:.6g}",
                 int(r.step_sequences[i]), int(r.step_tokens[i]), int(r.step_kv_blocks[i]),
                 f"{r.step_kv_blocks[i] / r.kv_blocks:.4f}"] for s in served for r in [s.run]
                for i in range(r.iterations)), written[1])
    written += [write_summary(served, out / "summary.json", args, lengths, acc.name),
                plot_latency_vs_load(served, out / "serve_latency.png", args.ttft_ms,
                                     args.tpot_ms, f"{args.model} on {acc.name}"),
                plot_timeline(served, out / "serve_timeline.png",
                              f"{args.model} on {acc.name}: the run as given")]
    for path in written:
        print(f"wrote {path}")
    return 0


_HEADER = ["scheme", "KV tokens", "weights (GB)", "TTFT p50 / p90 / p99 (ms)",
           "TPOT p50 / p90 / p99 (ms)", "tokens/s", "requests/s", "goodput (req/s)",
           "mean / max batch", "mean KV use", "preempted", "max rate at p90 targets (req/s)"]


def serve_table(served: Sequence[Any]) -> str:
    """A markdown table, one row per scheme."""
    rows = []
    for s in served:
        m = s.metrics
        best = "-" if s.search is None else (
            "none" if s.search.rate is None else
            f"{s.search.rate:,.3f} (batch {s.search.metrics.batch_mean:,.1f})")
        rows.append([s.scheme, f"{s.sizing.tokens:,}", f"{s.sizing.weight_bytes / 1e9:,.2f}",
                     f"{m.ttft_ms_p50:,.1f} / {m.ttft_ms_p90:,.1f} / {m.ttft_ms_p99:,.1f}",
                     f"{m.tpot_ms_p50:,.2f} / {m.tpot_ms_p90:,.2f} / {m.tpot_ms_p99:,.2f}",
                     f"{m.tokens_per_s:,.1f}", f"{m.requests_per_s:,.3f}",
                     f"{m.goodput_rps:,.3f}", f"{m.batch_mean:,.1f} / {m.batch_max}",
                     f"{100 * m.kv_use_mean:.0f}%", m.preemptions, best])
    return markdown_table(_HEADER, rows)


def write_summary(served: Sequence[Any], path: Path, args: argparse.Namespace, lengths: Any,
                  accelerator: str) -> Path:
    """``summary.json``: per scheme the figures, the cache and the rate search."""
    doc: dict[str, Any] = {
        "model": str(args.model), "accelerator": accelerator,
        "arrivals": (f"trace {args.trace}" if args.trace else
                     f"Poisson {args.rate}/s, {args.requests} requests, seed {args.seed}"),
        "lengths": None if lengths is None else lengths.describe(),
        "policy": args.policy, "token_budget": args.token_budget, "max_seqs": args.max_seqs,
        "block_size": args.block_size, "ttft_ms_target_p90": args.ttft_ms,
        "tpot_ms_target_p90": args.tpot_ms,
        "chips": {"tensor_parallel": args.tp, "pipeline_parallel": args.pp,
                  "link_gbps": args.link_gbps, "link_latency_us": args.link_latency_us,
                  "topology": args.topology, "disaggregate": args.disaggregate},
        "schemes": {},
    }
    for s in served:
        entry = asdict(s.metrics)
        entry["cache"] = {k: v for k, v in asdict(s.sizing).items() if k != "block_size"}
        entry["cache"]["tokens"] = s.sizing.tokens
        if s.search is not None:
            entry["max_rate"] = s.search.rate
            entry["at_max_rate"] = None if s.search.metrics is None else asdict(s.search.metrics)
            entry["rates_tried"] = [{"rate": r, "met": ok, "ttft_ms_p90": m.ttft_ms_p90,
                                     "tpot_ms_p90": m.tpot_ms_p90, "batch_mean": m.batch_mean}
                                    for r, m, ok in s.search.tried]
        doc["schemes"][s.scheme] = entry
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def plot_latency_vs_load(served: Sequence[Any], path: Path, ttft_ms: float | None,
                         tpot_ms: float | None, title: str) -> Path:
    """TTFT and TPOT p50 / p90 / p99 against the arrival rate, a colour per scheme (the
    rates the search tried; without targets, the one run at its achieved rate)."""
    from matplotlib.figure import Figure

    from .plots import label_axes, save_figure

    fig = Figure(figsize=(12, 4.5), layout="constrained")
    axes = fig.subplots(1, 2)
    styles = {50: ":", 90: "-", 99: "--"}
    for ax, metric, target in ((axes[0], "ttft", ttft_ms), (axes[1], "tpot", tpot_ms)):
        xs, ys = [], [] if target is None else [target]
        for i, s in enumerate(served):
            # (rate, figures) of every run, by rate: the search's, or the one run
            pts = ([(s.metrics.requests_per_s, s.metrics)] if s.search is None
                   else sorted(((r, m) for r, m, _ in s.search.tried), key=lambda x: x[0]))
            for q, style in styles.items():
                x, y = [r for r, _ in pts], [getattr(m, f"{metric}_ms_p{q}") for _, m in pts]
                xs, ys = xs + x, ys + y
                ax.plot(x, y, linestyle=style, marker="o", markersize=3, color=f"C{i}",
                        label=f"{s.scheme} p{q}")
            if s.search is not None and s.search.rate is not None:
                ax.axvline(s.search.rate, color=f"C{i}", alpha=0.4)
        if target is not None:
            ax.axhline(target, color="red", linestyle="--", label="p90 target")
        # log only where the rates or latencies span two decades
        label_axes(ax, xs, ys, "arrival rate (requests/s)", f"{metric.upper()} (ms)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(f"{title}: latency percentiles against load (vertical: largest rate "
                 "meeting the p90 targets)")
    return save_figure(fig, path, dpi=110)


def plot_timeline(served: Sequence[Any], path: Path, title: str) -> Path:
    """Batch size and KV use over time, a line per scheme (time-binned means)."""
    from matplotlib.figure import Figure

    from .plots import save_figure

    fig = Figure(figsize=(12, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for i, s in enumerate(served):
        r = s.run
        if r.iterations == 0:
            continue
        edges = np.linspace(r.step_start_s[0], r.step_start_s[-1] + r.step_seconds[-1], 201)
        which = np.clip(np.searchsorted(edges, r.step_start_s, side="right") - 1, 0, 199)
        w = r.step_seconds
        busy = np.bincount(which, w, 200)
        keep = busy > 0
        mids = (edges[:-1] + edges[1:]) / 2
        batch = np.bincount(which, w * r.step_sequences, 200)
        kv = np.bincount(which, w * r.step_kv_blocks, 200)
        axes[0].plot(mids[keep], batch[keep] / busy[keep], color=f"C{i}", label=s.scheme)
        axes[1].plot(mids[keep], 100 * kv[keep] / busy[keep] / r.kv_blocks, color=f"C{i}",
                     label=s.scheme)
    axes[0].set_ylabel("sequences per iteration")
    axes[1].set_ylabel("KV blocks in use (%)")
    for ax in axes:
        ax.set_ylim(bottom=0)  # from zero: a batch of 3 against 1, not a spike from nothing
        ax.set_xlabel("time (s)")
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    return save_figure(fig, path, dpi=110)
