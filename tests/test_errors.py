"""One error root: every public exception of the package is a ``VenusEdgeError``, and the tree drawn in
``venus_edge.errors``' docstring is the tree the modules define (derived from the modules, not listed here)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import venus_edge.errors
from venus_edge.errors import ModelNotFoundError, VenusEdgeError

# The runtime package and the parts installed under it from their own folders (tools/, quantize/, train/).
ROOT_PACKAGES = ("venus_edge", "venus_edge.tools", "venus_edge.quantize", "venus_edge.train")
# One drawn line: the 4-space docstring indent, the tree's rails, the branch, the class name.
TREE_LINE = re.compile(r"^ {4}(?P<rails>(?:│   | {4})*)(?P<branch>[├└]── )?(?P<name>[A-Z]\w*)(?:\s|$)")


def _package_exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in a module of the package, by name."""
    found: dict[str, type[BaseException]] = {}
    for package_name in ROOT_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if info.name.endswith("__main__"):  # running it is the CLI
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__ \
                        and not name.startswith("_"):  # a private class is a module's own control flow
                    assert found.get(name, obj) is obj, f"two exception classes named {name}"
                    found[name] = obj
    return found


def _drawn_tree() -> dict[str, str | None]:
    """{class name: its parent's name} of the tree in ``venus_edge.errors``' docstring (the root's parent None)."""
    parents: dict[str, str | None] = {}
    path: list[str] = []  # the names from the root down to the last line's
    for line in (venus_edge.errors.__doc__ or "").splitlines():
        match = TREE_LINE.match(line)
        if match is None or (not match["branch"] and match["name"] != "VenusEdgeError"):
            continue
        depth = len(match["rails"]) // 4 + (1 if match["branch"] else 0)
        assert depth <= len(path), f"the line {line!r} hangs under no drawn class"
        del path[depth:]
        assert match["name"] not in parents, f"{match['name']} is drawn twice"
        parents[match["name"]] = path[-1] if path else None
        path.append(match["name"])
    return parents


def test_every_public_exception_of_the_package_is_a_venus_edge_error():
    exceptions = _package_exceptions()
    assert "VenusEdgeError" in exceptions and "ToolError" in exceptions and "ConfigError" in exceptions
    other_roots = sorted(name for name, cls in exceptions.items() if not issubclass(cls, VenusEdgeError))
    assert not other_roots, f"exceptions outside the one root: {other_roots}"


def test_the_drawn_tree_is_the_tree_the_modules_define():
    """Each class is drawn once, under its first base that is a ``VenusEdgeError``; nothing else is drawn."""
    defined = {name: cls for name, cls in _package_exceptions().items() if issubclass(cls, VenusEdgeError)}
    drawn = _drawn_tree()
    assert set(drawn) == set(defined), (f"not drawn: {sorted(set(defined) - set(drawn))}; "
                                        f"drawn but not defined: {sorted(set(drawn) - set(defined))}")
    for name, cls in defined.items():
        parent = next((base.__name__ for base in cls.__bases__ if issubclass(base, VenusEdgeError)), None)
        assert drawn[name] == parent, f"{name} is drawn under {drawn[name]}, defined under {parent}"


def test_errors_imports_nothing_from_the_package():
    """``venus_edge.errors`` is layer 0: the tool layer and every part import it, so it imports none of them."""
    source = inspect.getsource(venus_edge.errors)
    imported = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", source, flags=re.MULTILINE)
    assert not [name for name in imported if name.split(".")[0] == "venus_edge"], imported


def test_the_second_bases_keep_what_callers_caught_before():
    from venus_edge.server.service import QuestionTooLongError
    from venus_edge.session import SetupError
    from venus_edge.train.errors import ConfigError, OracleGaveUp, RolloutServerError

    assert issubclass(QuestionTooLongError, ValueError) and issubclass(ConfigError, ValueError)
    assert issubclass(RolloutServerError, RuntimeError) and issubclass(OracleGaveUp, RuntimeError)
    assert issubclass(SetupError, VenusEdgeError)


def test_a_model_given_by_another_setting_keeps_braces_of_its_name():
    """``given_by`` names the setting in the advice's ``{model}`` field only, not in a ``{model}`` that the name
    itself holds (escaped in the template)."""
    from venus_edge.engines.models import _hub_advice

    error = ModelNotFoundError("own/{model}:x.gguf", "cannot fetch it", advice=_hub_advice("own/{model}", "x.gguf"))
    message = error.given_by("judge").message_for({"judge": "--judge", "model": "--model"})
    assert "hf download own/{model} x.gguf" in message or "huggingface.co/own/{model}" in message, message
    assert "(--judge /path/to/model.gguf)" in message and "--model" not in message
