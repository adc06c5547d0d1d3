"""dse with a DRAM capacity: points whose model does not fit a chip are infeasible, with the
reason, and off the fronts."""

from __future__ import annotations

import math

import pytest

from tenet_byoc import dse

SPACE = {"rows": [8, 16], "cols": [16], "tensor_parallel": [1, 2], "node_nm": 28}


def test_points_that_do_not_fit_are_infeasible_with_the_reason_and_off_the_fronts():
    # GPT-2 small holds 124.4 M parameters (embeddings tied to the head): 0.50 GB at
    # float32, half that per chip at TP = 2 (the table and the layers' GEMMs split); about
    # 0.23 GB under q4f16_1 (4-bit GEMM weights, the float32 table kept).
    params = 50257 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768
    assert params * 4 / 1e9 == pytest.approx(0.498, abs=1e-3)
    capacity = 0.3e9
    rows = dse.explore("gpt2", ["none", "q4f16_1"], SPACE, executor="serial", prompt_len=8,
                       decode_steps=1, dram_capacity_bytes=capacity)
    assert len(rows) == 2 * 2 * 2
    for r in rows:
        fits = r.scheme == "q4f16_1" or r.tensor_parallel == 2
        assert r.feasible is fits, r
        if not fits:
            assert r.reason.startswith("none does not fit: it needs 0.5 GB per chip")
            assert "more than its 0.3 GB of DRAM" in r.reason
            assert r.fronts == () and math.isnan(r.tpot_ms)
    assert all(r.fronts for r in rows if r.feasible and r.rows == 8)  # the least area
    # Without a capacity every point runs.
    free = dse.explore("gpt2", ["none"], SPACE, executor="serial", prompt_len=8,
                       decode_steps=1)
    assert all(r.feasible for r in free)


def test_a_bad_capacity_is_refused():
    with pytest.raises(ValueError, match="dram_capacity_bytes=-1 must be a positive"):
        dse.explore("gpt2", ["none"], SPACE, executor="serial", prompt_len=8, decode_steps=1,
                    dram_capacity_bytes=-1)


def test_the_command_line_reports_what_does_not_fit(tmp_path, capsys):
    from tenet_byoc_cli import main

    space = tmp_path / "space.yaml"
    space.write_text("rows: [8]\ncols: [16]\ntensor_parallel: [1, 2]\nnode_nm: 28\n")
    argv = ["dse", "--model", "gpt2", "--schemes", "none", "--space", str(space), "--out",
            str(tmp_path / "out"), "--prompt-len", "8", "--decode-steps", "1", "--executor",
            "serial", "--memory-gb", "0.3", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "- some points: none does not fit" in out
    rows = (tmp_path / "out" / "dse.csv").read_text().splitlines()
    assert sum("needs 0.5 GB per chip" in r for r in rows) == 1  # TP = 1 only


def test_a_mixture_of_experts_is_explored_and_its_fit_checked():
    # Mixtral 8x7B holds 46.70 B parameters (Mistral's announcement: 46.7 B): 186.8 GB at
    # float32, not on an 80 GB chip; under q4f16_1 (4-bit GEMM weights and their fp16
    # scales, the float32 embedding table) it fits and is charged.
    rows = dse.explore("mixtral-8x7b", ["none", "q4f16_1"], {"rows": [16], "cols": [16]},
                       executor="serial", prompt_len=8, decode_steps=1,
                       dram_capacity_bytes=80e9)
    none, q4 = rows
    assert not none.feasible and "needs 186.8 GB per chip" in none.reason
    assert q4.feasible and q4.tpot_ms > 0 and q4.fronts
