"""Plot axes: one unit per figure that fits its values, linear bars, log only over decades,
a bar per decoder block (hand-derived expectations)."""

from __future__ import annotations

import pytest

from tenet_byoc.experiments.plots import panel_unit


@pytest.mark.parametrize("metric,values,scale,label", [
    ("latency_us", [37.0, 27.5], 1.0, "est. latency (µs)"),      # the MLP: microseconds
    ("latency_us", [71_670.0, 9_300.0], 1e-3, "est. latency (ms)"),  # GPT-2: milliseconds
    ("latency_us", [999.0, 1000.0], 1e-3, "est. latency (ms)"),  # one value reaches 1 ms
    ("energy_pj", [145.3e6, 47.3e6], 1e-6, "est. energy (µJ)"),
    ("energy_pj", [480.68e9], 1e-9, "est. energy (mJ)"),
    ("latency_us", [37.0, 19_084.0], 1e-3, "est. latency (ms)"),  # MLP beside GPT-2: one unit
    ("dram_bytes", [5.07e8, 1.3e8], 1e-6, "DRAM (MB)"),
    ("macs", [5.0], 1.0, "MACs"),
])
def test_panel_unit(metric, values, scale, label):
    assert panel_unit(metric, values) == (scale, label)


# --- rules a reader relies on: linear bars, log only over decades, one unit, short numbers ---


def test_bars_never_get_a_log_axis():
    from tenet_byoc.experiments.report import _Figure, _layout

    # the report's prefill-vs-decode: 71.7 ms against 9.6 ms, a 7.5x ratio
    bars = [{"type": "bar", "x": ["none", "w8a8"], "y": [71_670.0, 9_560.0]}]
    fig = _Figure("f", bars, _layout("t", "scheme", "latency", ylog=True))
    assert fig.layout["yaxis"]["type"] == "-" and fig.layout["yaxis"]["rangemode"] == "tozero"


@pytest.mark.parametrize("ys,kept", [
    ([46.0, 51.0], False),           # serving's 46-51 tokens/s: no decades to show
    ([1.0, 7.5], False),
    ([0.5, 12.0, 480.0], True),      # 960x: two decades and more
])
def test_log_only_over_two_decades(ys, kept):
    from tenet_byoc.experiments.report import _Figure, _layout

    lines = [{"type": "scatter", "mode": "lines", "x": list(range(len(ys))), "y": ys}]
    fig = _Figure("f", lines, _layout("t", "x", "y", ylog=True))
    assert (fig.layout["yaxis"]["type"] == "log") is kept


def _points():
    from tenet_byoc.experiments.estimate_cmd import SweepPoint

    # Llama-3-70B-like figures: TPOT 600-1,800 ms (3x), energy 1-85 J per token
    return ([SweepPoint("none", c, 1, 1100.0 + c / 300, 0.9, 84_000.0, 2.8e11, 0.004)
             for c in (128, 512, 2048, 8000)],
            [SweepPoint("none", 2048, b, 1100.0 + 10 * b, 0.9 * b, 84_000.0 / b, 2.8e11 / b,
                        0.004 * b) for b in (1, 4, 16, 64)])


def test_sweep_figure_axes():
    from tenet_byoc.experiments.estimate_cmd import sweep_figure

    fig = sweep_figure(*_points(), "t")
    (tpot_c, tpot_b), (energy_c, energy_b) = fig.axes[0:2], fig.axes[2:4]
    # TPOT spans under 2x: linear from zero; energy per token over batch spans 64x: linear
    for ax in (tpot_c, tpot_b, energy_c, energy_b):
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    # the swept lengths and batches (62x, 64x) on log axes, ticked at the swept values
    assert tpot_c.get_xscale() == "log" and list(tpot_c.get_xticks()) == [128, 512, 2048, 8000]
    fig.draw_without_rendering()  # tick labels are made when drawn
    assert [t.get_text() for t in energy_c.get_xticklabels()] == ["128", "512", "2,048", "8,000"]
    # one unit: 84,000 mJ is shown as 84 J on both energy panels
    assert energy_c.get_ylabel() == energy_b.get_ylabel() == "energy / token (J)"
    assert max(energy_b.lines[0].get_ydata()) == pytest.approx(84.0)


@pytest.mark.parametrize("value,unit,digits,text", [
    (147_837_069_295_616, "", 4, "147.8 T"),   # Llama-3-70B prefill MACs
    (35_829_318_811_648, "B", 3, "35.8 TB"),
    (4.6000000000000005, "", 3, "4.6"),
    (1_048_576, "B", 3, "1.05 MB"),
    (512, "B", 3, "512 B"),
])
def test_si_numbers(value, unit, digits, text):
    from tenet_byoc.experiments.results import si

    assert si(value, unit, digits) == text


def test_page_bars_sum_each_decoder_block():
    from tenet_byoc.experiments.report import _block_bars

    # two blocks of two calls and a head, in µs; by hand: h.0 = 1,500, h.1 = 2,500, head 4,000
    rows = [{"layer": n, "latency_us": v, "energy_pj": 1e6, "dram_bytes": 10}
            for n, v in (("h.0.attn", 1000.0), ("h.0.mlp.add", 500.0), ("h.1.attn", 2000.0),
                         ("h.1.mlp", 500.0), ("lm_head", 4000.0))]
    fig = _block_bars("k", "t", {"none": rows}, "layer")
    (bars,) = fig.data
    assert bars["x"] == ["h.0", "h.1", "lm_head"]
    assert bars["y"] == pytest.approx([1.5, 2.5, 4.0])  # ms: the largest bar is 4,000 µs
    assert fig.layout["yaxis"]["title"]["text"] == "est. latency (ms)"
    assert [c[2] for c in bars["customdata"]] == [2, 2, 1]  # calls summed per bar
