"""Totals, group_by and the profile table print readably: units, thousands separators, and
the figures equal the ledger's own sums."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

import tenet_byoc
from ledger_testing import mlp_executable
from tenet_byoc_cli import main
from tenet_byoc.ledger import step_cycles


@pytest.fixture(scope="module")
def book():
    _, ex = mlp_executable()
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu())
    tenet_byoc.set_phase(vm, "one")
    vm["main"](tvm.runtime.tensor(np.ones((3, 784), "float32")))
    tenet_byoc.set_phase(vm, "two")
    vm["main"](tvm.runtime.tensor(np.ones((5, 784), "float32")))
    return tenet_byoc.ledger(vm)


def _number(cell: str) -> float:
    return float(cell.rstrip("%x").replace(",", ""))


def test_group_by_is_a_dict_that_prints_a_table(book):
    groups = book.group_by("phase")
    assert isinstance(groups, dict) and list(groups) == ["one", "two"]
    lines = str(groups).splitlines()
    assert "MACs" in lines[0] and "latency (us)" in lines[0] and "energy (uJ)" in lines[0]
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header[0] == "phase"
    for line, phase in zip(lines[2:], ["one", "two"], strict=True):
        cells = re.split(r"\s{2,}", line.strip())
        assert cells[0] == phase
        row = dict(zip(header[1:], cells[1:], strict=True))
        entries = [e for e in book.entries if e.phase == phase]
        # Each figure against a sum over the entries, by hand.
        assert _number(row["calls"]) == len(entries)
        assert _number(row["MACs"]) == sum(e.macs for e in entries if e.unit == "array")
        assert row["MACs"] == f"{sum(e.macs for e in entries if e.unit == 'array'):,}"  # thousands separated
        assert _number(row["cycles"]) == step_cycles(entries)  # the ledger's one rule
        assert _number(row["energy (uJ)"]) == pytest.approx(
            sum(e.energy_pj for e in entries) / 1e6, abs=1e-3)
    assert repr(groups) == str(groups)  # print(dict) in a REPL shows the table too


def test_totals_prints_one_row(book):
    text = str(book.totals())
    lines = text.splitlines()
    assert len(lines) == 3 and lines[2].startswith("total")
    assert f"{sum(e.macs for e in book.entries if e.unit == 'array'):,}" in lines[2]
    assert max(len(x) for x in lines) <= 160


def test_profile_table_fits_and_names_layers(capsys):
    main(["profile", "--model", "mlp"])
    out = capsys.readouterr().out
    table = out[out.index("Name"):out.index("Configuration")]
    assert max(len(line) for line in table.splitlines()) <= 140
    # The MLP's two offloaded layers appear by their layer names, not kernel names.
    names = [re.split(r"\s{2,}", line.strip())[0] for line in table.splitlines()]
    assert "fc0, fc1" in names  # the MLP runs both layers in one merged call
    assert not any(n.endswith("_tenet") for n in names)
