"""Shared fixtures: real models (SmolLM2 from its PyPI package, a tiny Qwen3 built by our converter), the real
Qwen3 chat template (from the llama-cpp-python source package), real documents (Debian's Python docs), and
llama.cpp's own server as a process on 127.0.0.1."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.testing import LlamaServer, llama_cpp_sdist_path, smollm2_path

PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
# A few pages with known answers; enough for a research session, quick to index.
DOC_PAGES = ("library/tomllib.html", "library/pickle.html", "library/json.html", "library/datetime.html",
             "library/os.path.html", "whatsnew/3.11.html")
QWEN3_TEMPLATE_MEMBER = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja"


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
def smollm2_engine(smollm2_gguf: Path) -> Iterator[LlamaCppEngine]:
    engine = LlamaCppEngine(smollm2_gguf, n_ctx=8192, seed=0)
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
def tiny_qwen3_gguf(tmp_path_factory: pytest.TempPathFactory, qwen3_thinking_template: str) -> Path:
    """A tiny random-weight Qwen3 with the real Qwen tokenizer and template, converted by our converter (F16)."""
    from venus_edge.quantize.tiny import build_tiny_qwen3_gguf

    return build_tiny_qwen3_gguf(tmp_path_factory.mktemp("runtime-tiny-qwen3"), "f16",
                                 chat_template=qwen3_thinking_template)


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
def llama_server(smollm2_gguf: Path) -> Iterator[LlamaServer]:
    """A llama-server with SmolLM2 and two slots, for the whole session."""
    server = LlamaServer(smollm2_gguf)
    yield server
    server.stop()
