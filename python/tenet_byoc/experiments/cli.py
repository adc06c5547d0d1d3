"""The ``tenet-byoc`` command line: run one model, sweep schemes x accelerators, profile, presets.

Examples
--------
    tenet-byoc sweep --out results           # GPT-2 small + MLP, the 7 classic schemes, os16, ws16
    tenet-byoc sweep --quick --out results   # a shorter prompt, three schemes, one array
    tenet-byoc run --model gpt2 --scheme w4a16_group128 --accelerator ws16
    tenet-byoc run --model mlp --tenet-p systolic.p --tenet-m matmul_systolic_os.m
    tenet-byoc profile --model gpt2 --gpt2-config tiny --phase decode
    tenet-byoc eval --checkpoint gpt2-folder --text wiki.txt --schemes none,w8a8_per_tensor
    tenet-byoc presets
    tenet-byoc estimate --model llama-3-70b --schemes none,q4f16_1 --accelerator os128
    tenet-byoc report results                # results/report.html, one self-contained page
    tenet-byoc dse --model llama-3-8b --schemes none,per_token --space space.yaml --out dse
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["main"]

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


def _scheme_items(text: str) -> list[str]:
    """Split a scheme list on commas, keeping a spec string's own parts together: a part
    with ``=`` (or ``static``) continues the spec before it, unless it starts a new one
    with ``w=``."""
    items: list[str] = []
    for part in (t.strip() for t in text.split(",")):
        if not part:
            continue
        continues = ("=" in part or part == "static") and not part.startswith("w=")
        if continues and items and "=" in items[-1]:
            items[-1] += "," + part
        else:
            items.append(part)
    return items


def _unknown(kind: str, bad: Sequence[str], known: Sequence[str], text: str, many: bool) -> str:
    """The message for unknown names: near names when there are some, else the choices."""
    from .._names import did_you_mean

    if not bad:
        return f"no {kind} given in {text!r}"
    hints = [f"{t!r}{did_you_mean(t, known)}" for t in bad]
    if all("did you mean" in h for h in hints):
        return f"unknown {kind} " + ", ".join(hints)
    choices = ("run `tenet-byoc presets` for the list" if len(known) > 12
               else "available: " + ", ".join(known))
    return (f"unknown {kind} " + ", ".join(hints) + f"; {choices}"
            + (" (or all)" if many else ""))


def _names(kind: str, known: Sequence[str], *, many: bool = True):
    """An argparse type for a comma-separated list of known names (or ``all``); for
    schemes also names with a KV modifier (``per_token+kv8``) and spec strings. With
    ``many=False`` (see :func:`_one`) the message does not offer ``all``."""
    def parse(text: str) -> list[str]:
        if kind == "scheme":
            items = _scheme_items(text)
        else:
            items = [t.strip() for t in text.split(",") if t.strip()]
        if items == ["all"]:
            return list(known)
        bad = [t for t in items if t not in known]
        if kind == "scheme" and bad:
            from ..quantization import get_scheme

            for t in list(bad):
                try:
                    get_scheme(t)
                except ValueError as err:
                    if "+" in t or "=" in t:  # a modifier or spec: its own message
                        raise argparse.ArgumentTypeError(f"scheme {t!r}: {err}") from None
                else:
                    bad.remove(t)
        if bad or not items:
            raise argparse.ArgumentTypeError(
                _unknown(kind, bad, known, text, many)
                + ("; a name may take a KV modifier (+kv8) and a spec string works too"
                   if kind == "scheme" else "")
            )
        return items
    parse.__name__ = kind  # argparse names the type in its messages
    return parse


def _one(kind: str, known: Sequence[str]):
    many = _names(kind, known, many=False)

    def parse(text: str) -> str:
        items = many(text)
        if len(items) != 1 or text.strip() == "all":
            raise argparse.ArgumentTypeError(f"give one {kind}, got {text!r}")
        return items[0]
    parse.__name__ = kind
    return parse


def _is_design_file(text: str) -> bool:
    """Whether an --accelerator item names a design file rather than a preset."""
    return text.lower().endswith((".json", ".yaml", ".yml")) or "/" in text or "\\" in text


def _design(text: str):
    """A design file's accelerator (``Accelerator.from_file``), as an argparse error when bad."""
    from ..hardware import Accelerator

    try:
        return Accelerator.from_file(text)
    except (ValueError, OSError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _accelerators(presets: Sequence[str], *, many: bool):
    """An argparse type for --accelerator: preset names and/or design files (JSON or YAML,
    the accelerator's one JSON form), comma-separated when ``many``; ``all`` is every
    preset. Files are loaded (and so checked) when the options are parsed."""
    names = _names("preset", presets, many=many)

    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()] if many else [text.strip()]
        if not many and ("," in text or text.strip() == "all"):
            raise argparse.ArgumentTypeError(f"give one preset or design file, got {text!r}")
        out = []
        for item in items:
            out += [_design(item)] if _is_design_file(item) else names(item)
        if not out:
            raise argparse.ArgumentTypeError(f"no preset given in {text!r}")
        return out if many else out[0]
    parse.__name__ = "accelerator"
    return parse


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    from ..hardware import DEFAULT_PRESET, PRESETS
    from ..models.gpt2 import PRESETS as GPT2_PRESETS
    from ..quantization import CLASSIC_SCHEMES, SCHEMES
    from .sweep import DEFAULT_ACCELERATORS

    presets, schemes, configs = sorted(PRESETS), list(SCHEMES), list(GPT2_PRESETS)
    parser = argparse.ArgumentParser(
        prog="tenet-byoc",
        description="What an LLM (GPT-2, Llama-family checkpoints, or any size from its config "
        "alone) and an MLP on scikit-learn's digits (or FashionMNIST files you give) would cost "
        "on a PE-array accelerator (TENET cost model), per quantization scheme. The GEMMs "
        "really run on the CPU, so output errors are real.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run `tenet-byoc COMMAND --help` for a command's options; "
        "the main job is `tenet-byoc sweep --out results`",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def model_options(p: argparse.ArgumentParser, *, sweep: bool) -> None:
        g = p.add_argument_group("model")
        if sweep:
            g.add_argument("--model", default="all", choices=["gpt2", "mlp", "all"],
                           help="which model(s) to sweep (default: all)")
        else:
            g.add_argument("--model", default="gpt2", choices=["gpt2", "mlp"],
                           help="default: gpt2")
        # Defaults of GPT-2-only and MLP-only options are None so that an option given for
        # the other model can be refused (see _check_applicable).
        g.add_argument("--gpt2-config", choices=configs,
                       help="GPT-2 shape with seeded random weights (default: small)")
        g.add_argument("--checkpoint", metavar="DIR",
                       help="local Hugging Face GPT-2 folder (config.json + model.safetensors); "
                       "replaces --gpt2-config")
        quick = "; 32 with --quick" if sweep else ""
        g.add_argument("--prompt-len", type=_positive, metavar="P",
                       help=f"GPT-2 prefill tokens (default: 128{quick}, at most the model's "
                       "n_positions)")
        g.add_argument("--context-len", type=_positive, metavar="L",
                       help=f"GPT-2 decode step's cache length (default: 128{quick}, at most "
                       "n_positions - 1)")
        g.add_argument("--data", metavar="DIR",
                       help="folder with the FashionMNIST IDX files; the MLP is trained on "
                       "them (about 10 s). Without it: scikit-learn's handwritten digits "
                       "(8x8, bundled; a seeded 1437/360 train/test split)")
        g.add_argument("--epochs", type=_positive,
                       help="MLP training epochs (default: 5 on FashionMNIST, 60 on the "
                       "digits)")
        g.add_argument("--seed", type=int, default=0, help="weights and token ids (default 0)")

    def hardware_options(p: argparse.ArgumentParser, *, many: bool, default: str = "") -> None:
        g = p.add_argument_group("accelerator")
        if many:
            g.add_argument("--accelerator", "--hardware", dest="accelerator",
                           type=_accelerators(presets, many=True), metavar="LIST",
                           help=f"comma-separated presets, design files (.json/.yaml, see "
                           f"`presets --show`) or all (default: {default}; the model runs "
                           "once and each accelerator is charged from its ledger); "
                           f"available: {', '.join(presets)}; --hardware is a deprecated name")
        else:
            g.add_argument("--accelerator", "--hardware", dest="accelerator",
                           type=_accelerators(presets, many=False), metavar="PRESET|FILE",
                           help=f"a preset or a design file (.json/.yaml, see `presets "
                           f"--show`); default: {DEFAULT_PRESET}; available: "
                           f"{', '.join(presets)}")
        g.add_argument("--tenet-p", metavar="FILE",
                       help="custom accelerator: TENET .p file (PE array, interconnect, memory)")
        g.add_argument("--tenet-m", metavar="FILE",
                       help="custom accelerator: TENET .m file (space and time maps of a GEMM)")
        g.add_argument("--mapping", choices=["auto", "fixed"],
                       help="auto: search each distinct call's dataflow (os/ws/is), buffer tiles "
                       "and loop order, once, cached; fixed: the preset's own mapping (default); "
                       "a TENET .m dataflow stays, only its tiles are searched")
        g.add_argument("--objective", choices=["latency", "energy", "edp"],
                       help="what --mapping auto minimises (default: latency)")

    p = sub.add_parser("sweep", help="schemes x accelerators: tables, CSV/JSON and plots",
                       description="Quantize, build and run each model under each scheme "
                       "once, and charge the run on each accelerator; GPT-2 as a prefill and "
                       "one decode step.")
    model_options(p, sweep=True)
    p.add_argument("--schemes", type=_names("scheme", schemes), metavar="LIST",
                   help=f"comma-separated schemes or all (default: the classic "
                   f"{len(CLASSIC_SCHEMES)}, {','.join(CLASSIC_SCHEMES)}; three with --quick); "
                   f"available: {', '.join(schemes)}")
    hardware_options(p, many=True,
                     default=f"{','.join(DEFAULT_ACCELERATORS)}; os16 with --quick")
    p.add_argument("--quick", action="store_true",
                   help="prompt and context 32, schemes none,w8a8_per_channel_per_token,"
                   "w4a16_group128, accelerator os16 (explicit options win)")
    p.add_argument("--out", metavar="DIR", help="write sweep.csv, sweep.json, layers.csv and "
                   "PNG plots here")
    _report_option(p)
    p.add_argument("--repeats", type=_positive, default=1,
                   help="timed CPU runs per phase; the wall column is their median (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("run", help="one model and scheme, run once, charged on one or more "
                       "accelerators: totals and per-layer costs")
    model_options(p, sweep=False)
    p.add_argument("--scheme", type=_one("scheme", schemes), default="none",
                   help=f"default: none; available: {', '.join(schemes)}")
    hardware_options(p, many=True, default=DEFAULT_PRESET)
    p.add_argument("--out", metavar="DIR", help="write run.csv, run.json, layers.csv and a plot")
    _report_option(p)
    p.add_argument("--repeats", type=_positive, default=3,
                   help="timed CPU runs per phase; the wall column is their median (default 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("profile", help="a vm.profile-style report of one call",
                       description="Time every VM call of one run and show each offloaded "
                       "call's accelerator cost beside it.")
    model_options(p, sweep=False)
    p.add_argument("--scheme", type=_one("scheme", schemes), default="none",
                   help=f"default: none; available: {', '.join(schemes)}")
    hardware_options(p, many=False)
    p.add_argument("--phase", choices=["prefill", "decode"],
                   help="GPT-2 function to profile (default: prefill; not for the MLP)")
    p.add_argument("--csv", metavar="FILE", help="also write the report as CSV")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")

    p = sub.add_parser("eval", help="perplexity per scheme of a local checkpoint on a text file",
                       description="Tokenize a text file with the checkpoint's own "
                       "tokenizer.json, run it through the model offloaded to tenet under "
                       "each scheme in non-overlapping windows (one prefill each), and print "
                       "perplexity, its change and top-1 agreement against float32, and the "
                       "accelerator's latency and energy of the run.")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="local Hugging Face folder: config.json, model.safetensors, "
                   "tokenizer.json (GPT-2, Llama, Mistral, Qwen2)")
    p.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file")
    p.add_argument("--schemes", type=_names("scheme", schemes), metavar="LIST",
                   help="comma-separated schemes or all (default: the classic seven); "
                   "float32 (none) always runs first as the reference")
    p.add_argument("--accelerator", "--hardware", dest="accelerator",
                   type=_accelerators(presets, many=False), default=DEFAULT_PRESET,
                   metavar="PRESET|FILE",
                   help=f"a preset or a design file (.json/.yaml, see `presets --show`); "
                   f"default: {DEFAULT_PRESET}; available: {', '.join(presets)}")
    p.add_argument("--window", type=_positive, metavar="N",
                   help="tokens per window, at least 2 (default: the model's context)")
    p.add_argument("--max-tokens", type=_positive, metavar="N",
                   help="evaluate only the text's first N tokens (default: all)")
    p.add_argument("--out", metavar="DIR", help="write eval.csv and eval.json here")
    _report_option(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("presets", help="list accelerator presets and quantization schemes")
    p.add_argument("--show", type=_one("preset", presets), metavar="NAME",
                   help="print preset NAME in the accelerator's one form (a design file to "
                   "edit and pass as --accelerator FILE)")
    p.add_argument("--format", choices=["json", "yaml"], default="json",
                   help="with --show: JSON (default) or YAML")

    from .estimate_cmd import add_estimate_parser

    add_estimate_parser(sub, schemes, presets, _names, _one,
                        accelerator_type=_accelerators(presets, many=False))
    _report_option(sub.choices["estimate"])

    from .dse_cmd import add_dse_parser
    from .estimate_cmd import _count

    add_dse_parser(sub, schemes, _names, _count)

    p = sub.add_parser("report", help="write DIR/report.html: one self-contained page of a run",
                       description="Read what sweep, run, estimate or eval wrote into DIR "
                       "(CSV, JSON, manifest.json) and write DIR/report.html: the run's header, "
                       "sortable tables and interactive plots in one file that opens offline.")
    p.add_argument("dir", metavar="DIR", help="a folder a command wrote with --out")
    return parser


def _report_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report", action="store_true",
                   help="also write report.html into --out (see `tenet-byoc report`)")


