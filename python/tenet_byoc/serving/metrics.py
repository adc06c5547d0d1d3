"""Serving figures of a simulated run: TTFT, TPOT and end-to-end latency percentiles, throughput, goodput, batch size and KV use.

Definitions (per request): TTFT = first token - arrival; TPOT = (finish - first token) /
(output tokens - 1), for requests of more than one output token; end-to-end = finish -
arrival. Throughput counts output tokens and requests over the run's span, from the first
arrival to the last finish. Goodput counts the requests whose TTFT and TPOT both meet the
targets (a target left None is met), per second of the same span, and as a share.
Percentiles are numpy's (linear interpolation). Batch size and KV use are averaged over time
(each iteration weighted by its duration); their peaks are over iterations.

Thread safety: values are immutable. Errors: a target that is not a number > 0 raises
``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .simulator import ServingRun

__all__ = ["ServingMetrics", "request_latencies", "serving_metrics"]


def request_latencies(run: ServingRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TTFT, TPOT (NaN for one-token outputs) and end-to-end latency per request, seconds."""
    ttft = run.first_token_s - run.arrival_s
    e2e = run.finish_s - run.arrival_s
    steps = run.output_tokens - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (run.finish_s - run.first_token_s) / np.maximum(steps, 1),
                        np.nan)
    return ttft, tpot, e2e


@dataclass(frozen=True)
class ServingMetrics:
    """The figures of one run (milliseconds for latencies)."""

    requests: int
    seconds: float  #: first arrival to last finish
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    tpot_ms_p99: float
    e2e_ms_p50: float
    e2e_ms_p90: float
    e2e_ms_p99: float
    ttft_ms_mean: float
    tpot_ms_mean: float
    tokens_per_s: float  #: output tokens
    requests_per_s: float
    goodput_rps: float  #: requests meeting both targets, per second
    goodput_share: float  #: of the requests
    batch_mean: float  #: sequences per iteration, time-weighted
    batch_max: int
    kv_use_mean: float  #: share of the cache's blocks, time-weighted
    kv_use_max: float
    iterations: int
    preemptions: int


def _target(name: str, value: float | None) -> float:
    if value is None:
        return np.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a number of milliseconds > 0 (or None)")
    return float(value)


def serving_metrics(run: ServingRun, ttft_ms: float | None = None,
                    tpot_ms: float | None = None) -> ServingMetrics:
    """The figures of ``run`` (see the module), goodput at the targets given."""
    ttft_target, tpot_target = _target("ttft_ms", ttft_ms), _target("tpot_ms", tpot_ms)
    ttft, tpot, e2e = (1e3 * x for x in request_latencies(run))
    span = float(run.finish_s.max() - run.arrival_s.min())
    has_tpot = ~np.isnan(tpot)
    tpot_known = tpot[has_tpot] if has_tpot.any() else np.zeros(1)
    good = (ttft <= ttft_target) & (~has_tpot | (tpot <= tpot_target))
    weights = run.step_seconds
    busy = float(weights.sum())
    percentiles = [float(np.percentile(x, q)) for x in (ttft, tpot_known, e2e)
                   for q in (50, 90, 99)]
    return ServingMetrics(
        run.requests, span, *percentiles,
        float(ttft.mean()), float(tpot_known.mean()),
        float(run.output_tokens.sum()) / span, run.requests / span,
        float(good.sum()) / span, float(good.mean()),
        float((run.step_sequences * weights).sum() / busy) if busy else 0.0,
        int(run.step_sequences.max()),
        float((run.step_kv_blocks * weights).sum() / busy / run.kv_blocks) if busy else 0.0,
        float(run.step_kv_blocks.max() / run.kv_blocks),
        run.iterations, int(run.preemptions.sum()),
    )
