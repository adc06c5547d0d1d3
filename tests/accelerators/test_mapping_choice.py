"""How an accelerator's mapping is chosen from Python: preset, resolve, Accelerator, and errors.

References: the values the arguments name (hand-written), and a preset's own default mapping.
"""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset, resolve


def test_preset_and_resolve_choose_auto_and_default():
    auto = preset("os16", mapping="auto")
    assert (auto.mapping, auto.objective) == ("auto", "latency")
    assert preset("tpu_v1", mapping="auto", objective="edp").objective == "edp"
    assert (preset("os16").mapping, preset("os16").objective) == ("default", None)
    assert preset("os16", mapping="default").mapping == "default"
    assert resolve(None, mapping="auto").name == "os16"
    assert resolve("ws16", mapping="auto", objective="energy").objective == "energy"
    # "default" takes a searched accelerator back to its own default mapping.
    fixed = resolve(auto, mapping="default")
    assert (fixed.mapping, fixed.objective) == ("default", None)
    assert fixed.to_json() == preset("os16").to_json()
    # None keeps the accelerator's own choice; an objective alone retunes a search.
    assert resolve(auto) is auto
    assert resolve(auto, objective="edp").objective == "edp"
    assert resolve(resolve(auto, objective="edp"), mapping="auto").objective == "edp"


def test_accelerator_takes_auto_and_objective():
    acc = Accelerator.systolic("ws", 8, 8, mapping="auto", objective="energy")
    assert (acc.mapping, acc.objective) == ("auto", "energy")
    # The objective reaches the charge: the energy search trades cycles for energy.
    call = cm.GemmCall(m=100, n=300, k=200)
    latency = cm.charge(call, Accelerator.systolic("ws", 8, 8, mapping="auto")).ledger_fields()
    energy = cm.charge(call, acc).ledger_fields()
    assert energy["energy_pj"] < latency["energy_pj"]
    assert energy["cycles"] >= latency["cycles"]
    back = Accelerator.from_json(acc.to_json())
    assert (back.mapping, back.objective, back.to_json()) == ("auto", "energy", acc.to_json())
    assert Accelerator.systolic("ws", 8, 8, mapping="auto").objective == "latency"


@pytest.mark.parametrize("call, words", [
    (lambda: preset("os16", mapping="search"), ["mapping", "'auto'", "'default'", "'search'"]),
    (lambda: resolve("os16", mapping="given"), ["mapping", "'auto'", "'default'"]),
    (lambda: preset("os16", mapping="auto", objective="speed"),
     ["objective", "latency", "energy", "edp", "speed"]),
    (lambda: resolve("os16", objective="energy"), ["objective", "only with mapping='auto'"]),
    (lambda: resolve("os16", mapping="default", objective="edp"),
     ["objective", "mapping='auto'"]),
    (lambda: Accelerator.systolic("os", 8, 8, mapping="fixed"),
     ["Accelerator.mapping", "'auto'", "'default'", "TileMapping"]),
    (lambda: Accelerator.systolic("os", 8, 8, objective="edp"),
     ["Accelerator.objective", "only with mapping='auto'"]),
    (lambda: Accelerator.systolic("os", 8, 8, mapping="auto", objective="time"),
     ["Accelerator.objective", "latency", "energy", "edp"]),
])
def test_bad_mapping_choices_name_the_field(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_user_given_mappings_are_never_replaced():
    tiles = cm.TileMapping(16, 32, 64, "mnk")
    given = Accelerator.systolic("os", 16, 16, mapping=tiles)
    assert resolve(given, mapping="auto") is given
    assert resolve(given, mapping="default") is given


def test_the_old_name_fixed_is_refused_naming_the_choices():
    for old in (lambda: preset("os16", mapping="fixed"),
                lambda: resolve(preset("os16", mapping="auto"), mapping="fixed")):
        with pytest.raises(ValueError, match="mapping must be one of None, 'default' or "
                           "'auto', got 'fixed'"):
            old()


def test_the_command_line_takes_default_and_refuses_the_old_fixed(capsys):
    from tenet_byoc_cli.parser import build_parser

    parser = build_parser()
    args = parser.parse_args(["estimate", "--mapping", "default"])
    assert args.mapping == "default" and capsys.readouterr().err == ""
    for old in ("fixed", "best"):
        with pytest.raises(SystemExit):
            parser.parse_args(["estimate", "--mapping", old])
        assert f"invalid choice: '{old}'" in capsys.readouterr().err
