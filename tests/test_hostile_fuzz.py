"""Fuzzing what a user writes by hand: design files (a preset's JSON form with fields changed,
removed, added or retyped, written as YAML or JSON) and request mixes (inline text, JSON and
CSV files). Every input is read, or refused with a ValueError / TypeError naming the file or
the field; nothing crashes, hangs, or is read as another number.

The default run tries a few dozen of each; ``-m slow`` tries thousands.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenet_byoc import Accelerator
from tenet_byoc import _cost_model as cm
from tenet_byoc.design_file import design_form
from tenet_byoc.experiments.serving import parse_requests
from tenet_byoc.accelerators import PRESETS, preset

# Design files write each quantity once (tenet_byoc.design_file.design_form).
FORMS = {name: design_form(preset(name)) for name in sorted(PRESETS)}

LEAVES = st.one_of(
    st.none(), st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, 1.7e308, 5e-324, -0.0, 0.5, 4.6000000000000005]),
    st.text(max_size=12),
    st.sampled_from(["{PE[p,q]: 0<=p<100000 and 0<=q<100000}", "{S[i,j,k]->PE[i, j]}",
                     "os", "ws", "is", "auto", "default", "<!--", "\x00", "é"]),
)
VALUES = st.recursive(LEAVES, lambda sub: st.one_of(
    st.lists(sub, max_size=3), st.dictionaries(st.text(max_size=8), sub, max_size=3)),
    max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def design_files(draw):
    """(a preset's design form with 1-3 changes, 'yaml' or 'json')."""
    form = json.loads(json.dumps(FORMS[draw(st.sampled_from(sorted(FORMS)))]))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(form) if p]
        path = draw(st.sampled_from(paths))
        parent = form
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["set", "set", "set", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
        else:
            parent[path[-1]] = draw(VALUES)
    return form, draw(st.sampled_from(["yaml", "json"]))


def check_design_file(tmp_path, form, kind) -> None:
    path = tmp_path / f"design.{kind}"
    text = (yaml.safe_dump(form, allow_unicode=True) if kind == "yaml"
            else json.dumps(form))  # JSON may then hold NaN / Infinity: refused by name
    path.write_text(text, encoding="utf-8")
    try:
        acc = Accelerator.from_file(path)
    except (ValueError, TypeError) as err:
        assert str(path) in str(err), err
        return
    # Accepted: the value is the file's (its JSON form read back is itself) and charges a
    # GEMM to a finite, positive latency, or refuses the GEMM with a ValueError.
    assert Accelerator.from_json(acc.to_json()) == acc
    try:
        charge = cm.charge(cm.GemmCall(m=33, n=17, k=40), acc)
    except ValueError:
        return
    assert math.isfinite(charge.memory.cycles) and charge.memory.cycles > 0
    assert math.isfinite(charge.energy.total_pj) and charge.energy.total_pj >= 0


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[
        HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@fuzz(40)
@given(case=design_files())
def test_design_files(tmp_path, case):
    check_design_file(tmp_path, *case)


@pytest.mark.slow
@fuzz(3000)
@given(case=design_files())
def test_design_files_many(tmp_path, case):
    check_design_file(tmp_path, *case)


# ----------------------------------------------------------------------------------------
# Request mixes
# ----------------------------------------------------------------------------------------

INLINE = st.text(alphabet="0123456789:,. -+e_x\t", max_size=24)
ITEMS = st.one_of(
    st.lists(st.one_of(st.integers(-3, 2**40), st.floats(), st.text(max_size=4), st.none(),
                       st.booleans()), min_size=0, max_size=3),
    st.dictionaries(st.sampled_from(["prompt_len", "output_len", "x"]),
                    st.one_of(st.integers(-3, 2**40), st.floats(), st.text(max_size=4)),
                    max_size=3),
    st.text(max_size=8), st.integers(), st.none())
CELLS = st.one_of(st.integers(-3, 10**6).map(str), st.text(alphabet="0123456789.-e :",
                                                             max_size=6))


def reference_inline(text: str) -> list[tuple[int, int]] | None:
    """The requests of ``P:O,P:O``, each a pair of whole numbers >= 1 (spaces around either
    allowed), or None if any item is not one: what the parser should accept, by regex."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        m = re.fullmatch(r"\s*\+?(\d+(?:_\d+)*)\s*:\s*\+?(\d+(?:_\d+)*)\s*", item)
        if m is None or not all(int(g.replace("_", "")) >= 1 for g in m.groups()):
            return None
        out.append(tuple(int(g.replace("_", "")) for g in m.groups()))
    return out or None


def whole(value) -> int | None:
    """A JSON value as a token count: an int (not a bool), or a string of one; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*[+-]?(\d+(?:_\d+)*)\s*", value)
        return int(value.strip()) if m else None
    return None


def reference_item(item) -> tuple[int, int] | None:
    if isinstance(item, dict):
        if not {"prompt_len", "output_len"} <= set(item):
            return None
        pair = (whole(item["prompt_len"]), whole(item["output_len"]))
    elif isinstance(item, list) and len(item) == 2:
        pair = (whole(item[0]), whole(item[1]))
    elif isinstance(item, str) and item.count(":") == 1:
        return reference_inline(item) and reference_inline(item)[0]
    else:
        return None
    return pair if None not in pair and min(pair) >= 1 else None


def check_mix(spec, want: list[tuple[int, int]] | None, name: str) -> None:
    try:
        got = [(r.prompt_len, r.output_len) for r in parse_requests(spec)]
    except ValueError as err:
        assert want is None, (spec, want, err)
        assert name in str(err), err
        return
    assert got == want, spec


@fuzz(60)
@given(text=INLINE)
def test_inline_mixes(text):
    check_mix(text, reference_inline(text), repr(text))


def check_json_mix(tmp_path, items) -> None:
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(items))
    refs = [reference_item(i) for i in items]
    check_mix(path, None if not refs or None in refs else refs, str(path))


def check_csv_mix(tmp_path, rows) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("prompt_len,output_len\n" + "".join(f"{p},{o}\n" for p, o in rows))
    refs = [(whole(p), whole(o)) for p, o in rows]
    ok = refs and all(None not in r and min(r) >= 1 for r in refs)
    check_mix(path, refs if ok else None, str(path))


@fuzz(40)
@given(items=st.lists(ITEMS, max_size=4), rows=st.lists(st.tuples(CELLS, CELLS), max_size=4))
def test_file_mixes(tmp_path, items, rows):
    check_json_mix(tmp_path, items)
    check_csv_mix(tmp_path, rows)


@pytest.mark.slow
@fuzz(3000)
@given(text=INLINE, items=st.lists(ITEMS, max_size=6),
       rows=st.lists(st.tuples(CELLS, CELLS), max_size=6))
def test_mixes_many(tmp_path, text, items, rows):
    check_mix(text, reference_inline(text), repr(text))
    check_json_mix(tmp_path, items)
    check_csv_mix(tmp_path, rows)
