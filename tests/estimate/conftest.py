"""Fixtures for the estimate tests: the model tests' helpers (tiny checkpoints) by name."""

from __future__ import annotations

import sys
from pathlib import Path

# gpt2_testing and llama_testing live beside the model tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