# ----------------------------------------------------------------------------------------
# Input: cases and accelerators
# ----------------------------------------------------------------------------------------


def _tenet_accelerator(p_file: str, m_file: str):
    from ..hardware import Accelerator

    return Accelerator.from_tenet_files(p_file, m_file)


def _hardware(args, quick: bool = False) -> list:
    from ..hardware import resolve

    accs = [resolve(h, args.mapping, args.objective) for h in _chosen_hardware(args, quick)]
    names = [a.name for a in accs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"accelerator {', '.join(map(repr, twice))} given twice in "
                         f"{','.join(names)}: each accelerator is charged once")
    return accs


def _chosen_hardware(args, quick: bool) -> list:
    from ..hardware import DEFAULT_PRESET
    from .sweep import DEFAULT_ACCELERATORS, QUICK

    if (args.tenet_p is None) != (args.tenet_m is None):
        raise _UserError("--tenet-p and --tenet-m go together (a PE array and a mapping)")
    chosen = args.accelerator
    if chosen is not None and not isinstance(chosen, list):
        chosen = [chosen]  # one preset name or design file's accelerator
    custom = [] if args.tenet_p is None else [_tenet_accelerator(args.tenet_p, args.tenet_m)]
    if chosen is None:
        if custom:
            return custom  # only the custom array unless presets are asked for too
        if args.command == "sweep":
            chosen = list(QUICK.accelerators if quick else DEFAULT_ACCELERATORS)
        else:
            chosen = [DEFAULT_PRESET]
    return chosen + custom


