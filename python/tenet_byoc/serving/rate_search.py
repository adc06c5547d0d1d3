"""The largest arrival rate a served model meets its latency targets at (p90 TTFT and TPOT), searched over rates.

The figures at a rate come from a caller's ``metrics_at(rate)`` (a simulation of the same
requests at arrival times scaled by the rate: :func:`~tenet_byoc.serving.requests.poisson_trace`
with one seed). From a first rate the search doubles (or halves) until the targets flip, then
bisects geometrically until the bracket is within ``rel_tol``. Latency grows with load, so the
bracket holds the answer; should a rate inside the bracket disagree with that (randomness of
a short trace), the answer is still a rate that was simulated and met the targets.

Thread safety: no state is kept. Errors: bad targets or tolerances raise ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .metrics import ServingMetrics

__all__ = ["RateSearch", "max_rate"]


@dataclass(frozen=True)
class RateSearch:
    """The search's answer and every rate it tried."""

    rate: float | None  #: the largest rate found meeting the targets (None: not even the lowest)
    metrics: ServingMetrics | None  #: the figures at ``rate``
    tried: tuple[tuple[float, ServingMetrics, bool], ...]  #: (rate, figures, met), in order


def max_rate(metrics_at: Callable[[float], ServingMetrics], ttft_ms: float | None,
             tpot_ms: float | None, start: float = 1.0, rel_tol: float = 0.02,
             lowest: float = 1e-3, highest: float = 1e6) -> RateSearch:
    """Search the largest rate in [``lowest``, ``highest``] whose figures meet the p90
    targets (see the module).

    Raises
    ------
    ValueError
        For no target, a bad tolerance or bounds.
    """
    if ttft_ms is None and tpot_ms is None:
        raise ValueError("max_rate needs a target: ttft_ms, tpot_ms or both")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol={rel_tol!r} must be in (0, 1)")
    if not 0 < lowest <= start <= highest:
        raise ValueError(f"need 0 < lowest <= start <= highest; got {lowest}, {start}, {highest}")
    tried: list[tuple[float, ServingMetrics, bool]] = []

    def run(rate: float) -> bool:
        m = metrics_at(rate)
        ok = ((ttft_ms is None or m.ttft_ms_p90 <= ttft_ms)
              and (tpot_ms is None or m.tpot_ms_p90 <= tpot_ms))
        tried.append((rate, m, ok))
        return ok

    # Double from a rate that meets the targets, halve from one that does not, until the
    # answer flips (or the bound is reached: every rate tried agrees), then bisect.
    rate = start
    first = run(rate)
    while rate != (highest if first else lowest):
        prev, rate = rate, min(2 * rate, highest) if first else max(rate / 2, lowest)
        if run(rate) != first:
            lo, hi = min(prev, rate), max(prev, rate)
            while hi / lo > 1 + rel_tol:
                mid = (lo * hi) ** 0.5
                lo, hi = (mid, hi) if run(mid) else (lo, mid)
            break
    rate, m = max(((r, m) for r, m, ok in tried if ok), key=lambda x: x[0],
                  default=(None, None))
    return RateSearch(rate, m, tuple(tried))
