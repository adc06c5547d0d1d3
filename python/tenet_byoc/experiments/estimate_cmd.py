"""``tenet-byoc estimate``: per-phase figures of a model estimated from its shapes, and its
decode cost swept over context length (KV-cache growth) and batch.

Everything here reads ledgers of :func:`tenet_byoc.estimate`; nothing is built or run. The
command's options are parsed by :mod:`tenet_byoc_cli.parser` (without loading TVM).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .results import markdown_table, si, write_csv
from .serving import phase_latency_us

if TYPE_CHECKING:  # the ledger module imports TVM; `tenet-byoc --help` must not wait for it
    from ..ledger import Ledger
    from ..system import System

__all__ = ["LayerFigures", "PhaseFigures", "SweepPoint", "phase_figures", "run_estimate",
           "sweep_figure"]

@dataclass(frozen=True)
class PhaseFigures:
    """One phase of an estimate, per sequence where it says so."""

    scheme: str
    phase: str
    tokens: int  #: prompt tokens (prefill) or decode steps, per sequence
    latency_ms: float  #: TTFT for the prefill, TPOT (mean per step) for decode
    tokens_per_s: float  #: tokens of the whole batch per second of this phase
    energy_per_token_mj: float  #: per token of one sequence, static energy included
    macs: int  #: the whole phase
    dram_bytes: float  #: the whole phase
    pe_utilization: float
    roofline_ratio: float  #: cycles over the sum of the calls' rooflines
    static_mj_per_token: float = 0.0  #: the static power's part of ``energy_per_token_mj``


def phase_figures(ledger: Ledger, scheme: str, prompt_len: int, decode_steps: int,
                  batch: int = 1, static_w: float = 0.0) -> list[PhaseFigures]:
    """TTFT, TPOT, tokens/s, energy per token, MACs and DRAM bytes of each phase; the
    energy is the calls' plus ``static_w`` (every chip's, :func:`tenet_byoc.area.static_watts`)
    over the phase's time, as dse charges it."""
    out = []
    phases = ledger.group_by("phase")
    for phase, latency_us in phase_latency_us(ledger, phases).items():
        t = phases[phase]
        tokens = prompt_len if phase == "prefill" else decode_steps
        per = 1 if phase == "prefill" else decode_steps  # TTFT is the whole prefill
        latency_ms = latency_us / 1e3 / per
        static_mj = static_w * latency_us / 1e3 / (tokens * batch)  # W x ms = mJ
        out.append(PhaseFigures(
            scheme, phase, tokens, latency_ms,
            batch * tokens / (latency_us / 1e6) if latency_us else 0.0,
            t.energy_pj / 1e9 / (tokens * batch) + static_mj, t.macs, t.dram_bytes,
            t.pe_utilization, t.roofline_ratio, static_mj,
        ))
    return out


@dataclass(frozen=True)
class LayerFigures:
    """One layer's calls in one phase, summed (decode: over every step)."""

    scheme: str
    phase: str
    layer: str  #: e.g. ``layers.3.mlp.down_proj``, ``lm_head``
    calls: int
    macs: int
    cycles: int
    latency_us: float
    dram_bytes: float
    energy_pj: float
    pe_utilization: float


@dataclass(frozen=True)
class SweepPoint:
    """One decode step of a batch at one context length, under one scheme."""

    scheme: str
    context_len: int
    batch: int
    tpot_ms: float
    tokens_per_s: float  #: the batch's tokens per second
    energy_per_token_mj: float  #: per generated token of one sequence
    dram_bytes_per_token: float  #: per generated token of one sequence
    pe_utilization: float


def _point(model, scheme: str, accelerator, context_len: int, batch: int,
           mapping: str | None, static_w: float) -> SweepPoint:
    from ..estimate import estimate

    ledger = estimate(model, scheme, accelerator, prompt_len=0, context_len=context_len,
                      decode_steps=1, batch=batch, mapping=mapping)
    (f,) = phase_figures(ledger, scheme, 0, 1, batch, static_w)
    return SweepPoint(scheme, context_len, batch, f.latency_ms, f.tokens_per_s,
                      f.energy_per_token_mj, f.dram_bytes / batch, f.pe_utilization)


