"""README.md's examples run as written: every ```python block, and every tenet-byoc command
parses with the CLI's own parser.

Blocks run in a fresh process in a folder holding what the README tells a user to make (the
tiny checkpoint of ``examples/tiny_checkpoint.py``, which needs torch and transformers) and
the README's own files; no block is exempt.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
def _commands() -> list[str]:
    """Every `tenet-byoc ...` command in the README's code blocks, continuation lines joined
    and comments dropped."""
    out = []
    for _, code in BLOCKS:
        text = code.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("tenet-byoc"):
                    out.append(part)
    return out


COMMANDS = _commands()


def test_the_readme_has_examples():
    # a change to the fence syntax must not silently leave nothing to run
    assert len(PYTHON) >= 5 and len(COMMANDS) >= 8


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    pytest.importorskip("torch", reason="the README's tiny checkpoint needs torch (test extra)")
    pytest.importorskip("transformers",
                        reason="the README's tiny checkpoint needs transformers (test extra)")
    folder = tmp_path_factory.mktemp("readme")
    shutil.copy(ROOT / "README.md", folder / "README.md")
    shutil.copytree(ROOT / "examples", folder / "examples")
    # what the README tells the user to run, as written
    proc = subprocess.run([sys.executable, "examples/tiny_checkpoint.py", "tiny-gpt2", "--text",
                           "README.md"], cwd=folder, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-block-{i}" for i in range(len(PYTHON))])
def test_python_block_runs(code, workdir):
    proc = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True,
                          text=True, timeout=900, check=False)
    assert proc.returncode == 0, f"{code}\n---\n{proc.stderr[-3000:]}"
    # A user following the README sees no warning (e.g. the OpenMP one).
    assert "Warning" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("command", COMMANDS)
def test_command_parses(command):
    from tenet_byoc_cli.parser import build_parser as _parser

    argv = [a for a in shlex.split(command)[1:] if not (a.startswith("[") or a.endswith("]"))]
    if "|" in command or "DIR" in argv or "FILE" in argv or "LIST" in argv:
        # a usage line (`run|sweep`, `--checkpoint DIR`): its command must exist
        sub = argv[0].split("|") if argv else []
        assert all(s in _parser()._subparsers._group_actions[0].choices for s in sub), command
        return
    try:
        _parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"README command {command!r} does not parse (exit {exc.code})")


def test_help_commands_answer(capsys):
    # The cheap commands, run as a user would: the entry point once as a process, the
    # subcommands' help in this one.
    proc = subprocess.run([sys.executable, "-m", "tenet_byoc_cli", "--help"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "usage: tenet-byoc" in proc.stdout, proc.stderr
    from tenet_byoc_cli import main

    for argv in (["estimate", "--help"], ["sweep", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0 and f"usage: tenet-byoc {argv[0]}" in capsys.readouterr().out


def _tiny_checkpoint_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_checkpoint",
                                                  ROOT / "examples" / "tiny_checkpoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_checkpoint_without_its_packages_writes_nothing(tmp_path):
    # transformers made unimportable, as in an install without the test extra
    script = ("import sys, runpy; sys.modules['transformers'] = None; "
              f"sys.argv = ['tiny_checkpoint.py', {str(tmp_path / 'ckpt')!r}, '--text', "
              f"{str(ROOT / 'README.md')!r}]; "
              f"runpy.run_path({str(ROOT / 'examples' / 'tiny_checkpoint.py')!r}, "
              "run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 1
    assert "needs transformers" in proc.stderr and ".[test]" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_tiny_checkpoint_failing_halfway_leaves_no_folder(tmp_path, monkeypatch):
    pytest.importorskip("tokenizers", reason="the tokenizer step needs tokenizers")
    for module in ("torch", "transformers"):
        pytest.importorskip(module, reason=f"tiny_checkpoint.py checks for {module} first")
    tiny = _tiny_checkpoint_module()

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    # the tokenizer is written, then the model fails: nothing may stay behind
    monkeypatch.setattr(tiny, "write_model", fail)
    text = tmp_path / "text.txt"
    text.write_text("a small text to train a byte-level BPE on " * 20)
    with pytest.raises(RuntimeError, match="disk full"):
        tiny.main([str(tmp_path / "ckpt"), "--text", str(text), "--vocab", "300"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]


def _readme_tables():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_tables",
                                                  ROOT / "docs" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_tables", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_readme_tables_equal_their_source_files():
    tables = _readme_tables()
    marked = tables.marked_tables(README)
    # the Llama-3-70B estimate, the main job's GPT-2 and MLP tables, the speed against GenZ,
    # serving capacity, GPT-2 end to end, GEMM kernels, mapping search
    assert len(marked) >= 11, [f"{t.path}#{t.name}" for t in marked]
    for t in marked:
        source = tables.source_table(t.path, t.name)
        assert t.body == source, (f"README's table from {t.path}#{t.name} differs from the file: "
                                  "run `python docs/readme_tables.py write`")
        text = (ROOT / t.path).read_text()
        # each source says when it was measured, and on what
        assert re.search(r"20\d\d-\d\d-\d\d|\d{1,2} [A-Z][a-z]{2} 20\d\d", text), t.path
        assert "CPU" in text, t.path


def test_a_changed_source_figure_is_caught(tmp_path):
    tables = _readme_tables()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "t.md").write_text("## a\n\n| x | y |\n|---|---:|\n| p | 1.50 |\n")
    readme = ("text\n<!-- table: docs/t.md#a -->\n| x | y |\n|---|---:|\n| p | 1.50 |\n"
              "<!-- end table -->\nmore\n")
    assert tables.differing(readme, tmp_path) == []
    stale = readme.replace("1.50", "1.70")
    assert tables.differing(stale, tmp_path) == ["docs/t.md#a"]
    assert tables.regenerate(stale, tmp_path) == readme
    with pytest.raises(ValueError, match="no heading '## b'"):
        tables.differing(readme.replace("#a", "#b"), tmp_path)
    with pytest.raises(ValueError, match="under docs/ or benchmarks/results/"):
        tables.source_table("README.md", "a", tmp_path)
    # a heading named as it stands, spaces and punctuation included
    (tmp_path / "docs" / "u.md").write_text("## chip, 80 GB (its HBM): x\n\n| x |\n|---|\n| 2 |\n")
    spaced = ("<!-- table: docs/u.md#chip, 80 GB (its HBM): x -->\n| x |\n|---|\n| 3 |\n"
              "<!-- end table -->\n")
    assert [t.name for t in tables.marked_tables(spaced)] == ["chip, 80 GB (its HBM): x"]
    assert tables.differing(spaced, tmp_path) == ["docs/u.md#chip, 80 GB (its HBM): x"]


def test_estimate_tables_written_from_the_csv_files(tmp_path):
    tables = _readme_tables()
    (tmp_path / "estimate.csv").write_text(
        "scheme,phase,tokens,latency_ms,tokens_per_s,energy_per_token_mj,macs,dram_bytes,"
        "pe_utilization,roofline_ratio\n"
        "none,prefill,2048,22009.04,93.05,1461.6,1,1,0.49,1.6998\n"
        "none,decode,128,1108.95,0.90,84308.0,1,1,0.004,1.0146\n")
    (tmp_path / "sweep_batch.csv").write_text(
        "scheme,context_len,batch,tpot_ms,tokens_per_s,energy_per_token_mj,"
        "dram_bytes_per_token,pe_utilization\n"
        "none,2048,1,1108.8,0.902,84293.8,1,1\nnone,2048,16,1254.7,12.75,6483.3,1,1\n"
        "none,2048,64,1776.2,36.03,2654.0,1,1\n")
    text = tables.estimate_source(tmp_path, "tenet-byoc estimate ...")
    # figures by hand: 22009.04 ms = 22.01 s; 84308.0 mJ = 84.3 J; 6483.3 mJ = 6.48 J
    assert "| none | 22.01 | 1.70x | 1,109 | 1.01x | 84.3 |" in text
    assert ("| none | 1 / 16 / 64 | 1,109 / 1,255 / 1,776 | 0.9 / 12.8 / 36.0 | "
            "84.3 / 6.48 / 2.65 |") in text


def test_mlp_and_eval_tables_written_from_the_csv_files(tmp_path):
    tables = _readme_tables()
    (tmp_path / "sweep.csv").write_text(
        "model,scheme,accelerator,latency_us,weight_bytes,energy_pj,max_abs_error,top1_agreement,"
        "accuracy\n"
        "mlp,none,os16,36.964,37888.0,145259273.6,0.0,1.0,0.9777777777777777\n"
        "mlp,w4a8,os16,27.31,5010.0,44712000.0,1.0137,0.99444,0.9777777777777777\n")
    text = tables.mlp_source(tmp_path, "tenet-byoc sweep --model mlp ...")
    # by hand: 37,888 B = 37.89 kB; 145,259,273.6 pJ = 145.3 uJ; 352 / 360 = 97.78%
    assert "| none (float32) | 97.78% | 100.0% | 0 | 37.89 | 37.0 | 145.3 |" in text
    assert "| w4a8 | 97.78% | 99.4% | 1.01 | 5.01 | 27.3 | 44.7 |" in text
    (tmp_path / "eval.csv").write_text(
        "scheme,perplexity,delta_vs_float32,top1_agreement,latency_us,energy_pj\n"
        "none,926.054,0.0,1.0,1600.2,7142000000.0\n"
        "mxfp4,892.31,-33.744,0.584645,1297.0,3662400000.0\n")
    text = tables.eval_source(tmp_path, "tenet-byoc eval ...")
    # 1,600.2 us = 1.600 ms; 7.1420e9 pJ = 7.142 mJ; 0.584645 = 58.46%
    assert "| none (float32) | 926.05 | 0 | 100.00% | 1.600 | 7.142 |" in text
    assert "| mxfp4 | 892.31 | -33.74 | 58.46% | 1.297 | 3.662 |" in text


def test_dse_table_written_from_the_csv_files(tmp_path):
    tables = _readme_tables()
    folder = tmp_path / "dse-b16"
    folder.mkdir()
    head = ("scheme,rows,cols,dataflow,pe_formats,buffer_bytes,dram_gbps,mapping,area_mm2,"
            "ttft_ms,tpot_ms,energy_per_token_mj,feasible,perplexity,top1_agreement\n")
    (folder / "dse.csv").write_text(
        head
        + "q4f16_1,16,128,os,int8+fp16+fp32,4194304,128.0,auto,20.5,40572.0,103.9,110.2,"
          "True,908.0,0.72\n"
        + "q4f16_1,128,16,os,int8+fp16+fp32,1048576,128.0,auto,15.9,41000.0,110.0,101.4,"
          "True,908.0,0.72\n"
        + "q4f16_1,8,8,ws,fp8_e4m3+fp16+fp32,1048576,64.0,default,1.0,1.0,1.0,1.0,"
          "False,908.0,0.72\n")
    text = tables.dse_source([folder], "tenet-byoc dse ...")
    # by hand: fastest 103.9 ms (16x128, mapping searched: no dataflow named), least energy
    # 101.4 mJ (128x16); the infeasible row is left out though it is faster
    assert ("| 16 | q4f16_1 | 16x128 int8, 4 MiB, 128 GB/s | 20.5 | 103.9 | 40,572 | 110 | "
            "101 (128x16 int8, 1 MiB, 128 GB/s; 15.9) | 908.0 / 72.0% |") in text


def test_decode_scheme_groups_are_the_ranges_of_their_rows(tmp_path):
    tables = _readme_tables()
    rows = {s: 0.5 for group in tables.DECODE_GROUPS for s in group[2]}
    rows.update({s: 0.40 for s in tables.DECODE_GROUPS[0][2]})
    rows.update({"w8a8_per_tensor": 0.39, "w4a8": 0.41, "mxfp4": 1.07})
    path = tmp_path / "decode_schemes.md"
    path.write_text("# t\n\nmachine line\n\n| scheme | kernel | decode step ms (median) | / "
                    "float32 (same rounds) |\n|---|---|---:|---:|\n"
                    + "".join(f"| {s} | k | 1.0 | {r:.2f}x |\n" for s, r in rows.items()))
    text = tables.decode_schemes_source(path)
    # by hand: the int8 group (0.40) spans 0.39 (w8a8_per_tensor) to 0.41 (w4a8); the
    # others are 0.50 but mxfp4's 1.07
    assert "| real int8 | 0.39-0.41x |" in text
    assert "| `w8a16_per_channel` | real int8 weight-only | 0.50x |" in text
    assert "| emulated | 0.50-1.07x |" in text
    path.write_text(path.read_text().replace("| mxfp4 |", "| mxfp9 |"))
    with pytest.raises(ValueError, match="no row for mxfp4"):
        tables.decode_schemes_source(path)


def test_cost_model_ranges_are_those_of_their_rows(tmp_path):
    tables = _readme_tables()
    path = tmp_path / "cost_model.md"
    head = ("# c\n\nMeasured 2026-11-22 on x86_64, 2 CPUs. More.\n\n## Speed: x\n\n| GEMM MxNxK "
            "| array | dataflow | ours C++ (us) | py | isl (ms) | ratio | identical |\n"
            "|---|---|---|---:|---:|---:|---:|---|\n")
    path.write_text(head + "| 8x8x8 | 16x16 | os | 18.5 | 1 | 28.5 | 1,540x | yes |\n"
                    "| 8x8x8 | 16x16 | ws | 20.4 | 1 | 40.0 | 1,960.8x | yes |\n"
                    "## Next\n\n| 1x1x1 | a | b | 1 | 1 | 1 | 1x | yes |\n")
    text = tables.cost_model_source(path)
    # by hand: halves round up (18.5 -> 19, 28.5 -> 29), the next section's rows left out
    assert text.endswith("| 8 x 8 x 8 | 19-20 | 29-40 | 1,540-1,961x |\n")
    path.write_text(path.read_text().replace("40.0 | 1,960.8x | yes", "40.0 | 1,960.8x | no"))
    with pytest.raises(ValueError, match="8x8x8 has a row whose metrics differ"):
        tables.cost_model_source(path)


def test_gpt2_e2e_rows_are_those_of_their_files(tmp_path):
    tables = _readme_tables()
    body = ("# g\n\nMeasured 2026-11-26 on X (2 logical CPUs); more.\n\n"
            "| implementation | tokens | prefill time (ms) | time / tenet | notes |\n"
            "|---|---:|---:|---:|---|\n"
            "| tenet build (os16) | 128 | {t} | 1.00 | b |\n"
            "| PyTorch 2.13.0+cpu eager | 128 | {p} | 1.07 | c |\n\n"
            "- tenet / PyTorch eager time at 128 tokens: **{r}** (target <= 0.5)\n")
    (tmp_path / "a.md").write_text(body.format(t="1,234.5", p="2000.0", r="0.62")
                                   + "- GEMM floor: 32.2 GFLOP; at the best rate (99 GFLOP/s, "
                                     "numpy) they alone take 325 ms, more\n")
    (tmp_path / "b.md").write_text(body.format(t="10.4", p="9.6", r="1.08"))
    text = tables.gpt2_e2e_source(tmp_path, (("A", "a.md"), ("B", "b.md")))
    # by hand: 1,234.5 ms rounds half up to 1,235; b has no floor line
    assert ("| A ([results](benchmarks/results/a.md)) | 1,235 | 2,000 | 0.62 | 325 (99 GFLOP/s) |"
            in text)
    assert text.endswith("| B ([results](benchmarks/results/b.md)) | 10 | 10 | 1.08 "
                         "| not measured |\n")
    assert "| PyTorch 2.13 eager (ms) |" in text
    (tmp_path / "b.md").write_text(body.format(t="10.4", p="9.6", r="1.08").replace("**", ""))
    with pytest.raises(ValueError, match="b.md: no tenet row, PyTorch row"):
        tables.gpt2_e2e_source(tmp_path, (("A", "a.md"), ("B", "b.md")))
    with pytest.raises(ValueError, match="c.md do not exist"):
        tables.gpt2_e2e_source(tmp_path, (("C", "c.md"),))


def test_gemm_rows_are_those_of_their_files(tmp_path):
    tables = _readme_tables()

    def lines(kind, rows, mean, low):
        head = ("| M x K x N | a | b | tenet / numpy | c | d |\n|---|---:|---:|---:|---:|---:|\n"
                if kind == "f" else "| M x K x N | a | b | int8 / numpy f32 |\n|---|---:|---:|---:|\n")
        body = "".join(f"| {shape} | 1 | 2 | {r} |" + (" 3 | 4 |\n" if kind == "f" else "\n")
                       for shape, r in rows)
        what = "tenet / numpy" if kind == "f" else "int8 / numpy f32"
        return (f"{head}{body}\ngeometric mean {what}: all shapes 9.99x; prefill shapes "
                f"(M >= 64) {mean}, lowest {low}\n\n")

    # by hand: float32's lowest prefill ratio 0.90x is held by 128 x 768 x 768 alone (the
    # 1-row GEMV's 0.50x is not a prefill shape); int8's 1.20x by two shapes, so none named
    (tmp_path / "g.md").write_text(
        "# g\n\nMeasured 2026-11-27 on X (2 logical CPUs); more.\n\n"
        + lines("f", [("1 x 768 x 2304", "0.50x"), ("128 x 768 x 768", "0.90x"),
                      ("256 x 1024 x 1024", "1.10x")], "0.99x", "0.90x")
        + lines("i", [("128 x 768 x 768", "1.20x"), ("256 x 1024 x 1024", "1.20x")],
                "1.20x", "1.20x"))
    text = tables.gemm_source(tmp_path, (("G", "g.md", "g"),), (("native", "X", "g.md"),))
    assert ("| G | 0.99x (0.90x, 128x768x768) | 1.20x (1.20x) "
            "| [g](benchmarks/results/g.md) |\n") in text
    # the int8-path table takes the file's int8 cell
    assert text.endswith("## int8 paths\n\n| path | measured on | int8 / numpy float32, "
                         "prefill shapes: geomean (lowest) | results |\n|---|---|---:|---|\n"
                         "| `native` | X | 1.20x (1.20x) | [results](benchmarks/results/g.md) |\n")
    assert "`benchmarks/results/g.md`: Measured 2026-11-27 on X (2 logical CPUs)" in text
    (tmp_path / "g.md").write_text("# g\n\nMeasured 2026-11-27.\n")
    with pytest.raises(ValueError, match="g.md: expected a float32 and an int8"):
        tables.gemm_source(tmp_path, (("G", "g.md", "g"),), ())
    with pytest.raises(ValueError, match="h.md do not exist"):
        tables.gemm_source(tmp_path, (), (("native", "X", "h.md"),))


def test_mapper_rows_are_those_of_its_file(tmp_path):
    tables = _readme_tables()
    phases = "".join(f"| {a} | {ph} 128 | {s} | 1 | 1 | {a[0]}{ph[0]}{s[1]} | w | h |\n"
                     for a in ("os16", "tpu_v1") for ph in ("prefill", "decode")
                     for s in ("none", "w8a8_per_channel_per_token", "w4a16_group128"))
    path = tmp_path / "mapper.md"
    path.write_text(
        "Measured 2026-11-28 00:30 UTC on X (2 logical CPUs); more\n\n## The whole GPT-2 small search (x)\n\n| a | s | c | d | m | lo | hi "
        "| again |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
        "| os16 | none | 9 | 9 | 9 | 9 | 9 | 9 |\n| os16 | all three | 438 | 34 | 0.225 | 0 | 0 "
        "| 0.031 |\n| tpu_v1 | all three | 438 | 34 | 0.114 | 0 | 0 | 0.020 |\n\n"
        "## Phase totals (y)\n\n| a | p | s | c | r | ratio | w | h |\n"
        "|---|---|---|---:|---:|---:|---|---|\n" + phases)
    text = tables.mapper_source(path)
    # by hand: the ratio cells in scheme order; 0.225 s -> 0.23 s (two decimals), 0.114 -> 0.11
    assert "| prefill / roofline: none, w8a8_per_channel_per_token, w4a16_group128 | opo, op8, " \
           "op4 | tpo, tp8, tp4 |" in text
    assert "| decode / roofline: same schemes | odo, od8, od4 | tdo, td8, td4 |" in text
    assert "(34 searched) | 0.23 s | 0.11 s |" in text
    assert text.endswith("| the same 438 calls again (lookups) | 0.031 s | 0.020 s |\n")
    assert "Measured 2026-11-28 00:30 UTC on X (2 logical CPUs)." in text
    path.write_text(path.read_text().replace("| 438 | 34 | 0.114 |", "| 438 | 32 | 0.114 |"))
    assert "(34 / 32 searched) | 0.23 s | 0.11 s |" in tables.mapper_source(path)
    path.write_text(path.read_text().replace("| tpu_v1 | all three |", "| tpu_v1 | none |"))
    with pytest.raises(ValueError, match="mapper.md: no row for tpu_v1"):
        tables.mapper_source(path)
    path.write_text(path.read_text().replace("| tpu_v1 | none |", "| tpu_v1 | all three |")
                    .replace("Measured 2026-11-28 00:30 UTC on", "CPU:"))
    with pytest.raises(ValueError, match="names no 'Measured DATE on MACHINE'"):
        tables.mapper_source(path)
