"""A design file's bad field is one problem named as the file writes it, never followed by
the fields derived from it ("dataflow has no field 'name'"); presets print their constants as
written (4.6 pJ, not 4.6000000000000005); TPU v1's buffer is one figure."""

from __future__ import annotations

import json

import pytest
import yaml

from tenet_byoc.design_file import design_form
from tenet_byoc_cli import main
from tenet_byoc.accelerators import PRESETS, Accelerator, preset


def _problems(form, tmp_path) -> str:
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(form))
    with pytest.raises(ValueError) as err:
        Accelerator.from_file(path)
    text = str(err.value)
    assert str(path) in text
    return text


def _set_flow(key, value):
    return lambda f: f["dataflow"].__setitem__(key, value)


@pytest.mark.parametrize(("edit", "message"), [
    (_set_flow("rows", 0), "dataflow.rows must be a positive integer, got 0"),
    (_set_flow("rows", "x"), "dataflow.rows must be a positive integer, got 'x'"),
    (_set_flow("cols", 16.5), "dataflow.cols must be a positive integer, got 16.5"),
    (_set_flow("rows", True), "dataflow.rows must be a positive integer, got True"),
    (lambda f: f["dataflow"].pop("cols"), "dataflow.cols is missing"),
    (_set_flow("preset", "oss"), "dataflow.preset: unknown dataflow preset 'oss'"),
    (_set_flow("tiling", {"m": 2}), "dataflow.tiling: preset 'os' takes one tiling factor 'k'"),
    (_set_flow("tiling", {"k": -1}), "dataflow.tiling: tiling factor 'k' must be a positive"),
    (lambda f: f.pop("dataflow"), "missing field 'dataflow'"),
    (lambda f: f.__setitem__("dataflow", [1]), "dataflow must be an object"),
], ids=["rows0", "rows_text", "cols_float", "rows_bool", "no_cols", "preset", "tiling_key",
        "tiling_value", "no_dataflow", "dataflow_list"])
def test_a_bad_dataflow_field_is_one_problem(edit, message, tmp_path):
    form = design_form(preset("os16"))  # what `presets --show os16` prints
    edit(form)
    text = _problems(form, tmp_path)
    assert ": 1 problem:" in text and message in text, text
    # not the derived fields after it (they said "dataflow has no field 'name'" and
    # "hardware has no field 'pe_domain'")
    assert "has no field" not in text


def test_a_bad_dataflow_and_another_field_both_told(tmp_path):
    form = design_form(preset("os16"))
    form["dataflow"]["rows"] = 0
    form["memory"]["psum_bits"] = 0
    text = _problems(form, tmp_path)
    assert ": 2 problems:" in text
    assert "dataflow.rows must be a positive integer" in text and "memory.psum_bits" in text


@pytest.mark.parametrize(("written", "derived"), [
    ("buffer_bytes", "hardware.l2_bytes"), ("register_bytes", "hardware.l1_bytes"),
    ("dram_bandwidth_bits", "hardware.bandwidth_bits")])
def test_a_bad_value_is_told_of_the_field_written_not_its_twin(written, derived, tmp_path):
    form = design_form(preset("os16"))  # the twin is derived from the written field
    form["memory"][written] = -5
    text = _problems(form, tmp_path)
    assert ": 1 problem:" in text and f"memory.{written}" in text, text
    assert derived not in text


def test_presets_print_their_constants_as_written(capsys):
    # Horowitz (ISSCC 2014) 45 nm: fp32 multiply 3.7 + add 0.9 pJ, fp16 1.1 + 0.4, int8
    # multiply 0.2 + 32-bit add 0.1; the vector unit's exp 4 x 4.6, tanh 7 x 4.6 + 16.6
    assert main(["presets", "--show", "os16", "--format", "json"]) == 0
    form = json.loads(capsys.readouterr().out)
    assert [u["pj_per_mac"] for u in form["precision"]] == [4.6, 1.5, 0.3]
    assert form["vector"]["pj_per_op"]["exp"] == 18.4
    assert form["vector"]["pj_per_op"]["tanh"] == 48.8
    for name in PRESETS:
        text = json.dumps(design_form(preset(name)))
        for long in ("4.6000000000000005", "0.30000000000000004", "18.400000000000002",
                     "48.800000000000004"):
            assert long not in text, (name, long)


def test_tpu_v1_buffer_is_one_figure():
    # Jouppi et al. (ISCA 2017), Sec. 2: a 24 MiB unified buffer and 4 MiB of accumulators,
    # which the tiles share: memory.buffer_bytes, and TENET's l2_bytes is the same figure
    tpu = preset("tpu_v1")
    assert tpu.memory.buffer_bytes == (24 + 4) * 2**20
    assert tpu.hardware.l2_bytes == tpu.memory.buffer_bytes
