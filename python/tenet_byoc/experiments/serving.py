"""Serving figures of a request mix under static batching, from estimate's step latencies.

The serving model (static batching, as the batched runners run a batch):

* requests are taken in the order given, ``batch`` at a time (the last batch may be
  smaller);
* a batch is prefilled at once, its prompts left-padded to its longest prompt ``P``: one
  prefill step of ``P`` tokens for each of its ``b`` sequences. The prefill gives every
  request its first output token;
* the batch then decodes until its longest output ``O`` is done: ``O - 1`` decode steps of
  ``b`` rows, step ``i`` attending to ``P + i + 1`` keys. A request whose output is shorter
  keeps its row to the end (static batching does not refill it);
* a batch's time is its prefill plus its decode steps; batches run one after another.

Figures: TTFT of a request = its batch's prefill (from the batch's start: no queueing is
modelled); TPOT = its batch's mean decode step (0 when the batch has no decode step);
throughput = the requests' own output tokens (not the padded rows) and the requests, over
the sum of the batches' times; energy per output token = the batches' charged energy plus
``static_w`` (:func:`tenet_byoc.area.static_watts`, every chip's) over the mix's time, as
``estimate`` and dse charge it. Step latencies are those of :func:`tenet_byoc.estimate` (on a
:class:`~tenet_byoc.system.System`, each step's critical path).

Errors: a bad request, file or batch raises ``ValueError`` naming it and what is accepted.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..documents import load_document, read_text

if TYPE_CHECKING:  # the ledger module imports TVM; `tenet-byoc --help` must not wait for it
    from ..ledger import Ledger

__all__ = ["Request", "ServingFigures", "largest_batch", "meets", "parse_requests",
           "phase_latency_us", "plot_serving", "serve", "serving_table"]

#: The largest request file read: a mix of a few hundred thousand requests.
MAX_REQUEST_FILE_BYTES = 16 << 20


def phase_latency_us(ledger: Ledger, phases: dict | None = None) -> dict[str, float]:
    """Each phase's latency in µs (``phases``: ``ledger.group_by("phase")`` if made): its
    calls composed by ``tenet_byoc.compose``'s rule (fused epilogues hidden behind their
    GEMM on a pipelined vector unit); on several chips its critical path, not the sum of
    every chip's work."""
    from ..system import SystemLedger

    return {phase: ledger.latency_s(phase) * 1e6 if isinstance(ledger, SystemLedger)
            else t.latency_us for phase, t in (phases or ledger.group_by("phase")).items()}


@dataclass(frozen=True)
class Request:
    """One request: prompt tokens and output tokens (the first comes from the prefill)."""

    prompt_len: int
    output_len: int

    def __post_init__(self) -> None:
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Request.{name}={value!r} must be an integer >= 1")


