"""Static power in ``estimate``: each phase's energy carries every chip's area x
``static_w_per_mm2`` over the phase's time, the figure dse charges a design (checked by hand,
against TPU v1's published idle power and against a dse point of the same accelerator)."""

from __future__ import annotations

import csv

import pytest

import tenet_byoc
from tenet_byoc import dse
from tenet_byoc.area import AreaTable, static_watts
from tenet_byoc.experiments.estimate_cmd import phase_figures
from tenet_byoc.accelerators import resolve

RUN = {"prompt_len": 16, "decode_steps": 3, "batch": 2}


def test_tpu_v1_static_power_is_its_measured_idle_power():
    # the paper's 28 W idle (ISCA 2017) for the 331 mm2 die at 28 nm; our area of its array,
    # buffers and interface at 28 nm is 7% larger than the die
    assert static_watts(resolve("tpu_v1"), 28) == pytest.approx(28.0, rel=0.1)
    assert static_watts(resolve("tpu_v1"), 28, AreaTable(static_w_per_mm2=0)) == 0


def test_phase_energy_adds_static_power_over_the_phase_time():
    ledger = tenet_byoc.estimate("gpt2", "per_token", "os16", **RUN)
    off = phase_figures(ledger, "per_token", RUN["prompt_len"], RUN["decode_steps"], 2)
    on = phase_figures(ledger, "per_token", RUN["prompt_len"], RUN["decode_steps"], 2, 3.0)
    for a, b, tokens in zip(off, on, (RUN["prompt_len"], 1), strict=True):
        # by hand: 3 W x the phase's ms (TTFT, or TPOT per step) = mJ, per token of a sequence
        static = 3.0 * a.latency_ms / (tokens * RUN["batch"])
        assert (a.static_mj_per_token, b.static_mj_per_token) == (0.0, pytest.approx(static))
        assert b.energy_per_token_mj == pytest.approx(a.energy_per_token_mj + static)
        assert b.latency_ms == a.latency_ms


def test_estimate_equals_dse_on_the_same_design():
    space = dse.DesignSpace.from_dict({"rows": [16], "cols": [16], "node_nm": 28})
    (point,) = space.all_points()
    (row,) = dse.explore("gpt2", ["none"], space, executor="serial", **RUN)
    ledger = tenet_byoc.estimate("gpt2", "none", point.accelerator(), **RUN)
    static_w = static_watts(point.accelerator(), 28)
    assert static_w == pytest.approx(row.area_mm2 * AreaTable().static_w_per_mm2, rel=1e-12)
    pre, dec = phase_figures(ledger, "none", RUN["prompt_len"], RUN["decode_steps"],
                             RUN["batch"], static_w)
    assert pre.energy_per_token_mj == pytest.approx(row.prefill_energy_per_token_mj, rel=1e-9)
    assert dec.energy_per_token_mj == pytest.approx(row.energy_per_token_mj, rel=1e-9)


def test_estimate_command_writes_the_static_part(tmp_path, capsys):
    from tenet_byoc_cli import main

    out = tmp_path / "est"
    assert main(["estimate", "--model", "gpt2", "--accelerator", "os16", "--prompt-len", "16",
                 "--decode-steps", "3", "--node-nm", "28", "--no-progress", "--out",
                 str(out)]) == 0
    assert "energy includes 0.386 W of static power" in capsys.readouterr().out
    rows = {r["phase"]: r for r in csv.DictReader((out / "estimate.csv").open())}
    w = static_watts(resolve("os16"), 28)
    assert w == pytest.approx(4.5415 * 0.085, rel=1e-3)  # 4.54 mm2 x 0.085 W/mm2
    assert float(rows["prefill"]["static_mj_per_token"]) == pytest.approx(
        w * float(rows["prefill"]["latency_ms"]) / 16, rel=1e-6)
    assert float(rows["decode"]["static_mj_per_token"]) == pytest.approx(
        w * float(rows["decode"]["latency_ms"]), rel=1e-6)
