"""Designs as files: ``presets --show`` prints a preset in the accelerator's one form, and
``--accelerator FILE`` (JSON or YAML of that form) is the same accelerator on every command."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

import tenet_byoc
from tenet_byoc import cost_model as cm
from tenet_byoc.design_file import design_form
from tenet_byoc.experiments.cli import _checked_inputs
from tenet_byoc_cli import main
from tenet_byoc.accelerators import Accelerator, preset
from tenet_byoc_cli.parser import build_parser


def _parsed(argv):
    """The options as a command sees them: parsed (names checked), then design files read."""
    args = build_parser().parse_args(argv)
    _checked_inputs(args)
    return args


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_presets_show_prints_the_one_form(fmt, capsys, tmp_path):
    assert main(["presets", "--show", "tpu_v5e", "--format", fmt]) == 0
    out = capsys.readouterr().out
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    # each quantity once: the TENET duplicates and a preset's relations are derived on reading
    assert not {"pe_domain", "l1_bytes", "l2_bytes", "bandwidth_bits"} & set(data["hardware"])
    assert not {"name", "space", "time"} & set(data["dataflow"])
    path = tmp_path / f"shown.{fmt}"
    path.write_text(out)
    assert Accelerator.from_file(path) == preset("tpu_v5e")


def _custom_design(tmp_path, suffix: str):
    """os16 with a 256 KiB buffer and 128 bits/cycle of DRAM, edited as a user would."""
    form = design_form(preset("os16"))  # what `presets --show os16` prints
    form["name"] = form["hardware"]["name"] = "my_os16"
    form["memory"]["buffer_bytes"] = 256 << 10
    form["memory"]["dram_bandwidth_bits"] = 128.0
    path = tmp_path / f"mine{suffix}"
    path.write_text(json.dumps(form) if suffix == ".json" else yaml.safe_dump(form))
    # The same design made in Python, the reference (the file keeps the preset's SRAM
    # energies, which the Python constructor would otherwise derive from the new capacity).
    os16 = preset("os16")
    old = os16.memory
    ref = Accelerator.systolic(
        "os", 16, 16, name="my_os16", bandwidth_bits=128, l2_bytes=256 << 10,
        memory=cm.MemoryHierarchy(dram_bandwidth_bits=128, buffer_bytes=256 << 10,
                                  buffer_bandwidth_bits=(16 + 32) * 32, register_bytes=256,
                                  buffer_pj_per_bit=old.buffer_pj_per_bit,
                                  register_pj_per_bit=old.register_pj_per_bit),
        # os16's units beside the array (16 vector lanes, a 16-per-cycle edge dequantizer).
        vector=cm.VectorUnit(lanes=16), edge_dequantizer=cm.EdgeDequantizer(16, bits=[4, 8]),
        mapping="auto")  # the preset's own mapping, which its printed form carries
    assert (ref.vector, ref.edge_dequantizer) == (os16.vector, os16.edge_dequantizer)
    return path, ref


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_estimate_on_a_design_file_equals_the_python_design(suffix, tmp_path, capsys):
    path, ref = _custom_design(tmp_path, suffix)
    assert Accelerator.from_file(path) == ref
    out = tmp_path / "out"
    assert main(["estimate", "--model", "gpt2", "--accelerator", str(path), "--prompt-len",
                 "16", "--decode-steps", "2", "--out", str(out)]) == 0
    assert "gpt2 on my_os16" in capsys.readouterr().out
    rows = list(csv.DictReader((out / "estimate.csv").open()))
    ledger = tenet_byoc.estimate("gpt2", "none", ref, prompt_len=16, decode_steps=2)
    ttft_ms = ledger.group_by("phase")["prefill"].latency_us / 1e3  # ledger.step_cycles
    assert float(rows[0]["latency_ms"]) == pytest.approx(ttft_ms, rel=1e-12)
    # and it differs from the preset it was edited from (the file was read)
    base = tenet_byoc.estimate("gpt2", "none", "os16", prompt_len=16, decode_steps=2)
    assert base.group_by("phase")["prefill"].latency_us / 1e3 != pytest.approx(ttft_ms)


@pytest.mark.parametrize("argv", [
    ["run", "--model", "mlp"], ["profile", "--model", "mlp"], ["sweep", "--model", "mlp"],
    ["eval", "--checkpoint", "c", "--text", "t"], ["estimate"],
])
def test_every_command_takes_a_design_file(argv, tmp_path):
    path, ref = _custom_design(tmp_path, ".yaml")
    args = _parsed([*argv, "--accelerator", str(path)])
    got = args.accelerator[0] if isinstance(args.accelerator, list) else args.accelerator
    assert got == ref


def test_sweep_mixes_presets_and_files(tmp_path):
    path, ref = _custom_design(tmp_path, ".json")
    args = _parsed(["sweep", "--accelerator", f"os16,{path}"])
    assert args.accelerator == ["os16", ref]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda f: f["memory"].pop("buffer_bytes"), "has no field 'buffer_bytes'"),
    (lambda f: f.update(colour=1), "unknown field 'colour'"),
    (lambda f: f["hardware"].update(clock_ghz=-1), "clock_ghz"),
    # found by the design-file fuzzer with 3,000 examples: a pybind RuntimeError before
    (lambda f: f["dataflow"].update(preset="is", tiling={"": None}), "dataflow.tiling"),
    (lambda f: f["dataflow"].update(tiling={"k": 2.5}), "integer tiling factors"),
])
def test_a_bad_design_file_exits_2_naming_the_file_and_field(edit, message, tmp_path, capsys):
    form = json.loads(preset("os16").to_json())
    edit(form)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(form))
    assert exit_code(["estimate", "--accelerator", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Traceback" not in err


def test_a_missing_design_file(capsys):
    assert exit_code(["run", "--accelerator", "nowhere/x.yaml"]) == 2
    assert "accelerator file 'nowhere/x.yaml' does not exist" in capsys.readouterr().err


def _refusal(form, tmp_path, name="d.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(form))
    with pytest.raises(ValueError) as err:
        Accelerator.from_file(path)
    assert str(path) in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("derived", "written", "value"), [
    ("l2_bytes", "buffer_bytes", 4 << 20),
    ("l1_bytes", "register_bytes", 512),
    ("bandwidth_bits", "dram_bandwidth_bits", 512.0),
])
def test_a_quantity_written_twice_must_agree(derived, written, value, tmp_path):
    form = json.loads(preset("os16").to_json())  # the full form: both of each pair
    form["memory"][written] = value  # the natural edit: one of the pair
    text = _refusal(form, tmp_path)
    assert f"hardware.{derived}" in text and f"memory.{written}" in text and "disagree" in text
    # given once, the other is derived: the file is the design it says
    del form["hardware"][derived]
    path = tmp_path / "once.yaml"
    path.write_text(yaml.safe_dump(form))
    acc = Accelerator.from_file(path)
    assert getattr(acc.memory, written) == value and getattr(acc.hardware, derived) == value


def test_rows_and_cols_against_the_pe_domain_and_relations(tmp_path):
    form = json.loads(preset("os16").to_json())
    form["dataflow"]["rows"] = form["dataflow"]["cols"] = 32
    text = _refusal(form, tmp_path)
    assert "hardware.pe_domain is a 16x16 array but dataflow.rows / dataflow.cols say 32x32" \
        in text
    assert "dataflow.space" in text and "dataflow.time" in text
    # in the form `presets --show` prints, rows and cols are the one place the size lives
    shown = design_form(preset("os16"))
    shown["dataflow"]["rows"] = shown["dataflow"]["cols"] = 32
    path = tmp_path / "os32.yaml"
    path.write_text(yaml.safe_dump(shown))
    acc = Accelerator.from_file(path)
    ref = Accelerator.systolic("os", 32, 32)
    assert acc.hardware.num_pes == 32 * 32
    assert (acc.dataflow.space, acc.dataflow.time) == (ref.dataflow.space, ref.dataflow.time)


def test_every_problem_of_a_file_in_one_message_named_as_written(tmp_path):
    form = design_form(preset("os16"))
    form["memory"]["bufer_bytes"] = form["memory"].pop("buffer_bytes")
    form["hardware"]["clock_ghz"] = -1
    form["memory"]["psum_bits"] = 0
    form["precision"][0]["pj_per_mac"] = -1
    text = _refusal(form, tmp_path)
    assert "5 problems" in text
    assert "unknown field 'memory.bufer_bytes' (did you mean 'buffer_bytes'?)" in text
    assert "memory has no field 'buffer_bytes'" in text
    for field in ("hardware.clock_ghz", "memory.psum_bits", "precision[0].pj_per_mac"):
        assert field in text
    assert "MemoryHierarchy" not in text and "PrecisionTable" not in text
