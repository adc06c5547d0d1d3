"""The run report: pages of a small sweep and of an estimate, opened in headless Chromium
with the network blocked, checked against the CSV files they were made from."""

from __future__ import annotations

import csv
import html
import json
import re
import shlex
import shutil
from pathlib import Path

import plotly.offline
import pytest

import tenet_byoc
from tenet_byoc_cli import main
from tenet_byoc.experiments.report import (
    REPORT,
    SOURCES,
    browser_check,
    build_report,
    chromium_path,
    write_report,
)
from tenet_byoc.experiments.results import MANIFEST
from tenet_byoc.accelerators import resolve

needs_chromium = pytest.mark.skipif(
    chromium_path() is None,
    reason="no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it where "
    "it can)")

SWEEP_ARGV = ["sweep", "--model", "gpt2", "--gpt2-config", "tiny", "--schemes",
              "none,w8a8_per_tensor", "--accelerator", "os16", "--repeats", "1",
              "--no-progress", "--report"]
TINY_CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
               "vocab_size": 97, "n_positions": 256}


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    assert main([*SWEEP_ARGV, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def estimate_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("estimate")
    config = out / "config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    assert main(["estimate", "--model", str(config), "--schemes", "none,q4f16_1",
                 "--prompt-len", "16", "--decode-steps", "2", "--sweep-contexts", "16,64",
                 "--sweep-batches", "1,4", "--no-progress", "--out", str(out), "--report",
                 "--ledger"]) == 0
    return out


DSE_SPACE = ("rows: [8, 16]\ncols: [16]\ndataflows: [os, ws]\npe_formats: [[int8, fp16, fp32]]\n"
             "buffer_bytes: [262144, 1048576]\ndram_gbps: [32]\nnode_nm: 28\n")
DSE_FRONTS = (("tpot_area", "tpot_ms"), ("ttft_area", "ttft_ms"),
              ("energy_area", "energy_per_token_mj"))


@pytest.fixture(scope="module")
def dse_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dse")
    (root / "space.yaml").write_text(DSE_SPACE)
    out = root / "run"
    assert main(["dse", "--model", "gpt2", "--schemes", "none,per_token", "--prompt-len", "16",
                 "--decode-steps", "2", "--executor", "serial", "--no-progress", "--space",
                 str(root / "space.yaml"), "--out", str(out), "--report"]) == 0
    return out


def page_figures(text: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>',
                                text, re.DOTALL).group(1))


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point dominates (both figures minimised), by area."""
    return sorted(p for p in points if not any(
        q[0] <= p[0] and q[1] <= p[1] and q != p for q in points))


def fetched_urls(page: str) -> list[str]:
    """src/href attributes of elements a browser would fetch, outside plotly's bundle."""
    ours = page.replace(plotly.offline.get_plotlyjs(), "")
    return re.findall(r"<(?:script|link|img|iframe|source|embed|object|video|audio)\b[^>]*"
                      r"\b(?:src|href|data)\s*=\s*['\"]?([^'\" >]+)", ours, re.IGNORECASE)


def check_page(folder: Path, **actions) -> dict:
    """Open folder's report in Chromium (``actions``: browser_check's sort_by / filter_by);
    the checks common to every page."""
    page = folder / REPORT
    text = page.read_text()
    assert text.count(plotly.offline.get_plotlyjs()) == 1  # plotly.js inlined once
    assert fetched_urls(text) == []
    assert not re.search(r"<(script|link)[^>]*\bsrc\s*=", text.replace(
        plotly.offline.get_plotlyjs(), ""), re.IGNORECASE)
    check = browser_check(page, **actions)
    assert check.errors == []
    assert check.resources == []  # nothing fetched: no CDN, no server
    assert check.plots, "no plot drawn"
    for key, (width, height, points) in check.plots.items():
        assert width > 0 and height > 0, key
        assert points > 0, key
    for key, (rows, source) in check.tables.items():
        assert rows == len(csv_rows(folder / source)), (key, source)
    # opened (header and tables painted) before plotly.js ran, first screen before the rest
    assert 0 < check.open_ms <= check.plotly_ms <= check.first_ms <= check.ready_ms
    return {"check": check, "text": text}


