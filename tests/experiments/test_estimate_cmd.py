"""``tenet-byoc estimate``'s command line: the multi-chip flags, checked all at once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tenet_byoc.experiments.estimate_cmd import _system
from tenet_byoc_cli.parser import build_parser

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _args(line: str):
    return build_parser().parse_args(shlex.split(line)[1:])


def test_every_bad_multi_chip_flag_in_one_message():
    # (a negative --link-gbps is refused by the parser itself, before this)
    args = _args("tenet-byoc estimate --model gpt2 --tp 8 --pp 20 --chips 12 --micro-batches 4 "
                 "--prompt-len 1000 --decode-steps 100")
    with pytest.raises(ValueError) as err:
        _system(args)
    text = str(err.value)
    # by hand: 8 x 20 = 160 chips; batch 1; gpt2 has 12 heads and 12 layers
    for part in ("--chips 12 must equal --tp 8 x --pp 20 = 160",
                 "--micro-batches 4 must divide --batch 1",
                 "--tp 8 must divide gpt2's 12 attention heads",
                 "--pp 20 exceeds the model's 12 layers",
                 # gpt2's context is 1,024 tokens: 1,000 cached + 100 steps do not fit
                 "--context-len (= --prompt-len) 1000 + --decode-steps 100"):
        assert part in text, text
    assert text.startswith("5 bad option(s) for gpt2")


def test_the_readme_multi_chip_line_fits_its_model():
    lines = [m.group(0) for m in re.finditer(r"tenet-byoc estimate [^`\n]*--tp [^`\n]*", README)]
    assert lines, "the README has no multi-chip estimate line"
    for line in lines:
        system = _system(_args(line))
        args = _args(line)
        assert system.chips == args.tp * args.pp == (args.chips or args.tp * args.pp)
        assert args.batch % args.micro_batches == 0


def _exit(argv, capsys) -> tuple[int, str]:
    from tenet_byoc_cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


def test_serve_refuses_the_lengths_it_would_ignore(capsys):
    # the requests bring their own lengths; an abbreviation is the same flag to argparse
    for argv in (["--serve", "128:4", "--decode-steps", "8", "--prompt-len", "64"],
                 ["--serve", "128:4", "--decode-st=8", "--prompt", "64"]):
        code, out = _exit(["estimate", *argv], capsys)
        assert code == 2
        assert "--prompt-len and --decode-steps would be ignored" in out.err, out.err


def test_an_out_folder_of_another_command_is_refused(tmp_path, capsys):
    import json

    folder = tmp_path / "results"
    folder.mkdir()
    manifest = {"command": "sweep", "command_line": "tenet-byoc sweep --out results"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "sweep.csv").write_text("model\ngpt2\n")
    code, out = _exit(["estimate", "--prompt-len", "4", "--out", str(folder)], capsys)
    assert code == 2
    assert "holds the results of `tenet-byoc sweep --out results`" in out.err, out.err
    # nothing of the estimate was written beside the sweep's files
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "sweep.csv"]


def test_several_chips_in_the_header_and_manifest(tmp_path, capsys):
    import json

    out = tmp_path / "mc"
    code, printed = _exit(["estimate", "--model", "gpt2", "--batch", "2", "--tp", "2", "--pp",
                           "2", "--micro-batches", "2", "--link-gbps", "50", "--prompt-len",
                           "4", "--decode-steps", "1", "--out", str(out)], capsys)
    assert code == 0
    assert ("4 chips (TP 2 x PP 2, 2 micro-batch(es); ring link 50 GB/s, 1 us a hop)"
            in printed.out)
    assert "The whole model: GEMMs on the array, the vector unit's steps and the links" \
        in printed.out
    system = json.loads((out / "manifest.json").read_text())["system"]
    assert system == {"chips": 4, "tensor_parallel": 2, "pipeline_parallel": 2,
                      "micro_batches": 2, "link": {"bandwidth_gbps": 50.0, "latency_us": 1.0,
                                                   "topology": "ring"}}


def test_dse_refuses_a_checkpoint_of_another_model():
    from tenet_byoc.experiments.dse_cmd import _check_same_model

    _check_same_model("gpt2", "gpt2")
    with pytest.raises(ValueError, match="--checkpoint 'gpt2' is not llama-3-8b .*"
                       "--other-model-accuracy"):
        _check_same_model("llama-3-8b", "gpt2")
