"""Fuzzing the relation parser: random expressions evaluate as Python evaluates them, and
random or mutated text either parses or raises ValueError (never crashes or hangs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenet_byoc import _cost_model as core
from tenet_byoc import cost_model as cm

VARS = ["i", "j", "k"]


def exprs():
    """(text, python function of (i, j, k)) pairs of supported affine expressions."""
    leaf = st.one_of(
        st.integers(0, 50).map(lambda c: (str(c), lambda p, c=c: c)),
        st.sampled_from(range(3)).map(lambda v: (VARS[v], lambda p, v=v: p[v])),
    )

    def extend(sub):
        const = st.integers(1, 9)
        return st.one_of(
            st.tuples(sub, sub).map(lambda ab: (f"({ab[0][0]} + {ab[1][0]})",
                                                lambda p, a=ab[0][1], b=ab[1][1]: a(p) + b(p))),
            st.tuples(sub, sub).map(lambda ab: (f"({ab[0][0]}-{ab[1][0]})",
                                                lambda p, a=ab[0][1], b=ab[1][1]: a(p) - b(p))),
            st.tuples(const, sub).map(lambda cs: (f"{cs[0]}*({cs[1][0]})",
                                                  lambda p, c=cs[0], e=cs[1][1]: c * e(p))),
            st.tuples(sub, const).map(lambda sc: (f"floor({sc[0][0]}/{sc[1]})",
                                                  lambda p, e=sc[0][1], c=sc[1]: e(p) // c)),
            st.tuples(sub, const).map(lambda sc: (f"({sc[0][0]})%{sc[1]}",
                                                  lambda p, e=sc[0][1], c=sc[1]: e(p) % c)),
            sub.map(lambda e: (f"(-({e[0]}))", lambda p, f=e[1]: -f(p))),
        )

    return st.recursive(leaf, extend, max_leaves=8)


POINT = st.tuples(st.integers(-20, 20), st.integers(-20, 20), st.integers(-20, 20))


@settings(max_examples=300, deadline=None)
@given(e1=exprs(), e2=exprs(), point=POINT)
def test_expressions_evaluate_like_python(e1, e2, point):
    text = f"{{S[i,j,k]->T[{e1[0]}, {e2[0]}]}}"
    assert core._apply_relation(text, list(point)) == [[e1[1](point), e2[1](point)]]


@settings(max_examples=200, deadline=None)
@given(lhs=exprs(), rhs=exprs(), op=st.sampled_from(["<", "<=", ">", ">=", "="]),
       bound=st.integers(-5, 30), point=POINT)
def test_constraints_hold_like_python(lhs, rhs, op, bound, point):
    text = f"{{S[i,j,k]: {lhs[0]} {op} {rhs[0]} and i <= {bound}}}"
    py = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
          ">=": lambda a, b: a >= b, "=": lambda a, b: a == b}[op]
    inside = py(lhs[1](point), rhs[1](point)) and point[0] <= bound
    assert core._apply_relation(text, list(point)) == ([[]] if inside else [])


def test_named_parameters_and_pieces():
    text = "[R] -> {S[i,j]->PE[i%R, j] : i < 2*R; S[i,j]->PE[0, j+R] : i >= 2*R}"
    assert core._apply_relation(text, [5, 1], {"R": 4}) == [[1, 1]]
    assert core._apply_relation(text, [9, 1], {"R": 4}) == [[0, 5]]
    assert core._apply_relation("{S[i]->T[2i + 1]}", [3]) == [[7]]


ALPHABET = "{}[]()SPETijk0123456789+-*/%<>=:;, andflormd\n"


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=60))
def test_random_text_never_crashes(text):
    try:
        core._apply_relation(text, [1, 2, 3])
    except ValueError:
        pass


@settings(max_examples=500, deadline=None)
@given(pos=st.integers(0, 60), junk=st.text(alphabet=ALPHABET, max_size=3),
       drop=st.integers(0, 3))
def test_mutated_relations_never_crash(pos, junk, drop):
    base = "{S[i,j,k]->T[floor(i/8), floor(j/8), i%8+j%8+k] : 0<=i<16 and 0<=j<16}"
    pos = min(pos, len(base))
    text = base[:pos] + junk + base[pos + drop:]
    try:
        core._apply_relation(text, [1, 2, 3])
    except ValueError as err:
        assert "'" in str(err)  # names the relation or the token


def test_pathological_inputs_are_errors_not_crashes():
    import pytest

    deep = "{S[i]->T[" + "(" * 5000 + "i" + ")" * 5000 + "]}"
    with pytest.raises(ValueError, match="nested too deeply"):
        core._apply_relation(deep, [1])
    long = "{S[i]->T[" + "+".join(["i"] * 20000) + "]}"
    with pytest.raises(ValueError, match="expression too long"):
        core._apply_relation(long, [1])
    with pytest.raises(ValueError, match="integer constant too large"):
        core._apply_relation("{S[i]->T[99999999999999999999*i]}", [1])
    with pytest.raises(ValueError, match="integer overflow"):
        core._apply_relation("{S[i]->T[9223372036854775807*i]}", [2])
    with pytest.raises(ValueError, match="overflows int64"):
        cm.Hardware(pe_domain="{PE[p]: -9000000000000000000<=p<9000000000000000000}",
                    interconnect="{PE[p]->PE[p-1]}")


@settings(max_examples=300, deadline=None)
@given(space=st.text(alphabet="ijk%+-*0123456789,() floor/", max_size=20),
       time=st.text(alphabet="ijk%+-*0123456789,() floor/", max_size=20))
def test_random_dataflows_analyse_or_raise(space, time):
    # Whatever the maps, a small GEMM gives metrics or a ValueError, never a crash.
    hw = cm.Hardware(pe_domain="{PE[p,q]: 0<=p<4 and 0<=q<4}",
                     interconnect="{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}",
                     macs_per_pe_per_cycle=4)
    try:
        df = cm.Dataflow(space=f"{{S[i,j,k]->PE[{space}]}}", time=f"{{S[i,j,k]->T[{time}]}}")
        r = cm.analyze(cm.Statement.gemm(3, 4, 2), hw, df)
    except ValueError:
        return
    assert r.macs == 24 and r.method == "enumerate"
    assert sum(t.total for t in r.tensors.values()) <= 3 * 24


@settings(max_examples=2000, deadline=None)
@given(text=st.text(max_size=40))
def test_arbitrary_unicode_text_is_a_readable_value_error(text):
    # Any text, any characters: parsed, or a ValueError whose message is a str (a cut
    # multi-byte character in a C++ message used to surface as UnicodeDecodeError).
    try:
        core._apply_relation("{S[i,j,k]->PE[" + text + "]}", [1, 2, 3])
    except ValueError as err:
        assert "'" in str(err)


def test_a_wide_character_is_quoted_whole():
    with pytest.raises(ValueError, match="unexpected character at position 15 \\(token '\uff05'\\)"):
        core._apply_relation("{S[i,j,k]->PE[i\uff058, j%8]}", [1, 2, 3])


@pytest.mark.parametrize("text", [
    "{S[i]->T[0-(-9223372036854775807-1)]}",
    "{S[i]->T[-(-9223372036854775807-1)]}",
    "{S[i]->T[4611686018427387904*2]}",
])
def test_constant_folding_overflow_is_refused_like_the_variable_form(text):
    # Python integers do not overflow: each of these leaves int64.
    with pytest.raises(ValueError, match="integer overflow in constant arithmetic"):
        core._apply_relation(text, [0])


def test_evaluation_overflow_names_the_relation_and_the_instance():
    text = "{S[i]->T[9223372036854775807*i]}"
    with pytest.raises(ValueError, match=r"overflow evaluating relation '\{S\[i\]->T\[9223372036854775807\*i\]\}' at S\[2\]"):
        core._apply_relation(text, [2])


def test_a_bound_at_the_edge_of_int64_is_named():
    with pytest.raises(ValueError, match="bound 9223372036854775807 of variable 'p' is outside"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<=9223372036854775807}",
                    interconnect="{PE[p]->PE[p-1]}")
