"""Third-party tools: a tiny plugin distribution is built and pip-installed offline, then found and used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from venus_edge.tools import (
    ENTRY_POINT_GROUP,
    SearchTool,
    ToolArgumentError,
    ToolRegistry,
    VisitTool,
    load_entry_point_tools,
)

PLUGIN_PYPROJECT = f"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "venus-edge-echo-plugin"
version = "0.1.0"

[project.entry-points."{ENTRY_POINT_GROUP}"]
echo = "venus_echo_plugin:EchoTool"

[tool.setuptools]
py-modules = ["venus_echo_plugin"]
"""

PLUGIN_MODULE = '''
"""A third-party tool: a name, a JSON schema and a call."""

from venus_edge.tools import ToolResult


class EchoTool:
    name = "echo"

    def __init__(self, prefix="echo: "):
        self.prefix = prefix
        self.schema = {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Repeat the text.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "What to repeat."}},
                    "required": ["text"],
                },
            },
        }

    def __call__(self, arguments):
        return ToolResult(self.prefix + arguments["text"])
'''


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Build the plugin from source and install it with pip, offline, into a folder put on ``sys.path``."""
    source, target = tmp_path / "plugin-src", tmp_path / "site"
    source.mkdir()
    (source / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (source / "venus_echo_plugin.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    command = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index"]
    command += ["--target", str(target), str(source)]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, f"pip install of the plugin failed:\n{done.stdout}\n{done.stderr}"
    assert list(target.glob("venus_edge_echo_plugin-0.1.0.dist-info/entry_points.txt")), sorted(target.iterdir())
    monkeypatch.syspath_prepend(str(target))  # also invalidates the import caches
    yield target
    sys.modules.pop("venus_echo_plugin", None)


def test_installed_plugin_is_discovered_and_called_through_the_registry(installed_plugin: Path) -> None:
    """The plugin's entry point appears next to ours; its class builds a tool the registry validates and calls."""
    classes = load_entry_point_tools()
    assert classes["search"] is SearchTool and classes["visit"] is VisitTool
    echo_class = classes["echo"]
    assert echo_class.__module__ == "venus_echo_plugin"
    assert Path(sys.modules["venus_echo_plugin"].__file__).parent == installed_plugin

    registry = ToolRegistry([VisitTool(), echo_class(prefix="heard: ")])
    assert registry.names == ["visit", "echo"]
    assert registry.schemas[1]["function"]["name"] == "echo"
    assert registry.call("echo", {"text": "hello"}).text == "heard: hello"
    assert registry.call("echo", {"text": "hello", "volume": 11}).text == "heard: hello", "outside the schema: dropped"
    with pytest.raises(ToolArgumentError, match=r"Missing required argument.*text"):
        registry.call("echo", {"volume": 11})


def test_without_the_plugin_only_the_builtin_tools_are_registered() -> None:
    assert {"search", "visit"} <= set(load_entry_point_tools()) and "echo" not in load_entry_point_tools()