def _length(value: Any, name: str) -> int:
    """A token count as a file or the command line writes it: an integer, or its digits
    (never a fraction cut to an integer: [12.7, 3.9] is no 12:3 request)."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"{name} {value!r} is not a whole number of tokens") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not a whole number of tokens")
    return value


def _request(item: Any, where: str) -> Request:
    names = ("prompt_len", "output_len")
    pair = ([item.get(n) for n in names] if isinstance(item, dict)
            else item if isinstance(item, (list, tuple)) and len(item) == 2
            else item.split(":") if isinstance(item, str) and item.count(":") == 1 else None)
    if pair is None:
        raise ValueError(f"request {where} is {item!r}; expected PROMPT:OUTPUT, [prompt, "
                         "output] or {\"prompt_len\": P, \"output_len\": O}")
    try:
        if isinstance(item, dict) and not set(names) <= set(item):
            raise ValueError(f"lacks {sorted(set(names) - set(item))}")
        return Request(*(_length(v, name) for v, name in zip(pair, names)))
    except (TypeError, ValueError) as err:
        raise ValueError(f"request {where} ({item!r}): {err}") from None


def parse_requests(spec: str | os.PathLike[str]) -> list[Request]:
    """A request mix from inline text or a file.

    Parameters
    ----------
    spec : str or PathLike
        ``"128:64,512:32"`` (prompt:output pairs), or a ``.csv`` file with columns
        ``prompt_len`` and ``output_len``, or a ``.json`` file holding a list of
        ``{"prompt_len": P, "output_len": O}`` objects or ``[P, O]`` pairs.

    Raises
    ------
    ValueError
        Naming the file, row or item that is wrong, or for an empty mix.
    """
    text = os.fspath(spec)
    path = Path(text)
    if path.suffix.lower() in (".csv", ".json"):
        if not os.path.lexists(path):
            raise ValueError(f"request file {text!r} does not exist")
        if path.suffix.lower() == ".json":
            data = load_document(path, "request file", MAX_REQUEST_FILE_BYTES)
            if not isinstance(data, list):
                raise ValueError(f"request file {text!r} must hold a JSON list of requests")
            out = [_request(item, f"{i} of {text!r}") for i, item in enumerate(data)]
        else:
            rows = read_text(path, "request file", MAX_REQUEST_FILE_BYTES)
            reader = csv.DictReader(io.StringIO(rows, newline=""))
            try:
                if not {"prompt_len", "output_len"} <= set(reader.fieldnames or ()):
                    raise ValueError(f"request file {text!r} needs the columns prompt_len and "
                                     f"output_len; it has {reader.fieldnames}")
                out = [_request(row, f"on line {reader.line_num} of {text!r}")
                       for row in reader]
            except csv.Error as err:
                raise ValueError(f"request file {text!r} line {reader.line_num}: {err}"
                                 ) from None
    else:
        out = [_request(item.strip(), f"{i} of {text!r}")
               for i, item in enumerate(text.split(",")) if item.strip()]
    if not out:
        raise ValueError(f"the request mix {text!r} holds no request")
    return out


@dataclass(frozen=True)
class ServingFigures:
    """A request mix served at one batch size (see the module's serving model)."""

    scheme: str
    batch: int
    requests: int
    batches: int
    seconds: float  #: to serve the whole mix
    requests_per_s: float
    tokens_per_s: float  #: the requests' own output tokens per second
    ttft_ms_mean: float  #: over requests
    ttft_ms_max: float
    tpot_ms_mean: float  #: over requests with a decode step
    tpot_ms_max: float
    padded_share: float  #: of the rows' prompt and output tokens, the share that is padding
    energy_per_token_mj: float = 0.0  #: per output token, static energy included
    static_mj_per_token: float = 0.0  #: the static power's part of ``energy_per_token_mj``


def serve(model: Any, requests: Sequence[Request], batch: int, scheme: str = "none",
          accelerator: Any = "os16", mapping: str | None = None, system: Any = None,
          cache: dict | None = None, static_w: float = 0.0) -> ServingFigures:
    """Serve ``requests`` at ``batch``: throughput, TTFT, TPOT and energy per output token
    with ``static_w`` watts of static power over the mix's time (the module's model).

    ``cache`` (a dict) keeps each batch's estimated prefill and decode seconds and energy
    by (longest prompt, decode steps, rows) across calls.

    Raises
    ------
    ValueError
        For a batch below 1, or a batch whose longest prompt plus longest output outruns
        the model's context (naming its requests).
    """
    from ..estimate import estimate

    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r} must be an integer >= 1")
    if not requests:
        raise ValueError("requests is empty: nothing to serve")
    cache = {} if cache is None else cache
    total = energy_pj = 0.0
    ttft: list[float] = []  # per request
    tpot: list[float] = []  # per request of a batch with a decode step
    rows = tokens = 0  # the rows' padded prompt and output tokens; the requests' own output
    for first in range(0, len(requests), batch):
        group = requests[first:first + batch]
        p = max(r.prompt_len for r in group)
        steps = max(r.output_len for r in group) - 1
        key = (p, steps, len(group))
        if key not in cache:
            try:
                ledger = estimate(model, scheme, accelerator, prompt_len=p, decode_steps=steps,
                                  batch=len(group), mapping=mapping, system=system)
            except ValueError as err:
                raise ValueError(f"requests {first}..{first + len(group) - 1} at batch "
                                 f"{batch} (longest prompt {p}, longest output {steps + 1}): "
                                 f"{err}") from None
            phases = ledger.group_by("phase")
            us = phase_latency_us(ledger, phases)  # as estimate times a phase
            cache[key] = (us.get("prefill", 0.0) * 1e-6, us.get("decode", 0.0) * 1e-6,
                          sum(t.energy_pj for t in phases.values()))
        prefill_s, decode_s, pj = cache[key]
        total += prefill_s + decode_s
        energy_pj += pj
        ttft += [prefill_s] * len(group)
        tpot += [decode_s / steps] * len(group) if steps else []
        rows += len(group) * (p + steps + 1)
        tokens += sum(r.output_len for r in group)
    useful = sum(r.prompt_len + r.output_len for r in requests)
    static_mj = static_w * total * 1e3 / tokens  # W x s = J
    return ServingFigures(
        scheme, batch, len(requests), -(-len(requests) // batch), total, len(requests) / total,
        tokens / total, 1e3 * sum(ttft) / len(ttft), 1e3 * max(ttft),
        1e3 * sum(tpot) / len(tpot) if tpot else 0.0, 1e3 * max(tpot, default=0.0),
        1 - useful / rows, energy_pj / 1e9 / tokens + static_mj, static_mj,
    )


def meets(f: ServingFigures, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    """Whether every request's TTFT and TPOT are within the targets (None: no target)."""
    return ((ttft_ms is None or f.ttft_ms_max <= ttft_ms)
            and (tpot_ms is None or f.tpot_ms_max <= tpot_ms))


def largest_batch(figures: Sequence[ServingFigures], ttft_ms: float | None,
                  tpot_ms: float | None) -> ServingFigures | None:
    """The largest batch among ``figures`` whose every request meets the targets, or None.

    Every candidate is checked (TTFT and TPOT need not grow with the batch: the batches'
    longest prompts and outputs change with how the mix is cut).
    """
    ok = [f for f in figures if meets(f, ttft_ms, tpot_ms)]
    return max(ok, key=lambda f: f.batch, default=None)


_HEADER = ["scheme", "batch", "batches", "requests/s", "tokens/s", "TTFT mean / max (ms)",
           "TPOT mean / max (ms)", "energy/token (mJ)", "padding", "meets target"]


def serving_table(figures: Sequence[ServingFigures], ttft_ms: float | None = None,
                  tpot_ms: float | None = None) -> str:
    """A markdown table, one row per scheme and batch."""
    from .results import markdown_table

    targets = ttft_ms is not None or tpot_ms is not None
    return markdown_table(_HEADER, [
        [f.scheme, f.batch, f.batches, f"{f.requests_per_s:,.3f}", f"{f.tokens_per_s:,.1f}",
         f"{f.ttft_ms_mean:,.3f} / {f.ttft_ms_max:,.3f}",
         f"{f.tpot_ms_mean:,.3f} / {f.tpot_ms_max:,.3f}", f"{f.energy_per_token_mj:,.3f}",
         f"{100 * f.padded_share:.1f}%",
         ("yes" if meets(f, ttft_ms, tpot_ms) else "no") if targets else "-"]
        for f in figures
    ])


def plot_serving(figures: Sequence[ServingFigures], path: str | Path, title: str,
                 ttft_ms: float | None = None, tpot_ms: float | None = None) -> Path:
    """Throughput, worst TTFT and worst TPOT against the batch, a line per scheme, with the
    targets drawn; the largest batch meeting them is marked."""
    from matplotlib.figure import Figure

    from .plots import label_axes, save_figure

    fig = Figure(figsize=(12, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (metric, label, target) in zip(axes, (
            ("tokens_per_s", "output tokens/s", None),
            ("ttft_ms_max", "worst TTFT (ms)", ttft_ms),
            ("tpot_ms_max", "worst TPOT (ms)", tpot_ms)), strict=True):
        for scheme in dict.fromkeys(f.scheme for f in figures):
            mine = sorted((f for f in figures if f.scheme == scheme), key=lambda f: f.batch)
            ax.plot([f.batch for f in mine], [getattr(f, metric) for f in mine], marker="o",
                    label=scheme)
            best = largest_batch(mine, ttft_ms, tpot_ms)
            if best is not None and (ttft_ms is not None or tpot_ms is not None):
                ax.plot([best.batch], [getattr(best, metric)], marker="*", markersize=14,
                        color="black", linestyle="none")
        if target is not None:
            ax.axhline(target, color="red", linestyle="--", label="target")
        label_axes(ax, [f.batch for f in figures], [getattr(f, metric) for f in figures]
                   + ([target] if target is not None else []),
                   "batch (requests per static batch)", label, swept=True)
    axes[0].legend(title="scheme (* largest batch meeting the targets)")
    fig.suptitle(title)
    return save_figure(fig, path, dpi=110)
