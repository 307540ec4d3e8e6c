"""Lazy exports: a package's public names, each imported from its module on first use.

A package lists its names by module and forwards the module-level ``__getattr__`` and ``__dir__`` hooks of
PEP 562 here, so that importing the package (``venus-edge --help``, ``import venus_edge.engines.base``) loads none
of the heavy modules (llama.cpp, FastAPI, torch) that its names live in:

    _EXPORTS = LazyExports(__name__, {"llama_cpp": ("LlamaCppEngine",), ...})

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.listing(globals())

    __all__ = _EXPORTS.names
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LazyExports"]


class LazyExports:
    """The public names of ``package`` by the submodule that defines each.

    Args:
        package: the package's ``__name__`` (``venus_edge.engines``; a mapped subpackage such as
            ``venus_edge.train`` uses its installed name).
        module_exports: submodule name (relative to ``package``) -> the names it exports.

    Raises:
        ValueError: a name is listed under two modules.
    """

    def __init__(self, package: str, module_exports: Mapping[str, Sequence[str]]) -> None:
        self.package = package
        self.homes: dict[str, str] = {}
        for module, names in module_exports.items():
            for name in names:
                if name in self.homes:
                    raise ValueError(f"{package}: {name!r} is exported by both {self.homes[name]} and {module}")
                self.homes[name] = module

    @property
    def names(self) -> list[str]:
        """The exported names, sorted (the package's ``__all__``)."""
        return sorted(self.homes)

    def load(self, name: str) -> Any:
        """The object ``name`` names, importing its module (the package's ``__getattr__``).

        Raises:
            AttributeError: ``name`` is not exported (as for any missing module attribute).
        """
        module = self.homes.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{self.package}.{module}"), name)

    def listing(self, module_globals: Mapping[str, Any]) -> list[str]:
        """The package's ``__dir__``: what it holds now and every exported name."""
        return sorted(set(module_globals) | set(self.homes))
