"""The cost model's values (QuantRecipe, GemmCall, Accelerator) and the entry points taking them.

References: hand-derived figures (a roofline), QuantScheme's own recipe dicts, the values'
JSON forms read back, and the deprecated keyword functions, which must equal the new API.
"""

from __future__ import annotations

import json
import pickle
import warnings

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset
from tenet_byoc.quantization import get_scheme

CALL = cm.GemmCall(m=128, n=768, k=768, bits_a=8, bits_b=8)


def test_roofline_of_a_call_is_the_hand_derived_bound():
    # os16: 256 PEs at 1 MAC per cycle, 256 DRAM bits per cycle.
    # MACs 128 * 768 * 768 = 75,497,472 -> 294,912 cycles; compulsory DRAM bits
    # 128*768*8 + 768*768*8 + 128*768*32 = 8,650,752 -> 33,792 cycles. The larger wins.
    acc = preset("os16")
    assert cm.roofline(CALL, acc) == 294_912
    assert cm.charge(CALL, acc).memory.roofline_cycles == 294_912


def test_values_round_trip_through_json_and_pickle():
    acc = preset("tpu_v1", mapping="auto", objective="energy")
    recipe = cm.QuantRecipe(place="weight", weight="group", weight_group=32)
    call = cm.GemmCall(m=7, n=96, k=128, bits_a=16, bits_b=4, bits_c=16, scheme="w4a16",
                       recipe=recipe)
    assert cm.QuantRecipe.from_json(recipe.to_json()) == recipe
    assert cm.GemmCall.from_json(call.to_json()) == call
    assert Accelerator.from_json(acc.to_json()) == acc
    for value in (recipe, call, acc):
        again = pickle.loads(pickle.dumps(value))
        assert again == value and type(again) is type(value) and hash(again) == hash(value)
    assert repr(call).startswith("GemmCall(m=7, n=96, k=128, bits_a=16, bits_b=4")
    assert "weight_group=32" in repr(recipe) and "tpu_v1" in repr(acc)
    assert acc.objective == "energy" and acc.replace(mapping="default").objective is None


@pytest.mark.parametrize("scheme", ["w8a8_per_channel_per_token", "w4a16_group128", "mxfp4"])
def test_recipe_of_a_scheme_dict_is_its_fields(scheme):
    s = get_scheme(scheme)
    d = s.recipe().as_dict()
    recipe = cm.QuantRecipe.from_dict(d)
    assert recipe == s.recipe() and list(d) == list(cm.QuantRecipe.FIELDS)
    # GemmCall takes the dict, the QuantRecipe or the scheme itself: one call.
    calls = {cm.GemmCall(m=4, n=256, k=256, bits_a=s.bits()[0], bits_b=s.bits()[1],
                         bits_c=s.bits()[2], scheme=s.name, recipe=r)
             for r in (d, recipe, s)}
    assert len(calls) == 1


def test_the_recipe_fields_are_written_once_in_charge_h():
    # the field list as the header's text spells it (read here with a regex)
    import re
    from pathlib import Path

    header = (Path(__file__).parents[2] / "src/cost_model/charge.h").read_text()
    listed = re.findall(r"^\s*X\(\w+, (\w+),", header, flags=re.M)
    assert tuple(listed) == cm.QuantRecipe.FIELDS and len(listed) == 13
    # three valid recipes that set every field off its default, by keyword
    a = {"place": "k_group", "k_group": 32, "weight": "group", "weight_group": 32,
         "activation": "tensor", "activation_static": True, "scale_bits": 8,
         "zero_point_bits": 4, "accumulator_bits": 16, "weight_batched": True}
    b = {"place": "output", "weight": "group_n", "weight_group": 8, "activation": "group",
         "activation_group": 64, "scale_bits": 32}
    c = {"place": "weight", "weight": "channel", "dequant_rows": 16, "float_codes": True}
    default = cm.QuantRecipe()
    assert set(a) | set(b) | set(c) == set(listed)
    for fields in (a, b, c):
        r = cm.QuantRecipe(**fields)
        for name in listed:  # attribute, dict and JSON forms, replace: the same fields
            want = fields.get(name, getattr(default, name))
            assert getattr(r, name) == r.as_dict()[name] == want
            assert json.loads(r.to_json())[name] == want
        assert list(r.as_dict()) == listed
        assert cm.QuantRecipe.from_json(r.to_json()) == r == pickle.loads(pickle.dumps(r))
        assert default.replace(**fields) == r and r != default
        assert eval(repr(r), {"QuantRecipe": cm.QuantRecipe}) == r  # noqa: S307
    with pytest.raises(ValueError, match="weight_grup"):
        cm.QuantRecipe(weight_grup=3)


def test_recipe_weight_batched_is_optional_and_unknown_keys_are_refused():
    d = get_scheme("w8a16_per_channel").recipe().as_dict()
    d.pop("weight_batched", None)
    assert cm.QuantRecipe.from_dict(d).weight_batched is False
    with pytest.raises(ValueError, match="weight_grup"):
        cm.QuantRecipe.from_dict({**d, "weight_grup": 3})
    with pytest.raises(ValueError, match="scale_bits"):
        cm.QuantRecipe(scale_bits=12)


def test_call_refuses_a_recipe_and_explicit_extra_work_together():
    with pytest.raises(ValueError, match="either a quantization recipe or extra_read_bits"):
        cm.GemmCall(m=2, n=2, k=2, recipe=cm.QuantRecipe(place="output", weight="tensor",
                                                         activation="tensor"),
                    extra_ops=3)


def test_the_old_keyword_functions_are_gone():
    # the keyword forms kept one release are deleted: each call crosses as a GemmCall, and
    # the keyword form of a kept name is refused as a TypeError naming the expected value
    acc = preset("os16")
    for name in ("charge_gemm", "analyze_gemm", "roofline_cycles", "accelerator_parts",
                 "validate_accelerator", "serialize_accelerator", "parse_accelerator",
                 "accelerator_mapping_search"):
        assert not hasattr(cm, name), name
    with pytest.raises(TypeError, match="GemmCall"):
        cm.analyze_memory(9, 64, 96, acc.hardware, acc.dataflow, acc.memory)
    with pytest.raises(TypeError, match="GemmCall"):
        cm.search_mapping(9, 64, 96, acc.hardware, acc.memory)
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        cm.MappingSearch(acc.hardware, acc.memory).best(9, 64, 96)
    call = cm.GemmCall(m=9, n=64, k=96, bits_a=8, bits_b=8, bits_c=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API that stays does not warn
        cm.charge(call, acc)


def test_accelerator_json_bad_text_is_a_value_error():
    with pytest.raises(ValueError, match="lone surrogate"):
        Accelerator.from_json('{"name": "\ud800"}')
    big = preset("os16").to_json().replace('"name":"os16"', '"name":"' + "x" * (2 << 20) + '"')
    with pytest.raises(ValueError, match="at most 1048576"):
        Accelerator.from_json(big)
    with pytest.raises(TypeError, match="must be a str"):
        Accelerator.from_json(b"{}")


def test_preset_names_are_checked_with_suggestions():
    with pytest.raises(ValueError, match="did you mean 'tpu_v1'"):
        preset("tpuv1")
    with pytest.raises(TypeError, match="preset name must be a str"):
        preset(["os16"])