def shown_as_csv(shown: list[list[str]], rows: list[dict[str, str]]) -> list[list[str]]:
    """The page's rows in the CSV's spelling: a number cell (the page gives its exact value)
    as the CSV's text when they are the same number (PE utilization: the page shows the
    CSV's fraction in percent)."""
    out = []
    for cells, row in zip(shown, rows):
        line = []
        for cell, (column, csv_text) in zip(cells, row.items()):
            try:
                want = float(csv_text) * (100 if column == "pe_utilization" else 1)
                same = cell != "" and float(cell) == pytest.approx(want, rel=1e-12)
            except ValueError:
                same = False
            line.append(csv_text if same else cell)
        out.append(line)
    return out


def test_manifest_records_the_run(sweep_dir):
    doc = json.loads((sweep_dir / MANIFEST).read_text())
    assert doc["command"] == "sweep"
    assert doc["command_line"] == shlex.join(["tenet-byoc", *SWEEP_ARGV, "--out",
                                              str(sweep_dir)])
    assert doc["models"] == ["gpt2"] and doc["schemes"] == ["none", "w8a8_per_tensor"]
    (acc,) = doc["accelerators"]
    os16 = resolve("os16")
    assert acc["json"] == json.loads(os16.to_json())
    assert acc["num_pes"] == 16 * 16 and acc["dram_bytes_per_cycle"] == 256 / 8
    assert doc["cpu"]["model"] == tenet_byoc.cpu_info().model
    assert doc["versions"]["tenet-byoc"] == tenet_byoc.__version__


def _block(name: str) -> str:
    """The decoder block of a call ("h.3.mlp.c_fc" -> "h.3"); other calls stand alone."""
    head, index, *rest = name.split(".") + [""]
    return f"{head}.{index}" if head in ("h", "layers") and index.isdigit() else name


@needs_chromium
def test_sweep_page_in_chromium(sweep_dir):
    got = check_page(sweep_dir, sort_by=("layers", "latency_us"),
                     filter_by=("layers", "W8A8 prefill"))
    check, text = got["check"], got["text"]
    assert {s for _, s in check.tables.values()} == {"sweep.csv", "layers.csv"}
    layers = csv_rows(sweep_dir / "layers.csv")
    for phase in ("prefill", "decode"):
        calls = [r for r in layers if r["phase"] == phase]
        # a bar per decoder block of every run, every call a roofline point
        assert check.plots[f"layers-gpt2-{phase}"][2] == len(
            {(r["scheme"], r["accelerator"], _block(r["layer"])) for r in calls})
        assert check.plots[f"roofline-gpt2-{phase}-os16"][2] == len(calls)
    rows = csv_rows(sweep_dir / "sweep.csv")
    assert check.plots["prefill-decode"][2] == len(rows)
    assert check.plots["cost-error-gpt2-prefill"][2] == 2  # one point per scheme
    manifest = json.loads((sweep_dir / MANIFEST).read_text())
    assert html.escape(manifest["command_line"]) in text
    assert html.escape(json.dumps(json.loads(resolve("os16").to_json()), indent=1)) in text
    assert html.escape(tenet_byoc.cpu_info().model) in text
    # sorting and filtering work on every row: the page's rows after a click on the latency
    # header (ascending, ties in the CSV's order), then after typing two words in the filter,
    # equal the CSV's rows sorted and filtered here
    expected = sorted(layers, key=lambda r: float(r["latency_us"]))
    assert shown_as_csv(check.sorted_rows, expected) == [list(r.values()) for r in expected]
    kept = [r for r in expected if all(w in " ".join(r.values()).lower()
                                       for w in ("w8a8", "prefill"))]
    assert 0 < len(kept) < len(layers)
    assert shown_as_csv(check.filtered_rows, kept) == [list(r.values()) for r in kept]


