"""The ``tenet-byoc`` commands: run one model, sweep schemes x accelerators, profile, presets.

The options are parsed by :mod:`tenet_byoc_cli` (without loading TVM); :func:`run_command`
checks what the parser kept as typed (design files, scheme spec strings) and runs the command.

The commands and an example of each: :mod:`tenet_byoc_cli.parser`'s docstring, or
`tenet-byoc --help`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["run_command"]

# User mistakes (bad names, missing or broken files, lengths out of range) surface as these;
# they become a one-line message and exit code 2, never a traceback.
_USER_ERRORS = (ValueError, KeyError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
                PermissionError)


class _UserError(Exception):
    """A problem with the command line's input, reported without a traceback."""


@contextmanager
def _input_checks():
    """Turn the exceptions of reading the input into :class:`_UserError`.

    Only the input steps (names, files, cases, accelerators) run inside; an exception past
    them (building, running) is a bug and keeps its traceback.
    """
    try:
        yield
    except _USER_ERRORS as err:
        if isinstance(err, KeyError) and err.args:
            raise _UserError(str(err.args[0])) from err
        raise _UserError(str(err)) from err


# ----------------------------------------------------------------------------------------
# Input: cases and accelerators
# ----------------------------------------------------------------------------------------


def _accelerators(args, quick: bool = False) -> list:
    from ..accelerators import DEFAULT_PRESET, Accelerator, resolve
    from .sweep import DEFAULT_ACCELERATORS, QUICK

    if (args.tenet_p is None) != (args.tenet_m is None):
        raise _UserError("--tenet-p and --tenet-m go together (a PE array and a mapping)")
    chosen = args.accelerator
    if chosen is not None and not isinstance(chosen, list):
        chosen = [chosen]  # one preset name or design file's accelerator
    custom = ([] if args.tenet_p is None
              else [Accelerator.from_tenet_files(args.tenet_p, args.tenet_m)])
    if chosen is None:  # only the custom array unless presets are asked for too
        chosen = [] if custom else (list(QUICK.accelerators if quick else DEFAULT_ACCELERATORS)
                                    if args.command == "sweep" else [DEFAULT_PRESET])
    accs = [resolve(h, args.mapping, args.objective) for h in chosen + custom]
    names = [a.name for a in accs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"accelerator {', '.join(map(repr, twice))} given twice in "
                         f"{','.join(names)}: each accelerator is charged once")
    return accs


#: The options that apply to one model only.
_OPTIONS_OF = {"gpt2": ("gpt2_config", "checkpoint", "prompt_len", "context_len", "phase"),
               "mlp": ("data", "epochs")}


def _check_applicable(args, models: Sequence[str]) -> None:
    """Refuse options that would be silently ignored by the chosen model(s)."""
    unused = [n for model, names in _OPTIONS_OF.items() if model not in models
              for n in names if getattr(args, n, None) is not None]
    if args.checkpoint is not None and args.gpt2_config is not None:
        unused.append("gpt2_config")  # the checkpoint's config.json gives the shape
    if unused:
        flags = ", ".join("--" + n.replace("_", "-") for n in unused)
        verb = "does" if len(unused) == 1 else "do"
        target = ("--checkpoint (its config.json gives the shape)"
                  if unused == ["gpt2_config"] else f"--model {args.model}")
        raise _UserError(f"{flags} {verb} not apply to {target}")


def _gpt2_lengths(args, quick: bool) -> tuple[int, int]:
    """--prompt-len and --context-len, by default 128 (32 with --quick) cut to fit the
    model's context, so the defaults work for every config (tiny has 32 positions)."""
    from ..models.checkpoint import read_config
    from ..models.gpt2 import GPT2Config
    from .sweep import QUICK

    if args.checkpoint is not None:
        if not Path(args.checkpoint).is_dir():
            raise FileNotFoundError(f"GPT-2 checkpoint folder {args.checkpoint!r} does not exist")
        path = str(Path(args.checkpoint) / "config.json")
        try:
            n_positions = GPT2Config.from_hf_dict(read_config(path)).n_positions
        except FileNotFoundError:
            raise FileNotFoundError(f"{path!r} not found") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path!r}: {err}") from None
    else:
        n_positions = GPT2Config.preset(args.gpt2_config or "small").n_positions
    prompt = args.prompt_len or min(QUICK.prompt_len if quick else 128, n_positions)
    context = args.context_len or min(QUICK.context_len if quick else 128, n_positions - 1)
    return prompt, context