_GPT2_OPTIONS = ("gpt2_config", "checkpoint", "prompt_len", "context_len", "phase")
_MLP_OPTIONS = ("data", "epochs")


def _check_applicable(args, models: Sequence[str]) -> None:
    """Refuse options that would be silently ignored by the chosen model(s)."""
    given = {name for name in (*_GPT2_OPTIONS, *_MLP_OPTIONS)
             if getattr(args, name, None) is not None}
    unused = []
    if "gpt2" not in models:
        unused += [n for n in _GPT2_OPTIONS if n in given]
    if "mlp" not in models:
        unused += [n for n in _MLP_OPTIONS if n in given]
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
    from ..models.gpt2 import GPT2Config, read_config_json
    from .sweep import QUICK

    if args.checkpoint is not None:
        if not Path(args.checkpoint).is_dir():
            raise FileNotFoundError(f"GPT-2 checkpoint folder {args.checkpoint!r} does not exist")
        path = str(Path(args.checkpoint) / "config.json")
        try:
            n_positions = GPT2Config.from_hf_dict(read_config_json(path)).n_positions
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
    cases = []
    for model in models:
        if model == "gpt2":
            prompt_len, context_len = _gpt2_lengths(args, quick)
            cases.append(gpt2_case(
                args.gpt2_config or "small", checkpoint=args.checkpoint,
                prompt_len=prompt_len, context_len=context_len, seed=args.seed,
            ))
        else:
            cases.append(mlp_case(args.data, epochs=args.epochs, seed=args.seed))
    return cases


