"""Serving figures of a request mix against hand formulas over estimate's own step latencies.

Each batch's prefill and each of its decode steps is estimated on its own here (a prefill-only
estimate, then one single-step estimate per context length), and the static-batching
figures are summed by hand from those; ``serve`` estimates each batch in one call.
"""

from __future__ import annotations

import csv
import json

import pytest

import tenet_byoc
from tenet_byoc.ledger import totals
from tenet_byoc_cli import main
from tenet_byoc.experiments.serving import (
    Request,
    largest_batch,
    parse_requests,
    serve,
)
from tenet_byoc.system import Link, System

MIX = [Request(5, 3), Request(9, 2), Request(4, 1), Request(7, 4), Request(6, 2)]


def step_seconds(model, prompt, rows, context, scheme="none", system=None):
    """A prefill of ``prompt`` tokens, or a decode step after ``context`` ones, alone."""
    if prompt:
        ledger = tenet_byoc.estimate(model, scheme, "os16", prompt_len=prompt, decode_steps=0,
                                     batch=rows, system=system)
        phase = "prefill"
    else:
        ledger = tenet_byoc.estimate(model, scheme, "os16", prompt_len=0, context_len=context,
                                     decode_steps=1, batch=rows, system=system)
        phase = "decode"
    if system is not None:
        return ledger.latency_s(phase)
    # one chip: the entries composed one by one (tenet_byoc.ledger.totals, the plain
    # reference of the step rule: fused epilogues hidden behind their GEMM)
    return totals(ledger.entries).latency_us * 1e-6


def test_batch_of_two_by_hand():
    # Batches: (5:3, 9:2) -> prompt 9, 2 steps, 2 rows; (4:1, 7:4) -> 7, 3 steps; (6:2) -> 6,
    # 1 step, 1 row. Decode step i of a batch with prompt P runs after P + i tokens.
    model = "gpt2"
    shapes = [(9, 2, 2), (7, 3, 2), (6, 1, 1)]
    prefill = [step_seconds(model, p, b, 0) for p, _, b in shapes]
    decode = [[step_seconds(model, 0, b, p + i) for i in range(s)] for p, s, b in shapes]
    total = sum(prefill) + sum(map(sum, decode))
    f = serve(model, MIX, 2)
    assert (f.batch, f.batches, f.requests) == (2, 3, 5)
    assert f.seconds == pytest.approx(total, rel=1e-9)
    assert f.requests_per_s == pytest.approx(5 / total, rel=1e-9)
    assert f.tokens_per_s == pytest.approx((3 + 2 + 1 + 4 + 2) / total, rel=1e-9)
    ttft = [prefill[0]] * 2 + [prefill[1]] * 2 + [prefill[2]]
    assert f.ttft_ms_mean == pytest.approx(1e3 * sum(ttft) / 5, rel=1e-9)
    assert f.ttft_ms_max == pytest.approx(1e3 * max(prefill), rel=1e-9)
    tpot = [sum(d) / len(d) for d in decode]
    assert f.tpot_ms_mean == pytest.approx(1e3 * (2 * tpot[0] + 2 * tpot[1] + tpot[2]) / 5,
                                           rel=1e-9)
    assert f.tpot_ms_max == pytest.approx(1e3 * max(tpot), rel=1e-9)
    # Rows: 2 x (9 + 3) + 2 x (7 + 4) + 1 x (6 + 2) = 54 token slots, 43 of them requests (8 + 11 + 5 + 11 + 8)..
    assert f.padded_share == pytest.approx(1 - 43 / 54)


