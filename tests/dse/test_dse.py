"""Design-space exploration: each point equals ``estimate`` of its accelerator alone, the
marked fronts equal a brute-force Pareto filter, an interrupted run resumes, and the process
pool and Ray return the serial run's points."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

import tenet_byoc
from tenet_byoc import dse
from tenet_byoc.experiments.estimate_cmd import phase_figures

SCHEMES = ["none", "per_token", "q4f16_1"]
# (32 GB/s, 1 GHz) and (64 GB/s, 2 GHz) are both 256 bits a cycle: one charge cache.
SPACE = {"rows": [8, 16], "cols": [16], "dataflows": ["os", "ws"],
             "pe_formats": [["int8", "fp16", "fp32"], ["int4", "fp8_e4m3", "fp32"]],
             "buffer_bytes": [1 << 18, 1 << 20], "dram_gbps": [32, 64], "clock_ghz": [1, 2],
             "node_nm": 28}
RUN = {"prompt_len": 16, "decode_steps": 3, "batch": 2}


def rows_of(results):
    """Results as comparable text (NaN figures compare equal here, as they should)."""
    return [json.dumps(dataclasses.asdict(r)) for r in results]


@pytest.fixture(scope="module")
def serial():
    return dse.explore("gpt2", SCHEMES, SPACE, executor="serial", **RUN)


def test_every_point_and_scheme_is_there(serial):
    points = dse.DesignSpace.from_dict(SPACE).all_points()
    assert len(points) == 2 * 2 * 2 * 2 * 2 * 2
    assert [(r.key, r.scheme) for r in serial] == [(p.key, s) for p in points for s in SCHEMES]


@pytest.mark.parametrize("index", [0, 5, 21, 40, 63])
def test_a_point_equals_estimate_of_its_accelerator_alone(serial, index):
    point = dse.DesignSpace.from_dict(SPACE).all_points()[index]
    space = dse.DesignSpace.from_dict(SPACE)
    for r in (r for r in serial if r.key == point.key):
        acc = point.accelerator()
        if not r.feasible:
            assert "cannot run" in r.reason and math.isnan(r.tpot_ms)
            if "would run on the" not in r.reason:
                # the scheme needs a width no unit takes: estimate refuses it too
                with pytest.raises(ValueError):
                    tenet_byoc.estimate("gpt2", r.scheme, acc, **RUN)
            continue
        ledger = tenet_byoc.estimate("gpt2", r.scheme, acc, **RUN)
        assert {e.unit for e in ledger.entries} == {"array", "vector"}
        pre, dec = phase_figures(ledger, r.scheme, RUN["prompt_len"], RUN["decode_steps"],
                                 RUN["batch"])
        assert r.ttft_ms == pytest.approx(pre.latency_ms, rel=1e-9)
        assert r.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-9)
        assert r.tokens_per_s == pytest.approx(dec.tokens_per_s, rel=1e-9)
        # estimate's energy plus the static power (area x W/mm2) over each phase's time
        static_w = r.area_mm2 * space.table.static_w_per_mm2
        assert r.energy_per_token_mj == pytest.approx(
            dec.energy_per_token_mj + static_w * dec.latency_ms / RUN["batch"], rel=1e-9)
        assert r.prefill_energy_per_token_mj == pytest.approx(
            pre.energy_per_token_mj
            + static_w * pre.latency_ms / (RUN["prompt_len"] * RUN["batch"]), rel=1e-9)
        t = ledger.totals()
        assert r.power_w == pytest.approx(t.energy_pj / t.latency_us * 1e-6 + static_w,
                                          rel=1e-9)
        assert r.area_mm2 == pytest.approx(
            acc.area(28, formats=point.formats_by_width)["total"], rel=1e-12)
        assert r.area_mm2 == space.area(point)["total"]


def test_a_scheme_needs_a_unit_of_its_kind(serial):
    # int8 operands on a design whose 8-bit unit is fp8 (and the reverse) are refused: the
    # cost model charges by width alone, so they would be charged to the wrong PEs
    fp8 = [r for r in serial if r.pe_formats == "int4+fp8_e4m3+fp32"]
    by_scheme = {s: {r.feasible for r in fp8 if r.scheme == s} for s in SCHEMES}
    # q4f16_1's (16, 4) float-activation calls: no 16-bit unit, so the fp32 unit (a float
    # unit) takes them
    assert by_scheme == {"none": {True}, "per_token": {False}, "q4f16_1": {True}}
    assert all("per_token cannot run: its 8-bit int weight GEMMs would run on the fp8_e4m3 "
               "unit" in r.reason for r in fp8 if r.scheme == "per_token")
    assert dse._operands("q4f16_1") == (16, "float")
    assert dse._operands("e4m3_e4m3_f16") == (8, "float")
    point = dse.DesignPoint(8, 8, "os", ("int8", "fp16", "fp32"), 1 << 20, 32.0, 1.0)
    assert "would run on the int8 unit" in dse._format_mismatch(point, "e4m3_e4m3_f16",
                                                                 (8, "float"))


def _brute_force(values):
    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b, strict=True)) and any(
            x < y for x, y in zip(a, b, strict=True))
    return [not any(dominates(w, v) for w in values) for v in values]


def test_fronts_equal_a_brute_force_pareto_filter(serial):
    assert any(r.fronts for r in serial) and not all(r.fronts for r in serial)
    for scheme in SCHEMES:
        mine = [r for r in serial if r.scheme == scheme and r.feasible]
        for name, objectives in dse.OBJECTIVE_PAIRS.items():
            ref = _brute_force([[getattr(r, o) for o in objectives] for r in mine])
            assert [name in r.fronts for r in mine] == ref, (scheme, name)
    assert not any(r.fronts for r in serial if not r.feasible)


def test_pareto_front_on_ties_and_three_objectives():
    values = [(1, 5, 2), (2, 2, 2), (1, 5, 2), (3, 1, 9), (2, 3, 2), (0, 9, 9), (4, 4, 4)]
    assert dse.pareto_front(values) == _brute_force(values)
    grid = list(itertools.product(range(4), repeat=3))
    assert dse.pareto_front(grid) == _brute_force(grid)
    assert dse.pareto_front([(1, math.nan), (2, 2)]) == [False, True]


def test_an_interrupted_run_resumes(tmp_path, serial, monkeypatch):
    path = tmp_path / "points.jsonl"
    full = [dataclasses.replace(r, fronts=()) for r in serial]
    # The first 20 points finished, then a line was cut mid-write.
    lines = [json.dumps(dataclasses.asdict(r)) for r in full[: 20 * len(SCHEMES)]]
    path.write_text("\n".join(lines) + "\n" + lines[-1][:30])
    ran = []
    real = dse._evaluate
    monkeypatch.setattr(dse, "_evaluate", lambda job, pts: ran.extend(pts) or real(job, pts))
    rows = dse.explore("gpt2", SCHEMES, SPACE, executor="serial", results_file=path, **RUN)
    assert len(ran) == 64 - 20
    assert rows_of(rows) == rows_of(serial)
    # the file now holds every point; a third run charges nothing
    ran.clear()
    assert rows_of(dse.explore("gpt2", SCHEMES, SPACE, executor="serial", results_file=path,
                               **RUN)) == rows_of(serial)
    assert ran == []


def test_the_process_pool_returns_the_serial_points(serial):
    rows = dse.explore("gpt2", SCHEMES, SPACE, executor="local", workers=2, chunk_size=8,
                       **RUN)
    assert rows_of(rows) == rows_of(serial)


def test_ray_returns_the_local_points(serial):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tenet-byoc[ray]')")
    # explore starts a local Ray of 2 CPUs (no dashboard) and shuts it down after
    rows = dse.explore("gpt2", SCHEMES, SPACE, executor="ray", workers=2, chunk_size=8, **RUN)
    assert rows_of(rows) == rows_of(serial)
    assert not ray.is_initialized()


def test_importing_the_package_and_dse_does_not_import_ray():
    import subprocess
    import sys

    code = ("import sys, tenet_byoc, tenet_byoc.dse, tenet_byoc.experiments.dse_cmd; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_budgets(serial):
    budget = sorted({r.area_mm2 for r in serial})[3]
    rows = dse.explore("gpt2", SCHEMES, {**SPACE, "area_budget_mm2": budget},
                       executor="serial", **RUN)
    assert rows_of(rows) == rows_of(dse.mark_fronts([dataclasses.replace(r, fronts=())
                                                     for r in serial if r.area_mm2 <= budget]))
    watts = sorted(r.power_w for r in serial if r.feasible)[10]
    rows = dse.explore("gpt2", SCHEMES, {**SPACE, "power_budget_w": watts},
                       executor="serial", **RUN)
    over = [r for r in rows if "over the budget" in r.reason]
    assert over and all(r.power_w > watts and not r.feasible for r in over)
    assert all(r.power_w <= watts for r in rows if r.feasible)


def test_accuracy_joins_its_scheme_and_marks_a_three_way_front(serial):
    acc = {"none": {"perplexity": 10.0, "top1_agreement": 1.0},
           "per_token": {"perplexity": 10.5, "top1_agreement": 0.9},
           "q4f16_1": {"perplexity": 11.0, "top1_agreement": 0.8}}
    rows = dse.explore("gpt2", SCHEMES, SPACE, executor="serial", accuracy=acc, **RUN)
    assert all(r.perplexity == acc[r.scheme]["perplexity"] for r in rows)
    feas = [r for r in rows if r.feasible]
    ref = _brute_force([[getattr(r, o) for o in dse.ACCURACY_FRONT] for r in feas])
    assert ["accuracy" in r.fronts for r in feas] == ref


@pytest.mark.parametrize(("space", "message"), [
    ({"rows": [0]}, "rows: value 0 must be a positive integer"),
    ({"dataflows": ["os", "rs"]}, "'rs' is not a dataflow"),
    ({"pe_formats": [["int8", "fp8_e4m3"]]}, "two formats of one width"),
    ({"pe_formats": [["int3"]]}, "unknown PE format 'int3'"),
    ({"colums": [4]}, "unknown field 'colums'.*did you mean 'cols'"),
    ({"node_nm": 2}, "node_nm=2.0 is outside"),
    ({"buffer_bytes": []}, "buffer_bytes is empty"),
])
def test_a_bad_space_names_the_field(space, message):
    with pytest.raises(ValueError, match=message):
        dse.explore("gpt2", ["none"], space, executor="serial", **RUN)


def test_a_space_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("rows: [8, 16]\ncols: 16\npe_formats: [int8, fp16, fp32]\nnode_nm: 28\n")
    space = dse.DesignSpace.from_file(path)
    assert [(p.rows, p.cols, p.pe_formats) for p in space.all_points()] == [
        (8, 16, ("int8", "fp16", "fp32")), (16, 16, ("int8", "fp16", "fp32"))]
    path.write_text("rows: [8, x]\n")
    with pytest.raises(ValueError, match=r"space.yaml.*rows: value 'x'"):
        dse.DesignSpace.from_file(path)


def test_a_searched_mapping_point_equals_estimate_with_mapping_auto():
    space = {"rows": [8], "cols": [16], "mappings": ["default", "auto"], "node_nm": 28}
    rows = dse.explore("gpt2", ["per_token"], space, executor="serial", **RUN)
    default, auto = rows
    assert (default.mapping, auto.mapping) == ("default", "auto")
    acc = auto.point().accelerator()
    assert acc.mapping == "auto" and acc.objective == "latency"
    ledger = tenet_byoc.estimate("gpt2", "per_token", acc, **RUN)
    pre, dec = phase_figures(ledger, "per_token", RUN["prompt_len"], RUN["decode_steps"],
                             RUN["batch"])
    assert auto.ttft_ms == pytest.approx(pre.latency_ms, rel=1e-9)
    assert auto.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-9)
    assert auto.ttft_ms <= default.ttft_ms  # the search minimises latency per call
    with pytest.raises(ValueError, match="mappings: value 'best' is not a mapping"):
        dse.DesignSpace(mappings=["best"])


# Vector lanes and several chips: a point of a System equals estimate(..., system=...) of
# that system alone, its area the chips' sum; a point at the defaults keeps its old key.
SYSTEMS = {"rows": [8], "cols": [16], "pe_formats": [["int8", "fp16", "fp32"]],
           "vector_lanes": [16, 64], "tensor_parallel": [1, 2], "pipeline_parallel": [1, 2],
           "link_gbps": [50], "node_nm": 28}


def test_vector_lanes_and_chips_equal_estimate_of_that_system_alone():
    from tenet_byoc.system import Link, System

    rows = dse.explore("gpt2", ["none", "per_token"], SYSTEMS, executor="serial", **RUN)
    assert len(rows) == 2 * 2 * 2 * 2
    space = dse.DesignSpace.from_dict(SYSTEMS)
    for r in rows:
        assert r.feasible, r.reason
        p = r.point()
        acc = p.accelerator()
        assert acc.vector.lanes == r.vector_lanes
        chips = r.tensor_parallel * r.pipeline_parallel
        if chips == 1:
            # one chip: every entry of estimate, the vector unit's too
            ledger = tenet_byoc.estimate("gpt2", r.scheme, acc, **RUN)
        else:
            system = System(acc, chips=chips, tensor_parallel=r.tensor_parallel,
                            pipeline_parallel=r.pipeline_parallel,
                            link=Link(bandwidth_gbps=50.0))
            ledger = tenet_byoc.estimate("gpt2", r.scheme, system=system, **RUN)
        pre, dec = phase_figures(ledger, r.scheme, RUN["prompt_len"], RUN["decode_steps"],
                                 RUN["batch"])
        assert r.ttft_ms == pytest.approx(pre.latency_ms, rel=1e-12)
        assert r.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-12)
        static_w = r.area_mm2 * space.table.static_w_per_mm2  # all chips' area
        assert r.energy_per_token_mj == pytest.approx(
            dec.energy_per_token_mj + static_w * dec.latency_ms / RUN["batch"], rel=1e-12)
        one_chip = acc.area(28, formats=p.formats_by_width)["total"]
        assert r.area_mm2 == pytest.approx(chips * one_chip, rel=1e-12)
        assert r.area_mm2 == space.area(p)["total"]
    # the collectives cost time: two chips per layer on a 50 GB/s ring are not twice as fast
    one = {r.scheme: r for r in rows if r.tensor_parallel == r.pipeline_parallel == 1
           and r.vector_lanes == 16}
    two = {r.scheme: r for r in rows if (r.tensor_parallel, r.pipeline_parallel) == (2, 1)
           and r.vector_lanes == 16}
    assert all(two[s].tpot_ms > one[s].tpot_ms / 2 for s in one)


# Micro-batches: a point splits its batch through the pipeline as System(micro_batches=)
# does; on one chip the micro-batches run one after another.
MICRO = {"rows": [8], "cols": [16], "pe_formats": [["int8", "fp16", "fp32"]],
         "pipeline_parallel": [1, 2], "micro_batches": [1, 2], "link_gbps": [50], "node_nm": 28}


def test_micro_batches_equal_estimate_at_the_same_micro_batches():
    from tenet_byoc.system import Link, System

    rows = dse.explore("gpt2", ["none"], MICRO, executor="serial", **RUN)
    assert sorted((r.pipeline_parallel, r.micro_batches) for r in rows) == [
        (1, 1), (1, 2), (2, 1), (2, 2)]
    by = {}
    for r in rows:
        assert r.feasible, r.reason
        acc = r.point().accelerator()
        system = System(acc, chips=r.pipeline_parallel, pipeline_parallel=r.pipeline_parallel,
                        micro_batches=r.micro_batches, link=Link(bandwidth_gbps=50.0))
        ledger = tenet_byoc.estimate("gpt2", r.scheme, system=system, **RUN)
        pre, dec = phase_figures(ledger, r.scheme, RUN["prompt_len"], RUN["decode_steps"],
                                 RUN["batch"])
        assert r.ttft_ms == pytest.approx(pre.latency_ms, rel=1e-12)
        assert r.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-12)
        by[r.pipeline_parallel, r.micro_batches] = r
    # two micro-batches overlap on two stages, and only run one after another on one chip
    assert by[2, 2].ttft_ms < by[2, 1].ttft_ms
    assert by[1, 2].ttft_ms > by[1, 1].ttft_ms
    assert "mb2" in by[2, 2].name and "mb" not in by[2, 1].name
    # a batch the micro-batches do not divide is refused on that point, saying why
    (odd,) = dse.explore("gpt2", ["none"], {**MICRO, "pipeline_parallel": [2],
                                            "micro_batches": [3]}, executor="serial", **RUN)
    assert not odd.feasible and "micro_batches=3 must divide batch" in odd.reason


def test_vector_lanes_change_ttft_as_estimate_says():
    # one chip, two points that differ only in the vector unit's lanes: the norms, softmax,
    # residuals and epilogues run faster on 64 lanes, and by what estimate's ledgers say
    space = {"rows": [8], "cols": [16], "pe_formats": [["int8", "fp16", "fp32"]],
             "vector_lanes": [16, 64], "node_nm": 28}
    narrow, wide = dse.explore("gpt2", ["per_token"], space, executor="serial", **RUN)
    assert (narrow.vector_lanes, wide.vector_lanes) == (16, 64)
    assert dataclasses.replace(narrow.point(), vector_lanes=64) == wide.point()
    ttft = {}
    for r in (narrow, wide):
        ledger = tenet_byoc.estimate("gpt2", "per_token", r.point().accelerator(), **RUN)
        ttft[r.vector_lanes] = phase_figures(ledger, "per_token", RUN["prompt_len"],
                                             RUN["decode_steps"], RUN["batch"])[0].latency_ms
    assert ttft[64] < ttft[16]
    assert narrow.ttft_ms - wide.ttft_ms == pytest.approx(ttft[16] - ttft[64], rel=1e-9)
    assert (narrow.ttft_ms, wide.ttft_ms) == pytest.approx((ttft[16], ttft[64]), rel=1e-12)


def test_vector_lanes_have_an_area():
    # 1,024 lanes against 16 at 45 nm: 1,008 more fp32 adders (4184 um2) and multipliers
    # (7700 um2), and a buffer port of 1,024 x 64 bits against 16 x 64: 512 - 8 more banks of
    # 128 bits at 5000 um2 (the area table's figures)
    space = {"rows": [8], "cols": [16], "pe_formats": [["int8", "fp16", "fp32"]],
             "vector_lanes": [16, 1024]}
    narrow, wide = dse.explore("gpt2", ["none"], space, executor="serial", prompt_len=4,
                               decode_steps=1)
    by_hand = (1008 * (4184 + 7700) + (512 - 8) * 5000) / 1e6
    assert wide.area_mm2 - narrow.area_mm2 == pytest.approx(by_hand, rel=1e-9)


def test_tensor_parallel_that_does_not_divide_the_heads_is_refused_on_its_point():
    rows = dse.explore("gpt2", ["none"], {**SYSTEMS, "tensor_parallel": [5],
                                          "pipeline_parallel": [1], "vector_lanes": [16]},
                       executor="serial", **RUN)
    (r,) = rows
    assert not r.feasible and math.isnan(r.tpot_ms)
    assert r.reason.startswith("none cannot run:") and "5" in r.reason


def test_a_point_at_the_later_fields_defaults_keeps_its_first_key():
    import hashlib

    point = dse.DesignPoint(8, 16, "ws", ("int8", "fp32"), 1 << 20, 32.0, 1.0)
    first = {"rows": 8, "cols": 16, "dataflow": "ws", "pe_formats": ["int8", "fp32"],
             "buffer_bytes": 1 << 20, "dram_gbps": 32.0, "clock_ghz": 1.0,
             "register_bytes": 16, "mapping": "default"}
    text = json.dumps(first, sort_keys=True)
    assert point.key == hashlib.sha1(text.encode()).hexdigest()[:16]
    assert dataclasses.replace(point, tensor_parallel=2).key != point.key
    assert dataclasses.replace(point, vector_lanes=32).key != point.key


@pytest.mark.parametrize(("space", "message"), [
    ({"tensor_parallel": [0]}, "tensor_parallel: value 0 must be a positive integer"),
    ({"vector_lanes": [2.5]}, "vector_lanes: value 2.5 must be a positive integer"),
    ({"link_gbps": [-1]}, "link_gbps: value -1 must be a positive number"),
])
def test_a_bad_system_field_names_it(space, message):
    with pytest.raises(ValueError, match=message):
        dse.DesignSpace.from_dict(space)


def test_a_results_file_of_the_first_release_resumes(tmp_path, serial, monkeypatch):
    # rows written before vector_lanes and the system fields existed: same keys, read back
    path = tmp_path / "points.jsonl"
    later = ("vector_lanes", "tensor_parallel", "pipeline_parallel", "link_gbps",
             "micro_batches")
    old = [{k: v for k, v in dataclasses.asdict(dataclasses.replace(r, fronts=())).items()
            if k not in later} for r in serial]
    path.write_text("".join(json.dumps(row) + "\n" for row in old))
    ran = []
    real = dse._evaluate
    monkeypatch.setattr(dse, "_evaluate", lambda job, pts: ran.extend(pts) or real(job, pts))
    rows = dse.explore("gpt2", SCHEMES, SPACE, executor="serial", results_file=path, **RUN)
    assert ran == []
    assert rows_of(rows) == rows_of(serial)


def test_the_schema_drives_the_columns_the_space_and_the_charge_keys():
    # the results columns of the release before the schema was written once (hand-copied
    # from that release's PointResult), with micro_batches added since: files and CSVs
    # written then stay readable
    before = ("key name scheme rows cols dataflow pe_formats buffer_bytes dram_gbps clock_ghz "
              "register_bytes mapping vector_lanes tensor_parallel pipeline_parallel link_gbps "
              "micro_batches area_mm2 ttft_ms tpot_ms tokens_per_s energy_per_token_mj "
              "prefill_energy_per_token_mj power_w feasible reason perplexity top1_agreement "
              "fronts").split()
    assert [f.name for f in dataclasses.fields(dse.PointResult)] == before
    space_fields = [f.name for f in dataclasses.fields(dse.DesignSpace)]
    assert space_fields[:len(dse.AXES)] == [a.space for a in dse.AXES.values()]
    assert {"dataflows", "mappings"} <= set(space_fields)
    # the space's defaults are the point's: its one point is DesignPoint()
    assert dse.DesignSpace().all_points() == [dse.DesignPoint()]
    p = dse.DesignPoint(8, 16, "ws", ("int8", "fp32"), 1 << 20, 32.0, 1.0)
    # 32 GB/s at 1 GHz and 64 GB/s at 2 GHz are both 256 DRAM bits a cycle: same charges
    same_bits = dataclasses.replace(p, dram_gbps=64.0, clock_ghz=2.0)
    assert same_bits.charge_key() == p.charge_key() and same_bits.key != p.key
    assert dataclasses.replace(p, clock_ghz=2.0).charge_key() != p.charge_key()
    lanes = dataclasses.replace(p, vector_lanes=64)
    assert lanes.array_key() == p.array_key() and lanes.vector_key() != p.vector_key()
    rows = dataclasses.replace(p, rows=16, mapping="auto")
    assert rows.vector_key() == p.vector_key() and rows.array_key() != p.array_key()
    buffer = dataclasses.replace(p, buffer_bytes=1 << 18)
    assert buffer.vector_key() != p.vector_key() and buffer.array_key() != p.array_key()
    chips = dataclasses.replace(p, tensor_parallel=2, link_gbps=50.0)
    assert (chips.array_key(), chips.vector_key()) == (p.array_key(), p.vector_key())
    assert chips.charge_key() != p.charge_key()
    # a result's columns give its point back; the name as the first release wrote it
    r = dse._result(None, chips, 1.0, "none", {}, {}, "refused")
    assert r.pe_formats == "int8+fp32" and r.point() == chips
    assert chips.name == "ws8x16_int8+fp32_1024KiB_32GBps_1GHz_tp2_link50GBps"