def _check_output_dir(path: str) -> None:
    """Fail before the job if ``path`` cannot be made a folder we can write into."""
    import tempfile

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise _UserError(f"cannot write into output folder {path!r}: "
                         f"{err.strerror or err}") from None


def _check_output_file(path: str) -> None:
    """Fail before the job if ``path`` cannot be written (its folder must exist)."""
    import os

    target = Path(path)
    existed = target.exists()
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a directory")
        with open(target, "a"):
            pass
    except OSError as err:
        raise _UserError(f"cannot write output file {path!r}: {err.strerror or err}") from None
    if not existed:
        os.remove(target)


def _check_report(args) -> None:
    if getattr(args, "report", False) and not args.out:
        raise _UserError("--report needs --out DIR (the page is made from the files written "
                         "there)")


def _finish_out(args, models: Sequence[str], schemes: Sequence[str], accelerators) -> None:
    """Write the run's manifest into --out and, with --report, the page."""
    from .results import write_manifest

    write_manifest(args.out, command=args.command, argv=args.argv, models=models,
                   schemes=schemes, accelerators=accelerators)
    if args.report:
        from .report import write_report

        print(f"wrote {write_report(args.out)}")


# ----------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------


def _print_sweep(result) -> None:
    for note in result.notes:
        print(f"- {note}")
    for model in dict.fromkeys(r.model for r in result.rows):
        print()
        print(result.table(model))
    print(f"\nwall time {result.wall_s:.1f} s")


