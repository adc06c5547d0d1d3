"""dse: designs that cannot differ are not repeated (mapping "auto" searches the dataflow, so
an os and a ws point of one array are one design), and the default executor works from a
plain script with no ``if __name__ == "__main__":`` guard."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

import tenet_byoc
from tenet_byoc import dse
from tenet_byoc.experiments.estimate_cmd import phase_figures

RUN = {"prompt_len": 16, "decode_steps": 2, "batch": 1}


def test_auto_points_are_made_once_per_design():
    space = dse.DesignSpace(rows=(8, 16), cols=(16,), dataflows=("ws", "os", "is"),
                            mappings=("default", "auto"))
    points = space.all_points()
    # per array: three default points (one per dataflow) and one auto point, under "ws"
    assert [(p.rows, p.dataflow, p.mapping) for p in points] == [
        (r, d, m) for r in (8, 16) for d in ("ws", "os", "is") for m in ("default", "auto")
        if m == "default" or d == "ws"]
    assert len({p.key for p in points}) == len(points)


def test_the_dropped_dataflows_would_repeat_the_kept_point():
    # the reference: estimate of each dropped design's accelerator equals the kept row
    space = {"rows": [8], "cols": [16], "dataflows": ["os", "ws", "is"], "mappings": ["auto"],
             "node_nm": 28}
    rows = dse.explore("gpt2", ["per_token"], space, executor="serial", **RUN)
    assert len(rows) == 1 and rows[0].dataflow == "os"
    kept = rows[0]
    for dataflow in ("ws", "is"):
        point = dataclasses.replace(kept.point(), dataflow=dataflow)
        ledger = tenet_byoc.estimate("gpt2", "per_token", point.accelerator(), **RUN)
        pre, dec = phase_figures(ledger, "per_token", RUN["prompt_len"], RUN["decode_steps"],
                                 RUN["batch"])
        assert kept.ttft_ms == pytest.approx(pre.latency_ms, rel=1e-9)
        assert kept.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-9)
        assert kept.area_mm2 == pytest.approx(
            dse.DesignSpace.from_dict(space).area(point)["total"], rel=1e-12)


SPACE = {"rows": [8, 16], "cols": [16], "dataflows": ["os", "ws"], "node_nm": 28}
SCRIPT = f"""\
import json
from tenet_byoc import dse

print("script body ran", flush=True)
rows = dse.explore("gpt2", ["none", "per_token"], {SPACE!r}, prompt_len=16, decode_steps=2,
                   workers=2, chunk_size=1)
print(json.dumps([[r.name, r.scheme, r.ttft_ms, r.tpot_ms, r.area_mm2] for r in rows]))
"""


def test_a_plain_script_runs_the_default_executor(tmp_path):
    # multiprocessing's spawn ran such a script again in each worker: BrokenProcessPool
    script = tmp_path / "plain_script.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines.count("script body ran") == 1, out.stdout  # not re-run by a worker
    serial = dse.explore("gpt2", ["none", "per_token"], SPACE, prompt_len=16, decode_steps=2,
                         executor="serial")
    assert len(serial) == 8
    assert json.loads(lines[-1]) == [[r.name, r.scheme, r.ttft_ms, r.tpot_ms, r.area_mm2]
                                     for r in serial]
