"""Request traces for the serving simulator: arrival times with prompt and output lengths, drawn (Poisson) or read from a file.

A trace is a list of :class:`TraceRequest` in arrival order. :func:`poisson_trace` draws one
at a rate from a length distribution (:class:`FixedLengths`, :class:`LognormalLengths`;
:data:`SHAREGPT_LIKE`), seeded, so that the same seed at two rates gives the same requests
at scaled arrival times (the rate search compares like with like). :func:`read_trace` reads
a CSV file (``arrival_s,prompt_tokens,output_tokens`` and optionally ``prefix,
prefix_tokens``: requests naming the same prefix share its first ``prefix_tokens`` prompt
tokens, as the beams of one prompt do).

Thread safety: values are immutable; the functions keep no state. Errors: a bad value
raises ``ValueError`` naming the field (and, for a file, the file and line).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..documents import read_text

__all__ = ["SHAREGPT_LIKE", "FixedLengths", "LognormalLengths", "TraceRequest",
           "poisson_trace", "read_trace", "write_trace"]


def check_count(label: str, value: object, low: int = 1) -> None:
    """Refuse (``ValueError`` naming ``label``) a ``value`` that is not an integer >= ``low``
    (a bool is not one; numpy's are)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{label}={value!r} must be an integer >= {low}")


#: The latest arrival time a request may have, in seconds (31.7 years): up to it a double's
#: spacing is under 0.12 us, finer than any step the simulator times.
MAX_ARRIVAL_S = 1e9


@dataclass(frozen=True)
class TraceRequest:
    """One request: when it arrives, its prompt and output tokens (the first output token
    comes from the prompt's prefill), and the prompt prefix it shares with others, if any."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix: str | None = None  #: requests naming the same prefix share its tokens
    prefix_tokens: int = 0  #: the shared prompt tokens (<= prompt_tokens)

    def __post_init__(self) -> None:
        a = self.arrival_s
        if isinstance(a, bool) or not isinstance(a, int | float) or not math.isfinite(a) or a < 0:
            raise ValueError(f"TraceRequest.arrival_s={a!r} must be a finite number >= 0")
        if a > MAX_ARRIVAL_S:  # 1e308 + a 17 ms step is 1e308: every TTFT read 0
            raise ValueError(f"TraceRequest.arrival_s={a!r} is over {MAX_ARRIVAL_S:g} s: a "
                             f"double's spacing there is {math.ulp(float(a)):.3g} s, too coarse "
                             "for the steps it would time")
        object.__setattr__(self, "arrival_s", float(a))
        for name, low in (("prompt_tokens", 1), ("output_tokens", 1), ("prefix_tokens", 0)):
            check_count(f"TraceRequest.{name}", getattr(self, name), low)
        if (self.prefix is None) != (self.prefix_tokens == 0):
            raise ValueError(f"TraceRequest.prefix={self.prefix!r} with prefix_tokens="
                             f"{self.prefix_tokens}: a prefix is named exactly when it has "
                             "tokens")
        if self.prefix_tokens > self.prompt_tokens:
            raise ValueError(f"TraceRequest.prefix_tokens={self.prefix_tokens} exceeds "
                             f"prompt_tokens={self.prompt_tokens}")


@dataclass(frozen=True)
class FixedLengths:
    """Every request has ``prompt`` prompt tokens and ``output`` output tokens."""

    prompt: int
    output: int

    def __post_init__(self) -> None:
        check_count("FixedLengths.prompt", self.prompt)
        check_count("FixedLengths.output", self.output)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` prompt and output lengths."""
        return np.full(n, self.prompt, np.int64), np.full(n, self.output, np.int64)

    def describe(self) -> str:
        return f"prompt {self.prompt}, output {self.output} tokens"


@dataclass(frozen=True)
class LognormalLengths:
    """Prompt and output lengths drawn independently from log-normal distributions of the
    given means (before clipping) and log-space deviation ``sigma``, rounded, clipped to
    [1, ``max_prompt``] and [1, ``max_output``]."""

    prompt_mean: float
    output_mean: float
    sigma: float = 1.0
    max_prompt: int = 4096
    max_output: int = 2048

    def __post_init__(self) -> None:
        for name in ("prompt_mean", "output_mean", "sigma"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 \
                    or not math.isfinite(v):
                raise ValueError(f"LognormalLengths.{name}={v!r} must be a finite number > 0")
        check_count("LognormalLengths.max_prompt", self.max_prompt)
        check_count("LognormalLengths.max_output", self.max_output)

    def _draw(self, rng: np.random.Generator, n: int, mean: float, top: int) -> np.ndarray:
        mu = math.log(mean) - self.sigma ** 2 / 2  # E[exp(N(mu, s^2))] = exp(mu + s^2 / 2)
        return np.clip(np.rint(rng.lognormal(mu, self.sigma, n)), 1, top).astype(np.int64)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` prompt and output lengths."""
        return (self._draw(rng, n, self.prompt_mean, self.max_prompt),
                self._draw(rng, n, self.output_mean, self.max_output))

    def describe(self) -> str:
        return (f"log-normal prompt (mean {self.prompt_mean:g}) and output (mean "
                f"{self.output_mean:g}) tokens, sigma {self.sigma:g}, clipped to "
                f"{self.max_prompt} / {self.max_output}")


#: ShareGPT-like lengths: the means vLLM's paper (Kwon et al., SOSP 2023, Sec. 6.1) gives for
#: its ShareGPT trace, 161 prompt and 338 output tokens, each log-normal with sigma 1 (an
#: assumption: a long right tail), clipped to 4,096 / 2,048 tokens.
SHAREGPT_LIKE = LognormalLengths(161.0, 338.0, 1.0, 4096, 2048)


def poisson_trace(rate: float, requests: int, lengths: FixedLengths | LognormalLengths,
                  seed: int = 0) -> list[TraceRequest]:
    """``requests`` requests arriving as a Poisson process of ``rate`` per second.

    The gaps are unit exponentials of one seeded stream divided by ``rate`` and the lengths
    come from a second stream, so one seed at two rates gives the same requests at
    proportionally scaled times.

    Raises
    ------
    ValueError
        For a rate that is not a finite number > 0 or a count below 1.
    """
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0 \
            or not math.isfinite(rate):
        raise ValueError(f"rate={rate!r} must be a finite number of requests per second > 0")
    check_count("poisson_trace.requests", requests)
    gaps = np.random.default_rng([seed, 0]).standard_exponential(requests)
    arrivals = np.cumsum(gaps) / rate
    if arrivals[-1] > MAX_ARRIVAL_S:
        raise ValueError(f"rate={rate!r} requests per second spreads {requests} requests over "
                         f"{arrivals[-1]:.3g} s, past the latest arrival a trace may hold "
                         f"({MAX_ARRIVAL_S:g} s): give a higher rate")
    prompts, outputs = lengths.sample(np.random.default_rng([seed, 1]), requests)
    return [TraceRequest(float(a), int(p), int(o))
            for a, p, o in zip(arrivals, prompts, outputs, strict=True)]


_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
_OPTIONAL = ("prefix", "prefix_tokens")


def read_trace(path: str | os.PathLike[str]) -> list[TraceRequest]:
    """The requests of a CSV trace file, in arrival order.

    Columns ``arrival_s`` (seconds, non-decreasing), ``prompt_tokens``, ``output_tokens``
    (integers >= 1), optionally ``prefix`` (a name; empty for none) and ``prefix_tokens``.

    Raises
    ------
    ValueError
        Naming the file, the line and the field that is wrong, or the missing columns.
    """
    text = os.fspath(path)
    try:  # the guarded reader: size limit, FIFOs and directories, non-UTF-8 named
        body = read_text(text, "trace file")
    except FileNotFoundError:
        raise ValueError(f"trace file {text!r} does not exist") from None
    out: list[TraceRequest] = []
    with io.StringIO(body, newline="") as f:
        reader = csv.DictReader(f)
        names = [n.strip() for n in reader.fieldnames or ()]
        missing = [c for c in _COLUMNS if c not in names]
        if missing:
            raise ValueError(f"trace file {text!r} lacks the column(s) {', '.join(missing)}; "
                             f"it has {names}; expected {', '.join(_COLUMNS)} "
                             f"[, {', '.join(_OPTIONAL)}]")
        reader.fieldnames = names
        previous = 0.0
        for row in reader:
            where = f"trace file {text!r}, line {reader.line_num}"
            values: dict = {"prefix": (row.get("prefix") or "").strip() or None}
            for field, kind in (("arrival_s", float), ("prompt_tokens", int),
                                ("output_tokens", int), ("prefix_tokens", int)):
                raw = (row.get(field) or "").strip() or ("0" if field == "prefix_tokens" else "")
                try:
                    values[field] = kind(raw)
                except ValueError:
                    raise ValueError(f"{where}, field {field}: {raw!r} is not "
                                     f"{'a number' if kind is float else 'an integer'}") from None
            try:
                req = TraceRequest(**values)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            if req.arrival_s < previous:
                raise ValueError(f"{where}, field arrival_s: {req.arrival_s} is before the "
                                 f"previous request's {previous}; list requests in arrival "
                                 "order")
            previous = req.arrival_s
            out.append(req)
    if not out:
        raise ValueError(f"trace file {text!r} holds no request")
    return out


def write_trace(requests: Sequence[TraceRequest], path: str | os.PathLike[str]) -> Path:
    """Write ``requests`` as a CSV trace :func:`read_trace` reads back."""
    file = Path(path)
    with open(file, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(_COLUMNS + _OPTIONAL)
        for r in requests:
            w.writerow([repr(r.arrival_s), r.prompt_tokens, r.output_tokens, r.prefix or "",
                        r.prefix_tokens])
    return file
