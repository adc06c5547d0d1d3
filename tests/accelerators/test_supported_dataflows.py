"""The dataflows an array supports: a field of the accelerator that mapping="auto" respects.

The reference for a restricted search is ``cm.search_mapping`` called directly with the space
written out here by hand (the supported presets on the array, each streamed dimension also cut
into 1 and 4 array edges, as the cost model's README declares for "auto"), not read from the
charge path.
"""

from __future__ import annotations

import json

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset
from tenet_data import TENET_DATA

# Shapes where an unrestricted search picks os or is on the 16x16 and 256x256 arrays (M = 1
# decode GEMVs, a long-K GEMM, MLP0's layer) and ones where ws is natural.
CALLS = [(1, 2304, 768), (200, 2000, 2000), (64, 64, 4096), (512, 96, 64), (37, 200, 96)]


def _call(m: int, n: int, k: int, bits: int) -> cm.GemmCall:
    return cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=32)


def _direct(acc: Accelerator, presets: tuple[str, ...], m: int, n: int, k: int,
            bits: int) -> cm.MappingChoice:
    edge = max(acc.dataflow.rows, acc.dataflow.cols)
    return cm.MappingSearch(
        acc.hardware,
        acc.memory,
        dataflows=presets,
        rows=acc.dataflow.rows,
        cols=acc.dataflow.cols,
        objective="latency",
        precision=acc.precision,
        stream_tiles=(edge, 4 * edge),
    ).best(cm.GemmCall(m=m, n=n, k=k, bits_a=bits, bits_b=bits, bits_c=32))


def test_presets_say_what_their_arrays_run():
    assert preset("tpu_v1").supported_dataflows == ("ws",)
    for name in ("os16", "ws16", "is16", "os128", "tenet_os8"):
        assert set(preset(name).supported_dataflows) == {"os", "ws", "is"}, name
    p = TENET_DATA / "pe_array" / "systolic.p"
    m = TENET_DATA / "mapping" / "matmul_systolic_os.m"
    assert Accelerator.from_tenet_files(p, m).supported_dataflows == ()


@pytest.mark.parametrize("call", CALLS)
def test_auto_on_tpu_v1_picks_weight_stationary_only(call):
    acc = preset("tpu_v1", mapping="auto")
    got = cm.charge(_call(*call, bits=8), acc).memory
    assert got.mapping.startswith("ws"), got.mapping
    # The call its array computes: weights in whole 256 x 256 tiles.
    tiles = cm.computed_call(_call(*call, bits=8), acc)
    ref = _direct(acc, ("ws",), tiles.m, tiles.n, tiles.k, bits=8)
    assert (got.mapping, got.cycles) == (ref.metrics.mapping, ref.metrics.cycles)


@pytest.mark.parametrize("call", CALLS)
def test_auto_searches_exactly_the_supported_presets(call):
    acc = Accelerator.systolic("os", 16, 16, supported_dataflows=("is", "os"), mapping="auto")
    got = cm.charge(_call(*call, bits=32), acc).memory
    assert got.mapping.split()[0] in ("os", "is"), got.mapping
    ref = _direct(acc, ("os", "is"), *call, bits=32)
    assert (got.mapping, got.cycles) == (ref.metrics.mapping, ref.metrics.cycles)


def test_restriction_changes_a_choice():
    # On MLP0's layer the unrestricted search leaves ws (the issue's 11.2 TOPS came from an
    # os mapping), so the field is not a no-op there.
    call = (200, 2000, 2000)
    acc = preset("tpu_v1")
    free = _direct(acc, ("os", "ws", "is"), *call, bits=8)
    only_ws = _direct(acc, ("ws",), *call, bits=8)
    assert not free.metrics.mapping.startswith("ws")
    assert free.metrics.cycles < only_ws.metrics.cycles


def test_json_round_trip_and_old_form():
    acc = preset("tpu_v1", mapping="auto")
    data = json.loads(acc.to_json())
    assert data["supported_dataflows"] == ["ws"]
    assert Accelerator.from_json(acc.to_json()) == acc
    # JSON written before the field existed reads as today's default: all three presets.
    del data["supported_dataflows"]
    del data["memory"]["whole_stationary_tiles"]  # newer still, and needs one dataflow
    old = Accelerator.from_json(json.dumps(data))
    assert set(old.supported_dataflows) == {"os", "ws", "is"}


@pytest.mark.parametrize(("given", "words"), [
    (("os",), ["supported_dataflows", "'ws'", "does not run it"]),
    (("ws", "xs"), ["supported_dataflows[1]", "'xs'", "'os', 'ws' or 'is'"]),
    (("ws", "ws"), ["supported_dataflows", "twice"]),
    ((), ["supported_dataflows", "empty"]),
    ("ws", ["supported_dataflows", "list"]),
])
def test_bad_supported_dataflows_name_the_field(given, words):
    with pytest.raises(ValueError) as err:
        Accelerator.systolic("ws", 16, 16, supported_dataflows=given)
    for word in words:
        assert word in str(err.value)


def test_a_given_dataflow_outside_the_list_is_refused():
    acc = preset("tpu_v1")
    with pytest.raises(ValueError, match=r"supported_dataflows \['ws'\]"):
        acc.replace(dataflow=cm.Dataflow.preset("os", 256, 256))
    data = json.loads(acc.to_json())
    data["supported_dataflows"] = ["os"]
    with pytest.raises(ValueError, match="supported_dataflows"):
        Accelerator.from_json(json.dumps(data))
    data["supported_dataflows"] = "ws"
    with pytest.raises(ValueError, match="accelerator.supported_dataflows must be a list"):
        Accelerator.from_json(json.dumps(data))


def test_relations_support_only_themselves():
    p = TENET_DATA / "pe_array" / "systolic.p"
    m = TENET_DATA / "mapping" / "matmul_systolic_os.m"
    acc = Accelerator.from_tenet_files(p, m)
    with pytest.raises(ValueError, match="must be empty for dataflow"):
        acc.replace(supported_dataflows=("os",))
