"""Progress of a long job on stderr: tqdm's bar on a terminal, a plain line every few seconds
when stderr is a pipe or a file (where a bar's carriage returns show nothing until the end).

Every long loop of the package and its command line takes its bar from :func:`progress_bar`,
named in the unit it counts (``step``, ``point``, ``run``, ``window``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

__all__ = ["LineProgress", "progress_bar"]

#: Seconds between two lines when stderr is not a terminal.
LINE_INTERVAL_S = 5.0


class LineProgress:
    """tqdm's interface (``update``, ``set_description``, ``close``, iteration), printing
    ``desc: n/total units (rate units/s, or s/unit below one a second; elapsed s)`` every
    ``interval`` seconds and at the end, one line each, to ``file`` (default ``sys.stderr``
    as it is when the bar is made). ``total`` defaults to ``len(iterable)``; ``unit`` is
    the singular (``step``, ``point``); ``initial`` counts what a resumed run already did.
    """

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None,
                 desc: str = "", unit: str = "it", initial: int = 0,
                 interval: float = LINE_INTERVAL_S, file: TextIO | None = None) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self._initial, self.interval = initial, interval
        self.file = file if file is not None else sys.stderr
        self._start = self._last = time.monotonic()
        self._closed = False
        self._shown = initial  # the count of the last line written

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        elapsed = now - self._start
        done = self.n - self._initial
        rate = done / elapsed if elapsed > 0 else 0.0
        of = f"/{self.total:,}" if self.total is not None else ""
        head = f"{self.desc}: " if self.desc else ""
        self._shown = self.n
        # slow units read as seconds each (27.4 s/run), fast ones as a rate (12.5 steps/s)
        pace = (f"{rate:,.1f} {self.unit}s/s" if rate >= 1 or rate == 0
                else f"{1 / rate:,.1f} s/{self.unit}")
        self.file.write(f"{head}{self.n:,}{of} {self.unit}s ({pace}, {elapsed:,.0f} s)\n")
        self.file.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.n != self._shown:  # the end, unless the last line told it
                self._line(time.monotonic())


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, enabled: bool = True,
                 **tqdm_options: Any) -> Any:
    """A progress bar counting ``unit``: tqdm when stderr is a terminal, a
    :class:`LineProgress` (a line every :data:`LINE_INTERVAL_S` seconds) when it is not, and a
    silent tqdm when ``enabled`` is False."""
    stream = sys.stderr
    if enabled and not (hasattr(stream, "isatty") and stream.isatty()):
        return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial)
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc or None, unit=unit, initial=initial,
                disable=not enabled, **tqdm_options)
