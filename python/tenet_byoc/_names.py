"""Near-miss suggestions for names a user types: schemes, presets, models, options.

The one implementation lives in the console entry's light package (``tenet-byoc --help``
must reach it without loading TVM, which importing any module of ``tenet_byoc`` does).
"""

from __future__ import annotations

from tenet_byoc_cli.names import did_you_mean

__all__ = ["did_you_mean"]
