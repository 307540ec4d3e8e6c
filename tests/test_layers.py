"""The package's import graph, drawn from the modules' own source: no import circle, no arrow from a lower layer to
a higher one (README, "What is inside"; ``venus_edge/__init__.py``), and no module that imports the package root.

Every ``import`` and ``from ... import`` counts, at any depth: inside a function, under ``if TYPE_CHECKING:``, in
a ``try``. An import inside a function still is an arrow: it only hides a circle until someone calls it.
``from P import name`` is an arrow to the module ``P.name`` where that is a module, else to ``P``.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The package and its mapped subpackages (pyproject.toml, [tool.setuptools.package-dir]).
FOLDERS = {"venus_edge": "venus_edge", "venus_edge.tools": "tools", "venus_edge.quantize": "quantize",
           "venus_edge.train": "train"}
PACKAGE_ROOT = "venus_edge"

# Lowest first; a module may import its own layer and the layers below. A module belongs to the longest prefix
# listed. Layer 0 also holds the leaf formats ``grammar`` (the GBNF of a turn, part of the text format),
# ``text`` (the one place text from outside is made valid Unicode) and
# ``jsonl`` (records on disk, used by the journal, eval and train); the typed records of a session (``turn``,
# ``events``, ``trajectory``) sit with the agent that makes them, as does ``pacing`` (it acts between the agent's
# turns); ``testing`` holds a scripted engine.
LAYERS: list[tuple[str, ...]] = [
    ("venus_edge.tools", "venus_edge.protocol", "venus_edge.errors", "venus_edge.grammar", "venus_edge.jsonl",
     "venus_edge.lazy", "venus_edge.text"),
    ("venus_edge.memory",),
    ("venus_edge.engines", "venus_edge.testing"),
    ("venus_edge.agent", "venus_edge.pacing", "venus_edge.policies", "venus_edge.events", "venus_edge.result",
     "venus_edge.turn", "venus_edge.trajectory", "venus_edge.session_lock", "venus_edge.toolbox",
     "venus_edge.quantize"),
    ("venus_edge.session", "venus_edge.flags", "venus_edge.provenance"),
    ("venus_edge.eval", "venus_edge.server", "venus_edge.bench"),
    ("venus_edge.cli", "venus_edge.train"),
]


@dataclass(frozen=True)
class Arrow:
    """``source`` imports ``target`` at ``path:line``."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path.relative_to(ROOT)}:{self.line})"


@cache
def modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the package (``__init__.py`` is its package)."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


def _known(name: str) -> str | None:
    """The module ``name`` names, or the nearest package above it that is ours; None for other distributions."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of ours that one import statement names (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [target for alias in node.names if (target := _known(alias.name))]
    base = node.module or ""
    if node.level:
        package = module.split(".") if modules()[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else _known(base) for alias in node.names]
    return [target for target in targets if target]


@cache
def arrows() -> tuple[Arrow, ...]:
    """Every import of one of our modules by another, with where it is written."""
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [Arrow(module, target, path, node.lineno) for target in _imported(module, node)
                          if target != module]
    return tuple(found)


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (the longest matching prefix in ``LAYERS``); None for the package root."""
    matches = [(len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1] if matches else None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(target) == 1:
                return path[path.index(target):] + [target]
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(sorted(graph.get(target, ()))))
    return None


def test_every_module_has_a_layer():
    """A new module or package is placed in ``LAYERS`` (or the arrows into and out of it go unchecked)."""
    unplaced = sorted(m for m in modules() if m != PACKAGE_ROOT and layer_of(m) is None)
    assert unplaced == [], f"place these modules in LAYERS (and README's What is inside): {unplaced}"


def test_the_import_graph_has_no_circle():
    """No two modules import each other, directly or around a longer circle, not even from inside a function."""
    graph: dict[str, set[str]] = {module: set() for module in modules()}
    for arrow in arrows():
        graph[arrow.source].add(arrow.target)
    circle = _cycle(graph)
    if circle is not None:
        where = [next(str(a) for a in arrows() if (a.source, a.target) == pair) for pair in itertools.pairwise(circle)]
        raise AssertionError("import circle:\n  " + "\n  ".join(where))


def test_no_arrow_points_to_a_higher_layer():
    """Imports point down or sideways: tools, protocol, errors -> memory -> engines -> agent and quantize ->
    session -> eval, server, bench -> cli, train."""
    upward = [f"{arrow} (layer {layer_of(arrow.source)} imports layer {layer_of(arrow.target)})"
              for arrow in arrows()
              if arrow.source != PACKAGE_ROOT and arrow.target != PACKAGE_ROOT
              and layer_of(arrow.target) > layer_of(arrow.source)]
    assert upward == [], "imports against the layers:\n  " + "\n  ".join(upward)


def test_no_module_imports_the_package_root():
    """``venus_edge/__init__.py`` is the top (lazy exports only): a module that imports from it, even
    ``from venus_edge import protocol``, goes through those exports; import ``venus_edge.protocol`` instead."""
    through_root = []
    for module, path in modules().items():
        if module == PACKAGE_ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == PACKAGE_ROOT) or (
                    isinstance(node, ast.Import) and any(alias.name == PACKAGE_ROOT for alias in node.names)):
                through_root.append(f"{module} ({path.relative_to(ROOT)}:{node.lineno})")
    assert through_root == [], "modules importing the package root:\n  " + "\n  ".join(through_root)


def test_the_graph_is_read_from_every_kind_of_import():
    """The reader sees imports inside functions and relative ones (a circle held open by either is still found)."""
    seen = {(a.source, a.target) for a in arrows()}
    assert ("venus_edge.quantize.quantize", "venus_edge.quantize.errors") in seen  # from .errors import ...
    assert ("venus_edge.cli", "venus_edge.engines.llama_cpp") in seen  # inside a function
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
