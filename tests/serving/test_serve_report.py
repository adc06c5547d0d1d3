"""The report page of a ``serve --out`` folder: its figures and table against the run's files."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest


def _script(text: str, name: str) -> dict:
    return json.loads(re.search(rf'<script type="application/json" id="{name}">(.*?)</script>',
                                text, re.DOTALL).group(1))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tenet_byoc_cli import main

    out = tmp_path_factory.mktemp("serve")
    assert main(["serve", "--model", "gpt2", "--accelerator", "os16", "--schemes",
                 "none,w8a8_per_tensor", "--rate", "20", "--requests", "30", "--prompt-len",
                 "24", "--output-len", "5", "--memory-gb", "1", "--ttft-ms", "300",
                 "--out", str(out), "--no-progress", "--report"]) == 0
    return out


def test_page_figures_and_table_are_the_runs(served):
    text = (served / "report.html").read_text()
    figures, tables = _script(text, "figures"), _script(text, "tables")
    with open(served / "requests.csv", newline="") as f:
        requests = list(csv.DictReader(f))
    with open(served / "timeline.csv", newline="") as f:
        timeline = list(csv.DictReader(f))
    summary = json.loads((served / "summary.json").read_text())
    table = tables["serve-summary"]
    rows = {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert set(rows) == {"none", "w8a8_per_tensor"}
    for scheme in rows:
        mine = [r for r in requests if r["scheme"] == scheme]
        arrival, first, finish = (np.array([float(r[c]) for r in mine])
                                  for c in ("arrival_s", "first_token_s", "finish_s"))
        ttft = 1e3 * (first - arrival)
        load = len(mine) / (finish.max() - arrival.min())
        # The measured load and percentiles, from the request rows (9 digits in the CSV).
        for q in (50, 90, 99):
            assert rows[scheme][f"ttft_ms_p{q}"] == pytest.approx(np.percentile(ttft, q),
                                                                  rel=1e-6)
        assert rows[scheme]["requests_per_s"] == pytest.approx(load, rel=1e-6)
        traces = {t["name"]: t for t in figures["serve-ttft"]["data"]}
        assert traces[f"{scheme} p90"]["x"][0] == pytest.approx(load, rel=1e-6)
        assert traces[f"{scheme} p90"]["y"][0] == pytest.approx(np.percentile(ttft, 90),
                                                                rel=1e-6)
        tried = sorted(summary["schemes"][scheme]["rates_tried"], key=lambda t: t["rate"])
        assert traces[f"{scheme} p90 (rates tried)"]["x"] == pytest.approx(
            [t["rate"] for t in tried], rel=1e-6)
        steps = [r for r in timeline if r["scheme"] == scheme]
        batch = {t["name"]: t for t in figures["serve-sequences"]["data"]}[scheme]
        assert batch["y"] == [int(r["sequences"]) for r in steps]
        kv = {t["name"]: t for t in figures["serve-kv_use"]["data"]}[scheme]
        assert kv["y"] == pytest.approx([float(r["kv_use"]) for r in steps])
    assert figures["serve-ttft"]["layout"]["shapes"][0]["y0"] == 300


def test_timeline_without_its_summary_is_named(served, tmp_path):
    from tenet_byoc.experiments.report import build_report

    (tmp_path / "timeline.csv").write_bytes((served / "timeline.csv").read_bytes())
    with pytest.raises(FileNotFoundError, match="no summary.json"):
        build_report(tmp_path)
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected tenet-byoc serve's summary"):
        build_report(tmp_path)
