"""Import hygiene and the public API."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest


def test_import_venus_edge_pulls_in_neither_torch_nor_transformers():
    code = ("import sys, venus_edge, venus_edge.cli, venus_edge.tools, venus_edge.eval, venus_edge.train.clean, "
            "venus_edge.train.tokenize; "
            "print(sorted(m for m in ('torch', 'transformers', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["venus_edge.engines.base", "venus_edge.testing", "venus_edge.engines"])
def test_engine_types_load_no_backend(module):
    """The engine protocol and its records, and the scripted test engine, load neither llama.cpp nor torch: the
    agent loop, ``train/hf_engine.py`` and tests use them without a backend."""
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('llama_cpp', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"import {module} loaded {out.strip()}"


# Modules used as namespaces of their own (``from venus_edge import protocol``), not re-exported by the package.
NAMESPACE_MODULES = {"venus_edge.cli", "venus_edge.flags", "venus_edge.lazy", "venus_edge.session",
                     "venus_edge.testing", "venus_edge.eval.cli", "venus_edge.quantize.cli", "venus_edge.train.cli",
                     "venus_edge.server.cli", "venus_edge.bench.cli"}
# Names exported across packages: the tool interface at the top level.
CROSS_EXPORTS = {"venus_edge": {"Tool", "ToolError", "ToolResult"}}
# Subpackages whose modules' names the package also exports: the engines at the top level.
SUBPACKAGE_EXPORTS = {"venus_edge": ["venus_edge.engines"]}
PACKAGES = ["venus_edge", "venus_edge.engines", "venus_edge.memory", "venus_edge.eval", "venus_edge.protocol",
            "venus_edge.tools", "venus_edge.quantize", "venus_edge.train", "venus_edge.server", "venus_edge.bench"]


def _modules(package_name: str) -> list[ModuleType]:
    package = importlib.import_module(package_name)
    names = [f"{package_name}.{info.name}" for info in pkgutil.iter_modules(package.__path__) if not info.ispkg]
    return [importlib.import_module(name) for name in names if name not in NAMESPACE_MODULES]


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_class_is_in_its_modules_all(package_name):
    """A module lists its public API in ``__all__``; a public class outside it would be missed by the package."""
    for module in _modules(package_name):
        assert hasattr(module, "__all__"), f"{module.__name__} has no __all__"
        classes = {name for name, obj in vars(module).items()
                   if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_")}
        assert classes <= set(module.__all__), f"{module.__name__}: {sorted(classes - set(module.__all__))}"


@pytest.mark.parametrize("package_name", PACKAGES)
def test_the_package_exports_what_its_modules_declare(package_name):
    """The package's ``__all__`` is the union of its modules' (and those of the subpackages it re-exports, plus the
    declared cross exports), sorted, and each name is the module's object, documented."""
    package = importlib.import_module(package_name)
    exporting = [_modules(name) for name in [package_name, *SUBPACKAGE_EXPORTS.get(package_name, [])]]
    declared = {name: module for modules in exporting for module in modules for name in module.__all__}
    expected = set(declared) | CROSS_EXPORTS.get(package_name, set())
    exported = set(package.__all__)
    assert exported == expected, (sorted(expected - exported), sorted(exported - expected))
    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        value = getattr(package, name)
        if name in declared:
            assert value is getattr(declared[name], name), name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{package_name}.{name} has no docstring"
