"""Collectives charged by the cost model (``cost_model.charge_link``): time and energy by hand,
the all-to-all against routes enumerated hop by hop, link energy in an estimate, pickling.

References: per-link loads counted by walking every message's route around a ring (or along
rows then columns of a torus), independent of the closed forms in ``src/cost_model/link.h``;
energy as bits sent x pJ per bit typed out here.
"""

from __future__ import annotations

import json
import pickle

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.estimate import estimate, estimate_step
from tenet_byoc.accelerators import preset
from tenet_byoc.plan import LinkCall, Step, plan
from tenet_byoc.system import Link, System, charge_collective, collective_seconds

S, BW, LAT, PJ = 1e6, 1e9, 1e-6, 2.0  # bytes, bytes/s, s per hop, pJ per bit


def _ring_loads(chips: int, block: float) -> list[float]:
    """Bytes on each link of a one-way ring when every chip sends ``block`` to every other."""
    loads = [0.0] * chips
    for src in range(chips):
        for d in range(1, chips):
            for hop in range(d):
                loads[(src + hop) % chips] += block
    return loads


def test_all_reduce_time_and_energy_by_hand():
    link = Link(1.0, 1.0, "ring", pj_per_bit=PJ)
    c = charge_collective("all_reduce", S, 4, link)
    # Ring: reduce-scatter and all-gather, each 3 steps of S / 4 per chip.
    assert c.link_bytes == pytest.approx(2 * 3 * S / 4, rel=1e-12)
    assert c.hops == 6
    assert c.seconds == pytest.approx(2 * 3 * S / 4 / BW + 6 * LAT, rel=1e-12)
    assert c.energy_pj == pytest.approx(2 * 3 * S / 4 * 8 * PJ, rel=1e-12)
    assert charge_collective("all_reduce", S, 1, link).energy_pj == 0.0


@pytest.mark.parametrize("chips", [2, 3, 4, 7])
def test_ring_all_to_all_against_its_routes(chips):
    link = Link(1.0, 1.0, "ring", pj_per_bit=PJ)
    c = charge_collective("all_to_all", S, chips, link)
    busiest = max(_ring_loads(chips, S / chips))
    assert c.link_bytes == pytest.approx(busiest, rel=1e-12)
    assert c.seconds == pytest.approx(busiest / BW + (chips - 1) * LAT, rel=1e-12)
    assert c.energy_pj == pytest.approx(busiest * 8 * PJ, rel=1e-12)
    # Every link is equally loaded: the bits on all links are the chips' link_bytes summed.
    assert sum(_ring_loads(chips, S / chips)) == pytest.approx(chips * c.link_bytes)


def test_torus_and_switch_all_to_all_by_hand():
    # 8 chips: a 2 x 4 torus. Rows (rings of 2): each chip's blocks for the other row
    # position, S / 2, one hop; then columns (rings of 4) with S on each chip again.
    c = charge_collective("all_to_all", S, 8, Link(1.0, 1.0, "torus2d", pj_per_bit=PJ))
    rows = max(_ring_loads(2, S / 2))
    cols = max(_ring_loads(4, S / 4))
    assert (rows, cols) == (S / 2, 3 / 2 * S)
    assert c.seconds == pytest.approx((rows + cols) / BW + (1 + 3) * LAT, rel=1e-12)
    assert c.energy_pj == pytest.approx((rows + cols) * 8 * PJ, rel=1e-12)
    # Switch: each chip's 7 blocks of S / 8 leave through its one port, one pass.
    c = charge_collective("all_to_all", S, 8, Link(1.0, 1.0, "switch", pj_per_bit=PJ))
    assert c.seconds == pytest.approx(7 * S / 8 / BW + LAT, rel=1e-12)
    assert c.energy_pj == pytest.approx(7 * S / 8 * 8 * PJ, rel=1e-12)
    assert collective_seconds("all_to_all", S, 1, Link(1.0, 1.0)) == 0.0


def test_link_energy_in_an_estimate():
    # Llama-3-8B, 16-token prefill at TP = 4 on a ring: each all-reduce of the [16, 4096]
    # float32 result puts 2 x 3/4 x S on each chip's links at 2 pJ per bit.
    system = System(preset("os16"), chips=4, tensor_parallel=4, link=Link(50.0, 2.0,
                                                                           pj_per_bit=PJ))
    book = estimate("llama-3-8b", prompt_len=16, decode_steps=0, system=system)
    reduce = [e for e in book if e.name.endswith("all_reduce")]
    size = 16 * 4096 * 4
    assert len(reduce) == 4 * 2 * 32
    for e in reduce:
        assert e.energy_pj == pytest.approx(2 * 3 / 4 * size * 8 * PJ, rel=1e-12)
    # The step's energy (compose) is every entry's, links included.
    cost, _ = estimate_step("llama-3-8b", Step.prefill(16), system=system)
    assert cost.energy_pj == pytest.approx(book.totals().energy_pj, rel=1e-9)
    free = System(preset("os16"), chips=4, tensor_parallel=4, link=Link(50.0, 2.0,
                                                                         pj_per_bit=0.0))
    links = sum(e.energy_pj for e in book if e.unit == "link")
    assert links > 0
    assert cost.energy_pj - estimate_step("llama-3-8b", Step.prefill(16), system=free)[
        0].energy_pj == pytest.approx(links, rel=1e-9)


def test_calls_and_links_pickle():
    values = [cm.VectorCall("add", [4, 8], operand_elements=8),
              cm.VectorCall("rotary", [1, 4, 2, 8], bits_out=16, operand_elements=64),
              cm.LinkCall("all_to_all", 1.5e6, 8), cm.Link(25.0, 0.5, "torus2d", 3.0),
              Link(25.0, 0.5, "switch", 0.7)]
    for v in values:
        assert pickle.loads(pickle.dumps(v)) == v
    p = plan("gpt2", Step.prefill(8), system=System(preset("os16"), chips=2, tensor_parallel=2))
    again = pickle.loads(pickle.dumps(p))
    assert [c.call for c in again.calls] == [c.call for c in p.calls]
    assert any(isinstance(c.call, LinkCall) for c in again.calls)


def test_system_json_keeps_the_links_energy():
    system = System(preset("os16"), chips=2, tensor_parallel=2, link=Link(10.0, 1.0,
                                                                          pj_per_bit=4.5))
    assert System.from_json(system.to_json()) == system
    older = json.loads(system.to_json())
    del older["link"]["pj_per_bit"]  # written before links had an energy
    assert System.from_json(json.dumps(older)).link.pj_per_bit == cm.NVLINK_C2C_PJ_PER_BIT


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: Link(pj_per_bit=-1.0), ValueError, ["Link.pj_per_bit", ">= 0"]),
    (lambda: LinkCall("broadcast", 1.0, 2), ValueError, ["all_to_all", "'broadcast'"]),
    (lambda: LinkCall("p2p", -1.0, 2), ValueError, ["LinkCall.nbytes", ">= 0"]),
    (lambda: LinkCall("p2p", 1.0, 0), ValueError, ["LinkCall.chips", ">= 1"]),
    (lambda: LinkCall("p2p", 1.0, 2.0), TypeError, ["LinkCall.chips", "integer"]),
    (lambda: cm.Link(1.0, 1.0, "mesh"), ValueError, ["Link.topology", "'mesh'"]),
])
def test_bad_link_values_are_refused_by_name(make, error, words):
    with pytest.raises(error) as err:
        make()
    for word in words:
        assert word in str(err.value)
