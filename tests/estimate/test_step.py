"""Step: the sequences of one forward pass, counted by hand."""

import pytest

from tenet_byoc.plan import Step, StepSequence


def test_mixed_step_counts_by_hand():
    contexts = [100, 700, 1300, 1900, 2500, 3100, 4000]
    step = Step([StepSequence(512, 0)] + [StepSequence(1, c) for c in contexts])
    assert step.sequences == 8
    assert step.tokens == 512 + 7
    assert step.phase == "mixed"
    assert [s.keys for s, _ in step.groups] == [512] + [c + 1 for c in contexts]


def test_equal_sequences_are_one_group():
    step = Step([StepSequence(1, 64)] * 3 + [(StepSequence(1, 64), 5)])
    assert step.groups == ((StepSequence(1, 64), 8),)
    assert step == Step.decode(64, batch=8)
    assert step.phase == "decode" and step.tokens == 8
    assert Step.prefill(128, 2).phase == "prefill" and Step.prefill(128, 2).tokens == 256
    assert Step([StepSequence(64, 128)]).phase == "mixed"  # a later chunk of a prompt


@pytest.mark.parametrize(("make", "error", "field"), [
    (lambda: StepSequence(0, 5), ValueError, "new_tokens"),
    (lambda: StepSequence(1, -1), ValueError, "context"),
    (lambda: StepSequence(1.5, 0), TypeError, "new_tokens"),
    (lambda: Step([]), ValueError, "at least one"),
    (lambda: Step([(StepSequence(1, 0), 0)]), ValueError, "count"),
    (lambda: Step([(1, 0)]), TypeError, "StepSequence"),
])
def test_bad_values_name_the_field(make, error, field):
    with pytest.raises(error, match=field):
        make()
