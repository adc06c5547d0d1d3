"""Fixtures shared by all tests; helpers live in relax_testing.py beside this file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Before any test module imports torch, whose bundled libgomp would otherwise start first
# with spinning threads (tenet_byoc can set the wait policy only for a libgomp it loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import pytest

# Test modules import helpers (relax_testing) by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
