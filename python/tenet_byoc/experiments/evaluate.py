"""Perplexity of a local checkpoint on a local text file, per quantization scheme, offloaded.

The text is tokenized with the checkpoint's own ``tokenizer.json`` (the ``tokenizers``
package; nothing is downloaded) and cut into non-overlapping windows of ``window`` tokens
(the last, shorter window is kept if it holds at least two). Each window is one prefill
from an empty cache; the logits at positions ``0 .. n-2`` predict tokens ``1 .. n-1``, so
a window of n tokens contributes n - 1 predictions, exactly what Hugging Face's
``model(ids, labels=ids).loss`` averages over the same window. Perplexity is
``exp(sum of NLL / number of predictions)`` over all windows.

Every scheme runs the model offloaded to tenet (``from_pretrained`` with the scheme's
``quantize`` + ``build``), so the accelerator's ledger of the run is real; the float32 run
(scheme ``none``) is always made first, as the reference for the deltas and the top-1
agreement.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import write_json
from .results import markdown_table, save_files, write_csv

__all__ = [
    "EvalJob",
    "EvalResult",
    "PerplexityRow",
    "evaluate",
    "prepare_eval",
    "run_eval",
    "token_nll",
    "tokenize_text",
    "window_bounds",
]

TOKENIZER_FILE = "tokenizer.json"


# ----------------------------------------------------------------------------------------
# Input: tokenizer, text, windows
# ----------------------------------------------------------------------------------------


def _tokenizer(checkpoint: str | os.PathLike[str], vocab_size: int | None) -> Any:
    """The checkpoint's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, checked against the
    model's ``vocab_size``: a tokenizer with an id at or past it is from another model (its
    ids would index past the embedding) and refused. One with fewer tokens is normal (models
    pad their embedding, e.g. Qwen2.5: 151,665 tokens for ``vocab_size`` 151,936), but under
    half of ``vocab_size`` it is most likely another model's, so a warning says so."""
    from tokenizers import Tokenizer

    path = os.path.join(os.fspath(checkpoint), TOKENIZER_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path!r} not found: the evaluation tokenizes with the checkpoint's own "
            "tokenizer.json (the fast-tokenizer file Hugging Face saves beside the weights)"
        )
    try:
        tokenizer = Tokenizer.from_file(path)
    # tokenizers raises a bare Exception for any parse error (bad JSON, no model, ...).
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{path!r} is not a readable tokenizer.json: {err}") from None
    if vocab_size is None:
        return tokenizer
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    top = max(ids, default=-1)
    if top >= vocab_size:
        raise ValueError(
            f"{path!r} has token ids up to {top}, but the model's vocab_size is {vocab_size} "
            "(config.json): tokenizer and weights do not belong together"
        )
    if len(ids) < vocab_size // 2:
        warnings.warn(
            f"{path!r} has {len(ids)} tokens for a model with vocab_size {vocab_size} "
            "(config.json): is it the tokenizer of another model?",
            UserWarning,
            stacklevel=3,
        )
    return tokenizer


