"""The rate search against a latency curve whose answer is known."""

from __future__ import annotations

import dataclasses

import pytest

from tenet_byoc.serving.metrics import ServingMetrics
from tenet_byoc.serving.rate_search import max_rate

_BASE = ServingMetrics(*([0] * len(dataclasses.fields(ServingMetrics))))


def _curve(rate: float) -> ServingMetrics:
    # p90 TTFT grows as an M/M/1 wait would (capacity 8 req/s): 100 / (1 - rate / 8) ms,
    # which is 500 ms at rate 6.4; TPOT 10 ms + 5 ms per req/s: 50 ms at rate 8.
    ttft = 100 / (1 - rate / 8) if rate < 8 else float("inf")
    return dataclasses.replace(_BASE, ttft_ms_p90=ttft, tpot_ms_p90=10 + 5 * rate)


@pytest.mark.parametrize("start", [0.3, 6.0, 50.0])
def test_max_rate_finds_the_threshold(start):
    found = max_rate(_curve, 500, 50, start=start, rel_tol=0.02)
    assert 6.4 / 1.02 <= found.rate <= 6.4
    assert found.metrics.ttft_ms_p90 <= 500
    assert all(ok == (r < 6.4) for r, _, ok in found.tried if abs(r - 6.4) > 1e-9)


def test_tpot_alone_binds_and_none_is_reported():
    assert max_rate(_curve, None, 50, start=1.0).rate == pytest.approx(8.0, rel=0.02)
    never = max_rate(_curve, 50, None, start=1.0, lowest=0.01)
    assert never.rate is None and never.metrics is None
    with pytest.raises(ValueError, match="needs a target"):
        max_rate(_curve, None, None)


def test_a_rate_met_up_to_the_highest_stops_there():
    # Every rate meets the targets: doubling from 1 stops at the bound, 1, 2, 4, then 5.
    found = max_rate(lambda rate: _BASE, 500, 50, start=1.0, highest=5.0)
    assert [r for r, _, _ in found.tried] == [1.0, 2.0, 4.0, 5.0] and found.rate == 5.0