def _cases(args, models: Sequence[str], quick: bool = False) -> list:
    from .cases import gpt2_case, mlp_case

    _check_applicable(args, models)
    prompt_len, context_len = _gpt2_lengths(args, quick) if "gpt2" in models else (0, 0)
    return [gpt2_case(args.gpt2_config or "small", checkpoint=args.checkpoint,
                      prompt_len=prompt_len, context_len=context_len, seed=args.seed)
            if model == "gpt2" else mlp_case(args.data, epochs=args.epochs, seed=args.seed)
            for model in models]


def _finish_out(args, models: Sequence[str], schemes: Sequence[str], accelerators,
                system: dict | None = None) -> None:
    """Write the run's manifest into --out and, with --report, the page."""
    from .results import write_manifest

    write_manifest(args.out, command=args.command, argv=args.argv, models=models,
                   schemes=schemes, accelerators=accelerators, system=system)
    if getattr(args, "report", False):
        from .report import write_report

        print(f"wrote {write_report(args.out)}")


# ----------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------


def _cmd_sweep(args) -> int:
    """``sweep`` (schemes x accelerators) and ``run`` (one scheme, with per-layer tables)."""
    from ..quantization import CLASSIC_SCHEMES
    from .results import markdown_table
    from .sweep import QUICK, sweep

    run, quick = args.command == "run", getattr(args, "quick", False)
    models = ["gpt2", "mlp"] if args.model == "all" else [args.model]
    schemes = ([args.scheme] if run
               else args.schemes or list(QUICK.schemes if quick else CLASSIC_SCHEMES))
    with _input_checks():
        accelerators = _accelerators(args, quick=quick)
        cases = _cases(args, models, quick=quick)
    result = sweep(cases, schemes, accelerators, repeats=args.repeats,
                   progress=not args.no_progress)
    for note in result.notes:
        print(f"- {note}")
    print("Costs are the offloaded GEMMs only, as run and charged (`tenet-byoc estimate` adds "
          "the vector unit: the whole model).")
    for model in dict.fromkeys(r.model for r in result.rows):
        print(f"\n{result.table(model)}")
    print(f"\nwall time {result.wall_s:.1f} s")
    by_name = {a.name: a for a in accelerators}
    # run: one per-layer table (and plot) per phase and accelerator, in the rows' order
    runs: dict[tuple[str, str], list] = {}
    for c in result.layers if run else ():
        runs.setdefault((c.phase, c.accelerator), []).append(c)
    for (phase, name), calls in runs.items():
        print(f"\n{calls[0].model} {phase}, {args.scheme} on {name}: per layer")
        print(markdown_table(["layer", "pattern", "scheme", "batch", "M", "N", "K", "MACs",
                              "est. cycles", "est. latency (us)", "PE util", "off-chip bytes"], [
            [c.layer, c.pattern, c.call_scheme, c.batch, c.m, c.n, c.k, c.macs, c.cycles,
             f"{c.latency_us:,.2f}", f"{100 * c.pe_utilization:.1f}%", f"{c.offchip_bytes:,.0f}"]
            for c in calls]))
        if args.mapping == "auto":
            print(f"\n{calls[0].model} {phase} on {name}: mappings chosen by the search "
                  f"({by_name[name].objective or 'latency'})")
            print(markdown_table(["layer", "batch", "M", "N", "K", "mapping", "cycles",
                                  "/ roofline"], [
                [c.layer, c.batch, c.m, c.n, c.k, c.mapping.replace("|", "/"), c.cycles,
                 f"{c.cycles / max(c.roofline_cycles, 1):.3f}"] for c in calls]))
    if args.out:
        from .plots import plot_layer_breakdown, save_plots

        paths = result.save(args.out, args.command)
        if not run:
            paths += save_plots(result, args.out)
        for (phase, name), calls in runs.items():
            paths.append(plot_layer_breakdown(calls, Path(args.out) / f"layers_{calls[0].model}_"
                                              f"{phase}_{args.scheme}_{name}.png"))
        print("wrote " + ", ".join(str(p) for p in paths))
        _finish_out(args, [c.model for c in cases], schemes, accelerators)
    return 0


