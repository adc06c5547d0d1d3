"""Plot axes: each panel's unit fits its values, log axes end on labelled decades, and
coincident schemes stay distinguishable (hand-derived expectations)."""

from __future__ import annotations

import pytest

from tenet_byoc.experiments.plots import decade_limits, panel_unit


@pytest.mark.parametrize("metric,values,scale,label", [
    ("latency_us", [37.0, 27.5], 1.0, "est. latency (us)"),      # the MLP: microseconds
    ("latency_us", [71_670.0, 9_300.0], 1e-3, "est. latency (ms)"),  # GPT-2: milliseconds
    ("latency_us", [999.0, 1000.0], 1e-3, "est. latency (ms)"),  # one value reaches 1 ms
    ("energy_pj", [145.3e6, 47.3e6], 1e-6, "est. energy (uJ)"),
    ("energy_pj", [480.68e9], 1e-9, "est. energy (mJ)"),
    ("macs", [5.0], 1.0, "MACs"),
])
def test_panel_unit(metric, values, scale, label):
    assert panel_unit(metric, values) == (scale, label)


@pytest.mark.parametrize("values,limits", [
    ([614.0, 1108.0, 1674.0], (100.0, 10_000.0)),
    ([0.99, 12.3, 84.3], (0.1, 100.0)),
    ([1.0, 100.0], (1.0, 100.0)),
    ([0.0, 5.0], (1.0, 10.0)),
])
def test_decade_limits_enclose_every_value(values, limits):
    low, high = decade_limits(values)
    assert (low, high) == pytest.approx(limits)
    assert all(low <= v <= high for v in values if v > 0)
