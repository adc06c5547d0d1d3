"""The ``tenet-byoc`` argument parser: every command's options, checked without loading TVM.

A name a user types (preset, scheme, model, GPT-2 shape, objective) is checked here against
:mod:`tenet_byoc_cli.names`, with near names suggested. What needs the package to check
(design files, scheme spec strings and KV modifiers, config files) is kept as typed and
checked by :func:`tenet_byoc.experiments.cli.run_command` before any work.

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
    tenet-byoc serve --model llama-3-8b --accelerator tpu_v5e --schemes q4f16_1+kv8 \
        --rate 2 --requests 500 --ttft-ms 500 --tpot-ms 50 --out serve
"""

from __future__ import annotations

import argparse
import functools
import math
import os
from collections.abc import Sequence

from .design_point import AXES as DSE_AXES
from .design_point import COLUMNS as DSE_COLUMNS
from .names import (
    BUILTIN_MODELS,
    CLASSIC_SCHEMES,
    DEFAULT_ACCELERATORS,
    DEFAULT_PRESET,
    DSE_EXECUTORS,
    DSE_RESULTS_FILE,
    GPT2_CONFIGS,
    MAPPING_OBJECTIVES,
    PRESETS,
    QUICK_ACCELERATORS,
    QUICK_LENGTH,
    QUICK_SCHEMES,
    SCHEMES,
    TOPOLOGIES,
    did_you_mean,
)

__all__ = ["build_parser", "is_design_file", "is_scheme_spec", "refusal", "scheme_items"]


def scheme_items(text: str) -> list[str]:
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


def is_scheme_spec(text: str) -> bool:
    """Whether a scheme item is a spec string or carries a KV modifier (``per_token+kv8``):
    the quantization package checks those (see ``tenet_byoc.quantization.get_scheme``)."""
    return "+" in text or "=" in text or "," in text


def is_design_file(text: str) -> bool:
    """Whether an --accelerator item names a design file rather than a preset."""
    return text.lower().endswith((".json", ".yaml", ".yml")) or "/" in text or "\\" in text


def _unknown(kind: str, bad: Sequence[str], known: Sequence[str], text: str, many: bool) -> str:
    """The message for unknown names: near names when there are some, else the choices."""
    if not bad:
        return f"no {kind} given in {text!r}"
    hints = [f"{t!r}{did_you_mean(t, known)}" for t in bad]
    if all("did you mean" in h for h in hints):
        return f"unknown {kind} " + ", ".join(hints)
    choices = ("run `tenet-byoc presets` for the list" if len(known) > 16
               else "available: " + ", ".join(known))
    return (f"unknown {kind} " + ", ".join(hints) + f"; {choices}"
            + (" (or all)" if many else ""))


def _names(kind: str, known: Sequence[str], *, many: bool = True):
    """An argparse type for a comma-separated list of known names (or ``all``); for
    schemes also names with a KV modifier (``per_token+kv8``) and spec strings, kept as
    typed (checked before the work). With ``many=False`` (see :func:`_one`) the message does
    not offer ``all``."""
    def parse(text: str) -> list[str]:
        items = (scheme_items(text) if kind == "scheme"
                 else [t.strip() for t in text.split(",") if t.strip()])
        if items == ["all"]:
            return list(known)
        bad = [t for t in items if t not in known
               and not (kind == "scheme" and is_scheme_spec(t))]
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


def _accelerators(*, many: bool):
    """An argparse type for --accelerator: preset names and/or design files (JSON or YAML,
    the accelerator's one JSON form), comma-separated when ``many``; ``all`` is every
    preset. Preset names are checked here; files are read before the work."""
    names = _names("preset", sorted(PRESETS), many=many)

    def parse(text: str) -> list[str] | str:
        items = [t.strip() for t in text.split(",") if t.strip()] if many else [text.strip()]
        if not many and ("," in text or text.strip() == "all"):
            raise argparse.ArgumentTypeError(f"give one preset or design file, got {text!r}")
        out: list[str] = []
        for item in items:
            out += [item] if is_design_file(item) else names(item)
        if not out:
            raise argparse.ArgumentTypeError(f"no preset given in {text!r}")
        return out if many else out[0]
    parse.__name__ = "accelerator"
    return parse