def test_a_folder_written_with_the_old_hardware_column_gives_the_same_page(sweep_dir, tmp_path):
    # sweep.csv and layers.csv called the accelerator column "hardware" before it was renamed
    new, old = tmp_path / "new", tmp_path / "old"
    for folder in (new, old):
        folder.mkdir()
    for name in ("sweep.csv", "layers.csv"):
        text = (sweep_dir / name).read_text()
        header, rest = text.split("\n", 1)
        assert header.split(",")[2] == "accelerator"
        (new / name).write_text(text)
        (old / name).write_text(header.replace(",accelerator,", ",hardware,") + "\n" + rest)
    pages = [build_report(folder) for folder in (new, old)]
    assert "hardware" not in pages[0].replace(plotly.offline.get_plotlyjs(), "")
    assert page_figures(pages[1]) == page_figures(pages[0])
    assert pages[1].replace(str(old), str(new)) == pages[0]


@pytest.mark.parametrize("bad", [("layers",), ("layers:x", "latency_us"), ("", "x"),
                                 ["layers", "latency_us"]])
def test_browser_check_names_a_bad_action(bad):
    with pytest.raises(ValueError, match=r"sort_by=.*\(table key, text\) pair"):
        browser_check("no-such-page.html", sort_by=bad)


@needs_chromium
def test_estimate_page_in_chromium(estimate_dir):
    check = check_page(estimate_dir)["check"]
    sources = {s for _, s in check.tables.values()}
    assert sources == {"estimate.csv", "layers_none.csv", "layers_q4f16_1.csv",
                       "ledger_none.csv", "ledger_q4f16_1.csv", "sweep_context.csv",
                       "sweep_batch.csv"}
    for scheme in ("none", "q4f16_1"):
        calls = csv_rows(estimate_dir / f"ledger_{scheme}.csv")
        # a point per GEMM (a vector call has no MACs to place on a roofline)
        assert check.plots[f"roofline-{scheme}"][2] == sum(r["unit"] == "array" for r in calls)
        prefill_layers = {_block(r["name"]) for r in calls if r["phase"] == "prefill"}
        # four energy parts stacked per decoder block
        assert check.plots[f"energy-{scheme}-prefill"][2] == 4 * len(prefill_layers)
    decode = [r for s in ("none", "q4f16_1")
              for r in csv_rows(estimate_dir / f"layers_{s}.csv") if r["phase"] == "decode"]
    assert check.plots["estimate-layers-decode"][2] == len(
        {(r["scheme"], _block(r["layer"])) for r in decode})
    by_context = csv_rows(estimate_dir / "sweep_context.csv")
    assert check.plots["sweep-context_len-tpot_ms"][2] == len(by_context)


@needs_chromium
def test_dse_page_in_chromium(dse_dir):
    check = check_page(dse_dir)["check"]
    assert {s for _, s in check.tables.values()} == {"dse.csv"}
    feasible = [r for r in csv_rows(dse_dir / "dse.csv") if r["feasible"] == "True"]
    assert len(feasible) == 16  # 8 designs x 2 schemes, none over a budget
    for front, _ in DSE_FRONTS:  # every feasible design is a point of every plot
        assert check.plots[f"dse-{front}"][2] == len(feasible)


def test_dse_page_draws_each_schemes_pareto_front_with_designs_on_hover(dse_dir):
    text = (dse_dir / REPORT).read_text()
    assert "Design space" in text
    figures = page_figures(text)
    rows = [r for r in csv_rows(dse_dir / "dse.csv") if r["feasible"] == "True"]
    for front, metric in DSE_FRONTS:
        traces = {t["name"]: t for t in figures[f"dse-{front}"]["data"]}
        for scheme in ("none", "per_token"):
            mine = [r for r in rows if r["scheme"] == scheme]
            line = traces[f"{scheme}: front"]
            # the front line is the Pareto set of (area, figure), computed here from the CSV
            want = pareto([(float(r["area_mm2"]), float(r[metric])) for r in mine])
            assert line["x"] == pytest.approx([a for a, _ in want], rel=1e-6)
            assert line["y"] == pytest.approx([v for _, v in want], rel=1e-6)
            cloud = traces[scheme]
            assert len(cloud["x"]) + len(line["x"]) == len(mine)
            # each point's hover names its design: one of the CSV's designs at that point
            # (an os and a ws array of one size have one area and may cost the same)
            for x, y, hover in zip(line["x"] + cloud["x"], line["y"] + cloud["y"],
                                   line["text"] + cloud["text"]):
                at = [r for r in mine if float(r["area_mm2"]) == pytest.approx(x, rel=1e-6)
                      and float(r[metric]) == pytest.approx(y, rel=1e-6)]
                assert any(f"<b>{html.escape(r['name'])}</b>" in hover
                           and f"{r['rows']}×{r['cols']} {r['dataflow']}," in hover
                           for r in at), hover
    manifest = json.loads((dse_dir / MANIFEST).read_text())
    assert manifest["command"] == "dse" and manifest["schemes"] == ["none", "per_token"]


