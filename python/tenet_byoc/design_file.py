"""Design files: an accelerator as JSON or YAML with each quantity written once, and every
problem of a file reported in one message naming the fields as the file writes them.

The accelerator's JSON form (``Accelerator.to_json``) carries four quantities twice: the PE
array's size (``dataflow.rows`` / ``cols`` and ``hardware.pe_domain``), the shared buffer
(``memory.buffer_bytes`` and TENET's ``hardware.l2_bytes``), the per-PE registers
(``memory.register_bytes`` and ``hardware.l1_bytes``) and the DRAM bandwidth
(``memory.dram_bandwidth_bits`` and ``hardware.bandwidth_bits``). A design file writes the
first of each pair (:func:`design_form`, what ``tenet-byoc presets --show`` prints); the
second is derived from it on reading, and a file that gives both with different values is
refused naming both, so that editing one of a pair never changes results silently.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._names import did_you_mean

__all__ = ["PAIRS", "design_form", "read_design"]

#: (derived field, the field a design file writes) for each quantity the form holds twice.
PAIRS: tuple[tuple[str, str], ...] = (
    ("hardware.pe_domain", "dataflow.rows / dataflow.cols"),
    ("hardware.l2_bytes", "memory.buffer_bytes"),
    ("hardware.l1_bytes", "memory.register_bytes"),
    ("hardware.bandwidth_bits", "memory.dram_bandwidth_bits"),
)

_DOMAIN = re.compile(r"^\{\s*PE\[p,\s*q\]\s*:\s*0\s*<=\s*p\s*<\s*(\d+)\s+and\s+"
                     r"0\s*<=\s*q\s*<\s*(\d+)\s*\}$")
#: The cost model's class names in its messages -> the path a design file writes.
_CLASS_PATHS = (("MemoryHierarchy.", "memory."), ("Hardware.", "hardware."),
                ("Dataflow.", "dataflow."), ("VectorUnit.", "vector."),
                ("EdgeDequantizer.", "edge_dequantizer."), ("accelerator.", ""))
_PRECISION = re.compile(r"PrecisionTable\.units\[(\d+)\]\.")
#: Objects whose keys are values, not field names (tiles, rates by width, a mapping's kind).
_FREE = ("mapping", "tiling", "macs_per_pe_per_cycle")
_MISSING = re.compile(r"(\w+) has no field '(\w+)'")
_PATH = re.compile(r"(?<![\w.])((?:hardware|dataflow|memory|vector|edge_dequantizer|precision"
                   r"|mapping)(?:\[\d+\])?(?:\.\w+)?)")


def _domain(rows: int, cols: int) -> str:
    return f"{{PE[p,q]: 0<=p<{rows} and 0<=q<{cols}}}"


def _preset_array(form: dict) -> tuple[int, int] | None:
    """(rows, cols) of a preset dataflow (``dataflow.preset`` set), else None."""
    flow = form.get("dataflow")
    if not isinstance(flow, dict) or not flow.get("preset"):
        return None
    rows, cols = flow.get("rows"), flow.get("cols")
    if isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0:
        return rows, cols
    return None


def design_form(accelerator: Any) -> dict:
    """The accelerator's JSON form with each quantity once: the form less the derived fields
    of :data:`PAIRS` (``hardware.pe_domain`` only for a preset dataflow, whose rows and cols
    say the array's size)."""
    form = json.loads(accelerator.to_json())
    hardware = form["hardware"]
    for key in ("l1_bytes", "l2_bytes", "bandwidth_bits"):
        hardware.pop(key, None)
    if _preset_array(form) is not None and _DOMAIN.match(str(hardware.get("pe_domain", ""))):
        hardware.pop("pe_domain")
    ref = _preset_relations(form)
    if ref is not None and all(_squash(form["dataflow"][k]) == _squash(ref[k])
                               for k in ("name", "space", "time")):
        for key in ("name", "space", "time"):  # the preset's at rows x cols
            form["dataflow"].pop(key)
    return form


def _fill_pairs(form: dict, problems: list[str]) -> None:
    """Derive each pair's second field where the file leaves it out; refuse both given with
    different values, naming both."""
    hardware, memory = form.get("hardware"), form.get("memory")
    if not isinstance(hardware, dict) or not isinstance(memory, dict):
        return
    for derived, source in (("l2_bytes", "buffer_bytes"), ("l1_bytes", "register_bytes"),
                            ("bandwidth_bits", "dram_bandwidth_bits")):
        if source not in memory:
            # the missing memory field is reported; its TENET twin is not the user's to write
            hardware.setdefault(derived, 1)
            continue
        if derived not in hardware:
            hardware[derived] = memory[source]
        elif hardware[derived] != memory[source]:
            problems.append(
                f"hardware.{derived} = {hardware[derived]!r} and memory.{source} = "
                f"{memory[source]!r} are one quantity and disagree: give memory.{source} only "
                f"(hardware.{derived} is derived from it) or make them equal")
    array = _preset_array(form)
    if array is None:
        return
    rows, cols = array
    domain = hardware.get("pe_domain")
    if domain is None:
        hardware["pe_domain"] = _domain(rows, cols)
        return
    match = _DOMAIN.match(str(domain))
    if match and (int(match[1]), int(match[2])) != (rows, cols):
        problems.append(
            f"hardware.pe_domain is a {match[1]}x{match[2]} array but dataflow.rows / "
            f"dataflow.cols say {rows}x{cols}: give dataflow.rows and dataflow.cols only "
            "(hardware.pe_domain is derived from them) or make them agree")


def _preset_relations(form: dict) -> dict | None:
    """The dataflow form of the file's preset at its rows and cols (untiled), else None."""
    array = _preset_array(form)
    flow = form.get("dataflow", {})
    if array is None or flow.get("tiling") not in ({}, None):
        return None
    from . import cost_model as cm

    try:
        ref = cm.Dataflow.preset(flow["preset"], *array)
    except (ValueError, TypeError, KeyError):
        return None  # an unknown preset name is the cost model's to report
    return {"name": ref.name, "space": ref.space, "time": ref.time}


def _check_relations(form: dict, problems: list[str]) -> None:
    """A preset dataflow's space, time and name are its preset's at its rows and cols:
    derived where the file leaves them out; a file that changes rows or cols and keeps the
    old relations contradicts itself."""
    ref = _preset_relations(form)
    if ref is None:
        return
    flow, array = form["dataflow"], _preset_array(form)
    for key in ("name", "space", "time"):
        flow.setdefault(key, ref[key])
    for key in ("space", "time"):
        if key in flow and _squash(flow[key]) != _squash(ref[key]):
            problems.append(
                f"dataflow.{key} {flow[key]!r} is not the {flow['preset']!r} preset's at "
                f"dataflow.rows / dataflow.cols = {array[0]}x{array[1]} ({ref[key]!r}): "
                f"change rows and cols with their relations (`presets --show` prints a "
                f"preset's), or give your own relations with dataflow.preset \"\"")


def _squash(text: Any) -> str:
    return re.sub(r"\s+", "", str(text))


def _unknown_keys(form: dict, schema: dict, problems: list[str], where: str = "") -> None:
    """Every key the form has and its schema does not, with the nearest known name; each is
    dropped from ``form`` so that the rest of the file is still checked."""
    for key in list(form):
        value, path = form[key], f"{where}{key}"
        if key not in schema:
            problems.append(f"unknown field {path!r}{did_you_mean(str(key), list(schema))}")
            del form[key]
        elif isinstance(value, dict) and isinstance(schema[key], dict) \
                and key not in _FREE:
            _unknown_keys(value, schema[key], problems, f"{path}.")


def _schema(presets: Mapping[str, Any]) -> dict:
    """Every field the one form has, from the presets (their union: optional units too)."""
    schema: dict = {}
    for accelerator in presets.values():
        _merge(schema, json.loads(accelerator.to_json()))
    return schema


def _merge(into: dict, form: dict) -> None:
    for key, value in form.items():
        if isinstance(value, dict) and key not in _FREE and isinstance(into.get(key, {}), dict):
            _merge(into.setdefault(key, {}), value)
        else:
            into[key] = value


def _as_written(message: str) -> str:
    """A cost-model message with its class names turned into the file's paths."""
    message = _PRECISION.sub(r"precision[\1].", message)
    for name, path in _CLASS_PATHS:
        message = message.replace(name, path)
    return message.replace(" .", " ")


def _set(form: dict, path: str, value: Any, add: bool = False) -> bool:
    """Put ``value`` at a dotted ``path`` (``precision[0].pj_per_mac``); False if there is no
    such place in the form."""
    parts = re.findall(r"\w+|\[\d+\]", path)
    node: Any = form
    for i, part in enumerate(parts):
        key: Any = int(part[1:-1]) if part.startswith("[") else part
        last = i == len(parts) - 1
        try:
            if last:
                if isinstance(node, dict) and key not in node and not add:
                    return False
                node[key] = value
                return True
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return False
    return False


def _get(form: dict, path: str) -> Any:
    node: Any = form
    for part in re.findall(r"\w+|\[\d+\]", path):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def _parse_all(form: dict, parse: Callable[[str], Any], good_design: Any,
               problems: list[str]) -> Any:
    """Parse the form; on a refusal naming a field, note it, put a good value there (the
    ``good_design``'s) and parse again, so that every bad value is reported at once."""
    good = design_form(good_design)
    _fill_pairs(good, [])
    for _ in range(64):
        try:
            return parse(json.dumps(form))
        except (TypeError, ValueError) as err:
            message = _as_written(str(err))
            problems.append(message)
            missing = _MISSING.search(message)
            place = (f"{missing[1]}.{missing[2]}" if missing
                     else (_PATH.search(message) or [None, None])[1])
            if place is None:
                return None
            try:
                fix = _get(good, place)
            except (KeyError, IndexError, TypeError):
                return None
            if not _set(form, place, copy.deepcopy(fix), add=bool(missing)):
                return None
    return None


def read_design(path: str | Path, parse: Callable[[str], Any],
                presets: Mapping[str, Any]) -> Any:
    """The accelerator a design file holds (``Accelerator.from_file`` calls this).

    Parameters
    ----------
    path : str or Path
        A ``.json``, ``.yaml`` or ``.yml`` file of the accelerator's form.
    parse : callable
        The accelerator from the form's JSON text (``Accelerator.from_json``).
    presets : mapping of str to Accelerator
        The presets: their forms are the fields a file may hold, and ``os16``'s values
        stand in for a bad one while the rest of the file is checked.

    Raises
    ------
    ValueError
        Naming the file and, in one message, every problem found: unknown fields (with the
        nearest known name), the pairs of :data:`PAIRS` given twice with different values, a
        preset's relations that do not match its rows and cols, and each bad value the cost
        model refuses, named by its path in the file (``memory.buffer_bytes``).
    FileNotFoundError
        For a missing file.
    """
    from .area import load_table_file

    data = load_table_file(path, "accelerator file")
    if not isinstance(data, dict):
        raise ValueError(f"accelerator file {str(path)!r} must hold an object of the "
                         f"accelerator's fields, got {type(data).__name__}")
    form = copy.deepcopy(data)
    problems: list[str] = []
    _unknown_keys(form, _schema(presets), problems)
    _fill_pairs(form, problems)
    _check_relations(form, problems)
    accelerator = _parse_all(form, parse, presets["os16"], problems)
    if problems:
        count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
        raise ValueError(f"accelerator file {str(path)!r}: {count}:\n  " + "\n  ".join(problems))
    return accelerator