def _save(result, out: str, plots: bool = True) -> list[Path]:
    paths = result.save(out)
    if plots:
        from .plots import save_plots

        paths += save_plots(result, out)
    return paths


def _cmd_sweep(args) -> int:
    from ..quantization import CLASSIC_SCHEMES
    from .sweep import QUICK, sweep

    models = ["gpt2", "mlp"] if args.model == "all" else [args.model]
    schemes = args.schemes or list(QUICK.schemes if args.quick else CLASSIC_SCHEMES)
    _check_report(args)
    if args.out:
        _check_output_dir(args.out)
    with _input_checks():
        hardware = _hardware(args, quick=args.quick)
        cases = _cases(args, models, quick=args.quick)
    result = sweep(cases, schemes, hardware, repeats=args.repeats,
                   progress=not args.no_progress)
    _print_sweep(result)
    if args.out:
        paths = _save(result, args.out)
        print("wrote " + ", ".join(str(p) for p in paths))
        _finish_out(args, [c.model for c in cases], schemes, hardware)
    return 0


def _cmd_run(args) -> int:
    from .results import markdown_table
    from .sweep import sweep

    _check_report(args)
    if args.out:
        _check_output_dir(args.out)
    with _input_checks():
        hardware = _hardware(args)
        cases = _cases(args, [args.model])
    result = sweep(cases, [args.scheme], hardware, repeats=args.repeats,
                   progress=not args.no_progress)
    _print_sweep(result)
    by_name = {a.name: a for a in hardware}
    # One per-layer table (and plot) per phase and accelerator, in the rows' order.
    groups = dict.fromkeys((c.phase, c.hardware) for c in result.layers)
    for phase, name in groups:
        calls = [c for c in result.layers if c.phase == phase and c.hardware == name]
        print(f"\n{calls[0].model} {phase}, {args.scheme} on {name}: per layer")
        header = ["layer", "pattern", "scheme", "batch", "M", "N", "K", "MACs", "est. cycles",
                  "est. latency (us)", "PE util", "off-chip bytes"]
        print(markdown_table(header, [
            [c.layer, c.pattern, c.call_scheme, c.batch, c.m, c.n, c.k, c.macs, c.cycles,
             f"{c.latency_us:,.2f}", f"{100 * c.pe_utilization:.1f}%", f"{c.offchip_bytes:,.0f}"]
            for c in calls
        ]))
        if args.mapping == "auto":
            print(f"\n{calls[0].model} {phase} on {name}: mappings chosen by the search "
                  f"({by_name[name].objective or 'latency'})")
            print(markdown_table(["layer", "batch", "M", "N", "K", "mapping", "cycles",
                                  "/ roofline"], [
                [c.layer, c.batch, c.m, c.n, c.k, c.mapping.replace("|", "/"), c.cycles,
                 f"{c.cycles / max(c.roofline_cycles, 1):.3f}"]
                for c in calls
            ]))
    if args.out:
        from .plots import plot_layer_breakdown

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "run.csv", out / "run.json", out / "layers.csv"]
        result.to_csv(paths[0])
        result.to_json(paths[1])
        result.layers_to_csv(paths[2])
        for phase, name in groups:
            calls = [c for c in result.layers if c.phase == phase and c.hardware == name]
            paths.append(plot_layer_breakdown(
                calls, out / f"layers_{calls[0].model}_{phase}_{args.scheme}_"
                f"{calls[0].hardware}.png"))
        print("wrote " + ", ".join(str(p) for p in paths))
        _finish_out(args, [c.model for c in cases], [args.scheme], hardware)
    return 0