def _quantity(unit: str, low: float = 0, allow_low: bool = False):
    """An argparse type: a finite number of ``unit`` (an integer when ``unit`` is "an
    integer"), > ``low`` (>= ``low`` with ``allow_low``)."""
    integer = unit == "an integer"

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {unit}, got {text!r}") from None
        if value < low or (value == low and not allow_low) or not (
                integer or math.isfinite(value)):  # (an int may be too large for a float)
            raise argparse.ArgumentTypeError(f"expected {unit} {'>=' if allow_low else '>'} "
                                             f"{low}, got {value if integer else repr(text)}")
        return value
    parse.__name__ = "integer" if integer else "number"
    return parse


#: An argparse type: an integer >= ``low``.
_count = functools.partial(_quantity, "an integer", allow_low=True)
#: Positive, finite numbers: a rate or size, and a time in milliseconds.
_rate = _quantity("a number")
_milliseconds = _quantity("milliseconds")


def _counts(text: str) -> list[int]:
    one = _count(1)
    return [one(t.strip()) for t in text.split(",") if t.strip()] or [one(text)]


def _model(text: str) -> str:
    """A built-in model name or an existing config.json / checkpoint folder (its contents
    are read before the work)."""
    if text in BUILTIN_MODELS or os.path.exists(text):
        return text
    raise argparse.ArgumentTypeError(
        f"model {text!r} is neither a built-in name nor an existing config.json or "
        f"checkpoint folder{did_you_mean(text, BUILTIN_MODELS)}; built-in: "
        f"{', '.join(BUILTIN_MODELS)}")


def _output_dir_refusal(path: str) -> str | None:
    """Why ``path`` cannot be made a folder we can write into, or None (it is made)."""
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        return f"cannot write into output folder {path!r}: {err.strerror or err}"
    return None


def _output_file_refusal(path: str) -> str | None:
    """Why ``path`` cannot be written (its folder must exist), or None."""
    existed = os.path.exists(path)
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory")
        with open(path, "a"):
            pass
    except OSError as err:
        return f"cannot write output file {path!r}: {err.strerror or err}"
    if not existed:
        os.remove(path)
    return None


#: ``estimate`` options that ``--serve`` does not use: each request brings its own lengths.
SERVE_IGNORES = ("--prompt-len", "--context-len", "--decode-steps")


def _given(flag: str, argv: Sequence[str]) -> bool:
    """Whether ``flag`` is on the command line, as written or abbreviated (argparse takes a
    unique prefix), with or without ``=VALUE``."""
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and flag.startswith(name):
            return True
    return False


def _mixed_out_refusal(out: str, command: str) -> str | None:
    """Why ``out`` must not take ``command``'s results: it holds another command's
    (its ``manifest.json`` says which), and a report page of the folder would mix them."""
    import json

    try:
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
            before = json.load(f)
    except (OSError, ValueError):
        return None  # no manifest (a fresh folder), or one the report will refuse itself
    if not isinstance(before, dict) or before.get("command") in (None, command):
        return None
    return (f"--out {out!r} holds the results of `{before.get('command_line') or before['command']}` "
            f"(its manifest.json): one folder per command, so that a report page of it shows "
            f"one command's results; give {command} another folder "
            f"(e.g. {os.path.join(out, command)!r})")


#: ``--mapping``'s values (``tenet_byoc.accelerators.MAPPING_CHOICES`` but None).
MAPPING_CHOICES = ("default", "auto")


