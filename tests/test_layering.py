"""The package's layers: the backend imports neither models nor experiments, models do not
import experiments (checked in a fresh interpreter, so nothing else has imported them)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("imported", "forbidden"),
    [
        ("tenet_byoc", ("tenet_byoc.models", "tenet_byoc.experiments")),
        ("tenet_byoc.models.gpt2, tenet_byoc.models.mlp", ("tenet_byoc.experiments",)),
    ],
)
def test_layers_import_downwards_only(imported, forbidden):
    code = (f"import sys, {imported}\n"
            f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
