"""Training data in: the runtime's journals and the open trajectory datasets, all as ``Sample``s.

Sources, detected per file and per row:

- a journal of ``venus_edge.trajectory`` (``.jsonl`` whose records carry ``"record"``): each answered session is a
  sample, its ``messages`` exactly what the model saw;
- OpenAI-messages rows: ``{"messages": [{"role", "content"}, ...]}`` (JSONL, JSON or parquet), with the question
  and ground truth in ``question`` / ``answer`` / ``gt`` or in a ``meta`` object (REDSearcher's raw rows,
  ``Zchu/REDSearcher_SFT_10K``; the columns DR-Venus's ``SFT/data_clean/prepare_trajectories.py`` reads);
- ShareGPT rows: ``{"conversations": [{"from": "human" | "gpt" | "system" | "observation" | ..., "value"}]}``.

Roles are mapped to the protocol's three (PROTOCOL.md, "Conversation layout"): a tool result (``tool``,
``observation``, ``function``, or a user message right after a tool-calling turn) becomes a user message holding one
``<tool_response>`` block; OpenAI function-calling assistant messages (``tool_calls``, ``reasoning_content``) are
written as the protocol's ``<tool_call>`` and ``<think>`` text. Files are read with
``venus_edge.eval.data.read_data_rows`` (pyarrow for parquet; JSONL line by line, so that one broken line costs one
row, where a whole-file reader stops at it).

A row that cannot be a sample (broken JSON, no messages, a message that is not ``{role, content}`` text, an unknown
role, no question, no final assistant turn, more turns than ``max_turns``) is skipped and listed in
``LoadedData.rejected`` with its source and reason; loading never fails on a row.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.eval.data import ANSWER_SPLIT, read_data_rows, split_answers
from venus_edge.jsonl import MAX_RECORD_DEPTH
from venus_edge.protocol import THINK_CLOSE, THINK_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, is_observation, observation
from venus_edge.text import nesting_depth
from venus_edge.trajectory import read_journal

__all__ = ["LoadedData", "Rejected", "Sample", "load_samples", "sample_from_row"]

QUESTION_FIELDS = ("question", "problem", "query", "prompt")
ANSWER_FIELDS = ("answer", "gt", "answers", "ground_truth", "golden_answers")
_ROLES = {
    "system": "system",
    "user": "user", "human": "user",
    "assistant": "assistant", "gpt": "assistant", "model": "assistant", "bot": "assistant",
}
_TOOL_ROLES = {"tool", "observation", "function", "ipython"}


@dataclass(frozen=True)
class Sample:
    """One training conversation.

    Attributes:
        messages: ``{"role": "system" | "user" | "assistant", "content": str}`` dicts in order; tool results are
            user messages holding one ``<tool_response>`` block. A raw sample may lack the system message;
            cleaning (``venus_edge.train.clean``) adds it.
        question: the user's question.
        answers: accepted ground-truth answers (``<|answer_split|>`` aliases split); empty when unknown.
        source: where it came from, ``file:row N`` or ``file:session ID``, for reports.
    """

    messages: tuple[Mapping[str, str], ...]
    question: str
    answers: tuple[str, ...] = ()
    source: str = ""

    @property
    def turns(self) -> int:
        """Assistant/observation rounds, as the recipe counts them for resampling: ``(len(messages) - 1) // 2``
        (PROTOCOL.md, "Training facts")."""
        return (len(self.messages) - 1) // 2

    def replace_messages(self, messages: Iterable[Mapping[str, str]]) -> Sample:
        return Sample(tuple(dict(m) for m in messages), self.question, self.answers, self.source)

    def to_dict(self) -> dict[str, Any]:
        """The row written by ``venus-edge train clean``: OpenAI messages plus ``question``, ``answer`` (aliases
        joined by ``<|answer_split|>``) and ``source``; ``sample_from_row`` reads it back."""
        return {"question": self.question, "answer": ANSWER_SPLIT.join(self.answers),
                "messages": [dict(m) for m in self.messages], "source": self.source}


@dataclass(frozen=True)
class Rejected:
    """A row or session that did not become a sample, and why (one line, for the report)."""

    source: str
    reason: str


@dataclass
class LoadedData:
    """The samples read, and the rows rejected."""

    samples: list[Sample] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)

    def reasons(self) -> Counter[str]:
        """Rejections counted by reason, without the detail after a colon (``wrong role: 'tool_x'`` -> ``wrong
        role``)."""
        return Counter(r.reason.split(":")[0] for r in self.rejected)


class _BadRow(ValueError):
    """The row cannot be a sample; the message is the reason."""


def load_samples(paths: Sequence[str | os.PathLike[str]], *, max_turns: int | None = None) -> LoadedData:
    """Read every file in ``paths`` (journals and dataset rows may be mixed) into samples.

    Args:
        paths: ``.jsonl`` / ``.json`` / ``.parquet`` files.
        max_turns: reject a sample with more rounds than this (``Sample.turns``).

    Raises:
        FileNotFoundError: a path that is not a file.
        ValueError: a file type that is not supported, or a ``.json`` file that is not JSON.
    """
    data = LoadedData()
    for raw_path in paths:
        path = Path(raw_path)
        if not path.is_file():
            raise FileNotFoundError(f"no training data at {path}")
        for sample in _journal_samples(path, data) if _is_journal(path) else _row_samples(path, data):
            if max_turns is not None and sample.turns > max_turns:
                data.rejected.append(Rejected(sample.source, f"too long: {sample.turns} turns > {max_turns}"))
            else:
                data.samples.append(sample)
    return data


def sample_from_row(row: Mapping[str, Any], source: str = "") -> Sample:
    """One dataset row (OpenAI messages or ShareGPT) as a ``Sample``.

    Raises:
        ValueError: the row cannot be a sample; the message says why.
    """
    meta_value = row.get("meta")
    meta: Mapping[str, Any] = meta_value if isinstance(meta_value, Mapping) else {}
    if "messages" in row:
        raw, keys = _as_list(row["messages"], "messages"), ("role", "content")
    elif "conversations" in row:
        raw, keys = _as_list(row["conversations"], "conversations"), ("from", "value")
    else:
        raise _BadRow("no messages (looked for 'messages' and 'conversations')")
    messages: list[dict[str, str]] = []
    for index, message in enumerate(raw):
        messages.append(_message(message, index, *keys, after=messages[-1] if messages else None))
    if not messages:
        raise _BadRow("no messages: the conversation is empty")
    first = next((m for m in messages if m["role"] != "system"), None)
    if first is None or first["role"] != "user" or not first["content"].strip():
        raise _BadRow("no question: the conversation does not open with a user message")
    fields = {**row, **meta}
    question = next((fields[f] for f in QUESTION_FIELDS if isinstance(fields.get(f), str) and fields[f].strip()), None)
    question = question or first["content"]
    if messages[-1]["role"] != "assistant" or not messages[-1]["content"].strip():
        raise _BadRow("no answer: the conversation does not end with an assistant turn")
    answers = split_answers(next((_plain(fields[f]) for f in ANSWER_FIELDS if _present(fields.get(f))), None))
    return Sample(tuple(messages), question.strip(), answers, source)


def _plain(value: Any) -> Any:
    """A numpy array (a pandas or parquet cell) as a list; anything else as it is."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) else value