def refusal(args: argparse.Namespace, argv: Sequence[str] | None = None) -> str | None:
    """A mistake in parsed options that argparse's types do not see, in one line, or None.

    Outputs are checked here, before any work and before TVM is loaded: ``--report``
    without ``--out``, an ``--out`` folder that cannot be made or written into (it is made)
    or that holds another command's results, ``profile``'s ``--csv`` / ``--json`` files.
    ``dse --objective`` is refused here rather than by a type so that its message is one
    line, as ``run_dse`` gives it; so are ``estimate --serve``'s options it would ignore
    (``argv``, the command line, says which were given)."""
    if args.command == "dse" and args.objective not in DSE_COLUMNS:
        return (f"--objective {args.objective!r}{did_you_mean(args.objective, DSE_COLUMNS)}; "
                "e.g. tpot_ms, ttft_ms, energy_per_token_mj, area_mm2")
    if args.command == "estimate" and args.serve is not None and argv is not None:
        ignored = [flag for flag in SERVE_IGNORES if _given(flag, argv)]
        if ignored:
            return (f"--serve takes each request's prompt and output lengths from REQUESTS, so "
                    f"{' and '.join(ignored)} would be ignored: drop "
                    f"{'it' if len(ignored) == 1 else 'them'}")
    out = getattr(args, "out", None)
    if getattr(args, "report", False) and not out:
        return "--report needs --out DIR (the page is made from the files written there)"
    if out:
        return _mixed_out_refusal(out, args.command) or _output_dir_refusal(out)
    for path in (getattr(args, "csv", None), getattr(args, "json", None)):
        if path and (why := _output_file_refusal(path)) is not None:
            return why
    return None


def _system_options(p, micro_batches: bool = False) -> None:
    """The several-chip flags ``estimate`` and ``serve`` share (``--micro-batches``:
    estimate's pipeline only; serve keeps a step in flight per pipeline stage)."""
    p.add_argument("--tp", type=_count(1), default=1, metavar="T",
                   help="tensor-parallel chips per layer (Megatron-LM sharding; default 1)")
    p.add_argument("--pp", type=_count(1), default=1, metavar="P",
                   help="pipeline stages (default 1)")
    p.add_argument("--chips", type=_count(1), metavar="C",
                   help="chips in the system; must equal tp x pp (x ep) (default that product)")
    if micro_batches:
        p.add_argument("--micro-batches", type=_count(1), default=1, metavar="U",
                       help="micro-batches through the pipeline; must divide --batch "
                       "(default 1)")
        p.add_argument("--ep", type=_count(1), default=1, metavar="E",
                       help="expert-parallel chips: a mixture of experts' routed experts "
                       "round-robin over E chips, the rest data-parallel; alone, not with "
                       "--tp / --pp / --micro-batches (default 1)")
    p.add_argument("--link-gbps", type=_quantity("GB/s"), default=100.0, metavar="GB/s",
                   help="link bandwidth per chip and direction, GB/s (default 100)")
    p.add_argument("--link-latency-us", type=_quantity("microseconds", allow_low=True),
                   default=1.0, metavar="US",
                   help="link latency per hop, microseconds (default 1)")
    p.add_argument("--topology", default="ring", choices=TOPOLOGIES,
                   help="how collectives travel (default ring)")


