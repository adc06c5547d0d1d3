"""Loading an exported library with its ELF layout checked first, so a damaged file is an error.

``tvm.runtime.load_module`` hands a shared library to ``dlopen``, which maps it and dies
with SIGBUS when a header, a section or the section table lies past the end of a truncated
file. :func:`load_module` reads the ELF header and section table and checks that every
piece lies inside the file before anything maps it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import tvm

__all__ = ["load_module"]

_ELF_MAGIC = b"\x7fELF"
_SHT_NOBITS = 8  # .bss-like sections take no room in the file


def _check_elf(path: Path) -> None:
    """Raise ``ValueError`` naming ``path`` unless its ELF pieces all lie inside the file."""
    size = path.stat().st_size

    def bad(why: str) -> ValueError:
        return ValueError(f"{str(path)!r} is not a loadable shared library: {why} "
                          f"(file size {size:,} bytes); export it again with "
                          "ex.export_library(path)")

    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != _ELF_MAGIC:
            raise bad("no ELF header")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise bad(f"unknown ELF class {ident[4]} or byte order {ident[5]}")
        is64 = ident[4] == 2
        end = "<" if ident[5] == 1 else ">"
        header_size = 64 if is64 else 52
        rest = f.read(header_size - 16)
        if len(rest) < header_size - 16:
            raise bad(f"the ELF header needs {header_size} bytes")
        fmt = end + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH")
        (_type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
         shentsize, shnum, _shstrndx) = struct.unpack(fmt, rest)
        for what, off, entsize, num in (("program header table", phoff, phentsize, phnum),
                                        ("section table", shoff, shentsize, shnum)):
            if num and off + entsize * num > size:
                raise bad(f"its {what} ends at byte {off + entsize * num:,}, past the end")
        f.seek(phoff)
        programs = f.read(phentsize * phnum)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
    # Segments are what dlopen maps: one past the end is the SIGBUS.
    # p_offset and p_filesz: fields 2 and 5 of a 64-bit program header, 1 and 4 of a 32-bit
    ph_fmt, offset_at, size_at = (end + "IIQQQQQQ", 2, 5) if is64 else (end + "IIIIIIII", 1, 4)
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, programs, i * phentsize)
        p_offset, p_filesz = fields[offset_at], fields[size_at]
        if p_offset + p_filesz > size:
            raise bad(f"segment {i} ends at byte {p_offset + p_filesz:,}, past the end")
    sh_fmt = end + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
    for i in range(shnum):
        fields = struct.unpack_from(sh_fmt, table, i * shentsize)
        sh_type, sh_offset, sh_bytes = fields[1], fields[4], fields[5]
        if sh_type != _SHT_NOBITS and sh_offset + sh_bytes > size:
            raise bad(f"section {i} ends at byte {sh_offset + sh_bytes:,}, past the end")


def load_module(path: str | os.PathLike) -> tvm.runtime.Module:
    """Load a library written by ``ex.export_library(path)``, checked first.

    Parameters
    ----------
    path : str or os.PathLike
        The exported shared library (``.so``).

    Returns
    -------
    tvm.runtime.Module
        What ``tvm.runtime.load_module(path)`` returns: run it with
        ``relax.VirtualMachine(lib, tvm.cpu())`` or :class:`tenet_byoc.VirtualMachine`.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        ``path`` is a folder, or not an ELF file, or truncated: its ELF header, program
        header table, section table or a section lies past the end of the file (``dlopen``
        would die on it with SIGBUS).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"exported library {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; load_module takes the exported .so file")
    _check_elf(path)
    return tvm.runtime.load_module(str(path))
