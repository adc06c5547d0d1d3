"""How often a weight is dequantized (QuantRecipe.dequant_rows, src/cost_model/charge.h): once
per call, or again for every R output rows as a kernel that dequantizes inside each output
tile does; the counts by hand, the edge dequantizer's cycles, the JSON form and refusals."""

from __future__ import annotations

import json
import math

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset


def _call(m: int, rows: int, n: int = 64, k: int = 128, batch: int = 1) -> cm.GemmCall:
    recipe = cm.QuantRecipe(place="weight", weight="group", weight_group=32, dequant_rows=rows)
    return cm.GemmCall(m=m, n=n, k=k, batch=batch, bits_a=16, bits_b=4, bits_c=16,
                       recipe=recipe)


@pytest.mark.parametrize("m, rows, tiles", [(1, 16, 1), (16, 16, 1), (17, 16, 2),
                                            (100, 16, 7), (4096, 16, 256), (100, 0, 1)])
def test_the_weight_is_dequantized_once_per_tile_of_rows(m, rows, tiles):
    f = cm.charge(_call(m, rows), preset("os16")).ledger_fields()
    assert f["dequant_ops"] == 64 * 128 * tiles


def test_a_batched_call_dequantizes_per_batch_element_and_tile():
    f = cm.charge(_call(40, 16, batch=3), preset("os16")).ledger_fields()
    assert f["dequant_ops"] == 3 * 64 * 128 * math.ceil(40 / 16)


def test_the_edge_dequantizer_takes_every_tile_at_its_rate():
    # os16's edge dequantizer converts 16 four-bit codes per cycle beside the array:
    # 7 tiles x 64 x 128 codes / 16 = 3,584 cycles, and the call is no shorter.
    ch = cm.charge(_call(100, 16), preset("os16")).ledger_fields()
    assert ch["edge_cycles"] == 7 * 64 * 128 // 16
    assert ch["cycles"] >= ch["edge_cycles"]
    once = cm.charge(_call(100, 0), preset("os16")).ledger_fields()
    assert once["edge_cycles"] == 64 * 128 // 16


def test_hopper_dequantizes_int4_on_its_cuda_cores():
    for name in ("h100_sxm", "h200"):
        edge = preset(name).edge_dequantizer
        assert edge.bits == (4,) and edge.elements_per_cycle == 32  # 128 lanes / 4 ops


def test_json_form_round_trips_and_an_older_stamp_reads_as_once_per_weight():
    r = cm.QuantRecipe(place="weight", weight="channel", dequant_rows=16)
    doc = json.loads(r.to_json())
    assert doc["dequant_rows"] == 16 and cm.QuantRecipe.from_json(r.to_json()) == r
    # a recipe stamped before the field existed has no key: it reads as 0 (once per weight)
    plain = json.loads(cm.QuantRecipe(place="weight", weight="channel").to_json())
    del plain["dequant_rows"]
    assert cm.QuantRecipe.from_json(json.dumps(plain)).dequant_rows == 0
    assert r != plain and "dequant_rows=16" in repr(r)


@pytest.mark.parametrize("kwargs, message", [
    ({"place": "weight", "weight": "channel", "dequant_rows": -1}, "dequant_rows"),
    ({"place": "output", "weight": "channel", "dequant_rows": 16},
     "dequant_rows.*0 unless place is 'weight'"),
])
def test_bad_dequant_rows_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cm.QuantRecipe(**kwargs)
    doc = json.loads(cm.QuantRecipe(place=kwargs["place"], weight="channel").to_json())
    doc["dequant_rows"] = kwargs["dequant_rows"]
    with pytest.raises(ValueError, match=message):
        cm.QuantRecipe.from_json(json.dumps(doc))
