"""Report pages made from hostile result folders: nothing in a file runs as script on the page,
no name breaks its JSON, and a manifest field of the wrong type is refused by name."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tenet_byoc_cli import main
from tenet_byoc.experiments.report import (
    REPORT,
    _script_json,
    browser_check,
    build_report,
    chromium_path,
    write_report,
)
from tenet_byoc.experiments.results import LAYER_COLUMNS, MANIFEST

# If any of these ran, it would leave "INJECTED" among the errors the page's self-check
# records (its error capture is installed before anything else on the page).
RUN = "window.__tenetErrors.push('INJECTED')"
HOSTILE = [
    f'<img src=x onerror="{RUN}">',
    f"</script><script>{RUN}</script>",
    "os16 <!-- variant -->",
    f"<!--<script>{RUN}//",
    f"<svg onload=\"{RUN}\"></svg> & &amp; ]]> \u2028 \"quoted\" 'single'",
]
ACC = HOSTILE[2]  # the accelerator's name: the accelerator column of the CSVs, and the manifest's

SUMMARY_COLUMNS = ["model", "scheme", "accelerator", "phase", "tokens", "calls", "macs", "cycles",
                   "latency_us", "energy_pj", "dram_bytes"]


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)


def manifest(**acc) -> dict:
    return {
        "command": HOSTILE[0], "command_line": HOSTILE[1], "models": HOSTILE[:2],
        "schemes": HOSTILE[2:], "platform": HOSTILE[3], "date": HOSTILE[4],
        "cpu": {HOSTILE[0]: HOSTILE[1], "threads": 2}, "versions": {"x": HOSTILE[3]},
        "accelerators": [{"name": ACC, "num_pes": 256, "macs_per_pe_per_cycle": {"all": 1},
                          "dram_bytes_per_cycle": 32.0, "clock_ghz": 1.0,
                          "json": {HOSTILE[1]: HOSTILE[0]}, **acc}],
    }


def hostile_folder(folder: Path, **acc) -> Path:
    """A sweep's folder (manifest, summary and per-layer CSV) whose every name is hostile."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(json.dumps(manifest(**acc)))
    summary, layers = [], []
    for i, name in enumerate(HOSTILE):
        for phase in ("prefill", "decode"):
            summary.append({"model": HOSTILE[i - 1], "scheme": name, "accelerator": ACC,
                            "phase": phase, "tokens": 8, "calls": 2, "macs": 4096 * (i + 1),
                            "cycles": 100 + i, "latency_us": 0.1 + i, "energy_pj": 1e6,
                            "dram_bytes": 512})
            layers.append({c: 1 for c in LAYER_COLUMNS} | {
                "model": HOSTILE[0], "scheme": name, "accelerator": ACC, "phase": phase,
                "layer": HOSTILE[(i + 1) % len(HOSTILE)], "pattern": HOSTILE[1],
                "call_scheme": name, "mapping": HOSTILE[3], "macs": 4096, "dram_bytes": 512,
                "latency_us": 1.5, "energy_pj": 1e6, "cycles": 1500, "roofline_cycles": 1000})
    write_csv(folder / "sweep.csv", SUMMARY_COLUMNS, summary)
    write_csv(folder / "layers.csv", LAYER_COLUMNS, layers)
    return folder


def test_script_json_is_json_and_closes_nothing():
    for text in HOSTILE:
        out = _script_json({text: [text]})
        assert "<" not in out and ">" not in out and "&" not in out
        assert json.loads(out) == {text: [text]}


@pytest.mark.skipif(chromium_path() is None,
                    reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_a_page_from_hostile_names_runs_nothing_and_shows_them_as_text(tmp_path):
    folder = hostile_folder(tmp_path / "run")
    page = write_report(folder)
    check = browser_check(page, filter_by=("summary", "variant"), timeout=90)
    assert check.errors == []  # no INJECTED, and the JSON blocks parsed
    assert check.resources == []  # the <img src=x> was never made
    assert check.tables == {"summary": (2 * len(HOSTILE), "sweep.csv"),
                            "layers": (2 * len(HOSTILE), "layers.csv")}
    assert check.plots and all(points > 0 for _, _, points in check.plots.values())
    # The rows whose text holds "variant": those of the scheme, hardware or model spelt with
    # it, each cell showing the file's text exactly.
    shown = {tuple(r[:3]) for r in check.filtered_rows}
    want = {(HOSTILE[i - 1], s, ACC) for i, s in enumerate(HOSTILE)}
    assert shown == want


@pytest.mark.parametrize(("field", "value", "want"), [
    ("clock_ghz", f'<img src=x onerror="{RUN}">', "a positive finite number"),
    ("num_pes", "<script>1</script>", "a positive integer"),
    ("num_pes", 2.5, "a positive integer"),
    ("num_pes", True, "a positive integer"),
    ("dram_bytes_per_cycle", "<b>32</b>", "a positive finite number"),
    ("dram_bytes_per_cycle", float("nan"), "a positive finite number"),
    ("macs_per_pe_per_cycle", {"all": "<i>1</i>"}, "positive finite numbers"),
    ("name", ["os16"], "a string"),
])
def test_a_manifest_field_of_the_wrong_type_is_refused_by_name(tmp_path, capsys, field, value,
                                                                want):
    folder = hostile_folder(tmp_path / "run", **{field: value})
    with pytest.raises(ValueError, match=rf"manifest.json'.*accelerators\[0\]\.{field} .*{want}"):
        build_report(folder)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(folder)])
    assert exc.value.code == 2
    assert f"accelerators[0].{field}" in capsys.readouterr().err
    assert not (folder / REPORT).exists()


@pytest.mark.parametrize(("doc", "field"), [
    ({"command_line": ["tenet-byoc"]}, "command_line"),
    ({"models": "gpt2"}, "models"),
    ({"cpu": {"isa": {"nested": 1}}}, "cpu"),
    ({"accelerators": {"name": "os16"}}, "accelerators"),
    ({"accelerators": [{"name": "os16"}]}, "accelerators[0]"),
])
def test_other_manifest_fields_are_checked(tmp_path, doc, field):
    folder = hostile_folder(tmp_path / "run")
    (folder / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"manifest.json'.*{re.escape(field)}"):
        build_report(folder)


def test_a_hand_edited_csv_is_refused_naming_the_file_and_column(tmp_path):
    folder = hostile_folder(tmp_path / "run")
    rows = list(csv.DictReader(open(folder / "sweep.csv", newline="")))
    write_csv(folder / "sweep.csv", [c for c in SUMMARY_COLUMNS if c != "latency_us"], [
        {k: v for k, v in r.items() if k != "latency_us"} for r in rows])
    with pytest.raises(ValueError, match="'sweep.csv': no column 'latency_us'"):
        build_report(folder)
    folder = hostile_folder(tmp_path / "again")
    rows = list(csv.DictReader(open(folder / "layers.csv", newline="")))
    rows[0]["energy_pj"] = "lots"
    write_csv(folder / "layers.csv", LAYER_COLUMNS, rows)
    with pytest.raises(ValueError, match="'layers.csv': a value its section cannot use"):
        build_report(folder)
