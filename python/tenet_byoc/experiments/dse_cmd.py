"""``tenet-byoc dse``: explore a design space for a model, write the points, fronts and plots,
optionally with each scheme's measured accuracy beside its cost.

The work is :func:`tenet_byoc.dse.explore`; this module adds the per-scheme accuracy runs
(the ``eval`` path, once per scheme), the files and the plots. The command's options are
parsed by :mod:`tenet_byoc_cli.parser` (without loading TVM).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import astuple
from pathlib import Path
from typing import Any

from tenet_byoc_cli.design_point import COLUMNS

from ..documents import read_text, write_rows

__all__ = ["plot_fronts", "run_dse", "scheme_accuracy"]

RESULTS_FILE = "points.jsonl"  #: the command's options (tenet_byoc_cli.parser) name it too


def _eval_one(checkpoint: str, text: str, schemes: list[str], window: int | None,
              max_tokens: int | None) -> dict[str, dict[str, float]]:
    from .evaluate import evaluate

    res = evaluate(checkpoint, text, schemes, "os16", window=window, max_tokens=max_tokens,
                   progress=False)
    return {r.scheme: {"perplexity": r.perplexity, "top1_agreement": r.top1_agreement}
            for r in res.rows}


def scheme_accuracy(checkpoint: str, text: str, schemes: Sequence[str], *,
                    executor: str = "local", ray_address: str | None = None,
                    window: int | None = None, max_tokens: int | None = None
                    ) -> dict[str, dict[str, float]]:
    """Each scheme's perplexity and top-1 agreement against float32 on ``text`` (the eval
    path; the accelerator does not change the numbers, only what the run is charged).

    Locally one evaluation runs every scheme once (float32 first, as the reference); with
    ``executor="ray"`` each scheme is a Ray task (each with its own float32 reference)."""
    from .evaluate import prepare_eval

    schemes = list(dict.fromkeys(schemes))
    # check every input here, before any task starts
    prepare_eval(checkpoint, text, ["none"], "os16", window=window, max_tokens=max_tokens)
    if executor != "ray":
        return _eval_one(checkpoint, text, schemes, window, max_tokens)
    from ..dse import ray_session

    with ray_session(ray_address) as ray:
        task = ray.remote(_eval_one)
        refs = [task.remote(checkpoint, text, [s], window, max_tokens) for s in schemes]
        out: dict[str, dict[str, float]] = {}
        for got in ray.get(refs):
            out.update(got)
        return {s: out[s] for s in schemes}


def plot_fronts(rows: Sequence[Any], path: str | Path, title: str) -> Path:
    """TPOT, TTFT and energy per token against area: every feasible point faint, each
    scheme's front drawn as a line with its own marker (log axes only where the values span
    two decades, ticks as plain numbers)."""
    from matplotlib.figure import Figure

    from .plots import label_axes, save_figure
    from .report import DSE_FRONTS

    fig = Figure(figsize=(15, 4.8), layout="constrained")
    axes = fig.subplots(1, 3)
    schemes = list(dict.fromkeys(r.scheme for r in rows))
    colors = {s: f"C{i % 10}" for i, s in enumerate(schemes)}
    markers = {s: "os^Dv<>PX*"[i % 10] for i, s in enumerate(schemes)}
    for ax, (front, metric, label) in zip(axes, DSE_FRONTS, strict=True):
        xs: list[float] = []
        ys: list[float] = []
        for s in schemes:
            mine = [r for r in rows if r.scheme == s and r.feasible
                    and not math.isnan(getattr(r, metric))]
            if not mine:
                continue
            ax.scatter([r.area_mm2 for r in mine], [getattr(r, metric) for r in mine], s=6,
                       alpha=0.25, color=colors[s], linewidths=0)
            xs += [r.area_mm2 for r in mine]
            ys += [getattr(r, metric) for r in mine]
            on = sorted((r for r in mine if front in r.fronts), key=lambda r: r.area_mm2)
            ax.plot([r.area_mm2 for r in on], [getattr(r, metric) for r in on],
                    marker=markers[s], ms=5, color=colors[s], label=s, drawstyle="steps-post")
        label_axes(ax, xs, ys, "area (mm2)", label)
    axes[0].legend(title="scheme (front)")
    fig.suptitle(title)
    return save_figure(fig, path, dpi=110)


def _check_same_run(out: Path, settings: Mapping[str, Any]) -> None:
    """A results file resumes only the run that wrote it."""
    path = out / "dse_run.json"
    if path.exists():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            before = None
        if before != dict(settings):
            differs = sorted(k for k in settings if not isinstance(before, dict)
                             or before.get(k) != settings[k])
            raise ValueError(
                f"{out} holds a different dse run ({', '.join(differs)} differ): give a new "
                f"--out, or delete {path.name} and {RESULTS_FILE} there to start over")
    path.write_text(json.dumps(dict(settings), indent=1), encoding="utf-8")


def _shape(config) -> tuple:
    """What makes two configs one model here: family, width, depth, heads and vocabulary."""
    get = lambda *names: next((getattr(config, n) for n in names if hasattr(config, n)), None)  # noqa: E731
    return (type(config).__name__, get("n_embd", "hidden_size"),
            get("n_layer", "num_hidden_layers"), get("n_head", "num_attention_heads"),
            get("vocab_size"))


def _check_same_model(model: str, checkpoint: str) -> None:
    """Refuse a checkpoint whose model is not ``model``: its perplexity would be reported
    beside another model's costs as if it were theirs."""
    from ..models.configs import resolve_config

    a, b = _shape(resolve_config(model)), _shape(resolve_config(checkpoint))
    if a != b:
        names = ("family", "width", "layers", "heads", "vocabulary")
        differ = ", ".join(f"{n} {x} vs {y}" for n, x, y in zip(names, a, b) if x != y)
        raise ValueError(
            f"--checkpoint {checkpoint!r} is not {model} ({differ}): its perplexity would be "
            f"another model's beside {model}'s costs; give a checkpoint of {model}, or "
            "--other-model-accuracy to take it anyway (the wiring only)")


