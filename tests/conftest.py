"""Shared fixtures: real models (SmolLM2 from its PyPI package, a tiny Qwen3 built by our converter), the real
Qwen3 chat template (from the llama-cpp-python source package), real documents (Debian's Python docs), and
llama.cpp's own server as a process on 127.0.0.1.

A real-model test may not depend on the text the model happens to sample: another seed, CPU or thread count
samples other text. Two environment variables rerun every real-model test on other draws (``real_model_run``):

- ``VENUS_TEST_SEED`` (default 0) is added to each fixed seed: engine and CLI sampling seeds, and the seed of the
  tiny Qwen3's random weights.
- ``VENUS_TEST_THREADS`` (default: each engine's own, the physical cores; llama-server's 2) is the decode thread
  count of every real-model engine, CLI session and llama-server.

For example ``VENUS_TEST_SEED=2 VENUS_TEST_THREADS=1 .venv/bin/python -m pytest -m slow``.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.testing import LlamaServer, llama_cpp_sdist_path, smollm2_path

PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
# A few pages with known answers; enough for a research session, quick to index.
DOC_PAGES = ("library/tomllib.html", "library/pickle.html", "library/json.html", "library/datetime.html",
             "library/os.path.html", "whatsnew/3.11.html")
QWEN3_TEMPLATE_MEMBER = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja"


@dataclass(frozen=True)
class RealModelRun:
    """The draw real-model tests run on: an offset added to every fixed seed, and the decode threads."""

    seed_offset: int = 0
    n_threads: int | None = None

    @classmethod
    def from_environment(cls) -> RealModelRun:
        threads = os.environ.get("VENUS_TEST_THREADS")
        return cls(int(os.environ.get("VENUS_TEST_SEED", "0")), int(threads) if threads else None)

    def seed(self, fixed: int = 0) -> int:
        """The seed a test that names ``fixed`` runs with."""
        return fixed + self.seed_offset

    def thread_args(self) -> dict[str, Any]:
        """Keyword arguments of ``BatchedLlamaCppEngine`` (whose seeds are per call) and ``LlamaServer``."""
        return {} if self.n_threads is None else {"n_threads": self.n_threads}

    def engine_args(self, seed: int = 0) -> dict[str, Any]:
        """Keyword arguments of ``LlamaCppEngine``."""
        return {"seed": self.seed(seed), **self.thread_args()}

    def cli_args(self, seed: int = 0) -> list[str]:
        """Flags of ``research``, ``eval``, ``serve`` and ``mcp``."""
        threads = [] if self.n_threads is None else ["--threads", str(self.n_threads)]
        return ["--seed", str(self.seed(seed)), *threads]


REAL_MODEL_RUN = RealModelRun.from_environment()


@pytest.fixture(scope="session")
def real_model_run() -> RealModelRun:
    """Seeds and threads of this run (``VENUS_TEST_SEED``, ``VENUS_TEST_THREADS``; see the module docstring)."""
    return REAL_MODEL_RUN


def pytest_report_header() -> str:
    return f"real models: VENUS_TEST_SEED={REAL_MODEL_RUN.seed_offset} VENUS_TEST_THREADS={REAL_MODEL_RUN.n_threads}"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Corpus indexes and hub caches go to a temporary folder, never the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    return smollm2_path()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_gguf: Path, real_model_run: RealModelRun) -> Iterator[LlamaCppEngine]:
    engine = LlamaCppEngine(smollm2_gguf, n_ctx=8192, **real_model_run.engine_args(seed=0))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def qwen3_thinking_template() -> str:
    """The Qwen3 chat template from llama.cpp's test templates, with the Thinking-2507 generation prompt
    (which opens ``<think>\\n``; PROTOCOL.md, "Model")."""
    with tarfile.open(llama_cpp_sdist_path()) as archive:
        member = archive.extractfile(QWEN3_TEMPLATE_MEMBER)
        assert member is not None
        template = member.read().decode("utf-8")
    hybrid = template[template.index("{%- if add_generation_prompt %}"):]
    thinking = "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}"
    return template.replace(hybrid, thinking)


@pytest.fixture(scope="session")
def tiny_qwen3_gguf(tmp_path_factory: pytest.TempPathFactory, qwen3_thinking_template: str,
                    real_model_run: RealModelRun) -> Path:
    """A tiny random-weight Qwen3 with the real Qwen tokenizer and template, converted by our converter (F16)."""
    from venus_edge.quantize.tiny import build_tiny_qwen3_gguf

    return build_tiny_qwen3_gguf(tmp_path_factory.mktemp("runtime-tiny-qwen3"), "f16",
                                 chat_template=qwen3_thinking_template, seed=real_model_run.seed(0))


@pytest.fixture(scope="session")
def docs_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a few real pages of the Python documentation."""
    folder = tmp_path_factory.mktemp("docs") / "pydocs"
    for page in DOC_PAGES:
        target = folder / page
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PYTHON_DOCS / page, target)
    return folder


@pytest.fixture(scope="session")
def llama_server(smollm2_gguf: Path, real_model_run: RealModelRun) -> Iterator[LlamaServer]:
    """A llama-server with SmolLM2 and two slots, for the whole session."""
    server = LlamaServer(smollm2_gguf, **real_model_run.thread_args())
    yield server
    server.stop()