def test_a_large_design_space_thins_its_cloud_but_keeps_its_fronts(dse_dir, tmp_path):
    from tenet_byoc.experiments.report import _DSE_CLOUD

    with open(dse_dir / "dse.csv", newline="") as f:
        reader = csv.DictReader(f)
        columns, (base, *_) = reader.fieldnames, list(reader)
    n = 2 * _DSE_CLOUD + 7
    with open(tmp_path / "dse.csv", "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        for i in range(n):  # area grows and TPOT falls: every point is on the TPOT front
            w.writerow(dict(base, key=f"k{i}", name=f"d{i}", area_mm2=1.0 + i,
                            tpot_ms=1000.0 / (1 + i), fronts="tpot_area" if i % 2 else ""))
    figures = page_figures(build_report(tmp_path))
    traces = {t["name"].split(" (")[0]: t for t in figures["dse-tpot_area"]["data"]}
    scheme = base["scheme"]
    front, cloud = traces[f"{scheme}: front"], traces[scheme]
    assert len(front["x"]) == n // 2  # the front whole
    off = n - n // 2
    assert len(cloud["x"]) <= _DSE_CLOUD and cloud["name"] == (
        f"{scheme} ({len(cloud['x']):,} of {off:,} shown)")


def test_an_estimate_without_its_ledger_puts_each_layer_on_the_roofline(estimate_dir,
                                                                         tmp_path):
    for name in ("layers_none.csv", MANIFEST):
        shutil.copy(estimate_dir / name, tmp_path)
    text = build_report(tmp_path)
    figures = json.loads(re.search(
        r'<script type="application/json" id="figures">(.*?)</script>', text,
        re.DOTALL).group(1))
    layers = csv_rows(tmp_path / "layers_none.csv")
    points = [t for t in figures["roofline-none"]["data"] if t["mode"] == "markers"]
    assert sum(len(t["x"]) for t in points) == len(layers)
    by_phase = {t["name"]: t for t in points}
    first = next(r for r in layers if r["phase"] == "prefill")
    i = [r for r in layers if r["phase"] == "prefill"].index(first)
    # the point is the layer's MACs per DRAM byte and MACs per cycle, from the CSV
    assert by_phase["prefill"]["x"][i] == pytest.approx(int(first["macs"])
                                                        / float(first["dram_bytes"]))
    assert by_phase["prefill"]["y"][i] == pytest.approx(int(first["macs"]) / int(first["cycles"]))
    roofs = [t for t in figures["roofline-none"]["data"] if t["mode"] == "lines"]
    # one roof per MAC rate: min(PEs x rate, DRAM bytes per cycle x intensity)
    os16 = resolve("os16")
    rates = os16.hardware.macs_per_pe_per_cycle
    rates = sorted(rates.values()) if isinstance(rates, dict) else [rates]
    bandwidth = os16.memory.dram_bandwidth_bits / 8
    assert len(roofs) == len(rates)
    for roof, rate in zip(roofs, rates):
        assert roof["y"] == pytest.approx([min(os16.hardware.num_pes * rate, bandwidth * x)
                                           for x in roof["x"]])


def test_a_roof_of_cores_counts_every_cores_pes():
    # h200: 132 SMs, each an 8 x 16 array (its pe_domain): the roof under a ledger's MACs per
    # cycle (each call's own, on every core) is all 16,896 PEs, not one SM's 128.
    from tenet_byoc.experiments.results import _accelerator_entry

    h200 = resolve("h200")
    assert h200.hardware.pe_domain == "{PE[p,q]: 0<=p<8 and 0<=q<16}"
    assert _accelerator_entry(h200)["num_pes"] == 132 * 8 * 16
    assert _accelerator_entry(resolve("os16"))["num_pes"] == 16 * 16


def test_a_folder_missing_some_files_leaves_their_sections_out(estimate_dir, tmp_path):
    shutil.copy(estimate_dir / "sweep_context.csv", tmp_path)
    text = build_report(tmp_path)
    assert "Decode step swept" in text and "Summary" not in text
    assert f"no <code>{MANIFEST}</code>" in text
    tables = json.loads(re.search(r'<script type="application/json" id="tables">(.*?)</script>',
                                  text, re.DOTALL).group(1))
    assert list(tables) == ["sweep-context_len"]
    assert len(tables["sweep-context_len"]["rows"]) == len(csv_rows(tmp_path /
                                                                    "sweep_context.csv"))


def test_a_folder_without_results_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(FileNotFoundError, match="none of the files") as err:
        write_report(tmp_path)
    assert str(tmp_path) in str(err.value)
    for name in SOURCES:
        assert name in str(err.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_report(tmp_path / "missing")
    assert not (tmp_path / REPORT).exists()


def test_a_broken_csv_is_named(tmp_path):
    (tmp_path / "estimate.csv").write_text("scheme,phase\nnone\n")
    with pytest.raises(ValueError, match=r"estimate.csv' line 2: 1 fields"):
        build_report(tmp_path)


def test_cli_report_command_and_flag_errors(tmp_path, capsys):
    assert exit_code(["report", str(tmp_path)]) == 2
    assert "none of the files" in capsys.readouterr().err
    assert exit_code(["estimate", "--model", "gpt2", "--report"]) == 2
    assert "--report needs --out" in capsys.readouterr().err
    (tmp_path / "sweep_batch.csv").write_text("scheme,context_len,batch,tpot_ms,tokens_per_s,"
                                              "energy_per_token_mj,dram_bytes_per_token,"
                                              "pe_utilization\nnone,16,1,2.5,400,1.5,100,0.5\n")
    assert main(["report", str(tmp_path)]) == 0
    assert (tmp_path / REPORT).is_file()
    assert str(tmp_path / REPORT) in capsys.readouterr().out


def test_browser_check_names_a_browser_that_fails(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<!DOCTYPE html><p>no self-check here</p>")
    with pytest.raises(RuntimeError, match=r"chromium closed its pipe \(exit 1\)"):
        browser_check(page, chromium=shutil.which("false"))


@needs_chromium
def test_a_page_without_a_self_check_times_out_clearly(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<!DOCTYPE html><p>no self-check here</p>")
    with pytest.raises(RuntimeError, match=r"page.html'.*self-check did not finish in 10 s"):
        browser_check(page, timeout=10)


def test_pe_utilization_in_percent_as_the_command_line_prints_it(tmp_path):
    # one unit everywhere: the CLI prints 50.00%, the page shows 50 under "PE util (%)"
    (tmp_path / "sweep_batch.csv").write_text("scheme,context_len,batch,tpot_ms,tokens_per_s,"
                                              "energy_per_token_mj,dram_bytes_per_token,"
                                              "pe_utilization\nnone,16,1,2.5,400,1.5,100,0.5\n")
    text = Path(write_report(tmp_path)).read_text()
    tables = json.loads(re.search(r'<script type="application/json" id="tables">(.*?)</script>',
                                  text, re.S).group(1))
    table = tables["sweep-batch"]
    column = table["columns"].index("pe_utilization")
    assert table["labels"][column] == "PE util (%)"
    assert table["rows"][0][column] == 50.0
