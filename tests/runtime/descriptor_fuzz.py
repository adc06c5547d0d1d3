"""Fuzzing the tenet runtime's descriptor parser: mutated descriptors and exported libraries.

Run as a script, this file is the worker: it loads each case of a case file in turn, calls
every function of a module that loads with tensors of the declared ranks, and prints one
line per case, so that the parent knows which case was running when a worker died or hung.
Imported, it makes the cases and runs workers in subprocesses, many cases per process.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Values that break naive size and index arithmetic.
INTERESTING = [0, 1, -1, 2, 3, 4, 8, 31, 32, 33, 64, 65, 255, 256, 1024, 2**31 - 1, 2**31,
               2**32, 2**62, 2**63 - 1, -(2**63), -2, -100, 10**6]
STRINGS = ["", "float32", "int8", "uint8", "float16", "int64", "float32x4", "shape", "float",
           "int8", "dequant_channel", "dequant_group", "relu", "gelu", "none", "\uff05",
           "caf\u00e9", "\U0001f600", "a" * 300, "\x00", "e\u0301", "\ud7ff"]

# Shapes that fit the base functions below, by symbol: inputs then outputs.
BASE_SHAPES = {
    "float_chain": [[3, 8], [4, 8], [4], [4, 5], [3, 5], [3, 4]],
    "batched": [[2, 3, 8], [2, 8, 5], [2, 3, 5]],
    "int8": [[4, 8], [3, 8], [3, 1], [4], [4], [3, 4]],
    "channel": [[4, 8], [4], [], [3, 8], [4], [3, 4]],
    "group": [[4, 4], [], [], [], [4, 2, 1], [3, 8], [4], [3, 4]],
}


def base_descriptor(accelerator: dict) -> dict:
    """A descriptor with one function of every step kind, as tenet_byoc.codegen writes them."""

    def step(**kw):
        s = {"pattern": "tenet.p", "name": "s", "kind": "float", "scheme": "none", "lhs": 0,
             "rhs": 1, "bias": None, "scale_a": None, "scale_b": None, "zero_point": None,
             "bits": [32, 32, 32], "rhs_transposed": False, "epilogue": "none", "out_ndim": 2,
             "quant": recipe()}
        s.update(kw)
        return s

    def spec(dtype, ndim):
        return {"dtype": dtype, "ndim": ndim}

    def recipe(**kw):
        r = {"place": "none", "weight": "none", "weight_group": 0, "activation": "none",
             "activation_group": 0, "activation_static": False, "k_group": 0,
             "scale_bits": 16, "zero_point_bits": 0, "accumulator_bits": 32,
             "weight_batched": False}
        r.update(kw)
        return r

    functions = [
        {"symbol": "float_chain",
         "inputs": [spec("float32", 2), spec("float32", 2), spec("float32", 1),
                    spec("float32", 2)],
         "steps": [step(rhs_transposed=True, bias=2, epilogue="relu"), step(lhs=-1, rhs=3)],
         "outputs": [{**spec("float32", 2), "source": -2},
                     {**spec("float32", 2), "source": -1}]},
        {"symbol": "batched", "inputs": [spec("float32", 3), spec("float32", 3)],
         "steps": [step(out_ndim=3)], "outputs": [{**spec("float32", 3), "source": -1}]},
        {"symbol": "int8",
         "inputs": [spec("int8", 2), spec("int8", 2), spec("float32", 2), spec("float32", 1),
                    spec("float32", 1)],
         "steps": [step(kind="int8", scheme="w8a8_per_channel_per_token", lhs=1, rhs=0,
                        bias=4, scale_a=2, scale_b=3, bits=[8, 8, 16], rhs_transposed=True,
                        quant=recipe(place="output", weight="channel", activation="channel"))],
         "outputs": [{**spec("float32", 2), "source": -1}]},
        {"symbol": "channel",
         "inputs": [spec("int8", 2), spec("float32", 1), spec("int8", 0), spec("float32", 2),
                    spec("float32", 1)],
         "steps": [step(kind="dequant_channel", scheme="w8a16_per_channel", lhs=3, rhs=0,
                        bias=4, scale_b=1, bits=[16, 8, 16], rhs_transposed=True,
                        quant=recipe(place="weight", weight="channel"))],
         "outputs": [{**spec("float32", 2), "source": -1}]},
        {"symbol": "group",
         "inputs": [spec("uint8", 2), spec("uint8", 0), spec("uint8", 0), spec("float32", 0),
                    spec("float32", 3), spec("float32", 2), spec("float32", 1)],
         "steps": [step(kind="dequant_group", scheme="w4a16_group4", lhs=5, rhs=0, bias=6,
                        scale_b=4, zero_point=3, bits=[16, 4, 16], rhs_transposed=True,
                        quant=recipe(place="weight", weight="group", weight_group=4))],
         "outputs": [{**spec("float32", 2), "source": -1}]},
    ]
    return {"version": 6, "functions": functions, "accelerator": accelerator}


# ---------------------------------------------------------------- mutation


def _nodes(value, path=()):
    """Every (path, value) in a JSON tree."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, path + (i,))


