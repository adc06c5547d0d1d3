"""Cost-model values from hostile Python input: MAC rates that overflow a packed element,
pickles at every protocol. Each gives its value or a clear Python exception, never a signal."""

from __future__ import annotations

import json
import pickle

import pytest

import tenet_byoc
from tenet_byoc import _cost_model as cm
from tenet_byoc.design_file import design_form

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


@pytest.mark.parametrize("rate", [33, 2**31, 2**32 - 1, 2**32, 2**40, 2**62])
def test_a_mac_rate_past_a_1024_bit_packed_element_is_refused(rate, tmp_path):
    # A preset is an r-wide dot product: r float32 MACs per cycle read r x 32 bits at once,
    # and elements are at most 1024 bits, so r <= 32 at 32 bits (2^32 divided by zero).
    match = rf"macs_per_pe_per_cycle gives {rate} MACs per cycle at 32-bit operands.*at most 32"
    with pytest.raises(ValueError, match=match):
        tenet_byoc.Accelerator.systolic("os", 16, 16, macs_per_pe_per_cycle=rate)
    doc = json.loads(tenet_byoc.Accelerator.systolic("ws", 8, 8).to_json())
    doc["hardware"]["macs_per_pe_per_cycle"] = rate
    with pytest.raises(ValueError, match=match):
        tenet_byoc.Accelerator.from_json(json.dumps(doc))
    form = design_form(tenet_byoc.Accelerator.systolic("ws", 8, 8))  # each quantity once
    form["hardware"]["macs_per_pe_per_cycle"] = rate
    design = tmp_path / "design.yaml"
    design.write_text(json.dumps(form))  # JSON is YAML
    with pytest.raises(ValueError, match=rf"(?s){design.name}'.*{match}"):
        tenet_byoc.Accelerator.from_file(design)
    # A pickle carries the same JSON form (protocol 0: as text), checked when loaded.
    good = pickle.dumps(tenet_byoc.Accelerator.systolic("ws", 8, 8), protocol=0)
    bad = good.replace(b'"macs_per_pe_per_cycle":1}', b'"macs_per_pe_per_cycle":%d}' % rate)
    assert bad != good
    with pytest.raises(ValueError, match=match):
        pickle.loads(bad)


def test_mac_rates_up_to_the_packed_limit_never_charge_more_cycles():
    # More MACs per PE per cycle can only shorten a GEMM: the latency is non-increasing in
    # the rate, at every width up to the rate's limit there (1024 / bits).
    for bits, limit in ((32, 32), (8, 128)):
        cycles = []
        for rate in (1, 2, 4, 8, 16, 32, 64, 128):
            if rate > limit:
                break
            acc = tenet_byoc.Accelerator.systolic("os", 16, 16,
                                                  macs_per_pe_per_cycle={bits: rate})
            call = cm.GemmCall(m=64, n=64, k=64, bits_a=bits, bits_b=bits)
            cycles.append(cm.charge(call, acc).memory.cycles)
        assert cycles == sorted(cycles, reverse=True), (bits, cycles)
        with pytest.raises(ValueError, match=rf"at most 1024 \(rate <= {limit} at {bits} bits"):
            tenet_byoc.Accelerator.systolic("os", 16, 16,
                                            macs_per_pe_per_cycle={bits: limit + 1})


def values() -> dict[str, object]:
    acc = tenet_byoc.Accelerator.systolic("os", 16, 16)
    call = cm.GemmCall(m=16, n=32, k=64, bits_a=8, bits_b=8, scheme="w8a8_per_tensor")
    return {"accelerator": acc, "core accelerator": cm.Accelerator._parse_json(acc.to_json()),
            "call": call, "hardware": acc.hardware, "dataflow": acc.dataflow,
            "memory": acc.memory, "precision": acc.precision, "vector": acc.vector,
            "charge": cm.charge(call, acc)}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_value_pickles_or_is_refused_at_every_protocol(protocol):
    # Protocols 0 and 1 aborted the process (pybind11 threw where nothing could catch it).
    picklable = {"accelerator", "core accelerator", "call"}
    for name, value in values().items():
        if name in picklable:
            back = pickle.loads(pickle.dumps(value, protocol=protocol))
            assert type(back) is type(value) and back == value, name
            assert back.to_json() == value.to_json() if hasattr(value, "to_json") else True
        else:
            with pytest.raises(TypeError, match="cannot pickle"):
                pickle.dumps(value, protocol=protocol)
    recipe = values()["call"].recipe
    if recipe is not None:
        assert pickle.loads(pickle.dumps(recipe, protocol=protocol)) == recipe


@pytest.mark.parametrize("name", ["os16", "a100"])  # one array; 108 cores
def test_energy_figures_whose_products_overflow_are_refused_at_the_call(name):
    # Each figure is finite (and accepted), but 5.5e303 pJ x 64^3 MACs is not: the call is
    # refused naming the figures, never charged an infinite energy.
    from tenet_byoc.accelerators import preset

    form = json.loads(preset(name).to_json())
    unit = next(u for u in form["precision"] if u["bits_a"] == 32)
    unit["pj_per_mac"] = 5.5e303
    acc = tenet_byoc.Accelerator.from_json(json.dumps(form))
    with pytest.raises(ValueError, match=r"x 64 x 64 GEMM .*overflows a double.*pj_per_mac"):
        cm.charge(cm.GemmCall(m=64, n=64, k=64), acc)
    # 16 x 17 x 40 MACs at that figure are 5.98e307 pJ: finite, and charged as such.
    small = cm.charge(cm.GemmCall(m=16, n=17, k=40), acc).energy.mac_pj
    assert small == pytest.approx(16 * 17 * 40 * 5.5e303)
