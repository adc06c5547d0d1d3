"""The tenet-byoc command line, run in-process: files written, tables printed, clear errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

import tenet_byoc
from tenet_byoc_cli import main
from tenet_byoc.accelerators import PRESETS
from tenet_byoc.quantization import SCHEMES

TINY = ["--gpt2-config", "tiny", "--prompt-len", "6", "--context-len", "7", "--no-progress"]
# TENET's 8x8 output-stationary systolic array, in TENET's own file formats.
SYSTOLIC_P = ("{PE[i,j]:0<=i<8 and 0<=j<8}\n{PE[i,j]->PE[i-1,j] ; PE[i,j]->PE[i,j-1]}\n"
              "256 1024 64 16")
SYSTOLIC_OS_M = ("{S[i,j,k]->PE[i%8,j%8]}\n{S[i,j,k]->T[floor(i/8),floor(j/8),i%8+j%8+k]}")


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_no_arguments_prints_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: tenet-byoc" in out and "sweep" in out and "presets" in out


def test_presets_lists_accelerators_and_schemes(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in [*PRESETS, *SCHEMES]:
        assert f"| {name}" in out
    # Every core's PEs: H200's 132 SMs, each one 8 x 16 array here (accelerators.py).
    assert "| h200 | 132 x 128 = 16896 |" in out


def test_sweep_writes_tables_and_plots(tmp_path, capsys):
    out_dir = tmp_path / "results"
    argv = ["sweep", *TINY, "--schemes", "none,w8a8_per_tensor", "--accelerator", "os16",
            "--out", str(out_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| gpt2 | w8a8_per_tensor | os16 | decode | 7 |" in out
    assert "| mlp | none | os16 | inference | 360 |" in out  # the digits' test images
    doc = json.loads((out_dir / "sweep.json").read_text())
    assert [(r["model"], r["scheme"], r["phase"]) for r in doc["rows"]] == [
        ("gpt2", "none", "prefill"), ("gpt2", "none", "decode"),
        ("gpt2", "w8a8_per_tensor", "prefill"), ("gpt2", "w8a8_per_tensor", "decode"),
        ("mlp", "none", "inference"), ("mlp", "w8a8_per_tensor", "inference")]
    names = {p.name for p in out_dir.iterdir()}
    assert {"sweep.csv", "sweep.json", "layers.csv", "cost_vs_error.png",
            "prefill_vs_decode.png", "layers_gpt2_prefill_none_os16.png"} <= names
    for p in out_dir.iterdir():
        assert p.stat().st_size > 100, p


def test_run_on_a_custom_tenet_accelerator(tmp_path, capsys):
    (tmp_path / "systolic.p").write_text(SYSTOLIC_P)
    (tmp_path / "os.m").write_text(SYSTOLIC_OS_M)
    argv = ["run", "--model", "mlp", "--scheme", "w8a16_per_channel", "--no-progress",
            "--tenet-p", str(tmp_path / "systolic.p"), "--tenet-m", str(tmp_path / "os.m"),
            "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| mlp | w8a16_per_channel | systolic+os | inference |" in out
    assert "| fc0 | tenet.dequantize_matmul_channel_bias" in out  # the per-layer table
    rows = json.loads((tmp_path / "run" / "run.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["macs"] == 360 * (64 * 128 + 128 * 10)
    assert (tmp_path / "run" / "layers_mlp_inference_w8a16_per_channel_systolic+os.png").stat(
    ).st_size > 1000


def test_run_gpt2_prints_per_layer_costs(capsys):
    assert main(["run", *TINY, "--scheme", "w4a16_group32", "--accelerator", "ws16"]) == 0
    out = capsys.readouterr().out
    assert "gpt2 prefill, w4a16_group32 on ws16: per layer" in out
    assert "| h.1.mlp.c_fc | tenet.dequantize_matmul_group_bias_gelu_tanh |" in out
    assert "| lm_head |" in out


def test_profile(capsys):
    code = exit_code(["profile", *TINY[:-1], "--phase", "decode"])
    captured = capsys.readouterr()
    assert code == 0 and "decode" in captured.out


class _FakeReport:
    calls = ()  # no charged calls: the layer names the case gives are then an empty list

    def __init__(self, func, shapes):
        self.func, self.shapes = func, shapes

    def name_layers(self, names):
        assert list(names) == []

    def __str__(self):
        return f"REPORT {self.func} {self.shapes}"

    def csv(self):
        return f"Name\n{self.func}\n"

    def json(self):
        return json.dumps({"function": self.func})


@pytest.mark.parametrize("model,phase,func,shape", [
    ("gpt2", "prefill", "prefill", (1, 6)), ("gpt2", "decode", "decode", (1, 1)),
    ("mlp", "prefill", "main", (360, 64)),
])
def test_profile_wiring(model, phase, func, shape, monkeypatch, tmp_path, capsys):
    """The profile command hands the profiling VM the function and arguments of the phase."""
    from tvm import relax

    class FakeVirtualMachine(relax.VirtualMachine):
        def __init__(self, ex, dev, profile=False):
            assert profile is True
            super().__init__(ex, dev)

        def profile(self, func_name, *args):
            self[func_name](*args)  # the arguments must fit the function
            return _FakeReport(func_name, tuple(args[0].shape))

    monkeypatch.setattr(tenet_byoc, "VirtualMachine", FakeVirtualMachine, raising=False)
    model_args = [*TINY[:-1], "--phase", phase] if model == "gpt2" else []
    argv = ["profile", "--model", model, *model_args,
            "--csv", str(tmp_path / "p.csv"), "--json", str(tmp_path / "p.json")]
    assert main(argv) == 0
    assert f"REPORT {func} {shape}" in capsys.readouterr().out
    assert (tmp_path / "p.csv").read_text() == f"Name\n{func}\n"
    assert json.loads((tmp_path / "p.json").read_text()) == {"function": func}


def _fashion_mnist_with_bad_magic(folder):
    def idx(magic: int, dims: list[int]) -> bytes:
        size = 1
        for d in dims:
            size *= d
        head = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
        return head + bytes(size)

    folder.mkdir()
    (folder / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(0x803, [2, 28, 28])))
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(0x801, [2])))
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(0x801, [2])))  # labels
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(0x801, [2])))
    return folder


@pytest.mark.parametrize("argv,message", [
    (["sweep", "--schemes", "w3a3"], "unknown scheme 'w3a3'"),
    (["sweep", "--schemes", "none,per_token+kv9"], "scheme 'per_token+kv9'"),
    (["run", "--scheme", "w=int9"], "scheme 'w=int9'"),
    (["sweep", "--accelerator", "os16,tpu"], "unknown preset 'tpu'"),
    (["run", "--scheme", "none,w8a8_per_tensor"], "give one scheme"),
    (["run", "--accelerator", "gpu"], "unknown preset 'gpu'"),
    (["run", "--prompt-len", "0"], "expected an integer >= 1, got 0"),
    (["run", "--gpt2-config", "tiny", "--prompt-len", "64"], "prompt_len=64"),
    (["run", "--checkpoint", "{tmp}/no-such-folder"], "checkpoint folder"),
    (["sweep", "--model", "mlp", "--data", "{tmp}/no-such-folder"], "FashionMNIST folder"),
    (["sweep", "--model", "mlp", "--data", "{tmp}/fmnist"], "magic number 0x00000801"),
    (["run", "--model", "mlp", "--data", "{tmp}"], "train-images-idx3-ubyte"),
    (["run", "--tenet-p", "{tmp}/a.p"], "--tenet-p and --tenet-m go together"),
    (["run", "--tenet-p", "{tmp}/a.p", "--tenet-m", "{tmp}/a.m"], ".p file"),
    (["sweep", "--model", "bert"], "invalid choice: 'bert'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_exits_2_naming_the_problem(argv, message, tmp_path, capsys):
    _fashion_mnist_with_bad_magic(tmp_path / "fmnist")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert exit_code([*argv, "--no-progress"] if argv[0] in ("run", "sweep") else argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_scheme_lists_take_kv_modifiers_and_specs():
    # A spec's own commas stay inside it; each item is what get_scheme reads (hand-written).
    from tenet_byoc_cli.parser import build_parser as _parser

    args = _parser().parse_args(
        ["sweep", "--schemes", ("none, per_token+kv8,w=int8/channel,a=int8/tensor,static,"
         "w=e2m1/group32,a=e2m1/group32,scale=e8m0,mxfp4")])
    assert args.schemes == ["none", "per_token+kv8", "w=int8/channel,a=int8/tensor,static",
                            "w=e2m1/group32,a=e2m1/group32,scale=e8m0", "mxfp4"]
    assert _parser().parse_args(["run", "--scheme", "q4f16_1+kv4/head"]).scheme == (
        "q4f16_1+kv4/head")


def test_module_entry_point_exit_codes():
    """As a process: help exits 0, a bad scheme exits 2 with one line and no traceback."""
    ok = subprocess.run([sys.executable, "-m", "tenet_byoc_cli"], check=False,
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "usage: tenet-byoc" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "tenet_byoc_cli", "run", "--scheme", "int3"],
                         check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown scheme 'int3'" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_quick_sweep_on_gpt2_small(tmp_path):
    """The README's job in its --quick form: GPT-2 small's MACs are the analytical count."""
    from tenet_byoc.models.gemms import total_macs
    from tenet_byoc.models.gpt2 import GPT2Config

    assert main(["sweep", "--quick", "--model", "gpt2", "--no-progress", "--repeats", "1",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    small = GPT2Config.preset("small")
    assert len(rows) == 6
    for r in rows:
        assert r["macs"] == total_macs(small, r["phase"], 32)
        assert r["calls"] == 73


def _write_checkpoint(folder, drop: str | None = None):
    """The tiny GPT-2 in Hugging Face's layout: config.json + model.safetensors."""
    import numpy as np
    from safetensors.numpy import save_file

    from tenet_byoc.models.gpt2 import GPT2Config, random_params

    cfg = GPT2Config.preset("tiny")
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    tensors = {f"transformer.{k}": np.ascontiguousarray(v.T if k.endswith(conv1d) else v)
               for k, v in random_params(cfg, seed=3).items() if k != drop}
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head,
        "vocab_size": cfg.vocab_size, "n_positions": cfg.n_positions}))
    return folder