def _random_value(rng: random.Random):
    r = rng.random()
    if r < 0.45:
        return rng.choice(INTERESTING)
    if r < 0.7:
        return rng.choice(STRINGS)
    if r < 0.8:
        return rng.choice([None, True, False, 1.5, -0.0, 1e308])
    if r < 0.9:
        return rng.choice([[], {}, [1, 2, 3], {"a": 1}, [None]])
    return rng.randint(-40, 40)


def mutate_structure(doc: dict, rng: random.Random) -> dict:
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.randint(1, 3)):
        nodes = [(p, v) for p, v in _nodes(doc) if p]
        path, _ = rng.choice(nodes)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = rng.random()
        if op < 0.55:
            parent[key] = _random_value(rng)
        elif op < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.8 and isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(parent[key])))
        elif op < 0.9 and isinstance(parent, list):
            del parent[key]
        else:  # another node of the same document moved here
            parent[key] = json.loads(json.dumps(rng.choice(nodes)[1]))
    return doc


def mutate_bytes(data: bytes, rng: random.Random, keep_length: bool = False) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        i = rng.randrange(len(b))
        if op < 0.4 or keep_length:
            b[i] = rng.choice([rng.randrange(256), ord(rng.choice("0123456789-[]{},:\"")),
                               0x80, 0xC3, 0xEF, 0xFF])
        elif op < 0.6:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op < 0.8:
            del b[i:i + rng.randint(1, 8)]
        else:
            b = b[:i]
            if not b:
                b = bytearray(b"{")
    return bytes(b)


