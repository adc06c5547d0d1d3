"""mapping="auto" on an accelerator: its JSON form, and charges against a direct mapping search.

The reference for a charge is ``cm.MappingSearch`` asked directly over the space the
accelerator's README declares for "auto" (os, ws and is on its array, streamed dimension also
cut into 1 and 4 array edges; written out here by hand, not read from the charge path), and
``cm.charge`` with the default mapping for "never worse".
"""

from __future__ import annotations

import json

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset

CALLS = [  # (M, N, K, batch, bits a/b/c, extra_read_bits, extra_ops)
    (128, 768, 768, 1, (32, 32, 32), 0, 0),
    (1, 2304, 768, 1, (8, 8, 16), 2304 * 16, 2 * 768 + 2304),
    (64, 129, 64, 12, (32, 32, 32), 0, 0),
    (37, 200, 96, 1, (16, 4, 16), 200 * 16, 200 * 96),
]


def _objective_value(cycles: float, pj: float, objective: str) -> float:
    return {"latency": cycles, "energy": pj, "edp": cycles * pj}[objective]


def _gemm(call, scheme: str = "none") -> cm.GemmCall:
    M, N, K, batch, (a, b, c), extra_bits, extra_ops = call
    return cm.GemmCall(m=M, n=N, k=K, batch=batch, bits_a=a, bits_b=b, bits_c=c,
                       scheme=scheme, extra_read_bits=extra_bits, extra_ops=extra_ops)


def _direct_search(acc: Accelerator, call, objective: str) -> cm.MappingChoice:
    edge = max(acc.dataflow.rows, acc.dataflow.cols)
    return cm.MappingSearch(
        acc.hardware,
        acc.memory,
        dataflows=("os", "ws", "is"),
        rows=acc.dataflow.rows,
        cols=acc.dataflow.cols,
        objective=objective,
        precision=acc.precision,
        stream_tiles=(edge, 4 * edge),
    ).best(_gemm(call))


def _charge(acc: Accelerator, call, scheme: str = "none", **changes) -> cm.Charge:
    """``call`` charged on ``acc`` (with ``changes`` to its fields, e.g. its mapping)."""
    return cm.charge(_gemm(call, scheme), acc.replace(**changes) if changes else acc)


@pytest.mark.parametrize("objective", ["latency", "energy", "edp"])
def test_auto_json_round_trip(objective):
    acc = preset("os16", mapping="auto", objective=objective)
    assert (acc.mapping, acc.objective) == ("auto", objective)
    text = acc.to_json()
    assert json.loads(text)["mapping"] == {"kind": "auto", "objective": objective}
    back = Accelerator.from_json(text)
    assert (back.mapping, back.objective) == ("auto", objective)
    assert back.to_json() == text


def _with_mapping_json(mapping: dict) -> str:
    doc = json.loads(preset("os16").to_json())
    doc["mapping"] = mapping
    return json.dumps(doc)


@pytest.mark.parametrize("mapping, words", [
    ({"kind": "auto"}, ["accelerator.mapping", "objective"]),
    ({"kind": "auto", "objective": "speed"},
     ["accelerator.mapping.objective", "speed", "latency", "energy", "edp"]),
    ({"kind": "auto", "objective": 3}, ["accelerator.mapping", "objective"]),
    ({"kind": "auto", "objective": "edp", "tm": 16}, ["accelerator.mapping", "tm"]),
    ({"kind": "search"}, ["mapping.kind", "search", "default", "given", "auto"]),
    ({"kind": "default", "objective": "edp"}, ["accelerator.mapping", "objective"]),
])
def test_auto_json_errors_name_the_key(mapping, words):
    with pytest.raises(ValueError) as err:
        Accelerator.from_json(_with_mapping_json(mapping))
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize("objective", ["latency", "energy", "edp"])
@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}b{c[4][1]}")
def test_auto_charge_is_the_direct_search_best_and_never_worse_than_default(call, objective):
    acc = preset("os16", mapping="auto", objective=objective)
    charge = _charge(acc, call)
    best = _direct_search(acc, call, objective)
    assert charge.memory.mapping == best.mapping
    assert charge.memory.cycles == best.metrics.cycles
    assert charge.memory.roofline_cycles == best.metrics.roofline_cycles
    assert charge.energy.total_pj == pytest.approx(best.energy.total_pj, rel=1e-12)
    # The array level is the chosen dataflow's own (TENET's figures of that dataflow).
    array = cm.analyze_array(
        _gemm(call),
        cm.Accelerator("t", acc.hardware, best.dataflow),
    )
    assert (charge.array.cycles, charge.array.active_pes) == (array.cycles, array.active_pes)
    default = _charge(acc, call, mapping="default", objective=None)
    assert charge.memory.cycles >= charge.memory.roofline_cycles
    assert (_objective_value(charge.memory.cycles, charge.energy.total_pj, objective)
            <= _objective_value(default.memory.cycles, default.energy.total_pj, objective)
            * (1 + 1e-12))


