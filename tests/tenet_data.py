"""Where the tests find TENET-format input files (pe_array/, mapping/, statement/).

``$TENET_DATA_DIR`` when set (e.g. TENET's own ``data`` folder, to test against its files);
otherwise :func:`write_tenet_files` writes a set of small TENET-format files, made here from
the format, into a temporary folder once per test session, so a fresh clone runs every test.

TENET's formats (one relation per line, isl syntax):

- ``.p`` (PE array): the PE domain; the interconnect (links ``;``-separated); then
  ``L1_bytes L2_bytes bandwidth_bits avg_latency`` (a blank line before it is allowed).
- ``.m`` (mapping): the space map (statement instance -> PE); the time map (-> time stamp).
- ``.s`` (statement): ``reads writes``; the iteration domain; one access relation per
  tensor, reads first.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# Memory lines: L1 (per-PE registers) bytes, L2 (buffer) bytes, bandwidth bits per cycle,
# average latency. The first is the small-array default, the second a larger buffer.
_SMALL_MEMORY = "256 1024 64 16"
_LARGE_MEMORY = "600 110592 64 2"


def _grid(rows: int, cols: int, links: list[tuple[int, int]], memory: str,
          blank_line: bool = False) -> str:
    """A 2-D PE array whose PE[p,q] talks to PE[p+dp, q+dq] for each (dp, dq) in links."""
    def term(v: str, d: int) -> str:
        return v if d == 0 else f"{v}{d:+d}"

    link_text = ";".join(f"PE[p,q]->PE[{term('p', dp)},{term('q', dq)}]" for dp, dq in links)
    return (f"{{PE[p,q]: 0<=p<{rows} and 0<=q<{cols}}}\n{{{link_text}}}\n"
            + ("\n" if blank_line else "") + memory + "\n")


#: pe_array/*.p: name -> text. The 8x8 arrays differ only in their links; the systolic one
#: (links up and left) is the one the fast path knows.
PE_ARRAYS = {
    "systolic.p": _grid(8, 8, [(-1, 0), (0, -1)], _SMALL_MEMORY),
    "pe_8_8.p": _grid(8, 8, [(1, 0), (0, 1)], _SMALL_MEMORY),
    "1d_systolic1.p": _grid(8, 8, [(1, 0)], _SMALL_MEMORY),
    "1d_systolic2.p": _grid(8, 8, [(-1, 0)], _SMALL_MEMORY),
    "1d_systolic3.p": _grid(8, 8, [(0, 1)], _SMALL_MEMORY),
    "1d_systolic4.p": _grid(8, 8, [(0, -1)], _SMALL_MEMORY),
    "switch.p": _grid(8, 8, [(-1, 0), (0, -1), (1, -1), (-1, -1)], _SMALL_MEMORY),
    "switch2.p": _grid(8, 8, [(1, 0), (0, 1), (-1, 1), (1, 1)], _SMALL_MEMORY),
    "pe_12_14.p": _grid(12, 14, [(1, 0), (0, 1), (1, 1), (1, -1)], _LARGE_MEMORY,
                        blank_line=True),
    "pe_16_64.p": _grid(16, 64, [(1, 0), (0, 1)], _LARGE_MEMORY, blank_line=True),
    "lineral.p": f"{{PE[p]: 0<=p<64}}\n{{PE[p]->PE[p+1]}}\n{_SMALL_MEMORY}\n",
}

#: mapping/*.m: name -> (space map, time map). GEMM instances are S[i,j,k] (C[i,j] +=
#: A[i,k] B[k,j]); an output-stationary array keeps C[i,j] on PE[i%8, j%8] and skews the
#: stamps by the PE's position, a weight-stationary one keeps B[k,j].
MAPPINGS = {
    "matmul_systolic_os.m": ("{S[i,j,k]->PE[i%8,j%8]}",
                             "{S[i,j,k]->T[floor(i/8),floor(j/8),i%8+j%8+k]}"),
    "matmul_systolic_ws.m": ("{S[i,j,k]->PE[k%8,j%8]}",
                             "{S[i,j,k]->T[floor(j/8),floor(k/8),i+j%8+k%8]}"),
    # a 16x16 output-stationary tile (for the 16x64 array) and a 1-D array of 256 PEs
    "gemm_2d.m": ("{S[i,j,k]->PE[i%16,j%16]}",
                  "{S[i,j,k]->T[floor(i/16),floor(j/16),i%16+j%16+k]}"),
    "gemm_1d.m": ("{S[i,j,k]->PE[j%256]}", "{S[i,j,k]->T[floor(j/256),i,k]}"),
    "mttkrp_systolic1.m": ("{S[i,j,k,l]->PE[i%8,j%8]}",
                           "{S[i,j,k,l]->T[k,floor(i/8),floor(j/8),i%8+j%8+l]}"),
    # both put a whole 3x3 window (rx, ry) on one PE at one stamp
    "conv2d_os.m": ("{S[k,c,ox,oy,rx,ry]->PE[oy%8,ox%8]}",
                    "{S[k,c,ox,oy,rx,ry]->T[k,floor(oy/8),floor(ox/8),c]}"),
    "conv2d_ws.m": ("{S[k,c,ox,oy,rx,ry]->PE[k%8,c%8]}",
                    "{S[k,c,ox,oy,rx,ry]->T[floor(k/8),floor(c/8),oy,ox]}"),
}

#: statement/*.s: name -> (reads, writes, domain, accesses).
STATEMENTS = {
    "matmul.s": (2, 1, "{S[i,j,k]: 0<=i<256 and 0<=j<256 and 0<=k<256}",
                 ["{S[i,j,k]->A[i,k]}", "{S[i,j,k]->B[k,j]}", "{S[i,j,k]->C[i,j]}"]),
    "mttkrp.s": (3, 1, "{S[i,j,k,l]: 0<=i<24 and 0<=j<256 and 0<=k<256 and 0<=l<256}",
                 ["{S[i,j,k,l]->A[i,k,l]}", "{S[i,j,k,l]->B[k,j]}", "{S[i,j,k,l]->C[l,j]}",
                  "{S[i,j,k,l]->Y[i,j]}"]),
    "conv2d.s": (2, 1, ("{S[k,c,ox,oy,rx,ry]: 0<=k<128 and 0<=c<64 and 0<=ox<256 and "
                        "0<=oy<256 and 0<=rx<3 and 0<=ry<3}"),
                 ["{S[k,c,ox,oy,rx,ry]->I[c,ox+rx,oy+ry]}", "{S[k,c,ox,oy,rx,ry]->W[k,c,rx,ry]}",
                  "{S[k,c,ox,oy,rx,ry]->O[k,ox,oy]}"]),
}


def write_tenet_files(folder: Path) -> Path:
    """Write :data:`PE_ARRAYS`, :data:`MAPPINGS` and :data:`STATEMENTS` under ``folder``
    (``pe_array/``, ``mapping/``, ``statement/``, as TENET lays out its data); return it."""
    for sub in ("pe_array", "mapping", "statement"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for name, text in PE_ARRAYS.items():
        (folder / "pe_array" / name).write_text(text)
    for name, (space, time) in MAPPINGS.items():
        (folder / "mapping" / name).write_text(f"{space}\n{time}\n")
    for name, (reads, writes, domain, accesses) in STATEMENTS.items():
        (folder / "statement" / name).write_text(
            "\n".join([f"{reads} {writes}", domain, *accesses]) + "\n")
    return folder


def _folder() -> Path:
    given = os.environ.get("TENET_DATA_DIR")
    if given:
        if not Path(given).is_dir():
            raise FileNotFoundError(f"TENET_DATA_DIR={given!r} is not a folder; unset it to "
                                    "let the tests write their own TENET-format files")
        return Path(given)
    folder = Path(tempfile.mkdtemp(prefix="tenet-data-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return write_tenet_files(folder)


TENET_DATA = _folder()