def make_descriptor_cases(base: dict, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    text = json.dumps(base).encode()
    cases = []
    for _ in range(n):
        if rng.random() < 0.7:
            data = json.dumps(mutate_structure(base, rng), ensure_ascii=rng.random() < 0.5)
            data = data.encode("utf-8", "surrogatepass")
        else:
            data = mutate_bytes(text, rng)
        cases.append({"kind": "descriptor", "data": base64.b64encode(data).decode()})
    return cases


def make_library_cases(lib: bytes, descriptor: bytes, hints: dict, n: int, seed: int,
                       folder: Path) -> list[dict]:
    """Copies of an exported library whose embedded descriptor is mutated in place.

    The descriptor's bytes keep their length (the blob around it is TVM's framing, not
    ours); a structural mutation that comes out shorter is padded with JSON whitespace.
    """
    rng = random.Random(seed)
    start = lib.find(descriptor)
    assert start >= 0, "the descriptor is not stored verbatim in the library"
    base = json.loads(descriptor)
    cases = []
    for i in range(n):
        new = None
        for _ in range(20):
            if rng.random() < 0.6:
                cand = json.dumps(mutate_structure(base, rng), separators=(",", ":")).encode()
            else:
                cand = mutate_bytes(descriptor, rng, keep_length=True)
            if len(cand) <= len(descriptor):
                new = cand + b" " * (len(descriptor) - len(cand))
                break
        if new is None:
            new = mutate_bytes(descriptor, rng, keep_length=True)
        path = folder / f"lib{seed}_{i}.so"
        path.write_bytes(lib[:start] + new + lib[start + len(descriptor):])
        cases.append({"kind": "library", "path": str(path), "hints": hints})
    return cases


# ---------------------------------------------------------------- running


@dataclass
class FuzzResult:
    cases: int = 0
    crashes: list = field(default_factory=list)  # (case, return code)
    hangs: list = field(default_factory=list)
    refused: int = 0  # a readable ValueError/TypeError at load or call
    ran: int = 0  # loaded, and at least one function ran to the end
    bad_errors: list = field(default_factory=list)  # an exception of another kind


def _run_worker(case_file: Path, first: int, timeout: float):
    """Runs cases from `first` on; returns (last finished case, lines, rc or None on hang)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TVM_NUM_THREADS="1")
    try:
        proc = subprocess.run([sys.executable, __file__, str(case_file), str(first)],
                              capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
        out, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as err:
        raw = err.stdout or b""
        out, rc = raw.decode() if isinstance(raw, bytes) else raw, None
    return out.splitlines(), rc


def run_cases(cases: list[dict], folder: Path, batch: int = 1000,
              timeout: float = 300.0) -> FuzzResult:
    """Runs the cases `batch` per subprocess; a worker that dies or hangs is restarted
    after the case it was running, which is recorded as the culprit."""
    result = FuzzResult(cases=len(cases))
    for b0 in range(0, len(cases), batch):
        chunk = cases[b0:b0 + batch]
        case_file = folder / f"cases{b0}.json"
        case_file.write_text(json.dumps(chunk))
        first = 0
        while first < len(chunk):
            lines, rc = _run_worker(case_file, first, timeout)
            last_started = None
            for line in lines:
                kind, _, rest = line.partition(" ")
                if kind == "start":
                    last_started = int(rest)
                elif kind == "done":
                    i, status, detail = (rest.split(" ", 2) + [""])[:3]
                    if status == "refused":
                        result.refused += 1
                    elif status == "ran":
                        result.ran += 1
                    else:
                        result.bad_errors.append((b0 + int(i), detail))
                    last_started = None
                    first = int(i) + 1
            if rc == 0 and first >= len(chunk):
                break
            if last_started is None:  # died between cases (start-up): a crash of the worker
                last_started = first
            culprit = chunk[last_started]
            entry = (b0 + last_started, rc, culprit)
            (result.hangs if rc is None else result.crashes).append(entry)
            first = last_started + 1
    return result


def _tensor(spec, shape, rng):
    import numpy as np
    import tvm

    dtype = spec.get("dtype", "float32")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = np.dtype("float32")
    values = rng.integers(-3, 4, size=shape) if shape else rng.integers(-3, 4)
    return tvm.runtime.tensor(np.asarray(values).astype(np_dtype))


def _call_all(module, rng, hints: dict) -> bool:
    """Calls every function of a loaded tenet module twice, with the base case's shapes
    where the declared rank allows and with random small shapes; True if a call ran."""
    desc = json.loads(module.inspect_source())
    ran = False
    for f in desc["functions"]:
        specs = list(f["inputs"]) + list(f["outputs"])
        hint = hints.get(f["symbol"], [])
        for use_hint in (True, False):
            args = []
            for i, spec in enumerate(specs):
                if spec.get("kind") == "shape":
                    args.append(None)
                    continue
                ndim = spec["ndim"]
                if use_hint and i < len(hint) and len(hint[i]) == ndim:
                    shape = hint[i]
                else:
                    shape = [int(rng.integers(0, 5)) for _ in range(ndim)]
                args.append(_tensor(spec, shape, rng))
            try:
                module[f["symbol"]](*args)
                ran = True
            except (ValueError, TypeError):
                pass
    return ran


def _worker(case_file: str, first: int) -> None:
    import numpy as np
    import tvm

    import tenet_byoc  # noqa: F401  (registers the loader)

    load = tvm.get_global_func("ffi.Module.load_from_bytes.tenet")
    cases = json.loads(Path(case_file).read_text())
    rng = np.random.default_rng(first)
    for i in range(first, len(cases)):
        case = cases[i]
        print(f"start {i}", flush=True)
        status, detail = "ran", ""
        try:
            if case["kind"] == "segfault":  # the harness's own check: a worker that dies
                os.kill(os.getpid(), 11)
            if case["kind"] == "descriptor":
                modules = [load(base64.b64decode(case["data"]))]
            else:
                lib = tvm.runtime.load_module(case["path"])
                modules = [m for m in lib.imports if m.kind == "tenet"]
            hints = {**BASE_SHAPES, **case.get("hints", {})}
            results = [_call_all(m, rng, hints) for m in modules]  # every module, no shortcut
            ran = any(results)
            status = "ran" if ran else "refused"
        except (ValueError, TypeError) as err:
            status = "refused"
            str(err)  # the message must be text
        except Exception as err:  # noqa: BLE001  (reported, not swallowed)
            status, detail = "bad", f"{type(err).__name__}: {str(err)[:200]!r}"
        print(f"done {i} {status} {detail}".rstrip(), flush=True)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
