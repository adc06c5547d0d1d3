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
import functools
import json
import operator
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._names import did_you_mean
from .mapping import domain_edges

__all__ = ["PAIRS", "design_form", "read_design"]

#: TENET's hardware fields that repeat a memory field: ``hardware.<key>`` is ``memory.<value>``.
_TWINS = {"l2_bytes": "buffer_bytes", "l1_bytes": "register_bytes",
          "bandwidth_bits": "dram_bandwidth_bits"}
#: (derived field, the field a design file writes) for each quantity the form holds twice.
PAIRS: tuple[tuple[str, str], ...] = (
    ("hardware.pe_domain", "dataflow.rows / dataflow.cols"),
    *((f"hardware.{derived}", f"memory.{source}") for derived, source in _TWINS.items()))

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
    for key in _TWINS:
        hardware.pop(key, None)
    if _preset_array(form) is not None and domain_edges(str(hardware.get("pe_domain", ""))):
        hardware.pop("pe_domain")
    ref = _preset_relations(form)
    if ref is not None and all(_squash(form["dataflow"][k]) == _squash(ref[k])
                               for k in ("name", "space", "time")):
        for key in ("name", "space", "time"):  # the preset's at rows x cols
            form["dataflow"].pop(key)
    return form


def _check_preset(form: dict, good: dict, problems: list[str]) -> None:
    """A preset dataflow's own fields (``preset``, ``rows``, ``cols``, ``tiling``), checked
    before anything is derived from them. A bad one (or no dataflow at all) is reported once,
    and the ``good`` form's dataflow and PE domain stand in while the rest of the file is
    checked, so that the fields derived from it (its relations, ``hardware.pe_domain``) add
    no problem of their own ("dataflow has no field 'name'")."""
    flow = form.get("dataflow")
    found = []
    if flow is None:
        found.append("missing field 'dataflow' (the array's dataflow: preset, rows, cols and "
                     "tiling, as `presets --show` prints them)")
    elif not isinstance(flow, dict):
        found.append("dataflow must be an object (preset, rows, cols and tiling), got "
                     f"{type(flow).__name__} {flow!r:.60}")
    elif not flow.get("preset"):
        return  # the user's own relations
    else:
        for key in ("rows", "cols"):
            value = flow.get(key)
            if key not in flow:
                found.append(f"dataflow.{key} is missing: a preset dataflow's array size")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                found.append(f"dataflow.{key} must be a positive integer, got {value!r}")
        tiling = flow.get("tiling") or {}
        if not isinstance(tiling, dict) or any(
                isinstance(v, bool) or not isinstance(v, int) for v in tiling.values()):
            found.append("dataflow.tiling must be an object of integer tiling factors, got "
                         f"{tiling!r}")
        elif not found:
            from . import cost_model as cm

            try:
                cm.Dataflow.preset(str(flow["preset"]), flow["rows"], flow["cols"], **tiling)
            except (ValueError, TypeError) as err:
                where = ("dataflow.preset" if "unknown dataflow preset" in str(err)
                         else "dataflow.tiling")
                found.append(f"{where}: {_as_written(str(err))}")
    if found:
        problems.extend(found)
        form["dataflow"] = copy.deepcopy(good["dataflow"])
        if isinstance(form.get("hardware"), dict):
            form["hardware"]["pe_domain"] = good["hardware"]["pe_domain"]