def _present(value: Any) -> bool:
    value = _plain(value)
    if isinstance(value, str):
        return bool(value.strip())
    return value is not None and (not isinstance(value, (list, tuple)) or len(value) > 0)


def _as_list(value: Any, name: str) -> list[Any]:
    value = _plain(value)
    if not isinstance(value, list):
        raise _BadRow(f"wrong messages: {name!r} is a {type(value).__name__}, not a list")
    return value


def _message(
    message: Any, index: int, role_key: str, content_key: str, *, after: Mapping[str, str] | None,
) -> dict[str, str]:
    """One message in the protocol's roles. OpenAI function-calling fields are read as the protocol writes them:
    ``reasoning_content`` becomes the ``<think>`` block and ``tool_calls`` the ``<tool_call>`` blocks. A user message
    right after a tool-calling assistant turn, or one in a tool role, is a tool result: it is wrapped in
    ``<tool_response>`` unless it is already (the reference cleaning wraps them so)."""
    if not isinstance(message, Mapping):
        raise _BadRow(f"wrong messages: message {index} is not an object")
    role, content = message.get(role_key), message.get(content_key)
    if not isinstance(role, str) or (role not in _ROLES and role not in _TOOL_ROLES):
        raise _BadRow(f"wrong role: {role!r} at message {index}")
    if role in _ROLES and _ROLES[role] == "assistant":
        content = _assistant_text(message, content, index)
    if not isinstance(content, str):
        raise _BadRow(f"wrong messages: message {index} has no text {content_key!r}")
    role = _ROLES.get(role, "user")
    stripped = content.strip()
    answers_a_call = after is not None and after["role"] == "assistant" and TOOL_CALL_OPEN in after["content"]
    if role == "user" and (message.get(role_key) in _TOOL_ROLES or answers_a_call or is_observation(stripped)):
        return {"role": "user", "content": stripped if is_observation(stripped) else observation(stripped)}
    return {"role": role, "content": content}


