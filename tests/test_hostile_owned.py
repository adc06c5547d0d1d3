"""Hostile values refused by the analysis layer's constructors and entries, each by name.

Each case was accepted before (a NaN budget, an infinite area, ``charged_on(None)`` charging
on the default preset); the checks are hand-derived: the field named in the message.
"""

from __future__ import annotations

import math

import pytest

from tenet_byoc.dse import DesignSpace
from tenet_byoc.accelerators import Accelerator
from tenet_byoc.ledger import Ledger


@pytest.mark.parametrize("field", ["area_budget_mm2", "power_budget_w"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0])
def test_design_space_refuses_non_finite_or_non_positive_budget(field, value):
    with pytest.raises(ValueError, match=field):
        DesignSpace(rows=[8], cols=[8], dataflows=["os"], **{field: value})
    ok = DesignSpace(rows=[8], cols=[8], dataflows=["os"], **{field: 2.5})
    assert getattr(ok, field) == 2.5


def test_area_refuses_overflowing_clock():
    with pytest.raises(ValueError, match="clock_ghz"):
        Accelerator.systolic("os", 16, 16, clock_ghz=1.7e308).area()
    assert math.isfinite(Accelerator.systolic("os", 16, 16, clock_ghz=1.7).area()["total"])


def test_charged_on_refuses_none():
    book = Ledger([], "os16", "os", 1.0, [])
    with pytest.raises(TypeError, match="None"):
        book.charged_on(None)
    assert len(book.charged_on("os16").entries) == 0


def test_system_unpickling_runs_the_checks():
    import pickle

    from tenet_byoc.accelerators import preset
    from tenet_byoc.system import Link, System

    good = System(preset("os16"), chips=2, tensor_parallel=2)
    assert pickle.loads(pickle.dumps(good)) == good
    data = pickle.dumps(good).replace(b"K\x02", b"K\x05", 1)  # chips: protocol 2+ BININT1 2 -> 5
    assert data != pickle.dumps(good)
    with pytest.raises(ValueError, match="System.chips=5"):
        pickle.loads(data)
    bad_link = Link()
    object.__setattr__(bad_link, "bandwidth_gbps", -5.0)
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        pickle.loads(pickle.dumps(bad_link))


def test_read_trace_uses_the_guarded_reader(tmp_path):
    import os

    from tenet_byoc.serving.requests import read_trace

    latin = tmp_path / "latin.csv"
    latin.write_bytes("arrival_s,prompt_tokens,output_tokens,prefix\n0,4,2,caf\xe9\n"
                      .encode("latin-1"))
    with pytest.raises(ValueError, match="latin.csv"):
        read_trace(latin)
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="fifo.csv"):  # refused, not a read that blocks
        read_trace(fifo)
    with pytest.raises(ValueError, match="does not exist"):
        read_trace(tmp_path / "none.csv")
    good = tmp_path / "good.csv"
    good.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,4,2\n", encoding="utf-8")
    (req,) = read_trace(good)
    assert (req.arrival_s, req.prompt_tokens, req.output_tokens) == (0.5, 4, 2)


@pytest.mark.parametrize("fields", [{"bandwidth_gbps": 1e-320}, {"latency_us": 1e308}])
def test_link_refuses_figures_whose_collective_time_overflows(fields):
    from tenet_byoc.system import Link, collective_seconds

    with pytest.raises(ValueError, match="Link.bandwidth_gbps=.*Link.latency_us="):
        Link(**fields)
    # the slowest figures still accepted give finite times: 1 MB/s, 1 s per hop
    slow = Link(bandwidth_gbps=1e-3, latency_us=1e6)
    assert collective_seconds("all_reduce", 2.0**30, 2, slow) == pytest.approx(
        2 * 1 / 2 * 2.0**30 / 1e6 + 2 * 1 * 1.0)


def test_explore_on_ray_refuses_an_address_nothing_answers_at():
    import socket

    from tenet_byoc import dse

    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tenet-byoc[ray]')")
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    space = {"rows": [8], "cols": [8], "dataflows": ["os"]}
    with pytest.raises(ValueError, match=f"127.0.0.1:{port}.*nothing answers"):
        dse.explore("gpt2", ["none"], space, executor="ray", ray_address=f"127.0.0.1:{port}",
                    prompt_len=8, decode_steps=1, batch=1)
    assert not ray.is_initialized()


def test_design_space_refuses_more_points_than_the_limit():
    from tenet_byoc.dse import MAX_DESIGN_POINTS

    rows = list(range(1, 1001))
    with pytest.raises(ValueError, match=r"2,000,000 points \(rows 1000, cols 1000, dataflows "
                                         r"2\), over the limit of 1,000,000"):
        DesignSpace(rows=rows, cols=rows, dataflows=["os", "ws"])
    assert MAX_DESIGN_POINTS == 1_000_000
    assert len(DesignSpace(rows=rows, cols=[8], dataflows=["os"]).all_points()) == 1000


def test_estimate_refuses_a_ledger_over_the_entry_limit(monkeypatch):
    import tenet_byoc
    import importlib

    est = importlib.import_module("tenet_byoc.estimate")
    from tenet_byoc.accelerators import preset
    from tenet_byoc.system import System

    system = System(preset("os16"), chips=2, pipeline_parallel=2, micro_batches=4)
    run = {"batch": 4, "prompt_len": 8, "decode_steps": 1, "system": system}
    n = len(tenet_byoc.estimate("gpt2", **run).entries)
    monkeypatch.setattr(est, "MAX_LEDGER_ENTRIES", n)
    assert len(tenet_byoc.estimate("gpt2", **run).entries) == n
    monkeypatch.setattr(est, "MAX_LEDGER_ENTRIES", n - 1)
    book = tenet_byoc.estimate("gpt2", **run)
    with pytest.raises(ValueError, match=f"{n:,} entries, over the limit of {n - 1:,}.*"
                                         "micro_batches=4"):
        book.entries  # noqa: B018 (the entries are listed on first use)


def test_results_file_rows_are_read_back_only_for_the_same_run(tmp_path, monkeypatch):
    from tenet_byoc import dse

    space = {"rows": [8], "cols": [8], "dataflows": ["os", "ws"]}
    first = {"prompt_len": 8, "decode_steps": 1, "batch": 1}
    other = {"prompt_len": 16, "decode_steps": 2, "batch": 2}
    path = tmp_path / "points.jsonl"

    def figures(rows):
        return [(r.key, r.scheme, r.ttft_ms, r.tpot_ms) for r in rows]

    dse.explore("gpt2", ["none"], space, executor="serial", results_file=path, **first)
    fresh = dse.explore("gpt2", ["none"], space, executor="serial", **other)
    again = dse.explore("gpt2", ["none"], space, executor="serial", results_file=path, **other)
    assert figures(again) == figures(fresh)  # not the first run's rows for the same points
    # a file whose rows are all repeated (two interrupted copies) resumes without running
    path.write_text(path.read_text() * 2)
    ran = []
    real = dse._evaluate
    monkeypatch.setattr(dse, "_evaluate", lambda job, pts: ran.extend(pts) or real(job, pts))
    assert figures(dse.explore("gpt2", ["none"], space, executor="serial", results_file=path,
                               **other)) == figures(fresh)
    assert ran == []