def _cmd_profile(args) -> int:
    import tvm

    import tenet_byoc

    from ..partition import build
    from ..quantization import quantize

    with _input_checks():
        accelerators = _accelerators(args)
        if len(accelerators) != 1:
            raise _UserError("profile takes one accelerator: give --accelerator or --tenet-p/-m")
        (case,) = _cases(args, [args.model])
    ex = build(quantize(case.module(), args.scheme), accelerator=accelerators[0])
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)
    phase = "inference" if args.model == "mlp" else (args.phase or "prefill")
    func, fargs = case.inputs(vm, phase)
    print(case.describe())
    report = vm.profile(func, *fargs)
    # The case knows its layers (h.0.attn.c_attn, fc0, ...) by call order: the table shows
    # them rather than the fused kernels' generated names.
    entries = [e for r in report.calls for e in r.entries if e.unit == "array"]
    report.name_layers(case.layer_names(phase, entries))
    print(report)
    for path, text in ((args.csv, report.csv), (args.json, report.json)):
        if path:
            Path(path).write_text(text())
            print(f"wrote {path}")
    return 0


def _cmd_eval(args) -> int:
    from ..quantization import CLASSIC_SCHEMES
    from .evaluate import prepare_eval, run_eval

    with _input_checks():
        job = prepare_eval(args.checkpoint, args.text, args.schemes or list(CLASSIC_SCHEMES),
                           args.accelerator, window=args.window, max_tokens=args.max_tokens)
    result = run_eval(job, progress=not args.no_progress)
    for note in result.notes:
        print(f"- {note}")
    print(f"\n{result.table()}")
    if args.out:
        print("wrote " + ", ".join(str(p) for p in result.save(args.out)))
        _finish_out(args, [Path(job.checkpoint).name], job.schemes, [job.accelerator])
    return 0


def _cmd_presets(args) -> int:
    from dataclasses import replace

    if args.show:
        import json

        import yaml

        from ..accelerators import preset
        from ..design_file import design_form

        form = design_form(preset(args.show))  # each quantity once: the file a user edits
        print(yaml.safe_dump(form, sort_keys=False, width=100) if args.format == "yaml"
              else json.dumps(form, indent=2) + "\n", end="")
        return 0

    from ..accelerators import DEFAULT_PRESET, PRESETS
    from ..quantization import KV_HELP, SCHEMES, SPEC_HELP
    from .results import markdown_table

    rows = []
    for name in PRESETS:
        acc = PRESETS[name]()
        hw = acc.hardware
        rates = hw.macs_per_pe_per_cycle
        rate = (", ".join(f"{r}@{b}b" for b, r in sorted(rates.items()))
                if isinstance(rates, dict) else str(rates))
        count = acc.cores.count  # every core's PEs, as the ledger's num_pes
        pes = f"{count} x {hw.num_pes} = {count * hw.num_pes}" if count > 1 else hw.num_pes
        rows.append([name + (" (default)" if name == DEFAULT_PRESET else ""), pes,
                     acc.dataflow.name, rate, f"{hw.bandwidth_bits:g}", f"{hw.avg_latency:g}",
                     f"{hw.clock_ghz:g}", hw.l1_bytes, hw.l2_bytes])
    print("Accelerator presets (--accelerator):\n")
    print(markdown_table(["preset", "PEs", "dataflow", "MACs/PE/cycle", "off-chip bits/cycle",
                          "avg latency", "clock GHz", "L1 bytes", "L2 bytes"], rows))
    rows = []
    for s in SCHEMES.values():
        def operand(bits, fmt, gran, group):
            if fmt == "float":
                return f"float{bits}"
            name = f"{fmt}{bits}" if fmt in ("int", "uint") else fmt
            return f"{name} per " + (f"group of {group}" if gran == "group" else gran)

        static = "static (calibrated)" if s.activation_static else "dynamic"
        rows.append([
            s.name,
            operand(s.weight_bits, s.weight_format, s.weight_granularity, s.group_size)
            + (" + zero points" if s.weight_format == "uint" else ""),
            operand(s.activation_bits, s.activation_format, s.activation_granularity,
                    s.activation_group)
            + (f", {static}" if s.quantizes_activations else "")
            + (f", smoothing alpha {s.smoothing:g}" if s.smoothing else ""),
            s.scale_dtype if s.kernel != "float" and s.weight_format != "float" else "-",
            s.dequant_place(),
            {"emulated": "emulated (exact rounding, float GEMM)", "float": "float GEMM"}.get(
                s.kernel, f"real ({s.kernel})")
            + ("; emulated without calibration" if s.activation_static and replace(
                s, activation_static=False).kernel != s.kernel else ""),
        ])
    print("\nQuantization schemes (--schemes / --scheme; --scheme also takes a spec string):\n")
    print(markdown_table(["scheme", "weights", "activations", "scales", "dequantization",
                          "kernel"], rows))
    print("\nStatic schemes without calibration data compute the same scales per call.")
    print(f"Spec strings: {SPEC_HELP}.")
    print(f"KV cache: {KV_HELP}. Keys and values are rounded where they are written to the "
          "cache (symmetric int codes times fp16 scales, stored dequantized in float32: exact "
          "emulation); attention's K / V operand is charged at the KV width with its scales.")
    print("Emulated schemes: for a decode step's few rows each weight is formed from its "
          "codes inside the GEMM (no float32 copy per call); the ledger charges their recipe, "
          "not the emulation.")
    print("\nCustom accelerators: --accelerator FILE (.json/.yaml; `presets --show NAME` prints "
          "a preset's to start from), or --tenet-p FILE.p --tenet-m FILE.m (TENET's formats).")
    return 0


