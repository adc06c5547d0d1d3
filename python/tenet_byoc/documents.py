"""The one guarded reader of the small JSON / YAML / CSV files a user hands us (design files,
design spaces, area tables, request mixes): bounded in size, depth and expansion, strict
about what the file means, and every refusal a ValueError naming the file and the place;
and the one writer of the CSV and JSON files we hand back (:func:`write_rows`,
:func:`write_json`).

What it refuses, and why each would otherwise go wrong:

- anything but a regular file (a FIFO would block the reader for ever, a directory or a
  device is not a document), and a file over ``max_bytes`` (checked before it is read);
- text that is not UTF-8 (named by byte offset);
- YAML aliases that expand past ``MAX_NODES`` values (a few hundred bytes of nested aliases
  are billions of values once written out as JSON), nesting deeper than ``MAX_DEPTH``;
- a key written twice in one mapping (YAML ``{45: 1, 45.0: 2}`` would keep only the last),
  and JSON's ``NaN`` / ``Infinity`` or YAML's ``.nan`` / ``.inf``: no field we read means
  a non-finite number, and passed on they surfaced as unrelated errors elsewhere.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from pathlib import Path
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "MAX_NODES", "load_document", "load_mapping",
           "read_text", "write_json", "write_rows"]

#: The largest file read (a design file or space is a few kB; the cost model's own JSON
#: limit is the same 1 MiB).
MAX_DOCUMENT_BYTES = 1 << 20
#: The most values (mappings, lists and scalars, aliases counted as often as they are used)
#: a document may hold once expanded.
MAX_NODES = 200_000
#: The deepest nesting of mappings and lists.
MAX_DEPTH = 64


def read_text(path: str | os.PathLike[str], what: str,
              max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` names it in messages).

    Raises ``FileNotFoundError`` if nothing is at ``path``, ``ValueError`` if it is not a
    regular file, is larger than ``max_bytes``, or is not UTF-8.
    """
    name = f"{what} {os.fspath(path)!r}"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} does not exist") from None
    except OSError as err:
        raise ValueError(f"{name} cannot be read: {err.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{name} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "a device")
        raise ValueError(f"{name} is {kind}, not a regular file")
    if info.st_size > max_bytes:
        raise ValueError(f"{name} is {info.st_size:,} bytes; at most {max_bytes:,} are read")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # a file that grew since stat is still bounded
    except OSError as err:
        raise ValueError(f"{name} cannot be read: {err.strerror}") from None
    if len(data) > max_bytes:
        raise ValueError(f"{name} is over {max_bytes:,} bytes; at most {max_bytes:,} are read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not UTF-8 text (byte {data[err.start]:#04x} at offset "
                         f"{err.start})") from None


def _where(path: list) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the top level"


def _check_tree(data: Any, name: str) -> None:
    """Refuse non-finite numbers, nesting past MAX_DEPTH and more than MAX_NODES values,
    walking each alias as often as it is used but stopping at the budget."""
    nodes = 0
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ValueError(f"{name} holds more than {MAX_NODES:,} values once its aliases "
                             "are expanded")
        if len(path) > MAX_DEPTH:
            raise ValueError(f"{name} nests deeper than {MAX_DEPTH} levels (at "
                             f"{_where(path[:4])}...)")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: {_where(path)} is {value}; numbers must be finite")
        if isinstance(value, dict):
            stack.extend((v, [*path, str(k)]) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(value))


def _yaml_loader():
    import yaml

    class GuardedLoader(yaml.SafeLoader):
        """PyYAML's safe loader, refusing a key written twice in one mapping and counting
        alias uses (the expansion is bounded again on the loaded tree)."""

        def construct_mapping(self, node, deep=False):
            # The mapping's own keys, before merge keys (<<) bring in others they override.
            seen: list[tuple[Any, int]] = []
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                for earlier, at in seen:
                    if key == earlier:  # 45 and 45.0 too: one dict key
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} on line {line} repeats key {earlier!r} "
                            f"of line {at} (each key may appear once)", key_node.start_mark)
                seen.append((key, line))
            return super().construct_mapping(node, deep=deep)

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self._aliases = getattr(self, "_aliases", 0) + 1
                if self._aliases > MAX_NODES:
                    raise yaml.composer.ComposerError(
                        None, None, f"more than {MAX_NODES:,} aliases",
                        self.peek_event().start_mark)
            # Refused at the first level too deep, not by Python's recursion limit (slow to
            # reach, and a RecursionError names nothing).
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nesting deeper than {MAX_DEPTH} levels",
                        self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return yaml, GuardedLoader


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object (each key may "
                             "appear once)")
        out[key] = value
    return out


def _json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a number JSON allows (numbers must be finite)")


def load_document(path: str | os.PathLike[str], what: str,
                  max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The value a JSON or YAML file holds (YAML by the suffix ``.yaml``/``.yml``), read
    through :func:`read_text` and checked as the module says.

    Raises ``FileNotFoundError`` if nothing is at ``path``, and for anything refused a
    ``ValueError`` naming the file (``what`` and its path) and the line or field.
    """
    name = f"{what} {os.fspath(path)!r}"
    text = read_text(path, what, max_bytes)
    try:
        if Path(path).suffix.lower() in (".yaml", ".yml"):
            yaml, loader = _yaml_loader()
            try:
                data = yaml.load(text, Loader=loader)  # noqa: S506 (a SafeLoader subclass)
            except yaml.YAMLError as err:
                raise ValueError(f"{name} is not valid YAML: {err}") from None
        else:
            try:
                data = json.loads(text, object_pairs_hook=_json_pairs,
                                  parse_constant=_json_constant)
            except json.JSONDecodeError as err:
                raise ValueError(f"{name} is not valid JSON: {err}") from None
            except ValueError as err:
                raise ValueError(f"{name}: {err}") from None
    except RecursionError:
        raise ValueError(f"{name} nests deeper than {MAX_DEPTH} levels (too deep to read)"
                         ) from None
    _check_tree(data, name)
    return data


def load_mapping(path: str | os.PathLike[str], what: str,
                 max_bytes: int = MAX_DOCUMENT_BYTES) -> dict:
    """:func:`load_document` of a file that must hold a mapping of fields at its top."""
    data = load_document(path, what, max_bytes)
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 (a file's content)
            f"{what} {os.fspath(path)!r} must hold a mapping of fields, got "
            f"{type(data).__name__}")
    return data


def _written(text: str, path: str | Path | None) -> str:
    """``text``, written to ``path`` (UTF-8) when given."""
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def write_rows(header: Sequence[str], rows: Iterable[Sequence], path: str | Path | None = None
               ) -> str:
    """CSV text of ``rows`` (each a list of cells, None written empty) under ``header``,
    written to ``path`` when given."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return _written(buf.getvalue(), path)


def write_json(doc: Any, path: str | Path | None = None) -> str:
    """``doc`` as indented JSON text, written to ``path`` when given."""
    return _written(json.dumps(doc, indent=1), path)
