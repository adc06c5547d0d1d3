"""Trace times a double cannot time steps at: an arrival of 1e308 s plus a 17 ms step is
1e308 s, so every such request's TTFT read 0 ms. Refused naming the file, line and field, as
negative and NaN times are."""

from __future__ import annotations

import math

import pytest

from tenet_byoc.serving.requests import (
    MAX_ARRIVAL_S,
    FixedLengths,
    TraceRequest,
    poisson_trace,
    read_trace,
)


def _trace(tmp_path, rows: str):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,16,4\n" + rows)
    return path


@pytest.mark.parametrize(("time", "message"), [
    ("-1", r"arrival_s=-1.0 must be a finite number >= 0"),
    ("nan", r"arrival_s=nan must be a finite number >= 0"),
    ("inf", r"arrival_s=inf must be a finite number >= 0"),
    ("1e308", r"arrival_s=1e\+308 is over 1e\+09 s"),
    ("1e15", r"arrival_s=1000000000000000.0 is over 1e\+09 s: a double's spacing there is "
             r"0.125 s"),
])
def test_an_arrival_time_is_refused_naming_line_and_field(tmp_path, time, message):
    path = _trace(tmp_path, f"{time},16,4\n")
    with pytest.raises(ValueError, match=rf"trace file '{path}', line 3: TraceRequest\.{message}"):
        read_trace(path)


def test_the_limit_keeps_steps_finer_than_a_microsecond():
    # by hand: doubles in [2^29, 2^30) are 2^(29 - 52) = 1.19e-7 s apart
    assert MAX_ARRIVAL_S < 2 ** 30 and math.ulp(MAX_ARRIVAL_S) == 2.0 ** -23 < 1e-6
    assert TraceRequest(MAX_ARRIVAL_S, 16, 4).arrival_s == 1e9


def test_a_rate_too_low_for_the_limit_is_refused_naming_the_rate():
    with pytest.raises(ValueError, match=r"rate=1e-12 requests per second spreads 3 requests"):
        poisson_trace(1e-12, 3, FixedLengths(16, 4))
