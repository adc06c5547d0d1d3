"""Request traces: drawn at a rate, read and written, and refused with the file, line and field."""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.serving import (
    SHAREGPT_LIKE,
    FixedLengths,
    TraceRequest,
    poisson_trace,
    read_trace,
    write_trace,
)


def test_poisson_trace_scales_with_the_rate():
    slow = poisson_trace(2.0, 2000, SHAREGPT_LIKE, seed=3)
    fast = poisson_trace(8.0, 2000, SHAREGPT_LIKE, seed=3)
    assert [r.prompt_tokens for r in slow] == [r.prompt_tokens for r in fast]
    assert np.allclose([r.arrival_s for r in slow], [4 * r.arrival_s for r in fast])
    gaps = np.diff([0.0] + [r.arrival_s for r in fast])
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.05)  # 2000 exponentials: sd 2.2%
    # Log-normal, sigma 1, clipped: the medians are mean / e^(1/2).
    assert np.median([r.prompt_tokens for r in fast]) == pytest.approx(161 / np.e**0.5, rel=0.1)
    assert np.median([r.output_tokens for r in fast]) == pytest.approx(338 / np.e**0.5, rel=0.1)


def test_trace_round_trip(tmp_path):
    reqs = [TraceRequest(0.0, 5, 2), TraceRequest(0.25, 40, 1, "sys", 32)]
    path = write_trace(reqs, tmp_path / "t.csv")
    assert read_trace(path) == reqs


@pytest.mark.parametrize("body, match", [
    ("arrival_s,prompt_tokens\n0,1\n", r"lacks the column\(s\) output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,4,2\n0.5,x,2\n",
     r"line 3, field prompt_tokens: 'x' is not an integer"),
    ("arrival_s,prompt_tokens,output_tokens\n0,4,0\n", r"line 2: TraceRequest.output_tokens=0"),
    ("arrival_s,prompt_tokens,output_tokens\n1,4,2\n0.5,4,2\n",
     r"line 3, field arrival_s: 0.5 is before"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,4,2\n", r"line 2: TraceRequest.arrival_s=-1.0"),
    ("arrival_s,prompt_tokens,output_tokens,prefix,prefix_tokens\n0,4,2,p,9\n",
     r"line 2: TraceRequest.prefix_tokens=9 exceeds"),
    ("arrival_s,prompt_tokens,output_tokens\n", r"holds no request"),
])
def test_bad_trace_names_file_line_and_field(tmp_path, body, match):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(ValueError, match=match) as err:
        read_trace(path)
    assert "bad.csv" in str(err.value)


def test_missing_trace_and_bad_rate():
    with pytest.raises(ValueError, match="does not exist"):
        read_trace("/nonexistent/trace.csv")
    with pytest.raises(ValueError, match="rate=0"):
        poisson_trace(0, 10, FixedLengths(1, 1))