def test_energy_per_token_adds_static_power_over_the_mix_time():
    # One batch (7:3, 5:2) -> prompt 7, 2 decode steps, 2 rows; 5 output tokens. Energy:
    # the calls' pJ (each step estimated alone) plus 2 W x the mix's seconds, per token.
    def step_pj(prompt, context):
        ledger = tenet_byoc.estimate("gpt2", "none", "os16", prompt_len=prompt,
                                     context_len=context, decode_steps=0 if prompt else 1,
                                     batch=2)
        return sum(e.energy_pj for e in ledger.entries)

    pj = step_pj(7, None) + step_pj(0, 7) + step_pj(0, 8)
    mix = [Request(7, 3), Request(5, 2)]
    dynamic, with_static = serve("gpt2", mix, 2), serve("gpt2", mix, 2, static_w=2.0)
    assert dynamic.static_mj_per_token == 0
    assert dynamic.energy_per_token_mj == pytest.approx(pj / 1e9 / 5, rel=1e-9)
    static_mj = 2.0 * with_static.seconds * 1e3 / 5
    assert with_static.static_mj_per_token == pytest.approx(static_mj, rel=1e-12)
    assert with_static.energy_per_token_mj == pytest.approx(pj / 1e9 / 5 + static_mj, rel=1e-9)


def test_batch_of_one_has_no_padding_and_a_request_without_decode_has_no_tpot():
    f = serve("gpt2", [Request(4, 1)], 1)
    assert f.padded_share == 0 and f.tpot_ms_max == 0 and f.tpot_ms_mean == 0
    assert f.ttft_ms_max == pytest.approx(1e3 * step_seconds("gpt2", 4, 1, 0), rel=1e-9)


def test_on_a_system_each_step_is_its_critical_path():
    system = System("os16", chips=2, tensor_parallel=2, link=Link(50.0, 2.0, "ring"))
    f = serve("gpt2", [Request(6, 3), Request(3, 2)], 2, system=system)
    prefill = step_seconds("gpt2", 6, 2, 0, system=system)
    steps = [step_seconds("gpt2", 0, 2, 6 + i, system=system) for i in range(2)]
    assert f.ttft_ms_max == pytest.approx(1e3 * prefill, rel=1e-9)
    assert f.tpot_ms_max == pytest.approx(1e3 * sum(steps) / 2, rel=1e-9)


def test_largest_batch_meeting_targets_checks_every_candidate():
    figures = [serve("gpt2", MIX, b) for b in (1, 2, 4, 5)]
    ttft = sorted(f.ttft_ms_max for f in figures)[1]  # two of the four meet it
    want = max(f.batch for f in figures if f.ttft_ms_max <= ttft)
    assert largest_batch(figures, ttft, None).batch == want
    tpot = min(f.tpot_ms_max for f in figures)
    both = [f.batch for f in figures if f.ttft_ms_max <= ttft and f.tpot_ms_max <= tpot]
    got = largest_batch(figures, ttft, tpot)
    assert (got.batch if got else None) == (max(both) if both else None)
    assert largest_batch(figures, 1e-9, None) is None
    assert largest_batch(figures, None, None).batch == 5


def test_request_mixes_from_text_csv_and_json(tmp_path):
    assert parse_requests("128:64, 512:32") == [Request(128, 64), Request(512, 32)]
    path = tmp_path / "mix.csv"
    path.write_text("prompt_len,output_len\n10,2\n20,4\n")
    assert parse_requests(path) == [Request(10, 2), Request(20, 4)]
    path = tmp_path / "mix.json"
    path.write_text(json.dumps([{"prompt_len": 3, "output_len": 1}, [7, 5]]))
    assert parse_requests(str(path)) == [Request(3, 1), Request(7, 5)]