def _cmd_profile(args) -> int:
    import tvm

    import tenet_byoc

    from ..partition import build
    from ..quantization import quantize

    for path in (args.csv, args.json):
        if path:
            _check_output_file(path)
    with _input_checks():
        hardware = _hardware(args)
        if len(hardware) != 1:
            raise _UserError("profile takes one accelerator: give --accelerator or --tenet-p/-m")
        (case,) = _cases(args, [args.model])
    ex = build(quantize(case.module(), args.scheme), accelerator=hardware[0])
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
    if args.csv:
        Path(args.csv).write_text(report.csv())
        print(f"wrote {args.csv}")
    if args.json:
        Path(args.json).write_text(report.json())
        print(f"wrote {args.json}")
    return 0


def _cmd_eval(args) -> int:
    from ..quantization import CLASSIC_SCHEMES
    from .evaluate import prepare_eval, run_eval

    _check_report(args)
    if args.out:
        _check_output_dir(args.out)
    with _input_checks():
        job = prepare_eval(args.checkpoint, args.text, args.schemes or list(CLASSIC_SCHEMES),
                           args.accelerator, window=args.window, max_tokens=args.max_tokens)
    result = run_eval(job, progress=not args.no_progress)
    for note in result.notes:
        print(f"- {note}")
    print()
    print(result.table())
    if args.out:
        print("wrote " + ", ".join(str(p) for p in result.save(args.out)))
        _finish_out(args, [Path(job.checkpoint).name], job.schemes, [job.accelerator])
    return 0


def _show_preset(name: str, fmt: str) -> int:
    import json

    from ..hardware import preset

    form = json.loads(preset(name).to_json())
    if fmt == "yaml":
        import yaml

        print(yaml.safe_dump(form, sort_keys=False, width=100), end="")
    else:
        print(json.dumps(form, indent=2))
    return 0


def _cmd_presets(args) -> int:
    from dataclasses import replace

    if args.show:
        return _show_preset(args.show, args.format)

    from ..hardware import DEFAULT_PRESET, PRESETS
    from ..quantization import KV_HELP, SCHEMES, SPEC_HELP
    from .results import markdown_table

    rows = []
    for name in PRESETS:
        acc = PRESETS[name]()
        hw = acc.hardware
        rates = hw.macs_per_pe_per_cycle
        rate = (", ".join(f"{r}@{b}b" for b, r in sorted(rates.items()))
                if isinstance(rates, dict) else str(rates))
        rows.append([name + (" (default)" if name == DEFAULT_PRESET else ""), hw.num_pes,
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


def _cmd_estimate(args) -> int:
    from .estimate_cmd import run_estimate

    if args.out:
        _check_output_dir(args.out)  # before the work, as sweep and eval do
    with _input_checks():  # nothing runs: every error is about the input
        _check_report(args)
        code = run_estimate(args)
    if args.out:
        from ..hardware import resolve

        _finish_out(args, [args.model], args.schemes,
                    [resolve(args.accelerator, args.mapping)])
    return code


def _cmd_dse(args) -> int:
    from .dse_cmd import run_dse

    with _input_checks():  # a bad space, model, length or checkpoint is the user's
        return run_dse(args)


def _cmd_report(args) -> int:
    from .report import write_report

    with _input_checks():
        print(f"wrote {write_report(args.dir)}")
    return 0


_COMMANDS = {"sweep": _cmd_sweep, "run": _cmd_run, "profile": _cmd_profile,
             "eval": _cmd_eval, "presets": _cmd_presets, "estimate": _cmd_estimate,
             "dse": _cmd_dse, "report": _cmd_report}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tenet-byoc`` command line; return the exit code.

    Mistakes in the input (unknown names, missing or broken files, lengths out of range)
    print one line and exit with code 2 (``SystemExit``), as argparse does for bad options.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the run manifest records it
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _COMMANDS[args.command](args)
    except _UserError as err:
        parser.exit(2, f"tenet-byoc {args.command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
