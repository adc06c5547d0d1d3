"""The measured silicon files under benchmarks/silicon/data/ are what their raw records say.

Each measured folder keeps the measurement script's own JSON lines (``silicon.jsonl``) beside the
CSVs the benchmarks read; converting the record again must give the committed CSVs byte for byte,
so no CSV row can be edited by hand without the test failing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "silicon" / "data"
sys.path.insert(0, str(DATA.parent))
from jsonl_to_csv import convert  # noqa: E402

RECORDED = sorted(p.parent for p in DATA.glob("*/silicon.jsonl"))


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: p.name)
def test_csvs_are_the_record_converted(folder, tmp_path):
    written = convert(folder / "silicon.jsonl", tmp_path)
    assert written, folder
    for name in written:
        assert (tmp_path / f"{name}.csv").read_bytes() == (folder / f"{name}.csv").read_bytes(), name


def test_a_broken_record_names_its_line(tmp_path):
    bad = tmp_path / "silicon.jsonl"
    bad.write_text('{"section": "peak", "what": "x", "ms": 1.0, "tflops": 2.0}\n{"section": "gemm"\n')
    with pytest.raises(ValueError, match=r"silicon.jsonl: line 2 is not JSON"):
        convert(bad, tmp_path / "out")
    bad.write_text('{"section": "vector", "tokens": 4, "ms": 1.0}\n')
    with pytest.raises(ValueError, match=r"line 1 \(vector\) has no field 'op'"):
        convert(bad, tmp_path / "out")
