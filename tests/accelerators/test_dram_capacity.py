"""The accelerator's DRAM capacity: the presets' data-sheet figures, set, kept, refused."""

from __future__ import annotations

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


def test_a_set_capacity_is_kept_by_replace_and_charges_nothing():
    acc = preset("os16").with_dram_capacity(2e9)
    assert acc.dram_capacity_bytes == 2e9
    assert acc.replace(mapping="auto").dram_capacity_bytes == 2e9
    assert acc == preset("os16")  # the same charges
    assert preset("h200").with_dram_capacity(None).dram_capacity_bytes == 141e9


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "80GB", True])
def test_a_bad_capacity_is_refused(bad):
    with pytest.raises(ValueError, match="dram_capacity_bytes=.* must be a positive number"):
        preset("os16").with_dram_capacity(bad)
