"""Shared fixtures of the cost-model tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # isl_oracle, scalesim_ref

# TENET's data files live beside the repository: <parent of repo>/shared/tenet-data.
TENET_DATA = HERE.parents[2] / "shared" / "tenet-data"


@pytest.fixture
def tenet_data() -> Path:
    if not TENET_DATA.is_dir():
        pytest.skip(f"TENET data files not found at {TENET_DATA}")
    return TENET_DATA
