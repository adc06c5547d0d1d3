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
from kernels import tile  # noqa: E402

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


def test_the_sgemm_tile_rule_is_the_profiled_kernels():
    """The h200 preset charges an fp32 call of 9 to 64 rows as its thread block's rows (its
    float32 unit's row_tiles): the rule must name the tile of the kernel the H200 ran (its name,
    in kernels.jsonl) for at least 9 calls in 10 of 1 to 64 rows (the rest: cuBLAS's other
    choices by shape, e.g. GPT-2's 768 x 768)."""
    import json

    from tenet_byoc.accelerators import preset

    unit = preset("h200").precision.lookup(32, 32)
    agree = total = 0
    with open(DATA / "h200" / "kernels.jsonl", encoding="utf-8") as f:
        for row in map(json.loads, f):
            if row.get("format") != "fp32" or "kernels" not in row or row["M"] > 64:
                continue
            ran = tile(max(row["kernels"], key=lambda k: k["us"])["name"])
            rule = unit.row_tile_for(row["M"])
            total += 1
            agree += (ran[0] == rule) if rule else (ran is None or ran[0] >= row["M"])
    assert total >= 150 and agree >= 0.9 * total, (agree, total)
