"""Hostile values refused by the analysis layer's constructors and entries, each by name.

Each case was accepted before (a NaN budget, an infinite area, ``charged_on(None)`` charging
on the default preset); the checks are hand-derived: the field named in the message.
"""

from __future__ import annotations

import math

import pytest

from tenet_byoc.dse import DesignSpace
from tenet_byoc.hardware import Accelerator
from tenet_byoc.ledger import Ledger


@pytest.mark.parametrize("field", ["area_budget_mm2", "power_budget_w"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0])
def test_design_space_refuses_non_finite_or_non_positive_budget(field, value):
    with pytest.raises(ValueError, match=field):
        DesignSpace(rows=[8], cols=[8], dataflows=["os"], **{field: value})
    ok = DesignSpace(rows=[8], cols=[8], dataflows=["os"], **{field: 2.5})
    assert getattr(ok, field) == 2.5


def test_area_refuses_overflowing_clock():
    with pytest.raises(ValueError, match="clock_ghz"):
        Accelerator.systolic("os", 16, 16, clock_ghz=1.7e308).area()
    assert math.isfinite(Accelerator.systolic("os", 16, 16, clock_ghz=1.7).area()["total"])


def test_charged_on_refuses_none():
    book = Ledger([], "os16", "os", 1.0, [])
    with pytest.raises(TypeError, match="None"):
        book.charged_on(None)
    assert len(book.charged_on("os16").entries) == 0