def _cmd_planned(args) -> int:
    """``estimate``, ``dse`` and ``serve``: costs from configs, nothing built or run, so every
    error is about the input (a bad space, trace, model, length, name, memory size or
    checkpoint)."""
    from .dse_cmd import run_dse
    from .estimate_cmd import run_estimate
    from .serve_cmd import run_serve

    with _input_checks():
        code = {"estimate": run_estimate, "dse": run_dse, "serve": run_serve}[args.command](args)
    if args.command != "estimate":  # dse's designs are in dse.csv, serve's chip in summary.json
        _finish_out(args, [args.model], args.schemes, [])
    elif args.out:
        from ..accelerators import resolve
        from .estimate_cmd import _system, system_entry

        _finish_out(args, [args.model], args.schemes,
                    [resolve(args.accelerator, args.mapping)], system_entry(_system(args)))
    return code


def _cmd_report(args) -> int:
    from .report import write_report

    with _input_checks():
        print(f"wrote {write_report(args.dir)}")
    return 0


_COMMANDS = {"sweep": _cmd_sweep, "run": _cmd_sweep, "profile": _cmd_profile,
             "eval": _cmd_eval, "presets": _cmd_presets, "estimate": _cmd_planned,
             "dse": _cmd_planned, "serve": _cmd_planned, "report": _cmd_report}


def _checked_inputs(args: argparse.Namespace) -> None:
    """Check what the parser kept as typed, before any work: scheme spec strings and KV
    modifiers are parsed, design files read (``args.accelerator`` then holds their
    accelerators)."""
    from tenet_byoc_cli.parser import is_design_file, is_scheme_spec

    for attr in ("schemes", "scheme"):
        value = getattr(args, attr, None)
        items = value if isinstance(value, list) else [value] if value else []
        for item in items:
            if is_scheme_spec(item):
                from ..quantization import get_scheme

                try:
                    get_scheme(item)
                except ValueError as err:
                    raise _UserError(f"argument --{attr}: scheme {item!r}: {err}") from None

    def design(item):
        if not isinstance(item, str) or not is_design_file(item):
            return item
        from ..accelerators import Accelerator

        try:
            return Accelerator.from_file(item)
        except (ValueError, OSError) as err:
            raise _UserError(f"argument --accelerator: {err}") from None

    chosen = getattr(args, "accelerator", None)
    if chosen is not None:
        args.accelerator = ([design(a) for a in chosen] if isinstance(chosen, list)
                            else design(chosen))


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the command ``args`` (parsed by :func:`tenet_byoc_cli.parser.build_parser`);
    return the exit code.

    Mistakes in the input (missing or broken files, lengths out of range, bad spec strings)
    print one line and exit with code 2 (``SystemExit``), as argparse does for bad options.
    """
    try:
        _checked_inputs(args)
        return _COMMANDS[args.command](args)
    except _UserError as err:
        parser.exit(2, f"tenet-byoc {args.command}: error: {err}\n")

