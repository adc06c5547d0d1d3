"""Progress shows when stderr is a pipe (a line every few seconds, in the unit counted),
Ctrl-C ends a command with one line, and ``import tenet_byoc`` leaves torch unimported."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from tenet_byoc.progress import LineProgress, progress_bar


def test_line_progress_writes_whole_lines_in_its_unit():
    out = io.StringIO()
    bar = LineProgress(range(3), desc="estimate gpt2", unit="step", interval=0.0, file=out)
    assert list(bar) == [0, 1, 2]
    lines = out.getvalue().splitlines()
    # one line per update at interval 0, none of tqdm's carriage returns
    assert [line.split(" (")[0] for line in lines] == [
        "estimate gpt2: 1/3 steps", "estimate gpt2: 2/3 steps", "estimate gpt2: 3/3 steps"]
    assert "\r" not in out.getvalue() and "steps/s" in lines[-1]


def test_line_progress_waits_its_interval():
    out = io.StringIO()
    bar = LineProgress(total=1000, unit="point", interval=3600.0, file=out)
    for _ in range(999):
        bar.update()
    assert out.getvalue() == ""  # nothing within the hour
    bar.close()  # but the end is always told
    assert out.getvalue().startswith("999/1,000 points")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_lines_a_terminal_gets_tqdm(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(progress_bar(total=3, unit="run"), LineProgress)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    from tqdm.auto import tqdm

    assert isinstance(progress_bar(total=3, unit="run"), tqdm)


def test_estimate_into_a_pipe_says_how_far_it_is():
    proc = subprocess.run(
        [sys.executable, "-m", "tenet_byoc_cli", "estimate", "--model", "gpt2", "--schemes",
         "none,per_token", "--prompt-len", "8", "--decode-steps", "1"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "estimate gpt2 none done: 1/2 schemes" in proc.stderr
    assert "estimate gpt2 per_token done: 2/2 schemes" in proc.stderr


def test_ctrl_c_ends_with_one_line(monkeypatch, tmp_path, capsys):
    import tenet_byoc.experiments.cli as cli
    from tenet_byoc_cli import main

    def interrupted(parser, args):
        (tmp_path / "points.jsonl").write_text("{}\n")  # what a run wrote before Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_command", interrupted)
    assert main(["estimate", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip() == (f"tenet-byoc estimate: interrupted; what was written into "
                           f"{str(tmp_path)!r} is kept")
    assert (tmp_path / "points.jsonl").read_text() == "{}\n"


@pytest.mark.slow
def test_a_real_sigint_prints_no_traceback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenet_byoc_cli", "estimate", "--model", "llama-3-70b",
         "--prompt-len", "16", "--decode-steps", "8000", "--schemes",
         "none,per_token,q4f16_1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(12)  # past the imports, into the estimate
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "tenet-byoc estimate: interrupted" in err


def test_import_tenet_byoc_leaves_torch_alone():
    code = ("import sys, tenet_byoc\n"
            "assert 'torch' not in sys.modules, 'import tenet_byoc imported torch'\n"
            "import importlib.util\n"
            "if importlib.util.find_spec('torch') is not None:\n"
            "    import torch  # still importable, and usable after\n"
            "    assert torch.ones(2).sum().item() == 2.0\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_slow_unit_reads_as_seconds_each(monkeypatch):
    import tenet_byoc.progress as progress

    clock = iter([0.0, 60.0])  # made at 0 s, 2 runs done at 60 s
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    bar = LineProgress(total=14, desc="sweep", unit="run", interval=5.0, file=out)
    bar.update(2)
    assert out.getvalue() == "sweep: 2/14 runs (30.0 s/run, 60 s)\n"


def _ticking_clock(monkeypatch):
    """Every read of the progress clock 10 s after the last: each update writes a line."""
    import itertools

    import tenet_byoc.progress as progress

    ticks = itertools.count(0.0, 10.0)
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(ticks))


def test_estimate_into_a_pipe_counts_steps(monkeypatch):
    from tenet_byoc import estimate

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    _ticking_clock(monkeypatch)
    estimate("gpt2", "none", "os16", prompt_len=8, decode_steps=3, progress=True)
    # the prefill and 3 decode steps, in steps (the bar said "call" before)
    assert [line.split(" (")[0] for line in err.getvalue().splitlines()] == [
        f"estimate gpt2 none: {n}/4 steps" for n in range(1, 5)]


def test_dse_into_a_pipe_counts_points(monkeypatch):
    from tenet_byoc import dse

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    _ticking_clock(monkeypatch)
    dse.explore("gpt2", ["none"], {"rows": [8, 16, 32], "cols": [16]}, prompt_len=8,
                decode_steps=1, executor="serial", progress=True, chunk_size=1)
    assert [line.split(" (")[0] for line in err.getvalue().splitlines()] == [
        f"dse: {n}/3 points" for n in range(1, 4)]


def test_the_dse_command_into_a_pipe_tells_its_points(tmp_path, capsys):
    from tenet_byoc_cli import main

    space = tmp_path / "space.yaml"
    space.write_text("rows: [8, 16]\ncols: [16]\n")
    assert main(["dse", "--model", "gpt2", "--schemes", "none", "--space", str(space),
                 "--out", str(tmp_path / "out"), "--executor", "serial", "--prompt-len", "8",
                 "--decode-steps", "1"]) == 0
    # capsys's stderr is no terminal: the end line at least, whatever the interval
    assert "dse: 2/2 points (" in capsys.readouterr().err
