"""Lay out the package as it is installed, for mypy: ``build/mypy/venus_edge/`` with links to each entry of
``venus_edge/`` and to ``tools/``, ``quantize/`` and ``train/`` as its subpackages (pyproject.toml's
``package-dir``). mypy finds modules by path and cannot follow setuptools' editable import hook, so without this
tree ``venus_edge.tools`` would not resolve. The links point at the sources, so edits need no rebuild; a new
top-level module of ``venus_edge/`` does, and this script is cheap (``.ci/run`` calls it before mypy).

    .venv/bin/python scripts/mypy_tree.py && .venv/bin/mypy
"""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "mypy" / "venus_edge"
# The mapped subpackages of pyproject.toml's [tool.setuptools.package-dir].
MAPPED = ("tools", "quantize", "train")


def main() -> None:
    shutil.rmtree(TREE, ignore_errors=True)
    TREE.mkdir(parents=True)
    entries = [p for p in (ROOT / "venus_edge").iterdir() if p.name != "__pycache__"]
    for entry in [*entries, *(ROOT / name for name in MAPPED)]:
        (TREE / entry.name).symlink_to(Path("../../..") / entry.relative_to(ROOT))


if __name__ == "__main__":
    main()
