"""Token ids and the assistant mask of a sample, rendered by ``venus_edge.protocol``.

A sample is rendered with ``render_parts`` (the Qwen3 Thinking-2507 chat template, byte-exact, every turn's
reasoning kept because every assistant turn follows the question) and tokenized message by message: each part
starts with ``<|im_start|>``, a special token, so the parts' ids concatenate to the ids of the whole text, which
are the ids of ``tokenizer.apply_chat_template(messages)``.

The mask follows DR-Venus's SFT dataset (``SFT/verl/utils/dataset/multiturn_sft_dataset.py``): in an assistant
message the generation prompt (``<|im_start|>assistant\\n<think>\\n``, what inference writes before the model
speaks) is not trained; everything after it is: the reasoning, ``</think>``, the call or answer, ``<|im_end|>``
and the newline after it. System, user and ``<tool_response>`` messages are not trained. A token that straddles
the boundary (``\\n\\n`` after an empty ``<think>\\n``) is trained.

A message content holding control-token text (``<|im_end|>`` quoted by a web page) is tokenized with its control
tokens as text, as the runtime does (``venus_edge.protocol.tokenize_message``): the model is trained on the ids it
is shown at inference, and a page cannot close its message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from venus_edge.protocol import CONTROL_TOKEN_OPEN, GENERATION_PROMPT, IM_END, IM_START, render_parts
from venus_edge.train.data import Rejected, Sample

__all__ = ["TokenizedSample", "tokenize_messages", "tokenize_samples"]

_ASSISTANT_HEAD = f"{IM_START}assistant\n"


@dataclass(frozen=True)
class TokenizedSample:
    """One sample as the trainer sees it.

    Attributes:
        input_ids: token ids of the rendered conversation, length L.
        assistant_mask: L values, 1 where the token is trained (see the module docstring), else 0.
        source: the sample's source, for reports.
    """

    input_ids: tuple[int, ...]
    assistant_mask: tuple[int, ...]
    source: str = ""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.assistant_mask)


def tokenize_messages(messages: Sequence[Mapping[str, str]], tokenizer: Any, *, source: str = "") -> TokenizedSample:
    """Render ``messages`` (system, question, assistant / ``<tool_response>`` turns) and tokenize them with a mask.

    Args:
        messages: the conversation, ending with the assistant's answer.
        tokenizer: a Hugging Face fast tokenizer (``transformers.PreTrainedTokenizerFast``) of the model.
        source: copied into the result.

    Raises:
        ValueError: the conversation has no assistant message, so nothing would be trained.
    """
    ids: list[int] = []
    mask: list[int] = []
    for message, part in zip(messages, render_parts(messages, add_generation_prompt=False)):
        head = f"{IM_START}{message['role']}\n"
        body, tail = part[len(head) : len(part) - len(IM_END) - 1], part[len(part) - len(IM_END) - 1 :]
        if message["role"] != "assistant":
            part_ids = _encode_message(tokenizer, head, body, tail)[0]
            ids += part_ids
            mask += [0] * len(part_ids)
            continue
        boundary = len(GENERATION_PROMPT) if part.startswith(GENERATION_PROMPT) else len(_ASSISTANT_HEAD)
        part_ids, ends = _encode_message(tokenizer, head, body, tail)
        ids += part_ids
        mask += [1 if end > boundary else 0 for end in ends]
    if not any(mask):
        raise ValueError("the conversation has no assistant turn: nothing to train")
    return TokenizedSample(tuple(ids), tuple(mask), source)


def tokenize_samples(
    samples: Iterable[Sample], tokenizer: Any, *, max_tokens: int | None = None
) -> tuple[list[TokenizedSample], list[Rejected]]:
    """Tokenize each sample; one longer than ``max_tokens`` or with nothing to train is rejected with the reason."""
    kept: list[TokenizedSample] = []
    rejected: list[Rejected] = []
    for sample in samples:
        try:
            tokenized = tokenize_messages(sample.messages, tokenizer, source=sample.source)
        except ValueError as exc:
            rejected.append(Rejected(sample.source, f"nothing to train: {exc}"))
            continue
        except TypeError as exc:  # the tokenizer refuses the text (a lone surrogate: clean the data first)
            rejected.append(
                Rejected(sample.source, f"not text the tokenizer takes: {exc} (run venus-edge train clean)")
            )
            continue
        if max_tokens is not None and len(tokenized) > max_tokens:
            rejected.append(Rejected(sample.source, f"too long: {len(tokenized)} tokens > {max_tokens}"))
            continue
        kept.append(tokenized)
    return kept, rejected


def _encode_message(tokenizer: Any, head: str, body: str, tail: str) -> tuple[list[int], list[int]]:
    """(ids, end offset of each token within ``head + body + tail``) of one ChatML message."""
    if CONTROL_TOKEN_OPEN not in body:
        return _encode(tokenizer, head + body + tail, split_special=False)
    ids, ends = [], []
    offset = 0
    for piece, split in ((head, False), (body, True), (tail, False)):
        piece_ids, piece_ends = _encode(tokenizer, piece, split_special=split)
        ids += piece_ids
        ends += [offset + end for end in piece_ends]
        offset += len(piece)
    return ids, ends


def _encode(tokenizer: Any, text: str, *, split_special: bool) -> tuple[list[int], list[int]]:
    if not text:
        return [], []
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=split_special)
    return list(encoded["input_ids"]), [end for _, end in encoded["offset_mapping"]]