def _out_options(p: argparse.ArgumentParser, writes: str, required: bool = False) -> None:
    """``--out DIR`` (``writes``: what goes there), ``--report`` and ``--no-progress``."""
    p.add_argument("--out", required=required, metavar="DIR", help=writes)
    p.add_argument("--report", action="store_true",
                   help="also write report.html into --out (see `tenet-byoc report`)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _llm_options(p: argparse.ArgumentParser, default: str, chip: bool = True) -> None:
    """``--model`` and ``--schemes`` of the commands that take any LLM from its config alone,
    and with ``chip`` the chip's ``--accelerator`` and ``--mapping``."""
    p.add_argument("--model", default=default, type=_model, metavar="NAME|DIR",
                   help=f"built-in name ({', '.join(BUILTIN_MODELS)}), a config.json or a "
                   f"checkpoint folder (default: {default})")
    p.add_argument("--schemes", type=_names("scheme", SCHEMES), default=["none"],
                   metavar="LIST", help="comma-separated schemes or all, each with +kvN for a "
                   f"quantized KV cache if wanted (default: none); available: {', '.join(SCHEMES)}")
    if chip:
        _accelerator_option(p)
        _mapping_option(p)


def _accelerator_option(p: argparse.ArgumentParser, default: str | None = DEFAULT_PRESET
                        ) -> None:
    """``--accelerator``: one preset or design file."""
    p.add_argument("--accelerator", dest="accelerator", default=default,
                   type=_accelerators(many=False), metavar="PRESET|FILE",
                   help=f"a preset or a design file (.json/.yaml, see `presets --show`); "
                   f"default: {DEFAULT_PRESET}; available: {', '.join(sorted(PRESETS))}")


def _mapping_option(p: argparse.ArgumentParser,
                    what: str = "default: the accelerator's own") -> None:
    p.add_argument("--mapping", choices=MAPPING_CHOICES,
                   help="tile mapping: searched per call (auto: each distinct call's dataflow, "
                   "buffer tiles and loop order, once, cached) or each call's default tiles "
                   f"(default); {what}")


def _model_options(p: argparse.ArgumentParser, *, sweep: bool) -> None:
    g = p.add_argument_group("model")
    if sweep:
        g.add_argument("--model", default="all", choices=["gpt2", "mlp", "all"],
                       help="which model(s) to sweep (default: all)")
    else:  # run and profile: one model, one scheme
        g.add_argument("--model", default="gpt2", choices=["gpt2", "mlp"],
                       help="default: gpt2")
        p.add_argument("--scheme", type=_one("scheme", SCHEMES), default="none",
                       help=f"default: none; available: {', '.join(SCHEMES)}")
    # Defaults of GPT-2-only and MLP-only options are None so that an option given for
    # the other model can be refused (see tenet_byoc.experiments.cli).
    g.add_argument("--gpt2-config", choices=GPT2_CONFIGS,
                   help="GPT-2 shape with seeded random weights (default: small)")
    g.add_argument("--checkpoint", metavar="DIR",
                   help="local Hugging Face GPT-2 folder (config.json + model.safetensors); "
                   "replaces --gpt2-config")
    quick = f"; {QUICK_LENGTH} with --quick" if sweep else ""
    g.add_argument("--prompt-len", type=_count(1), metavar="P",
                   help=f"GPT-2 prefill tokens (default: 128{quick}, at most the model's "
                   "n_positions)")
    g.add_argument("--context-len", type=_count(1), metavar="L",
                   help=f"GPT-2 decode step's cache length (default: 128{quick}, at most "
                   "n_positions - 1)")
    g.add_argument("--data", metavar="DIR",
                   help="folder with the FashionMNIST IDX files; the MLP is trained on "
                   "them (about 10 s). Without it: scikit-learn's handwritten digits "
                   "(8x8, bundled; a seeded 1437/360 train/test split)")
    g.add_argument("--epochs", type=_count(1),
                   help="MLP training epochs (default: 5 on FashionMNIST, 60 on the "
                   "digits)")
    g.add_argument("--seed", type=int, default=0, help="weights and token ids (default 0)")


def _accelerator_options(p: argparse.ArgumentParser, *, many: bool, default: str = "") -> None:
    presets = ", ".join(sorted(PRESETS))
    g = p.add_argument_group("accelerator")
    if many:
        g.add_argument("--accelerator", dest="accelerator",
                       type=_accelerators(many=True), metavar="LIST",
                       help=f"comma-separated presets, design files (.json/.yaml, see "
                       f"`presets --show`) or all (default: {default}; the model runs "
                       "once and each accelerator is charged from its ledger); "
                       f"available: {presets}")
    else:
        _accelerator_option(g, default=None)  # None: --tenet-p/-m may replace the preset
    g.add_argument("--tenet-p", metavar="FILE",
                   help="custom accelerator: TENET .p file (PE array, interconnect, memory)")
    g.add_argument("--tenet-m", metavar="FILE",
                   help="custom accelerator: TENET .m file (space and time maps of a GEMM)")
    _mapping_option(g, "a TENET .m dataflow stays, only its tiles are searched")
    g.add_argument("--objective", choices=MAPPING_OBJECTIVES,
                   help="what --mapping auto minimises (default: latency)")


def _add_estimate(sub) -> None:
    p = sub.add_parser(
        "estimate", help="a model's cost from its shapes alone (no weights, nothing run)",
        description="Charge every GEMM of a prefill and of each decode step to the cost "
        "model from the model's config alone: TTFT, TPOT, tokens/s, energy per token, MACs "
        "and DRAM bytes per phase and scheme. Optionally sweep a decode step over context "
        "lengths and batch sizes.")
    _llm_options(p, "gpt2")
    p.add_argument("--prompt-len", type=_count(0), default=128, metavar="P",
                   help="prefill tokens (default 128; 0: no prefill)")
    p.add_argument("--context-len", type=_count(0), metavar="L",
                   help="tokens in the KV cache at the first decode step (default: P)")
    p.add_argument("--decode-steps", type=_count(0), default=1, metavar="S",
                   help="decode steps; step i attends to L + i + 1 keys (default 1)")
    p.add_argument("--batch", type=_count(1), default=1, metavar="B",
                   help="sequences run together (default 1)")
    p.add_argument("--node-nm", type=_quantity("nm"), default=45.0, metavar="NM",
                   help="process node of the accelerator's area, whose static power (area x "
                   "0.085 W/mm2, as dse charges it) is added to the energy over each phase's "
                   "time (default 45, the area table's node)")
    p.add_argument("--sweep-contexts", type=_counts, metavar="LIST",
                   help="also sweep one decode step over these context lengths, e.g. "
                   "128,512,2048")
    p.add_argument("--sweep-batches", type=_counts, metavar="LIST",
                   help="also sweep one decode step (at context L) over these batch sizes")
    _out_options(p, "write estimate.csv (per phase), layers_<scheme>.csv (per phase and "
                 "layer, summed over calls) and, with sweeps, sweep_context.csv, "
                 "sweep_batch.csv, estimate_sweep.png")
    p.add_argument("--ledger", action="store_true",
                   help="with --out, also write ledger_<scheme>.csv: every call, one row each "
                   "(about 200 bytes a call: 54 MB per scheme for llama-3-70b with a 2048-token "
                   "prompt and 128 decode steps)")
    _system_options(p, micro_batches=True)
    p.add_argument("--serve", metavar="REQUESTS",
                   help="serving figures of a request mix instead of one prefill and its "
                   "decode steps: prompt:output pairs (e.g. 128:64,512:32) or a .csv "
                   "(columns prompt_len, output_len) or .json file of them. Static batching: "
                   "requests in order, --batch at a time, each batch prefilled (padded to its "
                   "longest prompt) then decoded to its longest output; throughput, TTFT and "
                   "TPOT per batch size")
    p.add_argument("--serve-batches", type=_counts, metavar="LIST",
                   help="with --serve, the batch sizes to compare (default: powers of two up "
                   "to the number of requests, and --batch)")
    p.add_argument("--ttft-ms", type=_milliseconds, metavar="MS",
                   help="with --serve, the TTFT target: report the largest batch whose every "
                   "request meets it (and --tpot-ms)")
    p.add_argument("--tpot-ms", type=_milliseconds, metavar="MS",
                   help="with --serve, the TPOT target (mean decode step of each request)")


def _add_dse(sub) -> None:
    p = sub.add_parser(
        "dse", help="explore accelerator designs: cost, area and Pareto fronts per scheme",
        description="Estimate every point of a design space (array, dataflow, PE formats, "
        "buffer, DRAM bandwidth, clock) under each scheme: TTFT, TPOT, tokens/s, energy per "
        "token, area and power, with the Pareto fronts against area marked. Results are "
        f"appended to DIR/{DSE_RESULTS_FILE} as they finish: run the same command again to "
        "resume. With --checkpoint and --text, each scheme's perplexity and top-1 agreement "
        "join its points.")
    _llm_options(p, "llama-3-8b", chip=False)
    p.add_argument("--space", required=True, metavar="FILE",
                   help="YAML or JSON: lists per field ("
                   f"{', '.join(a.space for a in DSE_AXES.values())}) and node_nm, "
                   "area_budget_mm2, power_budget_w, area_table")
    _out_options(p, f"write {DSE_RESULTS_FILE} (appended; resumes), dse.csv and the front "
                 "plots", required=True)
    p.add_argument("--prompt-len", type=_count(0), default=512, metavar="P",
                   help="prefill tokens (default 512)")
    p.add_argument("--decode-steps", type=_count(0), default=16, metavar="S",
                   help="decode steps (default 16)")
    p.add_argument("--batch", type=_count(1), default=1, metavar="B", help="default 1")
    p.add_argument("--objective", default="tpot_ms", metavar="FIELD",
                   help="sort dse.csv and the printed fronts by this figure (default tpot_ms)")
    p.add_argument("--memory-gb", type=_rate, metavar="GB",
                   help="each chip's DRAM: a point whose model (weights at their stored "
                   "widths, KV cache, activations' peak per chip) does not fit is infeasible, "
                   "with the reason, and off the fronts (default: not checked)")
    p.add_argument("--executor", choices=DSE_EXECUTORS, default="local",
                   help="local process pool (default), this process, or Ray tasks "
                   "(pip install 'tenet-byoc[ray]')")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="with --executor ray: a running cluster (default: a local Ray)")
    p.add_argument("--workers", type=_count(1), metavar="N",
                   help="processes (local) or CPUs of a local Ray (default: every CPU)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="with --text: a local checkpoint whose per-scheme perplexity and top-1 "
                   "agreement join the points (the eval path, once per scheme)")
    p.add_argument("--text", metavar="FILE", help="with --checkpoint: a UTF-8 text file")
    p.add_argument("--other-model-accuracy", action="store_true",
                   help="accept a --checkpoint of another model than --model (its accuracy "
                   "only shows the wiring); refused otherwise")
    p.add_argument("--window", type=_count(2), metavar="N",
                   help="eval tokens per window (default: the model's context)")
    p.add_argument("--max-tokens", type=_count(2), metavar="N",
                   help="evaluate only the text's first N tokens")