def test_objectives_trade_latency_for_energy():
    call = CALLS[0]
    fast = _charge(preset("os16", mapping="auto", objective="latency"), call)
    frugal = _charge(preset("os16", mapping="auto", objective="energy"), call)
    assert fast.memory.cycles <= frugal.memory.cycles
    assert frugal.energy.total_pj <= fast.energy.total_pj * (1 + 1e-12)


def test_a_repeated_call_is_a_lookup():
    # A fresh accelerator (its own buffer size) so no other test has searched with it.
    acc = Accelerator.systolic("os", 8, 8, name="cache8", l2_bytes=(1 << 16) + 64,
                               mapping="auto")
    search = acc.mapping_search
    assert search.searches == 0
    first = _charge(acc, CALLS[0])
    assert search.searches == 1
    again = _charge(acc, CALLS[0])
    other_scheme = _charge(acc, CALLS[0], scheme="renamed")  # same workload: same search
    assert search.searches == 1
    assert again.memory.mapping == other_scheme.memory.mapping == first.memory.mapping
    _charge(acc, CALLS[2])
    assert search.searches == 2
    # The same accelerator made again (another object, same JSON) shares the search.
    twin = Accelerator.systolic("os", 8, 8, name="cache8", l2_bytes=(1 << 16) + 64,
                                mapping="auto")
    assert twin.mapping_search.searches == 2
    assert preset("os16", mapping="default").mapping_search is None
    # Cleared, the next one made searches from empty (same mapping); the old ones keep theirs.
    cm.clear_mapping_searches()
    fresh = Accelerator.systolic("os", 8, 8, name="cache8", l2_bytes=(1 << 16) + 64,
                                 mapping="auto")
    assert fresh.mapping_searches == 0
    assert _charge(fresh, CALLS[0]).memory.mapping == first.memory.mapping
    assert (fresh.mapping_searches, acc.mapping_searches) == (1, 2)


def test_given_tiles_win_over_auto():
    from tenet_byoc.accelerators import resolve

    tiles = cm.TileMapping(16, 64, 128, "nmk")
    acc = Accelerator.systolic("os", 16, 16, name="given16", mapping=tiles)
    assert resolve(acc, mapping="auto") is acc
    charge = _charge(resolve(acc, mapping="auto"), CALLS[0])
    assert charge.memory.mapping.endswith(tiles.describe())
    assert charge.memory.mapping.startswith("os 16x16")


def test_relations_dataflow_stays_under_auto():
    # An output-stationary map with the array's axes swapped: the user's own relations, so
    # "auto" searches only its tiles and orders, never another dataflow.
    n = 4
    hw = cm.Hardware.systolic(n, n)
    df = cm.Dataflow(space=f"{{S[i,j,k]->PE[j%{n}, i%{n}]}}",
                     time=f"{{S[i,j,k]->T[floor(i/{n}), floor(j/{n}), i%{n}+j%{n}+k]}}",
                     name="os_swapped")
    acc = Accelerator("swapped", hw, df, mapping="auto")
    call = (12, 10, 8, 1, (8, 8, 32), 0, 0)
    charge = _charge(acc, call)
    best = cm.MappingSearch(hw, acc.memory, dataflows=[df], precision=acc.precision).best(
        cm.GemmCall(m=12, n=10, k=8, bits_a=8, bits_b=8, bits_c=32)
    )
    assert charge.memory.mapping == best.mapping
    assert charge.memory.mapping.startswith("os_swapped")
    assert charge.memory.cycles == best.metrics.cycles