def test_run_from_a_checkpoint(tmp_path, capsys):
    ckpt = _write_checkpoint(tmp_path / "gpt2-tiny-hf")
    argv = ["run", "--checkpoint", str(ckpt), "--prompt-len", "5", "--context-len", "5",
            "--no-progress", "--repeats", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {ckpt}" in out and "| gpt2 | none | os16 | prefill | 5 |" in out


def test_checkpoint_missing_a_tensor_exits_2(tmp_path, capsys):
    ckpt = _write_checkpoint(tmp_path / "broken", drop="h.1.mlp.c_fc.weight")
    assert exit_code(["run", "--checkpoint", str(ckpt), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "h.1.mlp.c_fc.weight" in err and "Traceback" not in err


def test_readme_profile_command_works_with_its_defaults(monkeypatch, capsys):
    """`tenet-byoc profile --gpt2-config tiny --phase decode` (README): the default lengths
    are cut to tiny's 32 positions (prompt 32, context 31) instead of refused."""
    from tvm import relax

    seen = {}

    class FakeVirtualMachine(relax.VirtualMachine):
        def __init__(self, ex, dev, profile=False):
            super().__init__(ex, dev)

        def profile(self, func_name, *args):
            self[func_name](*args)
            seen["cache_len"] = int(args[1][0].shape[2])
            return _FakeReport(func_name, tuple(args[0].shape))

    monkeypatch.setattr(tenet_byoc, "VirtualMachine", FakeVirtualMachine, raising=False)
    assert main(["profile", "--gpt2-config", "tiny", "--phase", "decode"]) == 0
    assert "REPORT decode (1, 1)" in capsys.readouterr().out
    assert seen == {"cache_len": 31}


@pytest.mark.parametrize("argv,message", [
    # every bad value at once
    (["run", "--gpt2-config", "tiny", "--prompt-len", "64", "--context-len", "40"],
     ("prompt_len=64 must be an integer in [1, 32]; context_len=40 must be an integer in "
      "[1, 31] for GPT-2 tiny")),
    # options the chosen model would ignore
    (["run", "--model", "mlp", "--checkpoint", "{tmp}"],
     "--checkpoint does not apply to --model mlp"),
    (["run", "--model", "mlp", "--prompt-len", "5000"],
     "--prompt-len does not apply to --model mlp"),
    (["sweep", "--model", "gpt2", "--data", "{tmp}", "--epochs", "2"],
     "--data, --epochs do not apply to --model gpt2"),
    (["profile", "--model", "mlp", "--phase", "decode"], "--phase does not apply"),
    (["run", "--checkpoint", "{tmp}/ckpt", "--gpt2-config", "tiny"],
     "--gpt2-config does not apply to --checkpoint"),
    # outputs checked before the job runs
    (["sweep", "--quick", "--out", "/proc/foo"], "cannot write into output folder '/proc/foo'"),
    (["run", "--model", "mlp", "--out", "/dev/null/x"],
     "cannot write into output folder '/dev/null/x'"),
    (["profile", "--csv", "/nonexistent_dir/r.csv"],
     "cannot write output file '/nonexistent_dir/r.csv': No such file or directory"),
    (["profile", "--json", "{tmp}"], "cannot write output file"),
    # broken input files name the file
    (["run", "--checkpoint", "{tmp}/ckpt"], "model.safetensors' is not a safetensors file"),
    (["run", "--model", "mlp", "--data", "{tmp}/cutgz"], "is not a valid gzip file"),
    (["run", "--checkpoint", "{tmp}/huge"], "config.json n_layer=1000000000 is above the limit"),
], ids=["lengths", "mlp-checkpoint", "mlp-prompt", "gpt2-data", "mlp-phase", "ckpt-config",
        "out-proc", "out-devnull", "csv-missing-dir", "json-dir", "safetensors", "gzip",
        "huge-n-layer"])
def test_cli_refuses_before_running(argv, message, tmp_path, capsys, monkeypatch):
    import tenet_byoc.experiments.sweep

    ckpt = _write_checkpoint(tmp_path / "ckpt")
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:500])
    huge = _write_checkpoint(tmp_path / "huge")
    config = json.loads((huge / "config.json").read_text())
    (huge / "config.json").write_text(json.dumps({**config, "n_layer": 10**9}))
    cut = tmp_path / "cutgz"
    cut.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (cut / f"{name}.gz").write_bytes(gzip.compress(bytes(100))[:-10])
    # Nothing may be built or run: the refusal comes first.
    monkeypatch.setattr(tenet_byoc.experiments.sweep, "sweep", lambda *a, **k: pytest.fail("ran"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    no_progress = ["--no-progress"] if argv[0] in ("run", "sweep") else []
    assert exit_code([*argv, *no_progress]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "profile"])
def test_help_mentions_only_existing_options(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "--quick" not in out
    if command == "profile":
        for scheme in SCHEMES:
            assert scheme in out


@pytest.mark.parametrize("argv,message", [
    (["run", "--accelerator", "tpuv1"], "unknown preset 'tpuv1' (did you mean 'tpu_v1'?)"),
    (["sweep", "--accelerator", "os16,OS_128"], "unknown preset 'OS_128' (did you mean 'os128'?)"),
    (["run", "--scheme", "W8A8_PER_TENSOR"],
     "unknown scheme 'W8A8_PER_TENSOR' (did you mean 'w8a8_per_tensor'?)"),
    (["sweep", "--schemes", "none,q4f16-awq"], "'q4f16-awq' (did you mean 'q4f16_awq'?)"),
    (["estimate", "--accelerator", "tpuv1"], "(did you mean 'tpu_v1'?)"),
])
def test_near_names_get_a_suggestion_not_a_list(argv, message, capsys):
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    # the suggestion replaces the dump of every name
    assert "mxfp4" not in err and "is16" not in err


def test_one_name_options_do_not_offer_all(capsys):
    # `profile` takes one preset, so its message must not suggest "all", which it refuses.
    assert exit_code(["profile", "--accelerator", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "available: " in err and "(or all)" not in err
    assert exit_code(["sweep", "--accelerator", "nonsense"]) == 2
    assert "(or all)" in capsys.readouterr().err


def test_help_describes_the_models_and_the_default_sweep(capsys):
    from tenet_byoc.experiments.sweep import DEFAULT_ACCELERATORS
    from tenet_byoc.quantization import CLASSIC_SCHEMES

    assert main([]) == 0
    out = capsys.readouterr().out
    assert "FashionMNIST MLP" not in out and "digits" in out
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    # what the sweep really runs by default, from the sweep's own constants
    said = out[out.index(f"default: the classic {len(CLASSIC_SCHEMES)},"):].split(";")[0]
    assert said.replace(" ", "").split(",")[1:] == list(CLASSIC_SCHEMES)
    assert f"default: {','.join(DEFAULT_ACCELERATORS)}" in out
    assert "default: all;" not in out