def _fill_pairs(form: dict, problems: list[str]) -> dict[str, str]:
    """Derive each pair's second field where the file leaves it out; refuse both given with
    different values, naming both. Returns the fields derived, each with the one it came
    from (``{"hardware.l2_bytes": "memory.buffer_bytes"}``)."""
    derived_from: dict[str, str] = {}
    hardware, memory = form.get("hardware"), form.get("memory")
    if not isinstance(hardware, dict) or not isinstance(memory, dict):
        return derived_from
    for derived, source in _TWINS.items():
        if source not in memory:
            # the missing memory field is reported; its TENET twin is not the user's to write
            hardware.setdefault(derived, 1)
            continue
        if derived not in hardware:
            hardware[derived] = memory[source]
            derived_from[f"hardware.{derived}"] = f"memory.{source}"
        elif hardware[derived] != memory[source]:
            problems.append(
                f"hardware.{derived} = {hardware[derived]!r} and memory.{source} = "
                f"{memory[source]!r} are one quantity and disagree: give memory.{source} only "
                f"(hardware.{derived} is derived from it) or make them equal")
    array = _preset_array(form)
    if array is None:
        return derived_from
    rows, cols = array
    domain = hardware.get("pe_domain")
    if domain is None:
        hardware["pe_domain"] = f"{{PE[p,q]: 0<=p<{rows} and 0<=q<{cols}}}"
        derived_from["hardware.pe_domain"] = "dataflow.rows / dataflow.cols"
        return derived_from
    edges = domain_edges(str(domain))
    if edges is not None and edges != (rows, cols):
        problems.append(
            f"hardware.pe_domain is a {edges[0]}x{edges[1]} array but dataflow.rows / "
            f"dataflow.cols say {rows}x{cols}: give dataflow.rows and dataflow.cols only "
            "(hardware.pe_domain is derived from them) or make them agree")
    return derived_from


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


def _parts(path: str) -> list:
    """The keys of a dotted ``path`` (``precision[0].pj_per_mac``): names and list indices."""
    return [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\w+|\[\d+\]", path)]


def _set(form: dict, path: str, value: Any, add: bool = False) -> bool:
    """Put ``value`` at a dotted ``path``; False if there is no such place in the form."""
    *parents, last = _parts(path)
    try:
        node = functools.reduce(operator.getitem, parents, form)
        if isinstance(node, dict) and last not in node and not add:
            return False
        node[last] = value
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _parse_all(form: dict, parse: Callable[[str], Any], good_design: Any,
               problems: list[str], derived_from: Mapping[str, str] | None = None) -> Any:
    """Parse the form; on a refusal naming a field, note it, put a good value there (the
    ``good_design``'s) and parse again, so that every bad value is reported at once. A
    refusal of a field derived from another (``derived_from``) is told of the field the file
    wrote, and only when that field's own check has not told it already."""
    good = design_form(good_design)
    _fill_pairs(good, [])
    derived_from = derived_from or {}
    of_derived: dict[str, str] = {}  # the field the file wrote -> the refusal of its twin
    try:
        for _ in range(64):
            try:
                return parse(json.dumps(form))
            except (TypeError, ValueError) as err:
                message = _as_written(str(err))
            missing = _MISSING.search(message)
            place = (f"{missing[1]}.{missing[2]}" if missing
                     else (_PATH.search(message) or [None, None])[1])
            if place in derived_from:
                source = derived_from[place]
                of_derived[source.split(" ")[0]] = message.replace(
                    place, f"{source} ({place}, derived from it)", 1)
            else:
                problems.append(message)
            if place is None:
                return None
            try:
                fix = functools.reduce(operator.getitem, _parts(place), good)
            except (KeyError, IndexError, TypeError):
                return None
            if not _set(form, place, copy.deepcopy(fix), add=bool(missing)):
                return None
        return None
    finally:
        for source, message in of_derived.items():
            if not any(p.startswith(source) for p in problems):
                problems.append(message)


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
    from .documents import load_mapping

    form = load_mapping(path, "accelerator file")
    problems: list[str] = []
    schema: dict = {}  # every field the one form has: the presets' union (optional units too)
    for accelerator in presets.values():
        _merge(schema, json.loads(accelerator.to_json()))
    _unknown_keys(form, schema, problems)
    _check_preset(form, json.loads(presets["os16"].to_json()), problems)
    derived_from = _fill_pairs(form, problems)
    _check_relations(form, problems)
    accelerator = _parse_all(form, parse, presets["os16"], problems, derived_from)
    if problems:
        count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
        raise ValueError(f"accelerator file {str(path)!r}: {count}:\n  " + "\n  ".join(problems))
    return accelerator
