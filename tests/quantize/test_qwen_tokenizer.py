"""The offline-built Qwen3 tokenizer equals tiktoken on the same ranks and carries Qwen3's added tokens."""

from __future__ import annotations

import json
import unicodedata

import tiktoken
from tokenizers import Tokenizer

from venus_edge.quantize.qwen_tokenizer import (
    QWEN2_SPLIT_PATTERN,
    QWEN3_ADDED_TOKENS,
    QWEN3_FIRST_ADDED_ID,
    build_qwen3_tokenizer_files,
    load_qwen_ranks,
)

VARIED_TEXT = "\n".join([
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\n",
    "# Heading\n\n- **bold** and `code` [link](https://example.org/a?b=1)\n| a | b |\n|---|---|",
    "你好，世界！これは日本語の文です。한국어 텍스트. Привет, мир! مرحبا",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "café naïve résumé Å",
    " " * 37 + "indented\t\t\ttabs\n\n\n\n" + "=" * 64,
    "It's we'll they've I'd 12345 3.14159 0xDEADBEEF",
])


def test_ids_match_tiktoken_on_varied_text(tmp_path):
    """Token ids equal tiktoken's with the same ranks and split regex (NFC-normal text, no added tokens)."""
    folder = build_qwen3_tokenizer_files(tmp_path)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    encoding = tiktoken.Encoding(
        "qwen", pat_str=QWEN2_SPLIT_PATTERN, mergeable_ranks=load_qwen_ranks(), special_tokens={}
    )
    text = unicodedata.normalize("NFC", VARIED_TEXT)
    ours, reference = tokenizer.encode(text).ids, encoding.encode(text)
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, reference)) if a != b), None)
    assert ours == reference, f"first difference at token {first_diff} of {len(reference)}"
    assert tokenizer.decode(ours) == text


def test_added_tokens_have_qwen3_ids_and_flags(tmp_path):
    folder = build_qwen3_tokenizer_files(tmp_path, chat_template="{{ messages }}")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    decoder = tokenizer.get_added_tokens_decoder()
    seen = [(decoder[i].content, decoder[i].special) for i in sorted(decoder)]
    assert seen == list(QWEN3_ADDED_TOKENS)
    assert min(decoder) == QWEN3_FIRST_ADDED_ID == 151643 and max(decoder) == 151668
    assert tokenizer.get_vocab_size() == 151669
    assert tokenizer.encode("<|im_start|>user\n<think>x</think><tool_call>").ids[:4] == [151644, 872, 198, 151667]
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == "{{ messages }}"
    assert (
        config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>" and config["bos_token"] is None
    )
    assert config["added_tokens_decoder"]["151657"] == {
        "content": "<tool_call>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": False,
    }


def test_nfc_normalizer_applies(tmp_path):
    """A decomposed 'é' (e + U+0301) encodes like the composed one, as in the real Qwen3 tokenizer."""
    tokenizer = Tokenizer.from_file(str(build_qwen3_tokenizer_files(tmp_path) / "tokenizer.json"))
    assert tokenizer.encode("cafe\u0301").ids == tokenizer.encode("caf\u00e9").ids
