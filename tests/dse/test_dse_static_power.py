"""Static power in dse: every point's energy carries its area x ``static_w_per_mm2`` over its
run time (checked by hand against the same run with static power off), so a huge array at a
few watts of switching no longer sits on the energy front."""

from __future__ import annotations

import pytest

from tenet_byoc import dse
from tenet_byoc.area import SOURCES, AreaTable

RUN = {"prompt_len": 16, "decode_steps": 3, "batch": 2}
SPACE = {"rows": [8, 16], "cols": [16], "node_nm": 28}


def test_the_published_figure_is_tpu_v1_idle_power_over_its_die():
    assert AreaTable().static_w_per_mm2 == pytest.approx(28 / 331, abs=5e-4)
    assert "ISCA 2017" in SOURCES["static_w_per_mm2"]


def test_static_energy_is_area_times_power_times_time():
    off = dse.explore("gpt2", ["none"], {**SPACE, "area_table": AreaTable(static_w_per_mm2=0)},
                      executor="serial", **RUN)
    w_per_mm2 = 0.5
    on = dse.explore("gpt2", ["none"],
                     {**SPACE, "area_table": AreaTable(static_w_per_mm2=w_per_mm2)},
                     executor="serial", **RUN)
    for a, b in zip(off, on, strict=True):
        assert (a.ttft_ms, a.tpot_ms, a.area_mm2) == (b.ttft_ms, b.tpot_ms, b.area_mm2)
        static_w = a.area_mm2 * w_per_mm2
        # by hand: W x ms = mJ; a decode token is one of batch sequences' tokens of a step
        assert b.energy_per_token_mj - a.energy_per_token_mj == pytest.approx(
            static_w * a.tpot_ms / RUN["batch"], rel=1e-9)
        assert b.prefill_energy_per_token_mj - a.prefill_energy_per_token_mj == pytest.approx(
            static_w * a.ttft_ms / (RUN["prompt_len"] * RUN["batch"]), rel=1e-9)
        assert b.power_w - a.power_w == pytest.approx(static_w, rel=1e-9)


def test_larger_arrays_leave_the_energy_front():
    # 16x128 and 128x16 switch a little less energy per token than 16x16 (47.9 / 48.3 against
    # 48.4 mJ) at 4x its area: on the energy front without static power, off it with it
    # (0.085 W/mm2 x 10.5 mm2 more x ~16 ms / 2 sequences = ~7 mJ a token more)
    space = {"rows": [16, 128], "cols": [16, 128], "node_nm": 28}

    def front(table):
        rows = dse.explore("gpt2", ["none"], {**space, "area_table": table},
                           executor="serial", **RUN)
        return {(r.rows, r.cols) for r in rows if "energy_area" in r.fronts}

    assert front(AreaTable(static_w_per_mm2=0)) == {(16, 16), (16, 128), (128, 16)}
    assert front(AreaTable()) == {(16, 16)}
