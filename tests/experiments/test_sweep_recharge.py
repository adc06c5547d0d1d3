"""The sweep runs each (case, scheme) once and charges the other accelerators from its ledger.

The reference is a sweep per accelerator, each of which really builds GPT-2 tiny and the MLP
for that accelerator (the runtime charging the GEMMs it ran); the sweep over all of them at
once must give the same rows and per-call costs, value for value, except the timings.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from tenet_byoc.experiments.cases import gpt2_case, mlp_case
from tenet_byoc.experiments.sweep import sweep
from tenet_byoc.accelerators import preset

SCHEMES = ["none", "w8a8_per_channel_per_token", "w4a16_group128"]
TIMINGS = ("build_s", "wall_s")


def _cases():
    return [gpt2_case("tiny", prompt_len=6, context_len=6), mlp_case()]


def _without_timings(item) -> dict:
    # With each value's type: the CSV and JSON print 1340108288 and 1340108288.0 differently.
    return {k: (type(v).__name__, v) for k, v in asdict(item).items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def accelerators():
    # A fixed output-stationary array first (the one built), then another dataflow, a
    # mixed-precision array, and a searched mapping (mapping="auto").
    return [preset("os16", mapping="default"), preset("ws16", mapping="default"),
            preset("os16_mp", mapping="default"), preset("tpu_v1", mapping="auto")]


@pytest.fixture(scope="module")
def together(accelerators):
    return sweep(_cases(), SCHEMES, accelerators, progress=False)


@pytest.mark.parametrize("index", [1, 2, 3])
def test_recharged_rows_equal_a_sweep_built_for_the_accelerator(together, accelerators, index):
    acc = accelerators[index]
    alone = sweep(_cases(), SCHEMES, [acc], progress=False)
    mine = [r for r in together.rows if r.accelerator == acc.name]
    assert len(mine) == len(alone.rows) == 2 * len(SCHEMES) + len(SCHEMES)
    for got, want in zip(mine, alone.rows, strict=True):
        assert _without_timings(got) == _without_timings(want), (got.scheme, got.phase)
    layers = [c for c in together.layers if c.accelerator == acc.name]
    assert [_without_timings(c) for c in layers] == [_without_timings(c) for c in alone.layers]


def test_accelerators_of_one_run_share_its_build_and_outputs(together, accelerators):
    # One build and run per (case, scheme): the timings and errors are the same on every
    # accelerator, while the charge is each one's own.
    by_key: dict[tuple, list] = {}
    for r in together.rows:
        by_key.setdefault((r.model, r.scheme, r.phase), []).append(r)
    assert len(by_key) == 3 * len(SCHEMES)
    for rows in by_key.values():
        assert [r.accelerator for r in rows] == [a.name for a in accelerators]
        assert len({(r.build_s, r.wall_s, r.max_abs_error, r.top1_agreement, r.macs)
                    for r in rows}) == 1
    prefill = by_key[("gpt2", "w8a8_per_channel_per_token", "prefill")]
    assert len({r.cycles for r in prefill}) == len(accelerators)  # they do differ in cost


def _exit_code(argv) -> int:
    from tenet_byoc_cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _rows(folder) -> list[dict]:
    rows = json.loads((folder / "run.json").read_text())["rows"]
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]


def test_run_on_several_accelerators_equals_one_run_per_accelerator(tmp_path, capsys):
    # `run --accelerator os16,ws16,os16_mp` runs the model once; each accelerator's rows and
    # per-layer table equal those of a run built for that accelerator alone.
    # Each call's default tiles: searched, os16 and ws16 (one array and memory) cost the same.
    argv = ["run", "--model", "mlp", "--scheme", "w8a8_per_channel_per_token",
            "--no-progress", "--repeats", "1", "--mapping", "default"]
    names = ["os16", "ws16", "os16_mp"]
    assert _exit_code([*argv, "--accelerator", ",".join(names),
                       "--out", str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    for name in names:
        assert f"mlp inference, w8a8_per_channel_per_token on {name}: per layer" in out
        assert (tmp_path / "all" / f"layers_mlp_inference_w8a8_per_channel_per_token_{name}.png"
                ).stat().st_size > 1000
    together = _rows(tmp_path / "all")
    assert [r["accelerator"] for r in together] == names
    for name, row in zip(names, together, strict=True):
        assert _exit_code([*argv, "--accelerator", name, "--out", str(tmp_path / name)]) == 0
        assert _rows(tmp_path / name) == [row]
    assert len({r["cycles"] for r in together}) == len(names)


def test_an_accelerator_named_twice_is_refused(capsys):
    assert _exit_code(["run", "--model", "mlp", "--accelerator", "os16,ws16,os16",
                       "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "accelerator 'os16' given twice" in err and "Traceback" not in err
