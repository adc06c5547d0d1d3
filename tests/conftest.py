"""Fixtures shared by all tests; helpers live in relax_testing.py beside this file."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# Test modules import helpers (relax_testing) by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