def _share(text: str) -> float:
    value = _rate(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1], got {text!r}")
    return value


def _add_serve(sub) -> None:
    p = sub.add_parser(
        "serve", help="serving by iterations (continuous batching, paged KV cache): latency "
        "percentiles, throughput, goodput and the largest rate meeting p90 targets",
        description="Simulate an engine serving requests iteration by iteration: each "
        "iteration's sequences (decodes first, then prompt chunks up to a token budget: "
        "vLLM-style; or whole prompts: Orca-style) is charged by the cost model; the KV cache "
        "holds what the chip's memory leaves after the scheme's weights. Writes "
        "requests.csv, timeline.csv, summary.json and plots into --out. Static batching "
        "is `estimate --serve`.")
    _llm_options(p, "gpt2")
    g = p.add_argument_group("requests")
    g.add_argument("--rate", type=_rate, metavar="R", help="Poisson arrivals, requests/s")
    g.add_argument("--requests", type=_count(1), default=1000, metavar="N",
                   help="requests drawn with --rate (default 1000)")
    g.add_argument("--prompt-len", type=_count(1), metavar="P",
                   help="with --output-len: every request's prompt tokens")
    g.add_argument("--output-len", type=_count(1), metavar="O",
                   help="with --prompt-len: every request's output tokens")
    g.add_argument("--lengths", choices=["sharegpt"],
                   help="drawn lengths (the default without --prompt-len): sharegpt, "
                   "log-normal of means 161 / 338 tokens, sigma 1")
    g.add_argument("--trace", metavar="FILE",
                   help="a CSV of arrival_s,prompt_tokens,output_tokens[,prefix,"
                   "prefix_tokens] instead of --rate")
    g.add_argument("--seed", type=int, default=0, help="of the drawn arrivals and lengths")
    g = p.add_argument_group("targets (p90)")
    g.add_argument("--ttft-ms", type=_milliseconds, metavar="MS",
                   help="p90 time-to-first-token target; with a target the largest rate "
                   "meeting it is searched")
    g.add_argument("--tpot-ms", type=_milliseconds, metavar="MS",
                   help="p90 time-per-output-token target")
    g = p.add_argument_group("engine")
    g.add_argument("--policy", choices=["vllm", "orca"], default="vllm",
                   help="vllm: decodes first, prompts cut to the token budget (default); "
                   "orca: whole prompts")
    g.add_argument("--token-budget", type=_count(1), default=2048, metavar="T",
                   help="new tokens per iteration (default 2048)")
    g.add_argument("--max-seqs", type=_count(1), default=256, metavar="S",
                   help="sequences per iteration (default 256)")
    g.add_argument("--block-size", type=_count(1), default=16, metavar="B",
                   help="tokens per KV block (default 16)")
    g.add_argument("--memory-gb", type=_rate, metavar="GB",
                   help="each chip's memory (default: the data sheet's for a100, h100_sxm, "
                   "h200, tpu_v5e, tpu_v1; required for other accelerators)")
    g.add_argument("--memory-utilization", type=_share, default=0.9, metavar="F",
                   help="share of the memory the engine uses (default 0.9)")
    g = p.add_argument_group("several chips (a step costs its critical path over the "
                             "chips; a step in flight per pipeline stage)")
    _system_options(g)
    g.add_argument("--disaggregate", metavar="P:D",
                   help="disaggregated serving: prompts on P tensor-parallel chips, their KV "
                   "cache sent over the link, the other tokens on D others (e.g. 1:1); "
                   "excludes --tp / --pp / --chips")
    _out_options(p, "write requests.csv, timeline.csv, summary.json and plots here",
                 required=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``tenet-byoc`` parser with every command's options."""
    presets = sorted(PRESETS)
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

    p = sub.add_parser("sweep", help="schemes x accelerators: tables, CSV/JSON and plots",
                       description="Quantize, build and run each model under each scheme "
                       "once, and charge the run on each accelerator; GPT-2 as a prefill and "
                       "one decode step.")
    _model_options(p, sweep=True)
    p.add_argument("--schemes", type=_names("scheme", SCHEMES), metavar="LIST",
                   help=f"comma-separated schemes or all (default: the classic "
                   f"{len(CLASSIC_SCHEMES)}, {','.join(CLASSIC_SCHEMES)}; three with --quick); "
                   f"available: {', '.join(SCHEMES)}")
    _accelerator_options(p, many=True, default=f"{','.join(DEFAULT_ACCELERATORS)}; "
                      f"{','.join(QUICK_ACCELERATORS)} with --quick")
    p.add_argument("--quick", action="store_true",
                   help=f"prompt and context {QUICK_LENGTH}, schemes {','.join(QUICK_SCHEMES)}, "
                   f"accelerator {','.join(QUICK_ACCELERATORS)} (explicit options win)")
    _out_options(p, "write sweep.csv, sweep.json, layers.csv and PNG plots here")
    p.add_argument("--repeats", type=_count(1), default=1,
                   help="timed CPU runs per phase; the wall column is their median (default 1)")

    p = sub.add_parser("run", help="one model and scheme, run once, charged on one or more "
                       "accelerators: totals and per-layer costs")
    _model_options(p, sweep=False)
    _accelerator_options(p, many=True, default=DEFAULT_PRESET)
    _out_options(p, "write run.csv, run.json, layers.csv and a plot")
    p.add_argument("--repeats", type=_count(1), default=3,
                   help="timed CPU runs per phase; the wall column is their median (default 3)")

    p = sub.add_parser("profile", help="a vm.profile-style report of one call",
                       description="Time every VM call of one run and show each offloaded "
                       "call's accelerator cost beside it.")
    _model_options(p, sweep=False)
    _accelerator_options(p, many=False)
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
    p.add_argument("--schemes", type=_names("scheme", SCHEMES), metavar="LIST",
                   help="comma-separated schemes or all (default: the classic seven); "
                   "float32 (none) always runs first as the reference")
    _accelerator_option(p)
    p.add_argument("--window", type=_count(1), metavar="N",
                   help="tokens per window, at least 2 (default: the model's context)")
    p.add_argument("--max-tokens", type=_count(1), metavar="N",
                   help="evaluate only the text's first N tokens (default: all)")
    _out_options(p, "write eval.csv and eval.json here")

    p = sub.add_parser("presets", help="list accelerator presets and quantization schemes")
    p.add_argument("--show", type=_one("preset", presets), metavar="NAME",
                   help="print preset NAME in the accelerator's one form (a design file to "
                   "edit and pass as --accelerator FILE)")
    p.add_argument("--format", choices=["json", "yaml"], default="json",
                   help="with --show: JSON (default) or YAML")

    _add_estimate(sub)
    _add_dse(sub)
    _add_serve(sub)

    p = sub.add_parser("report", help="write DIR/report.html: one self-contained page of a run",
                       description="Read what sweep, run, estimate, eval or dse wrote into DIR "
                       "(CSV, JSON, manifest.json) and write DIR/report.html: the run's header, "
                       "sortable tables and interactive plots in one file that opens offline.")
    p.add_argument("dir", metavar="DIR", help="a folder a command wrote with --out")
    return parser