def tokenize_text(checkpoint: str | os.PathLike[str], text: str | os.PathLike[str],
                  max_tokens: int | None = None, vocab_size: int | None = None) -> np.ndarray:
    """Token ids (int64, at least two: one prediction) of a UTF-8 text file under the
    ``tokenizer.json`` of the ``checkpoint`` folder, the first ``max_tokens`` of them if given.
    The tokenizer is checked against the model's ``vocab_size`` first, if given.

    Special tokens are added as the tokenizer's post-processor defines them (e.g. a
    Llama tokenizer's BOS at the start), as ``tokenizer(text)`` does in transformers.

    Raises
    ------
    FileNotFoundError
        If the text file or ``tokenizer.json`` is missing (named).
    IsADirectoryError
        If ``text`` is a folder.
    ValueError
        If the text is not UTF-8, is empty or gives fewer than two tokens, or the tokenizer
        file is corrupt or does not fit ``vocab_size`` (each naming the file).
    """
    tokenizer = _tokenizer(checkpoint, vocab_size)
    path = os.fspath(text)
    if os.path.isdir(path):
        raise IsADirectoryError(f"text file {path!r} is a directory; --text takes a UTF-8 "
                                "text file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"text file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            content = f.read()
    except UnicodeDecodeError as err:
        raise ValueError(f"text file {path!r} is not UTF-8: {err}") from None
    if not content.strip():
        raise ValueError(f"text file {path!r} is empty: nothing to evaluate")
    ids = np.asarray(tokenizer.encode(content).ids, dtype=np.int64)
    if max_tokens is not None:
        ids = ids[:max_tokens]
    if ids.size < 2:
        raise ValueError(
            f"text file {path!r} gives {ids.size} token(s)"
            + (f" (max_tokens={max_tokens})" if max_tokens is not None else "")
            + "; perplexity needs at least 2 (one prediction)"
        )
    return ids


def window_bounds(tokens: int, window: int) -> list[tuple[int, int]]:
    """Non-overlapping windows ``[begin, end)`` of ``window`` tokens over ``tokens`` tokens.

    A last window shorter than ``window`` is kept if it has at least two tokens (one
    prediction); a single leftover token is dropped, since nothing in its window predicts it.
    """
    bounds = [(b, min(b + window, tokens)) for b in range(0, tokens, window)]
    return [(b, e) for b, e in bounds if e - b >= 2]


def token_nll(logits: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Negative log-likelihoods and argmaxes of a window's next-token predictions.

    From the prefill's ``[n, vocab]`` logits of the window's n token ``ids``: ``nll``, ``[n -
    1]`` float64, ``-log softmax(logits[t])[ids[t + 1]]``, and ``top1``, ``argmax(logits[t])``.
    """
    z = logits[:-1].astype(np.float64)
    peak = z.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(z - peak).sum(axis=-1)) + peak[:, 0]
    nll = log_norm - z[np.arange(len(z)), ids[1:]]
    return nll, np.argmax(z, axis=-1)


# ----------------------------------------------------------------------------------------
# The job
# ----------------------------------------------------------------------------------------


@dataclass
class EvalJob:
    """Checked inputs of an evaluation, and the float32 model built from them.

    Made by :func:`prepare_eval`; run by :func:`run_eval`.
    """

    checkpoint: str
    text: str
    ids: np.ndarray
    window: int
    schemes: list[str]
    accelerator: Any  #: a tenet_byoc.accelerators.Accelerator
    config: Any  #: the checkpoint's GPT2Config or LlamaConfig
    reference: Any = field(repr=False)  #: the float32 runner, offloaded
    reference_build_s: float = 0.0

    @property
    def bounds(self) -> list[tuple[int, int]]:
        return window_bounds(len(self.ids), self.window)


def _checked_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 2):
        raise ValueError(f"{name}={value!r} must be an integer >= 2")


def _runner(checkpoint: str, scheme: str, accelerator: Any) -> Any:
    """The checkpoint built with ``scheme`` offloaded to ``accelerator``."""
    from ..models import from_pretrained
    from ..partition import build
    from ..quantization import quantize

    return from_pretrained(
        checkpoint, bind_params=True,
        build=lambda mod: build(quantize(mod, scheme), accelerator=accelerator),
    )


def prepare_eval(checkpoint: str | os.PathLike[str], text: str | os.PathLike[str],
                 schemes: Sequence[str], accelerator: Any = "os16", *,
                 window: int | None = None, max_tokens: int | None = None) -> EvalJob:
    """Check every input, tokenize the text and build the float32 reference model.

    ``checkpoint`` is a local Hugging Face folder (``config.json``, safetensors weights,
    ``tokenizer.json``; a GPT-2 or Llama-family model, see
    :func:`tenet_byoc.models.from_pretrained`), ``text`` a UTF-8 text file, ``schemes``
    quantization scheme names or spec strings (:mod:`tenet_byoc.quantization`) and
    ``accelerator`` what the offloaded calls are charged to (a preset name or an
    Accelerator). ``window``: tokens per window, 2 .. the model's context (the context by
    default); ``max_tokens``: evaluate only the text's first ``max_tokens`` tokens.

    Raises
    ------
    FileNotFoundError, ValueError, KeyError
        Naming the problem: a missing folder, ``config.json``, weights, ``tokenizer.json``
        or text; a corrupt file; an empty or too short text; a token id the model's
        vocabulary does not have; a window longer than the context; an unknown scheme or
        accelerator.
    """
    from ..accelerators import resolve
    from ..plan import context_limit
    from ..models.checkpoint import read_folder_config
    from ..models.configs import config_from_dict
    from ..quantization import get_scheme

    folder = os.fspath(checkpoint)
    if os.path.isfile(folder):
        raise NotADirectoryError(f"checkpoint {folder!r} is a file; pass the folder that holds "
                                 "config.json, the weights and tokenizer.json")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"checkpoint folder {folder!r} does not exist")
    names = list(dict.fromkeys(schemes))
    if not names:
        raise ValueError("the evaluation needs at least one scheme")
    for s in names:
        get_scheme(s)
    acc = resolve(accelerator)
    _checked_count("window", window)
    _checked_count("max_tokens", max_tokens)
    config = read_folder_config(folder, config_from_dict)  # its errors name config.json
    context, _ = context_limit(config)
    if window is not None and window > context:
        raise ValueError(f"window={window} is longer than the model's context ({context} "
                         f"tokens, config.json of {folder!r})")
    ids = tokenize_text(folder, text, max_tokens, vocab_size=config.vocab_size)
    start = time.perf_counter()
    reference = _runner(folder, "none", acc)
    return EvalJob(folder, os.fspath(text), ids, window or context, names, acc, config,
                   reference, time.perf_counter() - start)


@dataclass(frozen=True)
class PerplexityRow:
    """One scheme's perplexity on the text and what the run cost on the accelerator."""

    scheme: str
    perplexity: float
    mean_nll: float  #: nats per predicted token
    delta_vs_float32: float  #: perplexity - the float32 run's
    top1_agreement: float  #: fraction of predictions whose argmax equals float32's
    predictions: int  #: tokens predicted (sum over windows of tokens - 1)
    windows: int
    calls: int  #: offloaded GEMM calls charged
    macs: int
    cycles: int
    latency_us: float  #: the accelerator's estimated latency of all windows' prefills
    energy_pj: float
    build_s: float  #: reading the checkpoint, quantize and build
    wall_s: float  #: CPU time of the windows' prefills on this machine


@dataclass
class EvalResult:
    """The rows of an evaluation (float32 first) and what was evaluated."""

    rows: list[PerplexityRow]
    notes: list[str]

    def table(self) -> str:
        """A markdown table: scheme, perplexity, delta, top-1, accelerator cost."""
        return markdown_table(
            ["scheme", "perplexity", "Δ vs float32", "top-1 vs float32", "predicted tokens",
             "est. latency (ms)", "est. energy (mJ)", "CPU (s)"],
            [[r.scheme, f"{r.perplexity:.4f}", f"{r.delta_vs_float32:+.4f}",
              f"{100 * r.top1_agreement:.2f}%", r.predictions, f"{r.latency_us / 1e3:,.3f}",
              f"{r.energy_pj / 1e9:,.4f}", f"{r.wall_s:.2f}"] for r in self.rows],
        )

    def save(self, out: str | Path) -> list[Path]:
        """Write ``eval.csv`` and ``eval.json`` into ``out`` (made if needed)."""
        return save_files(out, {
            "eval.csv": lambda p: write_csv([f.name for f in fields(PerplexityRow)], self.rows, p),
            "eval.json": lambda p: write_json({"notes": self.notes,
                                              "rows": [asdict(r) for r in self.rows]}, p)})


def run_eval(job: EvalJob, progress: bool = True) -> EvalResult:
    """Score every scheme of ``job`` on its windows; float32 first, as the reference.

    A progress bar (on stderr, ``tenet_byoc.progress``) counts windows over all schemes unless ``progress`` is False.
    """
    from ..ledger import ledger, totals
    from ..progress import progress_bar

    order = ["none"] + [s for s in job.schemes if s != "none"]
    bounds = job.bounds
    bar = progress_bar(total=len(order) * len(bounds), enabled=progress, unit="window",
                       dynamic_ncols=True)
    rows: list[PerplexityRow] = []
    ref_nll = ref_top1 = None
    try:
        for scheme in order:
            bar.set_description(f"{scheme} @ {job.accelerator.name}")
            start = time.perf_counter()
            runner = job.reference if scheme == "none" else _runner(
                job.checkpoint, scheme, job.accelerator)
            build_s = job.reference_build_s if scheme == "none" else (
                time.perf_counter() - start)
            # NLL and argmax of every prediction of every window, and the prefills' CPU time
            scored, wall = [], 0.0
            for begin, end in bounds:
                window = job.ids[begin:end]
                start = time.perf_counter()
                logits, _ = runner.prefill(window)
                wall += time.perf_counter() - start
                scored.append(token_nll(logits, window))
                bar.update()
            nll, top1 = (np.concatenate(part) for part in zip(*scored))
            if ref_nll is None:
                ref_nll, ref_top1 = nll, top1
            entries = ledger(runner.vm).entries
            t = totals(entries)  # every unit: the GEMMs and the vector work beside them
            mean = float(nll.mean())
            ppl = math.exp(mean)
            rows.append(PerplexityRow(
                scheme=scheme, perplexity=ppl, mean_nll=mean,
                delta_vs_float32=ppl - math.exp(float(ref_nll.mean())),
                top1_agreement=float(np.mean(top1 == ref_top1)), predictions=int(nll.size),
                windows=len(bounds), calls=sum(e.unit == "array" for e in entries), macs=t.macs, cycles=t.cycles,
                latency_us=t.latency_us, energy_pj=t.energy_pj, build_s=build_s, wall_s=wall,
            ))
            if scheme != "none":
                del runner
    finally:
        bar.close()
    kind = type(job.config).__name__.removesuffix("Config")
    notes = [
        (f"{kind} checkpoint {job.checkpoint!r} on {job.text!r}: {len(job.ids)} tokens "
         f"(its tokenizer.json), {len(bounds)} non-overlapping window(s) of up to "
         f"{job.window} tokens, {rows[0].predictions} predictions"),
        f"accelerator {job.accelerator.name}; latency and energy: all windows' prefills",
    ]
    return EvalResult(rows, notes)


def evaluate(checkpoint: str | os.PathLike[str], text: str | os.PathLike[str],
             schemes: Sequence[str], accelerator: Any = "os16", *, window: int | None = None,
             max_tokens: int | None = None, progress: bool = True) -> EvalResult:
    """Perplexity per scheme: :func:`prepare_eval` then :func:`run_eval`.

    Examples
    --------
    >>> res = evaluate("gpt2-folder", "wiki.txt", ["none", "w8a8_per_tensor"],
    ...                window=256, max_tokens=2048)  # doctest: +SKIP
    >>> print(res.table())  # doctest: +SKIP
    """
    job = prepare_eval(checkpoint, text, schemes, accelerator, window=window,
                       max_tokens=max_tokens)
    return run_eval(job, progress=progress)
