"""The relax tests use the model tests' helpers (tiny Llama configs) by name."""

from __future__ import annotations

import sys
from pathlib import Path

# llama_testing lives beside the model tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
