"""Fixtures for the model tests: a tiny GPT-2 checkpoint in Hugging Face's layout."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# The helpers beside this file are imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from gpt2_testing import TINY_HF_CONFIG, make_hf_weights, write_hf_checkpoint

from tenet_byoc.models.gpt2 import GPT2Runner, build_with_tvm, load_hf_checkpoint


@pytest.fixture(scope="session")
def tiny_hf_weights() -> dict[str, np.ndarray]:
    """The tiny model's weights in Hugging Face's layout (no prefix)."""
    return make_hf_weights(TINY_HF_CONFIG)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_hf_weights) -> Path:
    """A tiny GPT-2 checkpoint folder with the ``transformer.`` prefix."""
    return write_hf_checkpoint(
        tmp_path_factory.mktemp("gpt2_tiny"), TINY_HF_CONFIG, tiny_hf_weights
    )


@pytest.fixture(scope="session")
def tiny_loaded(tiny_checkpoint):
    """The tiny checkpoint as read by ``load_hf_checkpoint``: ``(config, params)``."""
    return load_hf_checkpoint(tiny_checkpoint)


@pytest.fixture(scope="session")
def built_modules() -> list:
    """Every module the ``tiny_runner`` fixture's build function received."""
    return []


@pytest.fixture(scope="session")
def tiny_runner(tiny_loaded, built_modules) -> GPT2Runner:
    """The tiny model built once with TVM's own pipeline, through an injected build function."""
    config, params = tiny_loaded

    def build(mod):
        built_modules.append(mod)
        return build_with_tvm(mod)

    return GPT2Runner(config, params, build=build)