def run_dse(args: argparse.Namespace) -> int:
    """The ``dse`` command. Bad input raises ``ValueError`` (the CLI reports it)."""
    from ..dse import DesignSpace, check_ray_address, explore
    from ..estimate import _check_lengths
    from ..plan import model_config
    from .results import markdown_table

    if (args.checkpoint is None) != (args.text is None):
        raise ValueError("--checkpoint and --text go together (the accuracy of each scheme)")
    if args.checkpoint is not None and not args.other_model_accuracy:
        _check_same_model(args.model, args.checkpoint)
    space = DesignSpace.from_file(args.space)
    if args.executor == "ray":
        check_ray_address(args.ray_address)
    _check_lengths(model_config(args.model), args.prompt_len, args.prompt_len, args.decode_steps,
                   args.batch)
    out = Path(args.out)
    _check_same_run(out, {"model": args.model, "schemes": list(args.schemes),
                          "prompt_len": args.prompt_len, "decode_steps": args.decode_steps,
                          "batch": args.batch, "space": read_text(args.space, "design space")})
    accuracy = None
    if args.checkpoint is not None:
        accuracy = scheme_accuracy(args.checkpoint, args.text, args.schemes,
                                   executor=args.executor, ray_address=args.ray_address,
                                   window=args.window, max_tokens=args.max_tokens)
    progress = not args.no_progress  # into a pipe: a line every few seconds
    n_points = len(space.all_points())
    start = time.perf_counter()
    rows = explore(args.model, args.schemes, space, prompt_len=args.prompt_len,
                   decode_steps=args.decode_steps, batch=args.batch, objective=args.objective,
                   executor=args.executor, workers=args.workers, ray_address=args.ray_address,
                   results_file=out / RESULTS_FILE, accuracy=accuracy, progress=progress,
                   dram_capacity_bytes=None if args.memory_gb is None else args.memory_gb * 1e9)
    wall = time.perf_counter() - start
    kept = len({r.key for r in rows})
    print(f"{args.model}: {kept:,} design points (of {n_points:,}; area budget "
          f"{space.area_budget_mm2 or 'none'}) x {len(args.schemes)} scheme(s) at "
          f"{space.node_nm:g} nm in {wall:.1f} s ({kept / wall if wall else 0:,.0f} points/s); "
          f"prompt {args.prompt_len}, {args.decode_steps} decode steps, batch {args.batch}\n")
    header = ["scheme", "design", "area mm2", "TTFT ms", "TPOT ms", "tokens/s", "mJ/token",
              "W", *(["perplexity", "top-1"] if accuracy else []), "fronts"]
    front_rows = [r for r in rows if r.fronts]
    print(markdown_table(header, [
        [r.scheme, r.name, f"{r.area_mm2:,.2f}", f"{r.ttft_ms:,.3f}", f"{r.tpot_ms:,.3f}",
         f"{r.tokens_per_s:,.1f}", f"{r.energy_per_token_mj:,.3f}", f"{r.power_w:,.2f}",
         *([f"{r.perplexity:.3f}", f"{100 * r.top1_agreement:.1f}%"] if accuracy else []),
         ",".join(r.fronts)] for r in front_rows[:40]]))
    if len(front_rows) > 40:
        print(f"... {len(front_rows) - 40} more front points in dse.csv")
    refused = {r.reason.split(":")[0] for r in rows if not r.feasible}
    for reason in sorted(refused):
        print(f"- some points: {reason}")
    csv_path = out / "dse.csv"
    # every column as it is, but the fronts (the last) ";"-joined
    write_rows(COLUMNS, ([*astuple(r)[:-1], ";".join(r.fronts)] for r in rows), csv_path)
    plot = plot_fronts(rows, out / "dse_fronts.png",
                       f"{args.model}: prompt {args.prompt_len}, {args.decode_steps} decode, "
                       f"batch {args.batch}, {space.node_nm:g} nm")
    print(f"\nwrote {out / RESULTS_FILE}, {csv_path}, {plot}")
    return 0