def _csv(items: Sequence, kind: type, path: Path) -> Path:
    write_csv([f.name for f in fields(kind)], items, path)
    return path


def sweep_figure(by_context: Sequence[SweepPoint], by_batch: Sequence[SweepPoint],
                 title: str):
    """``estimate_sweep.png``'s figure: TPOT and energy per token against context (left)
    and batch (right); an axis is log only where its values span two decades (the swept
    lengths and batches, powers of two, from 8x), ticks at the swept values."""
    from matplotlib.figure import Figure

    from .plots import label_axes, panel_unit

    fig = Figure(figsize=(10, 6.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for col, (points, key, label) in enumerate((
            (by_context, "context_len", "context length (tokens in the KV cache)"),
            (by_batch, "batch", "batch (sequences per decode step)"))):
        for row, metric in enumerate(("tpot_ms", "energy_per_token_mj")):
            ax = axes[row][col]
            # one unit for the quantity in the whole figure (J once a panel reaches 1,000 mJ)
            scale, ylabel = panel_unit(metric, [getattr(p, metric)
                                                for p in [*by_context, *by_batch]])
            for i, scheme in enumerate(dict.fromkeys(p.scheme for p in points)):
                mine = [p for p in points if p.scheme == scheme]
                ax.plot([getattr(p, key) for p in mine],
                        [scale * getattr(p, metric) for p in mine], marker="os^Dv"[i % 5],
                        label=scheme)
            label_axes(ax, [getattr(p, key) for p in points],
                       [scale * getattr(p, metric) for p in points], label if row else "",
                       ylabel, swept=True)
    axes[0][0].legend(title="scheme")
    fig.suptitle(title)
    return fig


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------


def _system(args: argparse.Namespace) -> System | None:
    """The System the flags describe, or None for one chip with no system flag given.

    Every bad length and multi-chip flag is reported at once, in one ``ValueError`` naming
    the flags.
    """
    from ..estimate import _check_lengths
    from ..plan import model_config

    problems = []
    context_len = args.prompt_len if args.context_len is None else args.context_len
    try:  # the lengths against the model's context, beside the chips' problems
        _check_lengths(model_config(args.model), args.prompt_len, context_len, args.decode_steps,
                       args.batch)
    except ValueError as err:
        text = str(err)
        for name in ("prompt_len", "context_len", "decode_steps", "batch"):
            text = text.replace(f"{name}=", f"--{name.replace('_', '-')} ")
        if args.context_len is None:  # not given: the context is the prompt
            text = text.replace("--context-len ", "--context-len (= --prompt-len) ")
        problems.append(text)
    from ..accelerators import resolve

    return chip_system(args, resolve(args.accelerator), problems)


def chip_system(args: argparse.Namespace, accelerator: Any, problems: Sequence[str] = ()
                ) -> System | None:
    """The System of ``--chips / --tp / --pp / --ep / --micro-batches / --link-*`` on
    ``accelerator`` for ``args.model``, or None for one chip (``estimate`` and ``serve``).

    ``problems``, the command's own, and every bad multi-chip flag are reported at once, in
    one ``ValueError`` naming the flags.
    """
    from ..models.configs import resolve_config
    from ..models.moe import MoEConfig
    from ..plan import check_tensor_parallel, stage_layers
    from ..system import Link, System

    problems = list(problems)
    tp, pp, ep = args.tp, args.pp, getattr(args, "ep", 1)
    micro_batches, batch = getattr(args, "micro_batches", 1), getattr(args, "batch", 1)
    chips = args.chips if args.chips is not None else tp * pp * ep
    if chips == tp * pp * ep == 1 and micro_batches == 1:
        if problems:
            raise ValueError(problems[0])
        return None
    if batch % micro_batches:
        problems.append(f"--micro-batches {micro_batches} must divide --batch {batch}"
                        " (each micro-batch takes batch / micro-batches sequences)")
    if chips != tp * pp * ep:
        problems.append(f"--chips {chips} must equal --tp {tp} x --pp {pp}"
                        + (f" x --ep {ep}" if ep > 1 else "") + f" = {tp * pp * ep}")
    link = None
    try:
        link = Link(args.link_gbps, args.link_latency_us, args.topology)
    except ValueError as err:
        problems.append(str(err).replace("Link.bandwidth_gbps", "--link-gbps")
                        .replace("Link.latency_us", "--link-latency-us")
                        .replace("Link.topology", "--topology"))
    config = resolve_config(args.model)  # an unknown model is its own error, reported alone
    if ep > 1:
        if (tp, pp, micro_batches) != (1, 1, 1):
            problems.append(f"--ep {ep} is not combined with --tp / --pp / --micro-batches yet")
        if not isinstance(config, MoEConfig):
            problems.append(f"--ep {ep}: {config.name} has no experts to spread")
        elif config.experts.num_experts % ep:
            problems.append(f"--ep {ep} must divide {config.name}'s "
                            f"{config.experts.num_experts} routed experts")
        if batch % ep:
            problems.append(f"--ep {ep} must divide --batch {batch} (each chip takes "
                            "batch / ep sequences through attention)")
    n_layers = getattr(config, "n_layer", None) or config.num_hidden_layers
    if isinstance(config, MoEConfig) and tp > 1:
        problems.append(f"--tp {tp}: {config.name}'s experts are not split by Megatron-LM's "
                        "rules here; spread them with --ep")
    for check in (lambda: tp > 1 and not isinstance(config, MoEConfig)
                  and check_tensor_parallel(config, tp),
                  lambda: stage_layers(n_layers, pp)):
        try:
            check()
        except ValueError as err:
            problems.append(str(err).replace("tensor_parallel=", "--tp ")
                            .replace("pipeline_parallel=", "--pp "))
    if problems:
        raise ValueError(f"{len(problems)} bad option(s) for {args.model}:\n  "
                         + "\n  ".join(problems))
    return System(accelerator, chips, tp, pp, micro_batches, link, ep)


def system_entry(system: System | None) -> dict:
    """The chips, parallelism and link of an estimate, as the manifest and header give them."""
    if system is None:
        return {"chips": 1}
    link = system.link
    return {"chips": system.chips, "tensor_parallel": system.tensor_parallel,
            "pipeline_parallel": system.pipeline_parallel,
            "micro_batches": system.micro_batches,
            **({"expert_parallel": system.expert_parallel} if system.expert_parallel > 1
               else {}),
            "link": {"bandwidth_gbps": link.bandwidth_gbps, "latency_us": link.latency_us,
                     "topology": link.topology}}


def system_line(system: System | None) -> str:
    """``one chip`` or ``16 chips (TP 8 x PP 2, 4 micro-batches; ring link 100 GB/s, 1 us a
    hop)``."""
    if system is None:
        return "one chip"
    link = system.link
    how = (f"EP {system.expert_parallel}: experts round-robin, the rest data-parallel"
           if system.expert_parallel > 1 else f"TP {system.tensor_parallel} x PP "
           f"{system.pipeline_parallel}, {system.micro_batches} micro-batch(es)")
    return (f"{system.chips} chips ({how}; {link.topology} link {link.bandwidth_gbps:g} GB/s, "
            f"{link.latency_us:g} us a hop)")


def _static_w(args: argparse.Namespace, system: System | None) -> float:
    """Static power of every chip in W: area at ``--node-nm`` x the area table's W/mm2."""
    from ..accelerators import resolve
    from ..area import static_watts

    chip = system.accelerator if system is not None else args.accelerator
    return static_watts(resolve(chip), args.node_nm) * (system.chips if system else 1)


def run_estimate(args: argparse.Namespace) -> int:
    """The ``estimate`` command. Bad input raises ``ValueError`` (the CLI reports it)."""
    import sys
    import time

    from ..area import AreaTable
    from ..estimate import estimate
    from ..models.footprint import fit
    from ..progress import LineProgress

    out = Path(args.out) if args.out else None
    if args.serve is not None:
        return run_serving(args, out)
    if args.ttft_ms is not None or args.tpot_ms is not None or args.serve_batches:
        raise ValueError("--ttft-ms, --tpot-ms and --serve-batches go with --serve REQUESTS")
    if args.ledger and out is None:
        raise ValueError("--ledger writes ledger_<scheme>.csv into the --out folder: give --out")
    context_len = args.prompt_len if args.context_len is None else args.context_len
    progress = not args.no_progress  # estimate's steps: a bar, or a line every few seconds
    system = _system(args)
    chip = system.accelerator if system is not None else args.accelerator
    static_w = _static_w(args, system)
    rows: list[PhaseFigures] = []
    ledgers: dict[str, Ledger] = {}
    start = time.perf_counter()
    # Into a pipe or a log, also a line per scheme estimated (a terminal has estimate()'s bar).
    piped = (LineProgress(total=len(args.schemes), desc=f"estimate {args.model}",
                          unit="scheme", interval=0.0)
             if progress and not sys.stderr.isatty() else None)
    for scheme in args.schemes:
        ledger = estimate(args.model, scheme, args.accelerator, prompt_len=args.prompt_len,
                          context_len=context_len, decode_steps=args.decode_steps,
                          batch=args.batch, mapping=args.mapping, progress=progress,
                          system=system)
        ledgers[scheme] = ledger
        rows += phase_figures(ledger, scheme, args.prompt_len, args.decode_steps,
                              args.batch, static_w)
        if piped is not None:
            piped.set_description(f"estimate {args.model} {scheme} done")
            piped.update()
    # a decode step of one chip at each context length (tokens cached) and each batch size
    chip_w = static_w / (system.chips if system is not None else 1)
    by_context, by_batch = ([_point(args.model, s, args.accelerator, c, b, args.mapping, chip_w)
                             for s in args.schemes for c, b in points]
                            for points in ([(c, args.batch) for c in args.sweep_contexts or ()],
                                           [(context_len, b) for b in args.sweep_batches or ()]))
    wall = time.perf_counter() - start
    first = next(iter(ledgers.values()))
    print(f"{args.model} on {first.accelerator} ({first.dataflow}), {system_line(system)}: "
          f"prompt {args.prompt_len}, context {context_len}, {args.decode_steps} decode "
          f"step(s), batch {args.batch}; {sum(len(v) for v in ledgers.values()):,} calls "
          f"estimated in {wall:.2f} s")
    print("The whole model: GEMMs on the array, the vector unit's steps"
          f"{' and the links' if system is not None else ''}; TTFT is the prefill, TPOT the "
          f"mean decode step; energy includes {static_w:,.3g} W of static power (area at "
          f"{args.node_nm:g} nm x {AreaTable().static_w_per_mm2:g} W/mm2, as dse charges it) over each phase's time.\n")
    print(markdown_table(["scheme", "phase", "tokens", "TTFT / TPOT (ms)", "tokens/s",
                          "energy/token (mJ)", "MACs", "DRAM bytes", "PE util", "/ roofline"], [
        [f.scheme, f.phase, f.tokens, f"{f.latency_ms:,.3f}", f"{f.tokens_per_s:,.1f}",
         f"{f.energy_per_token_mj:,.3f}", si(f.macs, digits=4), si(f.dram_bytes, "B"),
         f"{100 * f.pe_utilization:.1f}%", f"{f.roofline_ratio:.2f}x"] for f in rows]))
    tp, pp, ep = ((system.tensor_parallel, system.pipeline_parallel, system.expert_parallel)
                  if system is not None else (1, 1, 1))
    print("\nDRAM per chip (weights at their stored widths, KV cache, activations' peak):")
    for scheme in args.schemes:
        check = fit(args.model, scheme, chip, args.prompt_len, context_len, args.decode_steps,
                    args.batch, tp, pp, ep)
        print(f"  {scheme}: {check.message}")
    for title, points in (("decode step vs context length", by_context),
                          ("decode step vs batch", by_batch)):
        if points:
            print(f"\n{title}:\n")
            print(markdown_table(["scheme", "context", "batch", "TPOT (ms)", "tokens/s",
                                  "energy/token (mJ)", "DRAM bytes/token", "PE util"], [
                [p.scheme, p.context_len, p.batch, f"{p.tpot_ms:,.3f}", f"{p.tokens_per_s:,.1f}",
                 f"{p.energy_per_token_mj:,.3f}", si(p.dram_bytes_per_token, "B"),
                 f"{100 * p.pe_utilization:.2f}%"] for p in points]))
    if out is not None:
        paths = [_csv(rows, PhaseFigures, out / "estimate.csv")]
        for scheme, ledger in ledgers.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in scheme)
            # per phase and layer, the sums of its calls: a few hundred rows where the ledger
            # holds one per call (about 54 MB of CSV per scheme for a 70B model, 128 steps)
            paths.append(_csv([LayerFigures(scheme, phase, layer, t.calls, t.macs, t.cycles,
                                            t.latency_us, t.dram_bytes, t.energy_pj,
                                            t.pe_utilization)
                               for (phase, layer), t in ledger.group_by(("phase", "name")).items()],
                              LayerFigures, out / f"layers_{safe}.csv"))
            if args.ledger:
                paths.append(out / f"ledger_{safe}.csv")
                ledger.to_csv(paths[-1])
        paths += [_csv(points, SweepPoint, out / f"sweep_{name}.csv")
                  for name, points in (("context", by_context), ("batch", by_batch)) if points]
        if by_context and by_batch:
            from .plots import save_figure

            paths.append(save_figure(sweep_figure(
                by_context, by_batch, f"{args.model} decode step on {first.accelerator} (batch "
                f"{args.batch} vs context; context {context_len} vs batch)"),
                out / "estimate_sweep.png", dpi=110))
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


def run_serving(args: argparse.Namespace, out: Path | None) -> int:
    """``estimate --serve``: the request mix at each batch size, and the largest batch that
    meets the targets (:mod:`tenet_byoc.experiments.serving` defines the serving model)."""
    from .serving import (
        ServingFigures,
        largest_batch,
        parse_requests,
        plot_serving,
        serve,
        serving_table,
    )

    if args.ledger or args.sweep_contexts or args.sweep_batches:
        raise ValueError("--ledger and --sweep-contexts/--sweep-batches do not go with --serve "
                         "(a mix is many estimates; --serve-batches sets its batch sizes)")
    requests = parse_requests(args.serve)
    batches = args.serve_batches or [b for b in (2 ** i for i in range(31))
                                     if b <= len(requests)]
    batches = sorted(set(batches) | {args.batch})
    system = _system(args)
    static_w = _static_w(args, system)
    figures: list[ServingFigures] = []
    for scheme in args.schemes:
        cache: dict = {}
        figures += [serve(args.model, requests, b, scheme, args.accelerator, args.mapping,
                          system, cache, static_w) for b in batches]
    targets = " and ".join(f"{name} <= {ms} ms" for name, ms in
                           (("TTFT", args.ttft_ms), ("TPOT", args.tpot_ms)) if ms is not None)
    prompts = sum(r.prompt_len for r in requests) / len(requests)
    outputs = sum(r.output_len for r in requests) / len(requests)
    print(f"{args.model} serving {len(requests)} requests (mean prompt {prompts:,.1f}, mean "
          f"output {outputs:,.1f} tokens) on {args.accelerator}, {system_line(system)}, "
          "static batching; the whole model (GEMMs, vector unit, links); energy per output "
          f"token includes {static_w:,.3g} W of static power (area at {args.node_nm:g} nm) "
          "over the mix's time\n")
    print(serving_table(figures, args.ttft_ms, args.tpot_ms))
    for scheme in args.schemes:
        mine = [f for f in figures if f.scheme == scheme]
        at = next(f for f in mine if f.batch == args.batch)
        print(f"\n{scheme} at batch {args.batch}: {at.tokens_per_s:,.1f} tokens/s, "
              f"{at.requests_per_s:,.3f} requests/s, TPOT {at.tpot_ms_mean:,.3f} ms mean")
        if targets:
            best = largest_batch(mine, args.ttft_ms, args.tpot_ms)
            print(f"{scheme}: largest batch with every request at {targets}: "
                  + (f"{best.batch} ({best.tokens_per_s:,.1f} tokens/s)" if best else
                     f"none of {batches}"))
    if out is not None:
        paths = [_csv(figures, ServingFigures, out / "serving.csv"),
                 plot_serving(figures, out / "serving.png",
                              f"{args.model} serving {len(requests)} requests on "
                              f"{args.accelerator}", args.ttft_ms, args.tpot_ms)]
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0
