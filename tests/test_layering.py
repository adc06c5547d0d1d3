"""The package's layers: the backend imports neither models nor experiments, models do not
import experiments (checked in a fresh interpreter, so nothing else has imported them), and
the modules of tenet_byoc.models import each other without a circle (read from the source,
so an import inside a function counts as much as one at the top), no module below the
experiments imports the package's face (its ``__init__``), and the console entry's package is
reached only for its names module, which imports nothing but the standard library."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import tenet_byoc

PACKAGE_DIR = Path(tenet_byoc.__file__).parent


@pytest.mark.parametrize(
    ("imported", "forbidden"),
    [
        ("tenet_byoc", ("tenet_byoc.models", "tenet_byoc.experiments")),
        ("tenet_byoc.models.gpt2, tenet_byoc.models.mlp", ("tenet_byoc.experiments",)),
    ],
)
def test_layers_import_downwards_only(imported, forbidden):
    code = (f"import sys, {imported}\n"
            f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def _module_name(path: Path, root: Path) -> str:
    stem = path.name.split(".")[0]  # _cost_model.cpython-311-x86_64-linux-gnu.so: _cost_model
    parts = ["tenet_byoc", *path.relative_to(root).parent.parts, stem]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _compiled(path: Path) -> bool:
    return any(path.name.endswith(suffix) for suffix in EXTENSION_SUFFIXES)


def _imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for each import in ``path``'s source (module
    ``name``), relative ones resolved; ``import a.b`` is ``("a.b", [])``."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out.append((stem, [alias.name for alias in node.names]))
    return out


def _sources(root: Path) -> dict[str, Path]:
    """The modules under ``root`` with Python source, ``__init__`` files left out."""
    return {_module_name(p, root): p for p in root.rglob("*.py") if p.name != "__init__.py"}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Each module of ``package`` (under ``root``, the tenet_byoc folder) and the modules of
    ``package`` it imports anywhere in its source (``from . import x`` counts as ``x``),
    compiled ones (the C++ binding ``_cost_model``) included.

    Packages' ``__init__`` files are left out: one imports its own submodules by design.
    """
    sources = _sources(root)
    modules = set(sources) | {_module_name(p, root) for p in root.rglob("*") if _compiled(p)}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        if not name.startswith(package):
            continue
        targets: set[str] = set()
        for stem, names in _imports(name, path):
            targets.add(stem)
            targets.update(f"{stem}.{n}" for n in names)
        graph[name] = {t for t in targets if t in modules and t != name
                       and t.startswith(package)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1 while on the current path, 2 when done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_in_models():
    graph = import_graph(PACKAGE_DIR, "tenet_byoc.models")
    assert set(graph) >= {"tenet_byoc.models.gpt2", "tenet_byoc.models.gemms"}
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_circle_finder_finds_circles(tmp_path):
    # The check above must be able to fail: two modules importing each other, one lazily.
    pkg = tmp_path / "models"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from tenet_byoc.models import a\n")
    graph = import_graph(tmp_path, "tenet_byoc.models")
    assert graph["tenet_byoc.models.c"] == {"tenet_byoc.models.a"}
    assert find_cycle(graph) == ["tenet_byoc.models.a", "tenet_byoc.models.b",
                                 "tenet_byoc.models.a"]
    (pkg / "b.py").write_text("def f():\n    pass\n")
    assert find_cycle(import_graph(tmp_path, "tenet_byoc.models")) is None


#: The package's layers, lowest first (the README's "How it works" names them): a module
#: imports from its own layer or below, never from a layer above it.
LAYERS = (
    ("core", ("_cost_model", "_names", "_loader", "library", "patterns",
              "documents", "progress")),
    ("cost-model face", ("memory", "mapping", "cost_model")),
    ("accelerators", ("accelerators", "area", "design_file")),
    ("quantization", ("quantization",)),
    ("backend", ("compose", "ledger", "vector_plan", "partition", "codegen", "profiling",
                 "system")),
    ("models", ("models",)),
    ("plan", ("plan",)),
    ("estimate", ("estimate", "dse", "serving")),
    ("experiments", ("experiments",)),
)


def _layer_of(module: str) -> int:
    inside = module.removeprefix("tenet_byoc.")
    for index, (_, members) in enumerate(LAYERS):
        if any(inside == m or inside.startswith(m + ".") for m in members):
            return index
    raise AssertionError(f"{module} is in no layer of LAYERS: place it there")


def test_no_import_circle_in_the_package():
    graph = import_graph(PACKAGE_DIR, "tenet_byoc")
    assert len(graph) > 30
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_each_module_imports_its_own_layer_or_below():
    graph = import_graph(PACKAGE_DIR, "tenet_byoc")
    upward = sorted(f"{m} ({LAYERS[_layer_of(m)][0]}) -> {t} ({LAYERS[_layer_of(t)][0]})"
                    for m, targets in graph.items() for t in targets
                    if _layer_of(t) > _layer_of(m))
    assert upward == [], "imports from a lower layer back up:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    # The check above must be able to fail: the accelerators importing the ledger.
    root = tmp_path / "tenet_byoc"
    root.mkdir()
    (root / "accelerators.py").write_text("from .ledger import Ledger\n")
    (root / "ledger.py").write_text("X = 1\n")
    graph = import_graph(root, "tenet_byoc")
    assert [(m, t) for m, ts in graph.items() for t in ts
            if _layer_of(t) > _layer_of(m)] == [("tenet_byoc.accelerators", "tenet_byoc.ledger")]


def test_the_cost_model_binding_is_seen_in_the_core():
    # The C++ binding is a compiled module: an import of it is an edge of the graph.
    graph = import_graph(PACKAGE_DIR, "tenet_byoc")
    assert "tenet_byoc._cost_model" in graph["tenet_byoc.cost_model"]
    assert "tenet_byoc._cost_model" in graph["tenet_byoc.memory"]


def test_no_module_below_the_experiments_imports_the_package_face():
    # ``from . import x`` where x is no module takes x from ``__init__``, the face, which
    # imports the estimate layer: from the core that runs back up every layer.
    modules = set(_sources(PACKAGE_DIR)) | {
        _module_name(p, PACKAGE_DIR) for p in PACKAGE_DIR.rglob("*") if _compiled(p)}
    experiments = [name for name, _ in LAYERS].index("experiments")
    face = []
    for name, path in _sources(PACKAGE_DIR).items():
        if _layer_of(name) >= experiments:
            continue
        for stem, names in _imports(name, path):
            if stem == "tenet_byoc" and (not names or any(
                    f"tenet_byoc.{n}" not in modules and not (PACKAGE_DIR / n).is_dir()
                    for n in names)):
                face.append(f"{name}: from {stem} import {', '.join(names)}")
    assert face == [], "the package's face imported from below:\n" + "\n".join(face)


def test_the_console_entry_is_reached_only_for_its_names():
    # tenet_byoc_cli must answer --help without TVM, so the near-miss names live there; the
    # backend may take them (the core's _names) because that module imports nothing but the
    # standard library: no arrow runs back from it into the package or the parser.
    # The same for the design point's schema, which dse builds on and the parser reads.
    cli = PACKAGE_DIR.parent / "tenet_byoc_cli"
    for module in ("names", "design_point"):
        outside = sorted({stem.split(".")[0] for stem, _ in _imports(
            f"tenet_byoc_cli.{module}", cli / f"{module}.py")}
            - set(sys.stdlib_module_names) - {"__future__"})
        assert outside == [], module
    reached = {}
    for name, path in _sources(PACKAGE_DIR).items():
        for stem, _ in _imports(name, path):
            if stem.split(".")[0] == "tenet_byoc_cli" and _layer_of(name) < len(LAYERS) - 1:
                reached.setdefault(name, set()).add(stem)
    assert reached == {"tenet_byoc._names": {"tenet_byoc_cli.names"},
                       "tenet_byoc.dse": {"tenet_byoc_cli.design_point"}}
