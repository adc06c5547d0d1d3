"""Print the include directory and library file of the pip-installed oneDNN (CPU, GOMP) wheels.

The onednn-*-cpu-gomp wheels install their files as wheel "data" (under the environment's
prefix, not site-packages), and inside pip's isolated build environment that prefix is not
sys.prefix, so the files are located through the distributions' own file records.
"""

import importlib.metadata as md
import sys


def _locate(dist_name: str, suffix: str) -> str:
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        sys.exit(f"locate_onednn: the '{dist_name}' package is not installed")
    for f in dist.files or []:
        if str(f).endswith(suffix):
            return str(dist.locate_file(f).resolve())
    sys.exit(f"locate_onednn: '{dist_name}' has no file ending in '{suffix}'")


header = _locate("onednn-devel-cpu-gomp", "dnnl.hpp")
library = _locate("onednn-cpu-gomp", "libdnnl.so.3")
print(header.rsplit("/", 1)[0] + ";" + library, end="")
