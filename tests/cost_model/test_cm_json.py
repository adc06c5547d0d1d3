"""The accelerator's JSON reader: repeated keys, deep nesting and oversized relation text are
refused by name before any work; Python's json module is the reference for what is valid."""

from __future__ import annotations

import json

import pytest

from tenet_byoc import _cost_model as core
from tenet_byoc.accelerators import Accelerator, preset

LIMIT = 65536  # characters of one relation text (relation.h, kMaxRelationChars)


def _good() -> str:
    return preset("os16").to_json()


def test_a_repeated_key_is_refused_naming_the_object_and_key():
    text = _good()
    doc = json.loads(text)
    # Python's json keeps the last of two equal keys; ours must not pick one silently.
    dup = text.replace('"hardware":{"name":', '"hardware":{"name":"other","name":', 1)
    assert dup != text and json.loads(dup) == doc
    with pytest.raises(ValueError, match="accelerator.hardware has the key 'name' twice"):
        Accelerator.from_json(dup)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_nesting_is_refused_not_a_crash(depth):
    with pytest.raises(ValueError, match="nesting deeper than 64"):
        Accelerator.from_json("[" * depth + "]" * depth)


def test_nesting_within_the_limit_reaches_the_field_check():
    # 64 levels parse; the value is then refused for what it is, not for its depth.
    with pytest.raises(ValueError, match="accelerator must be a JSON object"):
        Accelerator.from_json("[" * 64 + "]" * 64)


@pytest.mark.parametrize("section,key", [("hardware", "pe_domain"), ("hardware", "interconnect"),
                                         ("dataflow", "space"), ("dataflow", "time")])
def test_relation_text_over_the_limit_names_the_field(section, key):
    doc = json.loads(_good())
    original = doc[section][key]
    # Whitespace keeps the relation itself valid: only its length is wrong.
    doc[section][key] = original + " " * (LIMIT + 1 - len(original))
    assert len(doc[section][key]) == LIMIT + 1
    with pytest.raises(ValueError, match=rf"accelerator\.{section}\.{key} is {LIMIT + 1} "
                                         rf"characters; at most {LIMIT} are accepted"):
        Accelerator.from_json(json.dumps(doc))
    # At the limit the same padded text is accepted and reads back as written.
    doc[section][key] = original + " " * (LIMIT - len(original))
    parsed = Accelerator.from_json(json.dumps(doc))
    part = parsed.hardware if section == "hardware" else parsed.dataflow
    assert getattr(part, key) == doc[section][key]


def test_a_50_mb_accelerator_is_refused_before_parsing():
    doc = json.loads(_good())
    doc["dataflow"]["space"] = "{S[i,j,k]->PE[" + "i+" * 25_000_000 + "0,0]}"
    text = json.dumps(doc)
    # The binding checks the size too (in bytes); either check names the size and the limit.
    with pytest.raises(ValueError, match=rf"(?i)accelerator JSON is {len(text)} "
                                         rf"(characters|bytes); at most {2**20} are accepted"):
        Accelerator.from_json(text)


def test_the_relation_parser_itself_bounds_its_text():
    text = "{S[i]->T[i" + "+0" * LIMIT + "]}"
    with pytest.raises(ValueError, match=rf"is {len(text)} characters of relation text; "
                                         rf"at most {LIMIT} are accepted"):
        core._apply_relation(text, [1])


# The 0-based character at which reading failed, counted by hand: 'h' of hello, the '}' where
# a key belongs, the '}' that ends the literal "tru" (not a word), the 'x' after the value.
@pytest.mark.parametrize("text,position", [("hello", 0), ('{"a":1,}', 7), ('{"a": tru}', 9),
                                           ("[1, 2] x", 7)])
def test_a_syntax_error_names_its_character(text, position):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the reference agrees that the text is not JSON
    with pytest.raises(ValueError, match=f"JSON at character {position}: "):
        Accelerator.from_json(text)


def test_numbers_outside_their_type_are_refused_by_field():
    doc = json.loads(_good())
    doc["hardware"]["l1_bytes"] = 2**63  # one past int64
    with pytest.raises(ValueError, match=r"accelerator.hardware.l1_bytes must be an integer"):
        Accelerator.from_json(json.dumps(doc))
    text = json.dumps(json.loads(_good())).replace('"clock_ghz": 1.0', '"clock_ghz": 1e400')
    assert "1e400" in text
    with pytest.raises(ValueError, match="JSON at character .*number overflow"):
        Accelerator.from_json(text)