@pytest.mark.parametrize(("spec", "match"), [
    ("128:64,512", r"request 1 .*PROMPT:OUTPUT"),
    ("128:0", r"request 0 .*output_len=0 must be an integer >= 1"),
    ("", "holds no request"),
    ("missing.csv", "does not exist"),
])
def test_bad_mixes_are_refused_by_name(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_requests(spec)


def test_bad_files_are_refused_by_name(tmp_path):
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n10,2\n")
    with pytest.raises(ValueError, match="needs the columns prompt_len and output_len"):
        parse_requests(path)
    path.write_text("prompt_len,output_len\n10,2\n10,x\n")
    with pytest.raises(ValueError, match="line 3"):
        parse_requests(path)
    path = tmp_path / "mix.json"
    path.write_text('{"prompt_len": 3}')
    with pytest.raises(ValueError, match="JSON list"):
        parse_requests(path)


def test_a_batch_outrunning_the_context_names_its_requests():
    # Each request fits gpt2's 1024 positions; padded together they do not.
    with pytest.raises(ValueError, match=r"requests 0\.\.1 at batch 2 .*longest prompt 1000"):
        serve("gpt2", [Request(1000, 2), Request(10, 100)], 2)


def test_cli_serve_prints_writes_and_finds_the_largest_batch(tmp_path, capsys):
    mix = tmp_path / "mix.csv"
    mix.write_text("prompt_len,output_len\n" + "".join(f"{r.prompt_len},{r.output_len}\n"
                                                       for r in MIX))
    figures = {b: serve("gpt2", MIX, b) for b in (1, 2, 4)}
    ttft = figures[2].ttft_ms_max
    argv = ["estimate", "--model", "gpt2", "--accelerator", "os16", "--serve", str(mix),
            "--batch", "2", "--ttft-ms", str(ttft * 1.000001), "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    best = max(b for b, f in figures.items() if f.ttft_ms_max <= ttft * 1.000001)
    assert f"largest batch with every request at TTFT <= {ttft * 1.000001} ms: {best} " in out
    rows = list(csv.DictReader((tmp_path / "o" / "serving.csv").open()))
    assert [int(r["batch"]) for r in rows] == [1, 2, 4]
    assert float(rows[1]["tokens_per_s"]) == pytest.approx(figures[2].tokens_per_s, rel=1e-12)
    # Static power: os16's area at 45 nm x 0.085 W/mm2 (the area table's figure), over the
    # mix's seconds, per output token (12 of them).
    from tenet_byoc.accelerators import preset
    from tenet_byoc.area import accelerator_area

    watts = accelerator_area(preset("os16"), 45.0)["total"] * 0.085
    assert float(rows[1]["static_mj_per_token"]) == pytest.approx(
        watts * figures[2].seconds * 1e3 / 12, rel=1e-9)
    assert float(rows[1]["energy_per_token_mj"]) == pytest.approx(
        figures[2].energy_per_token_mj + float(rows[1]["static_mj_per_token"]), rel=1e-9)
    assert (tmp_path / "o" / "serving.png").stat().st_size > 10_000


def test_cli_targets_need_serve(capsys):
    try:
        code = main(["estimate", "--model", "gpt2", "--ttft-ms", "5"])
    except SystemExit as exc:
        code = exc.code
    assert code != 0
    assert "--serve" in capsys.readouterr().err


def test_report_page_has_a_serving_section_from_serving_csv(tmp_path):
    import re

    from tenet_byoc.experiments.report import build_report

    out = tmp_path / "o"
    assert main(["estimate", "--model", "gpt2", "--schemes", "none,per_token", "--serve",
                 "5:3,9:2,4:1", "--serve-batches", "1,3", "--out", str(out)]) == 0
    page = build_report(out)
    figures = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)'
                                   r"</script>", page, re.DOTALL).group(1))
    rows = list(csv.DictReader((out / "serving.csv").open()))
    for metric in ("tokens_per_s", "ttft_ms_max", "tpot_ms_max"):
        lines = {t["name"]: (t["x"], t["y"]) for t in figures[f"serving-{metric}"]["data"]}
        for scheme in ("none", "per_token"):
            mine = [r for r in rows if r["scheme"] == scheme]
            assert lines[scheme][0] == [int(r["batch"]) for r in mine] == [1, 3]
            assert lines[scheme][1] == pytest.approx([float(r[metric]) for r in mine],
                                                     rel=1e-3)
    assert "<h2>Serving</h2>" in page


@pytest.mark.parametrize("extra", [["--ledger"], ["--sweep-batches", "1,2"]])
def test_cli_serve_refuses_what_does_not_go_with_it(extra, capsys, tmp_path):
    if extra == ["--ledger"]:
        extra = [*extra, "--out", str(tmp_path / "o")]
    try:
        code = main(["estimate", "--model", "gpt2", "--serve", "5:3", *extra])
    except SystemExit as exc:
        code = exc.code
    assert code != 0
    assert "do not go with --serve" in capsys.readouterr().err
