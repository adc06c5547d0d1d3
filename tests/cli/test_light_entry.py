"""The console entry answers help and bad names without loading TVM: its name lists equal the
package's registries, and as a process it imports no tvm, torch or tenet_byoc module."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tenet_byoc_cli import design_point, names

ROOT = Path(__file__).resolve().parents[2]


def test_name_lists_equal_the_registries():
    from tenet_byoc import accelerators, dse, mapping, system
    from tenet_byoc.experiments import dse_cmd, sweep
    from tenet_byoc.models import configs, gpt2
    from tenet_byoc.quantization import CLASSIC_SCHEMES, SCHEMES

    assert names.PRESETS == tuple(accelerators.PRESETS)
    assert names.DEFAULT_PRESET == accelerators.DEFAULT_PRESET
    assert names.SCHEMES == tuple(SCHEMES)
    assert names.CLASSIC_SCHEMES == tuple(CLASSIC_SCHEMES)
    assert names.GPT2_CONFIGS == tuple(gpt2.PRESETS)
    assert names.BUILTIN_MODELS == tuple(configs.BUILTIN)
    assert names.MAPPING_OBJECTIVES == tuple(mapping.OBJECTIVES)
    assert names.DEFAULT_ACCELERATORS == tuple(sweep.DEFAULT_ACCELERATORS)
    assert names.QUICK_SCHEMES == sweep.QUICK.schemes
    assert names.QUICK_ACCELERATORS == sweep.QUICK.accelerators
    assert names.QUICK_LENGTH == sweep.QUICK.prompt_len == sweep.QUICK.context_len
    assert names.TOPOLOGIES == tuple(system.TOPOLOGIES)
    assert names.DSE_RESULTS_FILE == dse_cmd.RESULTS_FILE
    # dse's results add no column beside the schema the parser reads --objective from
    assert design_point.COLUMNS == tuple(f.name for f in dataclasses.fields(dse.PointResult))


def test_dse_executors_are_the_ones_explore_takes():
    # explore checks the executor before the schemes: an accepted executor with no scheme
    # gets the schemes' refusal, a refused one its own
    from tenet_byoc.dse import explore

    space = {"rows": [8], "cols": [8], "dataflows": ["os"], "pe_formats": [["int8", "fp32"]]}
    with pytest.raises(ValueError, match="executor='threads'"):
        explore("gpt2", [], space, executor="threads")
    for executor in names.DSE_EXECUTORS:
        with pytest.raises(ValueError, match="schemes is empty"):
            explore("gpt2", [], space, executor=executor)


def test_the_console_script_is_the_light_entry():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tenet-byoc"] == "tenet_byoc_cli:main"


def test_the_package_and_the_entry_share_one_did_you_mean():
    from tenet_byoc._names import did_you_mean

    assert did_you_mean is names.did_you_mean


#: Runs the entry in a fresh interpreter, then reports its exit code and the heavy modules
#: it imported (the last line of stdout).
_PROBE = """
import json, sys
from tenet_byoc_cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("tvm", "tvm_ffi", "torch", "numpy", "tenet_byoc"))
print("\\n" + json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize(("argv", "code", "message"), [
    ([], 0, "usage: tenet-byoc"),
    (["--help"], 0, "usage: tenet-byoc"),
    (["sweep", "--help"], 0, "usage: tenet-byoc sweep"),
    (["estimate", "--help"], 0, "usage: tenet-byoc estimate"),
    (["dse", "--help"], 0, "usage: tenet-byoc dse"),
    (["run", "--scheme", "w8a8_per_chanel"], 2,
     "did you mean 'w8a8_per_channel_per_token' or 'w8a16_per_channel'?"),
    (["sweep", "--accelerator", "tpuv1"], 2, "unknown preset 'tpuv1' (did you mean 'tpu_v1'?)"),
    (["estimate", "--model", "llama3-8b"], 2, "did you mean 'llama-3-8b'?"),
    (["dse", "--space", "s.yaml", "--out", "d", "--objective", "tpot"], 2,
     "--objective 'tpot' (did you mean 'tpot_ms'?)"),
    (["run", "--gpt2-config", "huge"], 2, "invalid choice: 'huge'"),
    (["sweep", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["estimate", "--batch", "0"], 2, "expected an integer >= 1, got 0"),
    # outputs are checked before the work, and before TVM loads
    (["estimate", "--out", str(ROOT / "pyproject.toml")], 2,
     "cannot write into output folder"),
    (["sweep", "--report"], 2, "--report needs --out DIR"),
    (["profile", "--csv", str(ROOT / "no-such-folder" / "x.csv")], 2,
     "cannot write output file"),
])
def test_help_and_bad_names_load_no_tvm(argv, code, message):
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                          text=True, timeout=120, check=False)
    *shown, last = proc.stdout.rstrip("\n").split("\n")
    got = json.loads(last)
    assert got == {"code": code, "heavy": []}, proc.stderr[-2000:]
    assert message in ("\n".join(shown) if code == 0 else proc.stderr)
    assert "Traceback" not in proc.stderr


def test_module_entry_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "tenet_byoc_cli", "presets", "--help"],
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0 and "usage: tenet-byoc presets" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "tenet_byoc_cli", "report"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "the following arguments are required: DIR" in bad.stderr


def test_a_long_name_typed_in_part_and_misspelt_is_found():
    # issue 24 item 13's typo: both near schemes, the one it starts like first
    assert names.did_you_mean("w8a8_per_chanel", names.SCHEMES) == (
        " (did you mean 'w8a8_per_channel_per_token' or 'w8a16_per_channel'?)")
    assert names.did_you_mean("mxfp", names.SCHEMES) == " (did you mean 'mxfp8' or 'mxfp4'?)"
    # too short to compare by its start, or like nothing: no suggestion
    assert names.did_you_mean("os", names.PRESETS) == ""
    assert names.did_you_mean("resnet50", names.BUILTIN_MODELS) == ""


def test_the_entry_imports_the_package_only_to_run_a_command():
    # Read from the source, so a lazy import counts: the one import of tenet_byoc is
    # main's hand-over of a parsed command (tests/test_layering.py's rule for the package).
    import ast

    import tenet_byoc_cli

    found = []
    for path in sorted(Path(tenet_byoc_cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            found += [(path.name, m) for m in modules if m.split(".")[0] == "tenet_byoc"]
    assert found == [("__init__.py", "tenet_byoc.experiments.cli")]
