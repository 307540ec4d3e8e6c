"""``Turn``: one model turn of a research session, the one record of it that the journal writes, the
``TurnCompleted`` event carries and training reads (``venus_edge.train``).

``to_dict`` is the journal's turn record (without ``record`` and ``session_id``); ``from_dict`` reads every turn
record ever written (schema 1), filling fields added since with their empty values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Turn"]


@dataclass(frozen=True)
class Turn:
    """One model turn: what the model wrote, what ran, what came back.

    Attributes:
        index: the turn's number in the session, from 0 (``turn`` in the journal).
        kind: ``tool_call``, ``answer`` or ``malformed``.
        content: the assistant message as it entered the history (canonical when the turn needed leniency).
        generated: the text as generated, when it differs from ``content`` (else None).
        token_ids: the sampled token ids of the turn (the end-of-generation token excluded).
        logprobs: their log-probabilities, when the engine returned them.
        finish_reason: ``stop``, ``eog`` or ``length``.
        attempts: samples it took (retries on empty, repetitive, malformed or duplicate turns).
        format_errors: ``FormatError.to_dict()`` of every departure from the format (the RL format penalty).
        tool_call: ``{"name", "arguments"}`` with the arguments coerced to the tool's schema, or None.
        dropped_arguments: argument names outside the schema, dropped.
        argument_changes: what coercion changed, one sentence each.
        observation: the ``<tool_response>`` user message that followed, or None (an answer).
        visited_urls: URLs a tool read in this turn.
        tool_failures: ``ToolFailure.to_dict()`` of the tool call.
        tool_attempts: ``ToolAttempt.to_dict()`` of backend retries and fallbacks.
        tool_s: seconds the tool call took (the ``ToolReturned`` event's ``elapsed_s``), or None (no call; a record
            written before this field).
        replaces_last_observation: the limit notice that replaced the previous observation before this turn.
        stats: ``GenerationStats.to_dict()`` of the sample that made it.
    """

    index: int
    kind: str
    content: str
    generated: str | None = None
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    finish_reason: str = ""
    attempts: int = 1
    format_errors: tuple[dict[str, Any], ...] = ()
    tool_call: dict[str, Any] | None = None
    dropped_arguments: tuple[str, ...] = ()
    argument_changes: tuple[str, ...] = ()
    observation: str | None = None
    visited_urls: tuple[str, ...] = ()
    tool_failures: tuple[dict[str, Any], ...] = ()
    tool_attempts: tuple[dict[str, Any], ...] = ()
    tool_s: float | None = None
    replaces_last_observation: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def well_formed(self) -> bool:
        """The strict RL format check passed (no format error at all)."""
        return not self.format_errors

    def to_dict(self) -> dict[str, Any]:
        """The journal's turn record: JSON-ready, ``index`` written as ``turn``."""
        data: dict[str, Any] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            data["turn" if spec.name == "index" else spec.name] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        """A turn from its journal record; fields a record lacks (written before they existed) get their empty
        value, and a record without ``kind`` gets it from its tool call or format errors.

        Raises:
            KeyError: the record has no ``content``.
        """
        known = {spec.name for spec in fields(cls)}
        values = {name: data[key] for key in data if (name := "index" if key == "turn" else key) in known}
        values.setdefault("index", 0)
        values.setdefault("kind", _kind(data))
        for name in ("token_ids", "logprobs", "format_errors", "dropped_arguments", "argument_changes", "visited_urls",
                     "tool_failures", "tool_attempts"):
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        values["content"] = data["content"]
        return cls(**values)


def _kind(data: Mapping[str, Any]) -> str:
    if any(error.get("fatal") for error in data.get("format_errors") or []):
        return "malformed"
    return "tool_call" if data.get("tool_call") else "answer"
