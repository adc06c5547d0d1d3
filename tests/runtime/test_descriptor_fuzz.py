"""Mutated kernel descriptors and exported libraries never crash or hang the process: each
is refused with a ValueError/TypeError, or loads and runs (see descriptor_fuzz.py)."""

from __future__ import annotations

import json
import time

import descriptor_fuzz as fuzz
import pytest

import tenet_byoc
from relax_testing import matmul_module
from tenet_byoc.accelerators import preset


@pytest.fixture(scope="module")
def base():
    return fuzz.base_descriptor(json.loads(preset("os16").to_json()))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """An exported library, its descriptor bytes, and argument shapes by symbol."""
    ex = tenet_byoc.build(matmul_module((3, 8), (4, 8), transposed=True, bias=True))
    module = next(m for m in ex.mod.imports if m.kind == "tenet")
    descriptor = module.inspect_source()
    (func,) = json.loads(descriptor)["functions"]
    (step,) = func["steps"]
    shapes = [None] * 3
    for role, shape in (("lhs", [3, 8]), ("rhs", [4, 8]), ("bias", [4])):
        shapes[step[role]] = shape
    path = tmp_path_factory.mktemp("lib") / "base.so"
    ex.export_library(str(path))
    return path.read_bytes(), descriptor.encode(), {func["symbol"]: shapes + [[3, 4]]}


def test_the_unmutated_cases_run(base, library, tmp_path):
    # The fuzz is only worth something if its base cases load and compute.
    cases = [{"kind": "descriptor", "data": fuzz.base64.b64encode(json.dumps(base).encode())
              .decode()}]
    lib, _, hints = library
    path = tmp_path / "same.so"
    path.write_bytes(lib)
    cases.append({"kind": "library", "path": str(path), "hints": hints})
    result = fuzz.run_cases(cases, tmp_path)
    assert (result.ran, result.refused, result.crashes, result.hangs) == (2, 0, [], [])


def test_a_worker_that_dies_is_reported_and_the_rest_still_run(base, tmp_path):
    good = {"kind": "descriptor",
            "data": fuzz.base64.b64encode(json.dumps(base).encode()).decode()}
    result = fuzz.run_cases([good, {"kind": "segfault"}, good], tmp_path)
    assert [(case, rc) for case, rc, _ in result.crashes] == [(1, -11)]
    assert (result.ran, result.hangs) == (2, [])


def _check(result: fuzz.FuzzResult, n: int) -> None:
    assert result.cases == n
    assert result.crashes == [] and result.hangs == [], (result.crashes, result.hangs)
    assert result.bad_errors == []
    assert result.ran + result.refused == n
    assert result.ran > 0 and result.refused > 0


def test_small_fuzz(base, library, tmp_path):
    cases = fuzz.make_descriptor_cases(base, 300, seed=1)
    cases += fuzz.make_library_cases(*library, n=40, seed=2, folder=tmp_path)
    _check(fuzz.run_cases(cases, tmp_path, batch=400), len(cases))


@pytest.mark.slow
def test_ten_thousand_mutations(base, library, tmp_path):
    start = time.time()
    cases = fuzz.make_descriptor_cases(base, 10_000, seed=10)
    cases += fuzz.make_library_cases(*library, n=2_000, seed=11, folder=tmp_path)
    result = fuzz.run_cases(cases, tmp_path, batch=1000)
    print(f"\n{result.cases} cases: {len(result.crashes)} crashes, {len(result.hangs)} hangs, "
          f"{result.refused} refused, {result.ran} ran, {time.time() - start:.0f} s")
    _check(result, len(cases))
