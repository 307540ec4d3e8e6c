"""Typed events that the agent loop yields: the CLI, the server, apps and the journal all read these.

Every event is a frozen dataclass with a ``type`` tag and ``to_dict()`` (JSON-ready). Events carry the records
they report, not copies of their fields: ``TurnCompleted`` the ``Turn``, ``SessionFinished`` the ``Result``
(a session's last event; ``Agent.run`` returns its result). Their ``to_dict()`` flattens the record into the
fields clients of the server's SSE, the MCP server and the page read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from venus_edge.result import Result
    from venus_edge.turn import Turn

__all__ = [
    "PACE_ACTIONS",
    "ContextCompacted",
    "ErrorRaised",
    "Event",
    "LimitReached",
    "Paced",
    "SessionFinished",
    "SessionStarted",
    "TextDelta",
    "ToolAttempted",
    "ToolCalled",
    "ToolReturned",
    "TurnCompleted",
    "TurnRetried",
    "TurnStarted",
]


@dataclass(frozen=True)
class Event:
    """Base class; ``type`` names the event in ``to_dict()`` output."""

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True)
class SessionStarted(Event):
    type: ClassVar[str] = "session_started"
    session_id: str
    question: str
    model: dict[str, Any]
    prompt_tokens: int


@dataclass(frozen=True)
class TurnStarted(Event):
    """A generation attempt begins. ``turn`` is 0-based; ``attempt`` counts retries from 0; ``purpose`` is ``turn``,
    or ``notes`` for the notes a context policy asks for (``summarize``), which do not enter the history."""

    type: ClassVar[str] = "turn_started"
    turn: int
    attempt: int
    prompt_tokens: int
    n_ctx: int
    purpose: str = "turn"


@dataclass(frozen=True)
class TextDelta(Event):
    """New text decoded in the current attempt (stop strings never appear in it)."""

    type: ClassVar[str] = "text"
    turn: int
    text: str


@dataclass(frozen=True)
class TurnRetried(Event):
    """An attempt was thrown away: ``reason`` is ``empty``, ``repetition``, ``format`` or ``duplicate_call``."""

    type: ClassVar[str] = "turn_retried"
    turn: int
    attempt: int
    reason: str
    detail: str


@dataclass(frozen=True)
class TurnCompleted(Event):
    """A turn went into the history: ``record`` is the ``Turn`` (the journal's record of the same turn).

    ``to_dict()`` gives ``turn`` (its index), ``kind`` (``tool_call``, ``answer`` or ``malformed``), ``content``,
    ``format_errors`` and ``stats`` (``GenerationStats.to_dict()``).
    """

    type: ClassVar[str] = "turn_completed"
    record: Turn

    @property
    def turn(self) -> int:
        """The turn's index, 0-based, as every event names its turn."""
        return self.record.index

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        return {"type": self.type, "turn": record.index, "kind": record.kind, "content": record.content,
                "format_errors": list(record.format_errors), "stats": dict(record.stats)}


@dataclass(frozen=True)
class ToolCalled(Event):
    """A tool call is about to run. ``arguments`` are coerced to the tool's schema; ``dropped_arguments`` names
    those outside it (dropped silently for the model, as the reference does) and ``argument_changes`` says what
    coercion changed (``tools.base.coerce_arguments``)."""

    type: ClassVar[str] = "tool_called"
    turn: int
    name: str
    arguments: Any
    dropped_arguments: list[str] = field(default_factory=list)
    argument_changes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolAttempted(Event):
    """One backend attempt of a tool call that did not simply succeed first time (``ToolResult.attempts``).

    Tools are synchronous calls, so these are reported when the call ends, not live: after the tool returns,
    one per attempt in order, before the call's ``ToolReturned``. ``backend`` is what was tried (a search
    engine such as ``duckduckgo``), ``target`` the query or URL, ``outcome`` one of ``ok``, ``empty``,
    ``rate_limited``, ``timeout``, ``error``; ``waited_s`` is the back-off in seconds slept just before it.
    """

    type: ClassVar[str] = "tool_attempt"
    turn: int
    name: str
    backend: str
    target: str
    outcome: str
    detail: str
    waited_s: float


@dataclass(frozen=True)
class ToolReturned(Event):
    """A tool finished; ``failures`` are typed tool failures (refused address, timeout, ...)."""

    type: ClassVar[str] = "tool_returned"
    turn: int
    name: str
    observation_chars: int
    visited_urls: list[str]
    failures: list[dict[str, str]]
    elapsed_s: float


@dataclass(frozen=True)
class LimitReached(Event):
    """The turn, token or time limit was met; ``limit`` is ``context``, ``turns`` or ``time``."""

    type: ClassVar[str] = "limit_reached"
    turn: int
    limit: str
    detail: str


@dataclass(frozen=True)
class ContextCompacted(Event):
    """A context policy edited the conversation (``venus_edge.policies``).

    ``tokens_before`` / ``tokens_after`` are the prompt's tokens around the edit; ``tokens_reevaluated`` is what the
    next turn's prefill will evaluate again (the tokens after the first one that changed), the price of the edit.
    """

    type: ClassVar[str] = "context_compacted"
    turn: int
    policy: str
    tokens_before: int
    tokens_after: int
    tokens_reevaluated: int
    detail: str


PaceAction = Literal["threads_lowered", "threads_raised", "paused", "resumed", "battery_stop", "sensor_problem"]
#: What pacing may do between turns (``venus_edge.pacing``), the values of ``Paced.action``.
PACE_ACTIONS: tuple[PaceAction, ...] = ("threads_lowered", "threads_raised", "paused", "resumed", "battery_stop",
                                        "sensor_problem")


@dataclass(frozen=True)
class Paced(Event):
    """Pacing acted between turns, before turn ``turn`` (``venus_edge.pacing``); the journal holds the same fields
    as a ``pace`` record.

    ``action`` is one of ``PACE_ACTIONS``: ``threads_lowered`` / ``threads_raised`` (the engine's decode threads
    changed to ``n_threads``), ``paused`` / ``resumed`` (a cool-down; ``waited_s`` on resuming), ``battery_stop``
    (the session stops, resumable), ``sensor_problem`` (a sysfs file could not be read: said once, the session goes
    on). ``detail`` says it in words. ``celsius`` and ``zone`` are the hottest thermal zone's reading,
    ``battery_pct`` the battery's charge, ``n_threads`` the engine's threads after the action; each None where it
    does not apply or is unknown.
    """

    type: ClassVar[str] = "pace"
    turn: int
    action: PaceAction
    detail: str
    celsius: float | None = None
    zone: str | None = None
    battery_pct: int | None = None
    n_threads: int | None = None
    waited_s: float | None = None

    @staticmethod
    def words(action: str, detail: str) -> str:
        """What every surface shows of a pace event (the CLI's progress, MCP progress, the chat stream), from its
        ``action`` and ``detail`` (an event's, or a serialized one's): ``pacing (threads lowered): DETAIL``."""
        return f"pacing ({action.replace('_', ' ')}): {detail}"


@dataclass(frozen=True)
class ErrorRaised(Event):
    """Something failed outside the model's control (a tool crashed, the engine failed)."""

    type: ClassVar[str] = "error"
    turn: int
    where: str
    message: str


@dataclass(frozen=True)
class SessionFinished(Event):
    """The session ended: the last event; ``result`` is the session's ``Result``.

    ``to_dict()`` gives ``termination``, ``answer``, ``sources`` (the URLs its tools read), ``turns``, ``elapsed_s``,
    ``totals`` (``SessionTotals.to_dict()``), ``unvisited_citations`` (URLs the answer cites that no tool read) and
    ``session_id`` (naming its journal records); not the conversation. ``journal_error`` is there only when the
    journal could not be saved whole (``Result.journal_error``).
    """

    type: ClassVar[str] = "session_finished"
    result: Result

    def to_dict(self) -> dict[str, Any]:
        result = self.result
        return {"type": self.type, "termination": result.termination, "answer": result.answer,
                "sources": list(result.sources), "turns": result.turns, "elapsed_s": result.elapsed_s,
                "totals": result.totals.to_dict(), "unvisited_citations": list(result.unvisited_citations),
                "session_id": result.session_id,
                **({"journal_error": result.journal_error} if result.journal_error else {})}
