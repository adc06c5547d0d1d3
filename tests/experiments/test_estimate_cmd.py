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
    args = _args("tenet-byoc estimate --model gpt2 --tp 8 --pp 20 --chips 12 --micro-batches 4 "
                 "--link-gbps -5")
    with pytest.raises(ValueError) as err:
        _system(args)
    text = str(err.value)
    # by hand: 8 x 20 = 160 chips; batch 1; gpt2 has 12 heads and 12 layers
    for part in ("--chips 12 must equal --tp 8 x --pp 20 = 160",
                 "--micro-batches 4 must divide --batch 1", "--link-gbps must be > 0",
                 "--tp 8 must divide gpt2's 12 attention heads",
                 "--pp 20 exceeds the model's 12 layers"):
        assert part in text, text
    assert text.startswith("5 bad multi-chip option(s) for gpt2")


def test_the_readme_multi_chip_line_fits_its_model():
    lines = [m.group(0) for m in re.finditer(r"tenet-byoc estimate [^`\n]*--tp [^`\n]*", README)]
    assert lines, "the README has no multi-chip estimate line"
    for line in lines:
        system = _system(_args(line))
        args = _args(line)
        assert system.chips == args.tp * args.pp == (args.chips or args.tp * args.pp)
        assert args.batch % args.micro_batches == 0
