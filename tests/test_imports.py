"""Import hygiene and the public API."""

from __future__ import annotations

import subprocess
import sys

import venus_edge


def test_import_venus_edge_pulls_in_neither_torch_nor_transformers():
    code = ("import sys, venus_edge, venus_edge.cli, venus_edge.tools; "
            "print(sorted(m for m in ('torch', 'transformers', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_all_is_sorted_and_complete():
    assert set(venus_edge.__all__) == set(venus_edge._EXPORTS)
    assert venus_edge.__all__ == sorted(venus_edge.__all__)
    public = {name for name in dir(venus_edge) if not name.startswith("_") and name[0].isupper()}
    assert public <= set(venus_edge.__all__), public - set(venus_edge.__all__)
    for name in venus_edge.__all__:
        assert getattr(venus_edge, name).__doc__, f"{name} has no docstring"
