"""``python -m tenet_byoc_cli``: the ``tenet-byoc`` command without its console script."""

import sys

from . import main

sys.exit(main())
