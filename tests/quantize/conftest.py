"""Session fixtures for the quantize tests: one tiny Qwen3 checkpoint, converted once to F32 and F16 GGUF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from venus_edge.quantize.tiny import build_tiny_qwen3_gguf

# A small ChatML template of our own (the Qwen3 template itself is not copied into the repository).
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory: pytest.TempPathFactory, real_model_run: Any) -> Path:
    """Folder holding `checkpoint/` (tiny Qwen3, seed 0 plus ``VENUS_TEST_SEED``, F32 safetensors) and its F32 / F16
    GGUF files."""
    workdir = tmp_path_factory.mktemp("tiny-qwen3")
    build_tiny_qwen3_gguf(workdir, "f32", chat_template=CHATML_TEMPLATE, seed=real_model_run.seed(0))
    build_tiny_qwen3_gguf(workdir, "f16")
    return workdir


@pytest.fixture(scope="session")
def chatml_template() -> str:
    return CHATML_TEMPLATE


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_workdir: Path) -> Path:
    return tiny_workdir / "checkpoint"


@pytest.fixture(scope="session")
def tiny_gguf_f32(tiny_workdir: Path) -> Path:
    return tiny_workdir / "tiny-qwen3-f32.gguf"


@pytest.fixture(scope="session")
def tiny_gguf_f16(tiny_workdir: Path) -> Path:
    return tiny_workdir / "tiny-qwen3-f16.gguf"
