"""The accelerator's DRAM capacity: the presets' data-sheet figures, set, kept in the memory
values and JSON, refused."""

from __future__ import annotations

import json

import pytest

from tenet_byoc.accelerators import preset


@pytest.mark.parametrize("name,gb", [("h100_sxm", 80), ("h200", 141), ("a100", 80),
                                     ("tpu_v5e", 16)])
def test_presets_hold_their_data_sheets_dram(name, gb):
    assert preset(name).dram_capacity_bytes == gb * 1e9
    # The mapping search's copy keeps it.
    assert preset(name, mapping="auto").dram_capacity_bytes == gb * 1e9


def test_tpu_v1_holds_8_gib_and_research_arrays_state_none():
    assert preset("tpu_v1").dram_capacity_bytes == 8 * 2**30
    assert preset("os16").dram_capacity_bytes is None


def test_a_set_capacity_is_kept_by_replace_and_json_and_charges_nothing():
    from tenet_byoc import cost_model as cm
    from tenet_byoc.accelerators import Accelerator

    acc = preset("os16").with_dram_capacity(2e9)
    assert acc.dram_capacity_bytes == 2e9
    assert acc.replace(mapping="auto").dram_capacity_bytes == 2e9
    # in the accelerator's JSON (memory.dram_capacity_bytes), written only where known
    assert json.loads(acc.to_json())["memory"]["dram_capacity_bytes"] == 2e9
    assert Accelerator.from_json(acc.to_json()).dram_capacity_bytes == 2e9
    assert "dram_capacity_bytes" not in json.loads(preset("os16").to_json())["memory"]
    call = cm.GemmCall(m=64, n=96, k=128)
    assert cm.charge(call, acc).ledger_fields() == cm.charge(call, preset("os16")).ledger_fields()
    assert preset("h200").with_dram_capacity(None).dram_capacity_bytes == 141e9


@pytest.mark.parametrize("bad", [-1, float("nan")])
def test_a_bad_capacity_in_the_memory_or_json_is_refused(bad):
    from tenet_byoc import cost_model as cm
    from tenet_byoc.accelerators import Accelerator

    with pytest.raises(ValueError, match="dram_capacity_bytes.*must be a finite number"):
        cm.MemoryHierarchy(dram_capacity_bytes=bad)
    if bad == bad:  # JSON has no NaN
        text = json.loads(preset("os16").to_json())
        text["memory"]["dram_capacity_bytes"] = bad
        with pytest.raises(ValueError, match=r"accelerator\.memory\.dram_capacity_bytes must "
                                             r"be a finite number of bytes >= 0.*got -1"):
            Accelerator.from_json(json.dumps(text))


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "80GB", True])
def test_a_bad_capacity_is_refused(bad):
    with pytest.raises(ValueError, match="dram_capacity_bytes=.* must be a positive number"):
        preset("os16").with_dram_capacity(bad)
