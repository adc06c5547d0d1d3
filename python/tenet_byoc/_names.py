"""Near-miss suggestions for names a user types: schemes, presets, models, options."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(value: object, choices: Iterable[str], *, limit: int = 3) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the choices closest to ``value``, else ``""``.

    Case and the separators ``-``, ``_`` and ``.`` are ignored when comparing, so
    ``llama3-8b`` finds ``llama-3-8b`` and ``tpuv1`` finds ``tpu_v1``.
    """
    if not isinstance(value, str):
        return ""

    def folded(s: str) -> str:
        return s.lower().replace("-", "").replace("_", "").replace(".", "")

    by_fold: dict[str, str] = {}
    for c in choices:
        by_fold.setdefault(folded(c), c)
    exact = by_fold.get(folded(value))
    close = [exact] if exact is not None else [
        by_fold[f] for f in difflib.get_close_matches(folded(value), list(by_fold), n=limit,
                                                      cutoff=0.75)
    ]
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f" (did you mean {' or '.join(quoted)}?)"