def _assistant_text(message: Mapping[str, Any], content: Any, index: int) -> Any:
    """The text of an assistant message, with OpenAI-style ``reasoning_content`` and ``tool_calls`` written in."""
    reasoning, calls = message.get("reasoning_content"), _plain(message.get("tool_calls"))
    if not reasoning and not calls:
        return content
    text = content if isinstance(content, str) else ""
    if isinstance(reasoning, str) and reasoning.strip():
        text = f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n{text.strip()}"
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise _BadRow(f"wrong messages: message {index} has a tool call without a function name")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):  # RecursionError: '[' * 50000
                raise _BadRow(f"wrong messages: message {index} has tool call arguments that are not JSON") from None
            if nesting_depth(arguments) > MAX_RECORD_DEPTH:
                raise _BadRow(f"wrong messages: message {index} has tool call arguments nested deeper than "
                              f"{MAX_RECORD_DEPTH} levels")
        body = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
        text = f"{text.rstrip()}\n\n{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}".lstrip("\n")
    return text


def _is_journal(path: Path) -> bool:
    """A ``.jsonl`` whose first readable record is a journal record."""
    if path.suffix.lower() != ".jsonl":
        return False
    for _, row in read_data_rows(path):
        if isinstance(row, dict):
            return "record" in row and "session_id" in row
    return False


def _journal_samples(path: Path, data: LoadedData) -> Iterable[Sample]:
    journal = read_journal(path)
    for skipped in journal.skipped:
        data.rejected.append(Rejected(f"{path.name}:line {skipped.line}", f"broken record: {skipped.reason}"))
    for trajectory in journal.trajectories:
        source = f"{path.name}:session {trajectory.session_id}"
        if trajectory.answer is None or not trajectory.messages or trajectory.messages[-1]["role"] != "assistant":
            data.rejected.append(Rejected(source, f"no answer: the session ended {trajectory.termination}"))
            continue
        yield Sample(tuple(dict(m) for m in trajectory.messages), trajectory.question, (), source)


def _row_samples(path: Path, data: LoadedData) -> Iterable[Sample]:
    for number, row in read_data_rows(path):
        source = f"{path.name}:row {number}"
        if isinstance(row, str):
            data.rejected.append(Rejected(source, f"broken row: {row}"))
            continue
        try:
            yield sample_from_row(row, source)
        except _BadRow as bad:
            data.rejected.append(Rejected(source, str(bad)))
