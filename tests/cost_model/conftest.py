"""Puts the cost-model tests' reference helpers (isl_oracle, scalesim_ref) on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
