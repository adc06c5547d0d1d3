"""Where the tests find TENET's own data files (pe_array/, mapping/, statement/).

``$TENET_DATA_DIR`` when set, else ``../shared/tenet-data`` beside the repository; tests
that need the files skip, naming this folder, where it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

TENET_DATA = Path(
    os.environ.get("TENET_DATA_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "tenet-data"
)
