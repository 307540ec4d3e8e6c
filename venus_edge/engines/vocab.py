"""A llama.cpp model's tokenizer with the text the model was trained on: the ids of the Hugging Face tokenizer,
and the exact bytes of every token.

Two facts of llama.cpp that this corrects (TEST_MODELS.md, "Facts that decide test design"): it does not apply the
NFC normalization that the Hugging Face Qwen tokenizer applies (``tokenizer_normalize``), and llama-cpp-python
0.3.36 detokenizes each token through a 32-byte buffer, cutting longer tokens (``Vocabulary.token_bytes`` sizes the
buffer to the token). Every llama.cpp engine (``LlamaCppEngine``, ``BatchedLlamaCppEngine``) tokenizes here.
"""

from __future__ import annotations

import ctypes
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import llama_cpp

__all__ = ["Vocabulary"]

#: GGUF ``tokenizer.ggml.pre`` values whose Hugging Face tokenizer NFC-normalizes its input and llama.cpp's does
#: not (TEST_MODELS.md, "Facts that decide test design").
NFC_PRE_TOKENIZERS = frozenset({"qwen2"})


def tokenizer_normalize(text: str, metadata: Mapping[str, Any]) -> str:
    """``text`` as the model's Hugging Face tokenizer sees it before splitting: NFC for the Qwen vocabularies
    (``NFC_PRE_TOKENIZERS``), unchanged otherwise. ``metadata`` is the GGUF's (``Llama.metadata``). Apply it
    before ``llama_tokenize`` so that llama.cpp's ids equal the ones the model was trained on."""
    if metadata.get("tokenizer.ggml.pre") in NFC_PRE_TOKENIZERS:
        return unicodedata.normalize("NFC", text)
    return text


class Vocabulary:
    """The tokenizer of a loaded llama.cpp model.

    Args:
        model: llama-cpp-python's ``_internals.LlamaModel``.
        metadata: the GGUF metadata (``tokenizer.ggml.pre`` decides the normalization).
    """

    def __init__(self, model: Any, metadata: Mapping[str, Any]) -> None:
        self._model = model
        self._vocab = model.vocab
        self.metadata = metadata
        #: A Qwen vocabulary (the qwen2 pre-tokenizer): a Qwen3 thinking model opens its reasoning block.
        self.qwen = metadata.get("tokenizer.ggml.pre") in NFC_PRE_TOKENIZERS
        self._pieces: dict[int, bytes] = {}
        self._single_tokens: dict[str, int | None] = {}

    @property
    def n_vocab(self) -> int:
        """Tokens in the vocabulary."""
        return int(llama_cpp.llama_vocab_n_tokens(self._vocab))

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in the text (``<|im_start|>``) become their ids.

        With ``parse_special=False``, control tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``) written
        in the text are tokenized as plain text, so untrusted text (a web page) cannot end a message or open a
        new one; the added tokens of the protocol (``<tool_response>``, ``<think>``) are still recognized.
        For Qwen vocabularies the text is NFC-normalized first (``tokenizer_normalize``).
        """
        text = tokenizer_normalize(text, self.metadata)
        # "replace": a lone surrogate (no UTF-8 form) must not crash a session; the parser and the tools remove them
        ids: list[int] = self._model.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=parse_special)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token, whatever its length (special tokens rendered as their text)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            size = 64
            while True:
                buffer = ctypes.create_string_buffer(size)
                n = llama_cpp.llama_token_to_piece(self._vocab, token_id, buffer, size, 0, True)
                if n >= 0:
                    piece = buffer.raw[:n]
                    break
                size = -n
            self._pieces[token_id] = piece
        return piece

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``; invalid UTF-8 (a token stream cut inside a character) becomes U+FFFD."""
        return b"".join(self.token_bytes(t) for t in token_ids).decode("utf-8", errors="replace")

    def is_end_of_generation(self, token_id: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token_id))

    def single_token_id(self, text: str) -> int | None:
        """The id of the added token whose text is ``text`` (``<tool_response>`` in the Qwen3 vocabulary), or None
        when the vocabulary spells ``text`` with ordinary tokens."""
        if text not in self._single_tokens:
            ids = self.tokenize(text, parse_special=True)
            added = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
            is_added = len(ids) == 1 and llama_cpp.llama_vocab_get_attr(self._vocab, ids[0]) & added
            self._single_tokens[text] = ids[0] if is_added else None
        return self._single_tokens[text]
