"""A runner tags the calls it charges with their phase, and leaves a user's own tag in force.

The per-phase MACs of a real offloaded run are compared with ``model_gemms``, which counts
the GEMMs from the config alone (an independent count: no module, no ledger).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from llama_testing import TINY_LLAMA, make_llama_weights, write_checkpoint

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.gemms import model_gemms

PROMPT = [5, 17, 0, 42, 8]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def runner(request, tmp_path_factory):
    """A tiny GPT-2 or Llama (grouped-query attention) checkpoint, every matmul offloaded."""
    if request.param == "gpt2":
        folder = request.getfixturevalue("tiny_checkpoint")
    else:
        folder = write_checkpoint(tmp_path_factory.mktemp("llama"), TINY_LLAMA,
                                  make_llama_weights(TINY_LLAMA))
    return from_pretrained(folder, build=tenet_byoc.build)


def test_prefill_and_decode_are_tagged_with_their_phase(runner):
    tenet_byoc.ledger(runner.vm).reset()
    _, cache = runner.prefill(PROMPT)
    runner.decode(3, cache)
    book = tenet_byoc.ledger(runner.vm)
    groups = book.group_by("phase")
    assert set(groups) == {"prefill", "decode"}
    # decode's ``tokens`` is the cache length before the step: the prompt's.
    for phase in ("prefill", "decode"):
        gemms = model_gemms(runner.config, phase, len(PROMPT))
        assert sum(e.unit == "array" and e.phase == phase for e in book) == len(gemms)
        assert groups[phase].macs == sum(g.macs for g in gemms)


def test_generate_tags_each_step(runner):
    tenet_byoc.ledger(runner.vm).reset()
    runner.generate(PROMPT, 3)  # one prefill, two decode steps
    groups = tenet_byoc.ledger(runner.vm).group_by("phase")
    decode = sum(g.macs for n in (len(PROMPT), len(PROMPT) + 1)
                 for g in model_gemms(runner.config, "decode", n))
    assert groups["prefill"].macs == sum(g.macs for g in model_gemms(runner.config, "prefill",
                                                                      len(PROMPT)))
    assert groups["decode"].macs == decode


def test_a_users_own_tag_is_restored_after_the_runners_calls(runner):
    ledger = tenet_byoc.ledger(runner.vm)
    ledger.reset()
    tenet_byoc.set_phase(runner.vm, "my experiment")
    try:
        _, cache = runner.prefill(PROMPT)
        runner.decode(3, cache)
        # A call on the VM itself, after the runner's: it carries the user's tag again.
        ids = tvm.runtime.tensor(np.array([PROMPT], np.int32))
        runner.vm["prefill"](ids, *runner._weights)
    finally:
        tenet_byoc.set_phase(runner.vm, "")
    phases = [e.phase for e in tenet_byoc.ledger(runner.vm).entries if e.unit == "array"]
    n_prefill = len(model_gemms(runner.config, "prefill", len(PROMPT)))
    n_decode = len(model_gemms(runner.config, "decode", len(PROMPT)))
    assert phases == (["prefill"] * n_prefill + ["decode"] * n_decode
                      + ["my experiment"] * n_prefill)
