"""The agent loop: turn -> parse -> guard -> tool -> observation, as DR-Venus's reference loop runs it.

The loop follows ``Inference/run_demo.py`` (``ResearchProblemSolver``) and PROTOCOL.md, "Guards in the
reference loop": each turn is retried (up to ``max_retries`` attempts) when the output is empty, repeats itself,
fails to parse, or repeats a tool call already made; on the last attempt a parse failure is answered with the
format-error notice and a duplicate call is executed. At the turn or context limit the last observation is
replaced by a notice asking for the final answer, and one more turn is generated.

Tool arguments are coerced to the tool's schema (``tools.base.coerce_arguments``) before a call runs and before
it is compared with earlier calls, and arguments outside the schema are dropped without telling the model, as
the reference does; what was dropped or changed goes into the ``ToolCalled`` event and the journal. A turn that
needed leniency to parse enters the history in its canonical form (``protocol.ParsedTurn.content``) and its
format errors are journaled for the RL format penalty.

Departures from the reference:
1. No back-off sleep between retries: the model is local, a retry is only a new sample (with a new seed).
2. The prompt budget is also capped by the engine's ``n_ctx`` minus an answer reserve: room for a whole final turn,
   at least ``answer_reserve_tokens`` and at least the longest turn seen so far plus the limit notice. A regular
   turn may not grow past the budget (its ``max_tokens`` is capped there), so the forced final turn always fits.
3. What happens at the budget is a context policy (``venus_edge.policies``): ``force-answer`` is the
   reference's behaviour; ``keep-last-k`` and ``summarize`` compact the conversation and go on researching.
4. A killed session resumes from its journal (``Agent.resume``) at its last complete turn.
5. The wall-clock limit binds tool calls too: each runs under the session's deadline and cancel event
   (``tools.base.Deadline``) and is abandoned when it overruns them, where the reference checks the time only
   between turns and lets a tool call run to its end.
6. Strict mode (a grammar per turn, for models too small to keep the protocol; the reference has none) can require
   the first calls (``required_calls``, e.g. search then visit) and lets a ``url`` argument name only URLs that the
   searches found and that did not fail to read, so a small model reads real pages rather than invented ones.
7. Pacing (``venus_edge.pacing``, off unless ``pace`` is given; the reference runs on servers): before each turn
   the device's temperatures and battery are read, and the loop lowers the engine's threads, pauses to cool down,
   or stops on a low battery without an end record, so that the journal resumes the session.

Usage:

    agent = Agent(engine, tools=[SearchTool(...), VisitTool(...)])
    result = agent.run("When was tomllib added to Python?")
    for event in agent.events("..."):   # the same loop, as a stream of typed events
        ...
    result = agent.resume("journal.jsonl")   # a killed session, continued from its last complete turn
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import threading
import time
import traceback
import uuid
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from datetime import date as Date
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import venus_edge.protocol as protocol
from venus_edge.engines.base import Completion, Engine, SamplingParams, stream_generation
from venus_edge.errors import (
    ContextOverflowError,
    ContextSettingsError,
    EngineConnectionError,
    GenerationCancelled,
    TrajectoryError,
)
from venus_edge.events import (
    ContextCompacted,
    ErrorRaised,
    Event,
    LimitReached,
    Paced,
    SessionFinished,
    SessionStarted,
    TextDelta,
    ToolAttempted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    TurnRetried,
    TurnStarted,
)
from venus_edge.grammar import GrammarLimits, TurnActions, turn_grammar, with_choices
from venus_edge.pacing import PaceConfig, Pacer
from venus_edge.policies import Compaction, CompactionContext, ContextPolicy, fit_result, make_policy
from venus_edge.result import (
    ANSWERED,
    ANSWERED_MAX_STEPS,
    ANSWERED_TOKEN_LIMIT,
    BATTERY_LOW,
    CANCELLED,
    ERROR,
    INTERRUPTED,
    LLM_ERROR,
    MAX_STEPS,
    TIMEOUT,
    TOKEN_LIMIT_NO_ANSWER,
    Result,
    SessionTotals,
)
from venus_edge.session_lock import SessionLock
from venus_edge.text import valid_text
from venus_edge.tools.base import Deadline, PreparedCall, Tool, ToolRegistry, ToolResult
from venus_edge.tools.errors import ToolArgumentError, ToolInterrupted
from venus_edge.tools.search import parse_search_observation
from venus_edge.trajectory import Journal, Trajectory, TrajectoryWriter, read_journal, rebuild_messages
from venus_edge.turn import Turn

# The termination reasons (ANSWERED, MAX_STEPS, ...) and their words live in venus_edge.result.
__all__ = ["Agent", "AgentConfig", "default_answer_reserve", "resumable_session"]
logger = logging.getLogger(__name__)

#: The least room, in tokens, that n_ctx must leave for the question and the research after the system prompt and
#: the answer reserve; settings leaving less are refused when the agent is built.
MIN_RESEARCH_TOKENS = 256


#: The answer reserve's default in a large window (tokens): room for a final turn of a research model.
MAX_DEFAULT_ANSWER_RESERVE = 1_024


def default_answer_reserve(n_ctx: int) -> int:
    """The answer reserve's floor when none is set: a quarter of the window, at most ``MAX_DEFAULT_ANSWER_RESERVE``
    tokens (1,024 from n_ctx 4,096 on; 512 at a phone's 2,048, where 1,024 would leave half the window unused by
    research). The reserve still grows to the longest turn seen (``_Run.reserve``)."""
    return min(MAX_DEFAULT_ANSWER_RESERVE, n_ctx // 4)


@dataclass(frozen=True)
class AgentConfig:
    """Limits and guards of one research session. Defaults are DR-Venus's (PROTOCOL.md, "Decoding and limits").

    Attributes:
        max_turns: research turns at most (reference: 200); a session still researching after them gets one
            more turn, asked for its final answer (PROTOCOL.md, "Decoding and limits").
        max_prompt_tokens: prompt budget in tokens before the context policy acts (reference: ~240K); the
            engine's ``n_ctx`` minus the answer reserve caps it too.
        answer_reserve_tokens: the floor, in tokens, of the room kept free in ``n_ctx`` for a final turn; the
            reserve grows to the longest turn seen so far plus the limit notice when that is more. None: scaled to
            the window, ``default_answer_reserve(n_ctx)`` (a quarter of it, at most 1,024).
        context_policy: what happens at the budget: ``force-answer`` (the reference), ``keep-last-k`` or
            ``summarize`` (``venus_edge.policies``).
        keep_last: tool results kept whole by ``keep-last-k``.
        max_summaries: restarts ``summarize`` may make before the answer is forced.
        time_limit_s: wall-clock budget in seconds (reference: 9,000).
        max_retries: attempts per turn (reference: 5).
        repetition_tail_chars: length of the tail checked by the repetition detector (reference: 50).
        repetition_max_count: the tail may occur at most this many times (reference: 5).
        sampling: decoding settings; ``max_tokens`` is the per-turn budget (reference: 15,000).
        strict: constrain each turn with a grammar built from the tool schemas (``grammar.turn_grammar``).
        min_tool_calls: in strict mode, the grammar allows no answer before this many tool calls were made, so
            that even a small model researches before it answers (ignored without ``strict``).
        required_calls: in strict mode, the tools of the session's first calls, in order (e.g. ``("search",
            "visit")``): the grammar offers only the next one of them, and no answer, until they were made; then
            any tool (ignored without ``strict``; each name must be a tool of the agent).
        grammar_limits: length bounds used in strict mode.
        seed: base sampling seed; attempt ``k`` of the session samples with ``seed + k``.
        today: the date written into the system prompt (default: today).
        observation_style: how the system prompt, the format-error and limit notices (and, through the tools
            built with the same style, the observations) are written: ``inference`` (the authors' inference code)
            or ``rl`` (the RL rollouts), ``tools.observation_styles``. The journal keeps it, so a resumed session
            keeps it.
    """

    max_turns: int = 200
    max_prompt_tokens: int = 240_000
    answer_reserve_tokens: int | None = None
    context_policy: str = "force-answer"
    keep_last: int = 3
    max_summaries: int = 3
    time_limit_s: float = 9_000.0
    max_retries: int = 5
    repetition_tail_chars: int = 50
    repetition_max_count: int = 5
    sampling: SamplingParams = field(default_factory=SamplingParams)
    strict: bool = False
    min_tool_calls: int = 0
    required_calls: tuple[str, ...] = ()
    grammar_limits: GrammarLimits = field(default_factory=GrammarLimits)
    seed: int = 0
    today: Date | None = None
    observation_style: protocol.ObservationStyle = protocol.DEFAULT_OBSERVATION_STYLE

    def __post_init__(self) -> None:
        protocol.observation_style(self.observation_style)  # an unknown style fails here, naming the styles
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_retries < 1:
            raise ValueError(f"max_retries must be >= 1, got {self.max_retries}")
        if self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.answer_reserve_tokens is not None and self.answer_reserve_tokens < 0:
            raise ValueError(f"answer_reserve_tokens must be >= 0, got {self.answer_reserve_tokens}")
        self.make_policy()  # a bad policy name or setting fails here, before anything runs

    def answer_reserve(self, n_ctx: int) -> int:
        """The reserve's floor in a window of ``n_ctx`` tokens: ``answer_reserve_tokens``, or when None
        ``default_answer_reserve(n_ctx)``."""
        return default_answer_reserve(n_ctx) if self.answer_reserve_tokens is None else self.answer_reserve_tokens

    def make_policy(self) -> ContextPolicy:
        """A new context policy as this config names it (each session gets its own: policies keep state).

        Raises:
            ValueError: unknown policy name or bad setting.
        """
        settings: dict[str, Any] = {"keep-last-k": {"keep_last": self.keep_last},
                                    "summarize": {"max_summaries": self.max_summaries}}.get(self.context_policy, {})
        return make_policy(self.context_policy, **settings)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["today"] = self.today.isoformat() if self.today else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentConfig:
        """The config a journal's start record holds (``to_dict``); keys this version does not know are ignored.

        Raises:
            ValueError: a value is out of range.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"config {data!r} is not an object")
        known = {spec for spec in cls.__dataclass_fields__}
        values = {key: value for key, value in data.items() if key in known}
        try:
            if isinstance(values.get("sampling"), Mapping):
                values["sampling"] = SamplingParams(**_checked(SamplingParams, values["sampling"]))
            if isinstance(values.get("grammar_limits"), Mapping):
                values["grammar_limits"] = GrammarLimits(**_checked(GrammarLimits, values["grammar_limits"]))
            if isinstance(values.get("today"), str):
                values["today"] = Date.fromisoformat(values["today"])
            if isinstance(values.get("required_calls"), list):  # JSON has no tuples
                values["required_calls"] = tuple(values["required_calls"])
            return cls(**_checked(cls, values))
        except TypeError as exc:
            raise ValueError(f"config {dict(data)!r}: {exc}") from exc


def _field_default(spec: Field[Any]) -> Any:
    """The default of a dataclass field (its factory called), or ``MISSING`` for a field without one."""
    if spec.default is not MISSING:
        return spec.default
    factory = spec.default_factory
    return factory() if callable(factory) else MISSING


def _checked(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` for the dataclass ``cls``, each of its field's type (that of the field's default: an int where
    the default is a float is fine; a bool is not an int). None stays None where the default is None.

    Raises:
        ValueError: a value of another type (a hand-edited or foreign journal), named with the type expected.
    """
    defaults = {spec.name: default for spec in fields(cls) if (default := _field_default(spec)) is not MISSING}
    for name, value in values.items():
        default = defaults.get(name)
        if default is None:
            continue
        expected: tuple[type, ...] = (int, float) if type(default) is float else (type(default),)
        if isinstance(value, bool) is not isinstance(default, bool) or not isinstance(value, expected):
            raise ValueError(f"{name} is {value!r}, not a {type(default).__name__}")
    return dict(values)


@dataclass
class _Attempt:
    parsed: protocol.ParsedTurn | None
    completion: Completion | None
    attempts: int
    call: PreparedCall | None = None
    budget_cut: bool = False  # the turn reached the prompt budget before it ended (see _generate_turn)


class Agent:
    """A DR-Venus research agent over an ``Engine`` and a set of tools.

    Args:
        engine: the model (``LlamaCppEngine`` or any ``Engine``).
        tools: the tools, in the order their schemas appear in the system prompt.
        config: limits and guards.
        trajectory_path: append the session's journal here (JSONL, see ``venus_edge.trajectory``).
        context_policy: a policy object of your own (``venus_edge.policies.ContextPolicy``); default the one
            ``config.context_policy`` names. Each session works on its own copy.
        pace: pace each session for a device that heats and drains (``venus_edge.pacing``); None (default): off.
            Not part of ``config`` (nor of the journal): it belongs to the device a session runs on, and a session
            resumed elsewhere paces by that device's settings.

    Raises:
        ContextSettingsError: the answer reserve does not fit in the engine's ``n_ctx``, or the system prompt and
            the reserve leave fewer than ``MIN_RESEARCH_TOKENS`` for the research; the message names the fix.
    """

    def __init__(
        self,
        engine: Engine,
        tools: Iterable[Tool],
        *,
        config: AgentConfig | None = None,
        trajectory_path: str | os.PathLike[str] | None = None,
        context_policy: ContextPolicy | None = None,
        pace: PaceConfig | None = None,
    ) -> None:
        self.engine = engine
        self.pace = pace
        self.registry = ToolRegistry(tools)
        self.config = config or AgentConfig()
        self.trajectory_path = Path(trajectory_path) if trajectory_path else None
        self.context_policy = context_policy
        unknown = [name for name in self.config.required_calls if name not in self.registry.names]
        if unknown:
            raise ValueError(f"required_calls names {', '.join(map(repr, unknown))}, not a tool of this agent; its "
                             f"tools are {', '.join(self.registry.names)}")
        self._check_context(self.config)

    def _check_context(self, config: AgentConfig) -> None:
        """Refuse a reserve and a window that leave less than ``MIN_RESEARCH_TOKENS`` for the research; the fix named
        is computed from the system prompt's real length, so following it works."""
        n_ctx = self.engine.n_ctx
        reserve = config.answer_reserve(n_ctx)
        system = protocol.render_messages([{"role": "system", "content": protocol.render_system_prompt(
            self.registry.schemas, config.today or Date.today(), style=config.observation_style)}],
            add_generation_prompt=False)
        system_tokens = len(self.engine.tokenize(system))
        room = min(n_ctx - reserve, config.max_prompt_tokens) - system_tokens
        if room >= MIN_RESEARCH_TOKENS:
            return
        if config.max_prompt_tokens < n_ctx - reserve:
            raise ContextSettingsError(
                f"{{max_prompt_tokens}} ({config.max_prompt_tokens:,}) leaves {room:,} tokens for the question and "
                f"the research after the system prompt ({system_tokens:,} tokens), fewer than {MIN_RESEARCH_TOKENS}. "
                f"Raise {{max_prompt_tokens}} to at least {system_tokens + MIN_RESEARCH_TOKENS:,}.")
        needed_n_ctx = system_tokens + reserve + MIN_RESEARCH_TOKENS
        reserve_at_most = n_ctx - system_tokens - MIN_RESEARCH_TOKENS  # below 0: no reserve makes this n_ctx work
        if reserve_at_most < 0:
            fix = (f"Raise {{n_ctx}} to at least {needed_n_ctx:,} (lowering {{answer_reserve_tokens}} cannot help: "
                   f"even with none, {{n_ctx}} must be at least {system_tokens + MIN_RESEARCH_TOKENS:,})")
        elif reserve >= n_ctx:
            fix = f"Lower it to at most {reserve_at_most:,} or raise {{n_ctx}} to at least {needed_n_ctx:,}"
        else:
            fix = (f"Raise {{n_ctx}} to at least {needed_n_ctx:,} or lower {{answer_reserve_tokens}} to at most "
                   f"{reserve_at_most:,}")
        rule = (f"{{answer_reserve_tokens}} ({reserve:,}) must be smaller than {{n_ctx}} ({n_ctx:,}): the reserve is "
                f"room kept free in the context for the final answer" if reserve >= n_ctx else
                f"the context leaves {room:,} tokens for the question and the research, fewer than "
                f"{MIN_RESEARCH_TOKENS}: {{n_ctx}} {n_ctx:,} - answer reserve {reserve:,} - system prompt "
                f"{system_tokens:,} tokens")
        raise ContextSettingsError(f"{rule}. {fix}.")

    def new_policy(self, config: AgentConfig | None = None) -> ContextPolicy:
        """The context policy of a new session: a copy of the one given, else the one the config names."""
        if self.context_policy is not None:
            return copy.deepcopy(self.context_policy)
        return (config or self.config).make_policy()

    def grammar(self, calls: Sequence[str], *, forcing: bool = False, config: AgentConfig | None = None,
                url_choices: Sequence[str] = ()) -> str | None:
        """The strict-mode grammar for the next turn (None in free mode), after tool calls of the tools ``calls``.

        A forced final turn may only answer. No answer is allowed before ``min_tool_calls`` calls, nor before the
        ``required_calls`` were made in order (other calls between them are fine); while one of those is due, only
        its tool may be called, but a tool with a ``url`` argument is not due before a tool response showed a URL
        (``url_choices`` is empty): the tool before it is offered again (another search, after one that found
        nothing). A ``url`` argument may only be one of ``url_choices``, when there are any. ``config`` defaults to
        the agent's (a resumed session passes the one it was recorded with).
        """
        config = config or self.config
        if not config.strict:
            return None
        required, made = config.required_calls, 0
        for name in calls:
            if made < len(required) and name == required[made]:
                made += 1
        due = required[made] if made < len(required) else None
        if due is not None and made and not url_choices and "url" in self._arguments(due):
            due = required[made - 1]
        may_answer = made == len(required) and len(calls) >= config.min_tool_calls
        actions: TurnActions = "answer" if forcing else "either" if may_answer else "call"
        schemas = [with_choices(schema, "url", url_choices) for schema in self.registry.schemas
                   if due is None or schema["function"]["name"] == due]
        return turn_grammar(schemas, config.grammar_limits, actions=actions)

    def _arguments(self, tool: str) -> Mapping[str, Any]:
        """The argument properties of a tool's schema."""
        schema = next(s for s in self.registry.schemas if s["function"]["name"] == tool)
        properties: Mapping[str, Any] = schema["function"].get("parameters", {}).get("properties", {})
        return properties

    def run(self, question: str, *, cancel: threading.Event | None = None) -> Result:
        """Research ``question`` to a termination and return the result: the last event's (events are consumed
        silently).

        Raises:
            ContextOverflowError: the question alone does not fit in the prompt budget.
        """
        return _last_result(self.events(question, cancel=cancel))

    def events(self, question: str, *, cancel: threading.Event | None = None,
               interrupt: threading.Event | None = None,
               session_id: str | None = None) -> Generator[Event, None, Result]:
        """Run the session as a generator of typed events; the last, ``SessionFinished``, carries the ``Result``
        (the generator returns it too, for ``yield from``). The trajectory journal is written as the events happen.

        Text streams live: each ``TextDelta`` is yielded as the engine decodes it (``engine.stream_generation``).
        Setting ``cancel`` (from any thread) ends the session with termination ``cancelled``: a turn being
        decoded stops at its next token and is dropped, a running tool call is abandoned at once (our own tools
        stop; the turn is recorded with a ``cancelled`` tool failure); the journal gets the end record. Tool calls
        run under the session's deadline too: one that overruns ``time_limit_s`` (plus ``TOOL_GRACE_S``) is
        abandoned with a ``timeout`` failure and the session ends with ``timeout``. Closing the generator early
        also stops the decode, but leaves the session without an end record (resumable, as a killed process). An
        exception from the engine or the loop writes the end record with termination ``error`` and goes on to the
        caller. ``session_id`` names the session in events and journal (default a new random hex id).
        Setting ``interrupt`` and then ``cancel`` stops the session as a killed process would be stopped (a server
        shutting down): the turn in flight, its tool call included, is not recorded and no end record is written,
        so the journal resumes the session; the result's termination is ``interrupted``.

        Raises:
            SessionLockedError: (when the generator starts) another writer is writing ``session_id`` to the same
                journal (``venus_edge.session_lock``).
        """
        return _Session(self, question, cancel=cancel, interrupt=interrupt, session_id=session_id).run()

    def resume(self, journal_path: str | Path, session_id: str | None = None) -> Result:
        """Continue a killed session from its last complete turn (see ``resume_events``)."""
        return _last_result(self.resume_events(journal_path, session_id))

    def resume_events(self, journal_path: str | Path, session_id: str | None = None, *,
                      cancel: threading.Event | None = None,
                      interrupt: threading.Event | None = None) -> Generator[Event, None, Result]:
        """Continue a session that has no end record (a killed run) from its last complete turn, as events.

        The session keeps its id, question, system prompt (its date included) and config (seed, limits, policy:
        from the journal's start record, so that sampling continues where it stopped); its conversation,
        duplicate-call keys, visited URLs and sample count are rebuilt from the turn and compaction records, and
        new records are appended to the same journal. The turn in flight when the process died is generated
        again; nothing complete is repeated or lost. The wall-clock limit counts from the resume.

        Args:
            journal_path: the JSONL journal the session was written to.
            session_id: the session to resume; default the last session of the journal without an end record.

        Totals (tokens, seconds, retries) count what the journal recorded: the accepted sample of each turn.

        Raises:
            TrajectoryError: no such file, an empty or unreadable journal, no such session, the session already
                ended, its turn records do not continue 0, 1, 2, ... or one of its records was skipped (the line is
                named), its config cannot be read, or it was recorded with other tools (resume with the same tools,
                or with a replay of their recording).
            SessionLockedError: (when the generator starts) another writer is writing the session; the journal is
                read again once the lock is held, so a session that writer ended meanwhile is refused as ended.
            ContextSettingsError: the recorded config does not fit this engine's ``n_ctx``.
        """
        path = Path(journal_path)
        trajectory = _resumable(path, session_id)
        try:
            recorded = AgentConfig.from_dict(trajectory.header.get("config") or {})
        except ValueError as exc:
            raise TrajectoryError(path, 0, f"session {trajectory.session_id}: its config cannot be read ({exc})") \
                from exc
        self._check_context(recorded)
        recorded_n_ctx = (trajectory.header.get("model") or {}).get("n_ctx")
        if recorded_n_ctx and recorded_n_ctx != self.engine.n_ctx:
            logger.warning("resuming session %s at n_ctx %d; it ran at %d, so its budget and compactions will differ "
                           "from an uninterrupted run (give the same --n-ctx)", trajectory.session_id,
                           self.engine.n_ctx, recorded_n_ctx)
        names = [schema.get("function", schema).get("name") for schema in trajectory.header.get("tools", [])]
        if trajectory.header.get("tools") != self.registry.schemas:
            raise TrajectoryError(path, 0, f"session {trajectory.session_id} was recorded with the tools "
                                           f"{names}; this agent has {list(self.registry.names)}: resume with the "
                                           "same tools (or replay their recording)")
        return _Session(self, trajectory.question, resumed=trajectory, journal_path=path, cancel=cancel,
                        interrupt=interrupt).run()


class _Cancelled(Exception):
    """The session's ``cancel`` was set; ``_Session.run`` ends the session with ``CANCELLED``."""


def _text_deltas(step: int, pieces: Generator[str, None, Completion]) -> Generator[Event, None, Completion]:
    """Each decoded piece as a ``TextDelta`` of turn ``step``; the return value is the ``Completion``. Closing
    this closes ``pieces``, which stops the decode."""
    with contextlib.closing(pieces):
        while True:
            try:
                text = next(pieces)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            yield TextDelta(step, text)


def _last_result(stream: Iterable[Event]) -> Result:
    """Run an event stream to its end: its last event, ``SessionFinished``, carries the result."""
    last: Event | None = None
    for event in stream:
        last = event
    assert isinstance(last, SessionFinished), f"a session's last event is SessionFinished, not {last!r}"
    return last.result


def _resumable(path: Path, session_id: str | None) -> Trajectory:
    """The session to resume (``session_id``, or the last one without an end record), checked: its turn records
    continue 0, 1, 2, ... and none of its records was skipped (a repeated turn, a wrong type), or it is refused
    with the line and the reason. Each message says what the journal holds."""
    journal = read_journal(path)
    if session_id is not None:
        found = [t for t in journal.trajectories if t.session_id == session_id]
        if not found:
            raise TrajectoryError(path, 0, f"no session {session_id} in the journal; {_holds(journal)}")
        if found[0].termination != "incomplete":
            raise TrajectoryError(path, 0, f"session {session_id} ended ({found[0].termination}); nothing to resume")
        chosen = found[0]
    else:
        incomplete = [t for t in journal.trajectories if t.termination == "incomplete"]
        if not incomplete:
            if journal.trajectories:
                raise TrajectoryError(path, 0, f"every session in the journal ended; nothing to resume "
                                               f"({_holds(journal)})")
            raise TrajectoryError(path, 0, f"nothing to resume: {_holds(journal)}")
        chosen = incomplete[-1]
    problems = journal.problems(chosen.session_id)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TrajectoryError(path, first.line, f"session {chosen.session_id} cannot be resumed: {first.reason}{more}; "
                                                "resuming would repeat or lose turns")
    return chosen


def resumable_session(journal_path: str | Path, session_id: str | None = None) -> Trajectory:
    """The session ``Agent.resume_events`` would continue, checked before any model is loaded: the journal holds
    it, it has no end record, its turn records continue, and no other writer holds its lock (the lock is only
    tried here; the session takes it when it runs).

    Raises:
        TrajectoryError: as ``Agent.resume_events``; ``SessionLockedError`` when another writer holds it.
    """
    path = Path(journal_path)
    trajectory = _resumable(path, session_id)
    lock = SessionLock(path, trajectory.session_id)
    with contextlib.suppress(OSError):  # a folder we may not write: the session itself will say so
        lock.acquire()
    lock.release()
    return trajectory


def _holds(journal: Journal) -> str:
    """What a journal holds, in words, for a message that found nothing to resume."""
    if journal.trajectories:
        ended = sum(t.termination != "incomplete" for t in journal.trajectories)
        ids = ", ".join(t.session_id for t in journal.trajectories[-5:])
        return (f"it holds {len(journal.trajectories)} session(s), {ended} ended (the last: {ids})")
    if journal.skipped:
        first = journal.skipped[0]
        return (f"the journal holds no readable session: {len(journal.skipped)} line(s) skipped, the first at line "
                f"{first.line}: {first.reason}")
    return "the journal is empty"


@dataclass(frozen=True)
class _Sampled:
    """What a model turn was sampled as: its text and exact token ids (kept so the KV prefix is reused)."""

    text: str
    token_ids: list[int]


class _Session:
    """The state of one run: messages, dedup keys, visited URLs, counters, journal, context policy."""

    def __init__(self, agent: Agent, question: str, *, resumed: Trajectory | None = None,
                 journal_path: Path | None = None, cancel: threading.Event | None = None,
                 interrupt: threading.Event | None = None, session_id: str | None = None) -> None:
        self.agent = agent
        self.cancel = cancel
        self.interrupt = interrupt
        self.engine = agent.engine
        self.config = AgentConfig.from_dict(resumed.header["config"]) if resumed else agent.config
        self.question = valid_text(question, source="the question")  # stored, tokenized and sent: valid Unicode
        self.resumed = resumed
        self.session_id = resumed.session_id if resumed else session_id or uuid.uuid4().hex
        self.system_prompt = (resumed.system_prompt if resumed else
                              protocol.render_system_prompt(agent.registry.schemas, self.config.today or Date.today(),
                                                            style=self.config.observation_style))
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.question},
        ]
        self.call_keys: set[str] = set()
        self.tool_calls: dict[int, dict[str, Any]] = {}  # assistant message index -> its (coerced) tool call
        self.visited: dict[str, None] = {}
        self.unreadable: set[str] = set()  # URLs a tool failed to read: never offered by the strict grammar
        self.calls: list[str] = []  # the tool of each call made, in order (the strict grammar's required calls)
        self.turns = 0
        self.samples = 0
        self.longest_turn = 0
        self.start = time.monotonic()
        self.totals = SessionTotals()
        self.journal_path = journal_path or agent.trajectory_path
        self.journal = TrajectoryWriter(self.journal_path, self.session_id) if self.journal_path else None
        self.pending_notice: str | None = None
        self.journal_started = resumed is not None  # the start record is in the journal
        self.ended = False  # the session ended (``_finish``): its end record written, unless pacing stopped it
        self.policy = agent.new_policy(self.config)
        self.pacer = Pacer(agent.pace, self.engine, cancel=cancel) if agent.pace is not None else None
        self._segments: dict[tuple[int, str], list[int]] = {}
        self._sampled: dict[int, _Sampled] = {}  # message index -> how the turn it holds was sampled
        self._recorded_samples = 0  # samples accounted for in journal records (see _new_samples)
        self._notice_tokens = len(self.engine.tokenize(protocol.render_messages(
            [{"role": "user", "content": protocol.limit_message("context", self.config.observation_style)}],
            add_generation_prompt=True)))

    @property
    def reserve(self) -> int:
        """Tokens kept free for a final turn: the configured floor, or the longest turn so far plus the limit
        notice when that is more (capped at half of n_ctx, so a runaway turn cannot leave no budget at all)."""
        observed = min(self.longest_turn + self._notice_tokens, self.engine.n_ctx // 2)
        return max(self.config.answer_reserve(self.engine.n_ctx), observed)

    @property
    def budget(self) -> int:
        """The prompt budget in tokens: past it the context policy acts."""
        return min(self.config.max_prompt_tokens, self.engine.n_ctx - self.reserve)

    def _restore(self, trajectory: Trajectory) -> None:
        """Rebuild the state a killed session had after its last complete turn (``Agent.resume_events``)."""
        turns, compactions = trajectory.turns, trajectory.compactions
        self.messages = rebuild_messages(trajectory.header, turns, compactions)
        self.turns = turns[-1].index + 1 if turns else 0
        self.samples = sum(t.attempts for t in turns) + sum(int(c.get("attempts", 0)) for c in compactions)
        self._recorded_samples = self.samples
        self.longest_turn = max((len(t.token_ids) for t in turns), default=0)
        since = -1
        if compactions:
            self.call_keys = set(compactions[-1].get("call_keys", []))
            since = compactions[-1]["turn"]
        names = self.agent.registry.names
        for turn in turns:
            for url in turn.visited_urls:
                self.visited.setdefault(url, None)
            self.unreadable.update(failure.get("target", "") for failure in turn.tool_failures)
            if turn.tool_call:
                self.calls.append(turn.tool_call["name"])
            if turn.tool_call and turn.index > since:
                self.call_keys.add(self._call_key(turn.tool_call))
        sampled = {t.content: t.token_ids for t in turns}
        for index, message in enumerate(self.messages):
            if message["role"] != "assistant":
                continue
            call = protocol.parse_turn(message["content"], names).tool_call
            if call is not None:
                with contextlib.suppress(ToolArgumentError, KeyError, ValueError):
                    prepared = self.agent.registry.prepare(call.name, call.arguments)
                    self.tool_calls[index] = {"name": prepared.name, "arguments": prepared.arguments}
            ids = sampled.get(message["content"])
            if ids:
                self._sampled[index] = _Sampled(self.engine.detokenize(ids), list(ids))
        totals = self.totals
        for turn in turns:
            totals.add(turn.stats)
            totals.tool_calls += turn.tool_call is not None
            totals.retries += turn.attempts - 1
            totals.well_formed_turns += turn.well_formed
        totals.generated_turns = self.samples
        totals.compactions = len(compactions)
        totals.compaction_tokens_reevaluated = sum(int(c.get("tokens_reevaluated", 0)) for c in compactions)
        totals.resumed_at_turn = self.turns
        self.policy.resume(compactions)

    def _call_key(self, call: Mapping[str, Any]) -> str:
        return self.agent.registry.prepare(call["name"], call["arguments"]).key

    # ------------------------------------------------------------------------------------------- main loop
    def run(self) -> Generator[Event, None, Result]:
        """The session, written under its journal lock (``venus_edge.session_lock``: one writer per session).

        Every way it ends writes the end record: a model server that fails (``EngineConnectionError``, after its
        retries) ends it with ``llm_error`` and an ``ErrorRaised`` event; any other exception (an engine's, a bug)
        writes the end record with ``error`` and goes on to the caller. Only a closed generator or a killed
        process (KeyboardInterrupt) leaves it without one, resumable.
        """
        lock = self._lock_journal()
        try:
            return (yield from self._loop())
        except (_Cancelled, GenerationCancelled):  # the latter from an engine that lets it out of generate
            if self._interrupted():  # as a killed process: the journal keeps the session open
                return (yield from self._end(INTERRUPTED, None, record_end=False))
            return (yield from self._end(CANCELLED, None))
        except EngineConnectionError as exc:
            yield ErrorRaised(self.turns, "engine", f"{type(exc).__name__}: {exc}")
            return (yield from self._end(LLM_ERROR, None))
        except Exception as exc:
            if self.journal_started and not self.ended:
                self._finish(ERROR, None, error="".join(traceback.format_exception_only(exc)).strip())
            raise
        finally:
            if lock is not None:
                lock.release()

    def _lock_journal(self) -> SessionLock | None:
        """Take the session's journal lock (None without a journal); a resumed session is read again under it,
        so that what another writer added before it let go is not written twice.

        Raises:
            SessionLockedError: another writer holds the session.
            TrajectoryError: (resume) the session, read again, ended or cannot be resumed.
        """
        if self.journal_path is None:
            return None
        lock = SessionLock(self.journal_path, self.session_id)
        try:
            lock.acquire()
        except OSError as exc:  # a folder we may not write: the journal's own writes will say so
            logger.warning("cannot lock session %s of %s (%s); it is written without its lock", self.session_id,
                           self.journal_path, exc)
            return None
        try:
            if self.resumed is not None:
                self.resumed = _resumable(self.journal_path, self.session_id)
                self._restore(self.resumed)
        except BaseException:
            lock.release()
            raise
        return lock

    def _loop(self) -> Generator[Event, None, Result]:
        prompt_tokens = len(self._prompt_ids())
        # The style is part of what the model is shown, so the session says it where it says which model runs.
        model = {**self.engine.model_info(), "observation_style": self.config.observation_style}
        if self.journal and not self.resumed:
            self.journal_started = True
            self.journal.start(
                question=self.question, system_prompt=self.system_prompt, tools=self.agent.registry.schemas,
                model=model, config=self.config.to_dict(),
                started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
        yield SessionStarted(self.session_id, self.question, model, prompt_tokens)
        step = self.turns
        if self.resumed:
            ended = yield from self._resume_point(step)
            if ended is not None:
                return ended
        elif prompt_tokens > self.budget:
            error = ContextOverflowError(
                prompt_tokens, self.engine.n_ctx,
                f"the question and system prompt leave no room for research (budget {self.budget:,} tokens); "
                "raise {n_ctx} or shorten the question",
            )
            yield ErrorRaised(0, "prompt", str(error))
            self._finish(TOKEN_LIMIT_NO_ANSWER, None)
            raise error

        while step < self.config.max_turns:
            if self.pacer is not None and (yield from self._pace(step)):
                return (yield from self._end(BATTERY_LOW, None, record_end=False))
            self._check_cancel()
            if time.monotonic() - self.start > self.config.time_limit_s:
                yield LimitReached(step, "time", f"{self.config.time_limit_s:.0f} s elapsed")
                return (yield from self._end(TIMEOUT, None))
            attempt = yield from self._generate_turn(step)
            if attempt.budget_cut:
                yield LimitReached(step, "context", f"turn {step} reached the prompt budget of {self.budget:,} "
                                                    "tokens before it ended")
                ended = yield from self._over_budget(step - 1, step)
                if ended is not None:
                    return ended
                continue  # the same turn again, in the compacted context
            if attempt.parsed is None:
                return (yield from self._end(LLM_ERROR, None))
            parsed = attempt.parsed
            assert attempt.completion is not None
            if attempt.call is not None:
                self._check_cancel()  # cancelled during the turn's last piece: its tool does not run
            index = len(self.messages)
            self._sampled[index] = _Sampled(attempt.completion.text, list(attempt.completion.token_ids))
            self.longest_turn = max(self.longest_turn, len(attempt.completion.token_ids))
            self.messages.append({"role": "assistant", "content": parsed.content})
            self.turns += 1
            if parsed.kind == "answer":
                yield from self._record_turn(step, attempt, None, ToolResult(""))
                return (yield from self._end(ANSWERED, parsed.answer))
            if attempt.call is not None:
                self.tool_calls[index] = {"name": attempt.call.name, "arguments": attempt.call.arguments}
                result, tool_s = yield from self._call_tool(step, attempt.call)
                if self._interrupted():  # the call was cut short: a resume makes it again, whole
                    raise _Cancelled
                text = protocol.observation(self._fit_result(result.text))
            else:
                text = protocol.format_error_message(self.config.observation_style)
                result, tool_s = ToolResult(""), None
            self.messages.append({"role": "user", "content": text})
            yield from self._record_turn(step, attempt, text, result, tool_s)
            used = len(self._prompt_ids())
            if used > self.budget:
                yield LimitReached(step, "context", f"prompt is {used:,} tokens; budget is {self.budget:,}")
                ended = yield from self._over_budget(step, step + 1)
                if ended is not None:
                    return ended
            step += 1
        yield LimitReached(self.config.max_turns, "turns", f"{self.config.max_turns} turns used")
        return (yield from self._force_answer(self.config.max_turns, "steps",
                                              ANSWERED_MAX_STEPS, MAX_STEPS))

    def _resume_point(self, step: int) -> Generator[Event, None, Result | None]:
        """Where a resumed session stands: it may have died after its last turn (an answer, or a forced turn that
        did not answer: the end record alone was lost), or past its budget. None means: go on with turn ``step``."""
        last = self.resumed.turns[-1] if self.resumed and self.resumed.turns else None
        if last is not None and last.observation is None:
            limit = protocol.limit_kind(last.replaces_last_observation or "")
            by_context, by_steps = limit == "context", limit == "steps"
            if last.kind == "answer":
                termination = ANSWERED_TOKEN_LIMIT if by_context else ANSWERED_MAX_STEPS if by_steps else ANSWERED
                answer = protocol.parse_turn(last.content, self.agent.registry.names).answer
                return (yield from self._end(termination, answer))
            return (yield from self._end(TOKEN_LIMIT_NO_ANSWER if by_context else MAX_STEPS, None))
        used = len(self._prompt_ids())
        if step > 0 and used > self.budget:
            yield LimitReached(step - 1, "context", f"prompt is {used:,} tokens; budget is {self.budget:,}")
            return (yield from self._over_budget(step - 1, step))
        return None

    def _pace(self, step: int) -> Generator[Event, None, bool]:
        """Pacing's check before turn ``step`` (``Pacer.check``): each action journaled, then yielded. True when the
        session stops for its battery."""
        assert self.pacer is not None
        checks = self.pacer.check(step)
        while True:
            try:
                event: Paced = next(checks)
            except StopIteration as done:
                return bool(done.value)
            if self.journal:
                self.journal.pace(**{key: value for key, value in event.to_dict().items() if key != "type"})
            yield event

    # ------------------------------------------------------------------------------------------- the budget
    def _over_budget(self, step: int, next_step: int) -> Generator[Event, None, Result | None]:
        """The prompt passed the budget after turn ``step`` (-1: before the first): compact it with the context
        policy, or force the final answer as turn ``next_step`` (returning the session's result). None means: go
        on researching. A compaction that does not shrink the prompt, or leaves it over the budget, forces the
        answer too, so that no policy can loop."""
        before = self._prompt_ids()
        context = CompactionContext(
            messages=[dict(m) for m in self.messages], tool_calls=dict(self.tool_calls), question=self.question,
            visited=list(self.visited), prompt_tokens=len(before), budget=self.budget,
            count_tokens=self._count_tokens,
        )
        notice = self.policy.notes_request(context)
        if notice is not None:
            notes = yield from self._write_notes(next_step, notice)
            context = replace(context, notes=notes)
        compaction = self.policy.compact(context)
        if compaction is None:
            return (yield from self._force_answer(next_step, "context",
                                                  ANSWERED_TOKEN_LIMIT, TOKEN_LIMIT_NO_ANSWER))
        self._apply(compaction)
        after = self._prompt_ids()
        shared = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        event = ContextCompacted(step, self.policy.name, len(before), len(after), len(after) - shared,
                                 compaction.detail)
        self.totals.compactions += 1
        self.totals.compaction_tokens_reevaluated += event.tokens_reevaluated
        if self.journal:
            self.journal.compaction(
                turn=step, policy=self.policy.name, tokens_before=event.tokens_before, tokens_after=event.tokens_after,
                tokens_reevaluated=event.tokens_reevaluated, detail=compaction.detail, attempts=self._new_samples(),
                summary=compaction.summary, messages=self.messages, call_keys=sorted(self.call_keys),
            )
        yield event
        if len(after) > self.budget or len(after) >= len(before):  # freed too little: the answer, not a loop
            yield LimitReached(step, "context", f"prompt is {len(after):,} tokens after compaction "
                                                f"({len(before):,} before); budget is {self.budget:,}")
            return (yield from self._force_answer(next_step, "context",
                                                  ANSWERED_TOKEN_LIMIT, TOKEN_LIMIT_NO_ANSWER))
        return None

    def _fit_result(self, text: str) -> str:
        """A tool result larger than the context policy could ever keep, cut to the policy's allowance when it
        arrives (``ContextPolicy.result_allowance``, ``policies.fit_result``): in a small window one search result
        can be larger than the room a compaction leaves, which would force the answer after the first call."""
        research_room = self.budget - self._count_tokens(self.messages[:2])
        allowance = self.policy.result_allowance(research_room)
        if allowance is None:
            return text
        return fit_result(text, lambda cut: len(self.engine.tokenize(protocol.observation(cut))) <= allowance)

    def _apply(self, compaction: Compaction) -> None:
        self.messages = [dict(m) for m in compaction.messages]
        if compaction.restart:
            self.call_keys.clear()
            self.tool_calls.clear()
            self._sampled.clear()
            return
        for index in compaction.forget_calls:
            call = self.tool_calls.get(index)
            if call is not None:
                self.call_keys.discard(self._call_key(call))

    def _write_notes(self, step: int, notice: str) -> Generator[Event, None, str | None]:
        """One answer-shaped turn asked for with ``notice`` (a policy's ``notes_request``), not kept in the history:
        the notice follows the last observation in the same tool response (or replaces it, when both would not fit
        with the reserve; or comes as a tool response of its own after a user message). Returns the ``<answer>``
        text, or None."""
        saved = self.messages
        last = saved[-1]["content"]
        asked = saved + [{"role": "user", "content": protocol.observation(notice)}]
        if protocol.is_observation(last):
            text = protocol.observation_text(last)
            asked = saved[:-1] + [{"role": "user", "content": protocol.observation(f"{text}\n\n{notice}")}]
            if self._count_tokens(asked) + self.reserve > self.engine.n_ctx:
                asked = saved[:-1] + [{"role": "user", "content": protocol.observation(notice)}]
        self.messages = asked
        try:
            attempt = yield from self._generate_turn(step, forcing=True, purpose="notes")
        except ContextOverflowError as exc:
            yield ErrorRaised(step, "engine", f"{type(exc).__name__}: {exc}")
            return None
        finally:
            self.messages = saved
        parsed = attempt.parsed
        return parsed.answer if parsed is not None and parsed.kind == "answer" else None

    def _new_samples(self) -> int:
        """Samples drawn since the last journal record (a record's ``attempts``), so a resume restores the count."""
        count, self._recorded_samples = self.samples - self._recorded_samples, self.samples
        return count

    def _count_tokens(self, messages: Sequence[Mapping[str, str]]) -> int:
        return len(self._prompt_ids(messages))

    def _force_answer(self, step: int, limit: protocol.LimitKind, ok: str, failed: str,
                      ) -> Generator[Event, None, Result]:
        """Replace the last observation by the notice of ``limit`` and generate one more turn (reference
        ``_force_answer``); the notice is the observation style's (``protocol.limit_message``)."""
        # The notice replaces the last observation (the reference); after a user message of its own (the question,
        # a summarize restart) it comes as a message of its own, so that nothing the model was told is lost.
        self.pending_notice = protocol.limit_message(limit, self.config.observation_style)
        if protocol.is_observation(self.messages[-1]["content"]) and len(self.messages) > 2:
            self.messages[-1] = {"role": "user", "content": self.pending_notice}
        else:
            self.messages.append({"role": "user", "content": self.pending_notice})
        try:
            attempt = yield from self._generate_turn(step, forcing=True)
        except ContextOverflowError as exc:
            yield ErrorRaised(step, "engine", f"{type(exc).__name__}: {exc}")
            return (yield from self._end(failed, None))
        if attempt.parsed is None:
            return (yield from self._end(failed, None))
        self.messages.append({"role": "assistant", "content": attempt.parsed.content})
        self.turns += 1
        yield from self._record_turn(step, attempt, None, ToolResult(""))
        if attempt.parsed.kind == "answer":
            return (yield from self._end(ok, attempt.parsed.answer))
        return (yield from self._end(failed, None))

    # ------------------------------------------------------------------------------------------- one turn
    def _generate_turn(self, step: int, *, forcing: bool = False,
                       purpose: str = "turn") -> Generator[Event, None, _Attempt]:
        """Sample until a turn passes the guards, or the attempts run out (reference ``_generate``).

        A regular turn may not grow past the budget: its ``max_tokens`` is capped there, and a turn cut by that cap
        comes back as ``budget_cut`` (the context policy acts, the turn is not retried). A ``forcing`` turn (the
        final answer, a policy's notes) may use all of ``n_ctx``. ``purpose`` tags its ``TurnStarted`` events.
        """
        prompt_ids = self._prompt_ids()
        sampling = self.config.sampling
        if not forcing:
            cap = self.budget - len(prompt_ids)
            if cap < 1:
                return _Attempt(None, None, 0, budget_cut=True)
            if cap < sampling.max_tokens:
                sampling = replace(sampling, max_tokens=cap)
        last: _Attempt = _Attempt(None, None, 0)
        for attempt in range(self.config.max_retries):
            final_try = attempt == self.config.max_retries - 1
            yield TurnStarted(step, attempt, len(prompt_ids), self.engine.n_ctx, purpose)
            completion = yield from _text_deltas(step, stream_generation(
                self.engine, prompt_ids, cancel=self.cancel, sampling=sampling, stop=protocol.STOP_STRINGS,
                stop_text_if=protocol.action_complete,
                grammar=self.agent.grammar(self.calls, forcing=forcing, config=self.config,
                                           url_choices=self._url_choices() if self.config.strict else ()),
                seed=self.config.seed + self.samples,
            ))
            self.samples += 1
            self.totals.generated_turns += 1
            self.totals.add(completion.stats.to_dict())
            if completion.finish_reason == "cancelled":
                raise _Cancelled
            if (sampling is not self.config.sampling and completion.finish_reason == "length"
                    and len(completion.token_ids) >= sampling.max_tokens):
                return _Attempt(None, completion, attempt + 1, budget_cut=True)
            if not completion.text.strip():
                yield from self._retry(step, attempt, "empty", "the model produced no text")
                continue
            content = protocol.assistant_content(completion.text)
            parsed = protocol.parse_turn(content, self.agent.registry.names)
            self.totals.well_formed_turns += parsed.well_formed
            call = None
            if parsed.tool_call is not None:
                call = self.agent.registry.prepare(parsed.tool_call.name, parsed.tool_call.arguments)
            last = _Attempt(parsed, completion, attempt + 1, call)
            if self._is_repetitive(completion.text) and not final_try:
                yield from self._retry(step, attempt, "repetition", "the output repeats its last characters")
                continue
            if not parsed.usable:
                self.totals.format_errors += 1
                if not final_try:
                    detail = "; ".join(e.message for e in parsed.errors if e.fatal)
                    yield from self._retry(step, attempt, "format", detail)
                    continue
            elif call is not None and call.key in self.call_keys and not final_try:
                yield from self._retry(step, attempt, "duplicate_call", call.key)
                continue
            return last
        return last

    def _url_choices(self) -> list[str]:
        """URLs the strict grammar lets a ``url`` argument name: the results of the searches the model sees now, in
        order, less those a tool failed to read. Not any URL in the text: a query that is a URL comes back in its
        results' ``query``, and a link in a snippet may lead outside what the tools can read."""
        found = (str(hit.get("url")) for message in self.messages[2:]
                 if message["role"] == "user" and protocol.is_observation(message["content"])
                 for block in parse_search_observation(protocol.observation_text(message["content"])) or ()
                 for hit in block["web_page_info_list"] if hit.get("url"))
        return [url for url in dict.fromkeys(found) if url not in self.unreadable]

    def _check_cancel(self) -> None:
        if (self.cancel is not None and self.cancel.is_set()) or self._interrupted():
            raise _Cancelled

    def _interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()

    def _retry(self, step: int, attempt: int, reason: str, detail: str) -> Iterator[Event]:
        self.totals.retries += 1
        yield TurnRetried(step, attempt, reason, detail)

    def _is_repetitive(self, text: str) -> bool:
        """The reference detector: the last ``tail`` characters occur more than ``max_count`` times."""
        tail_len = self.config.repetition_tail_chars
        return len(text) >= tail_len and text.count(text[-tail_len:]) > self.config.repetition_max_count

    def _call_tool(self, step: int, call: PreparedCall) -> Generator[Event, None, tuple[ToolResult, float]]:
        """Run ``call``; its result and the seconds it took (rounded to milliseconds, as ``ToolReturned`` says)."""
        self.call_keys.add(call.key)
        self.calls.append(call.name)
        self.totals.tool_calls += 1
        yield ToolCalled(step, call.name, call.arguments, list(call.dropped), list(call.changes))
        started = time.monotonic()
        deadline = Deadline(self.start + self.config.time_limit_s, self.cancel)
        try:
            result = self.agent.registry.run(call, deadline=deadline)
        except ToolArgumentError as exc:
            result = ToolResult(f"Error: {exc}")
        except ToolInterrupted as exc:  # abandoned at the session's deadline or cancel: the loop ends next
            result = self.agent.registry.interrupted_result(call, exc)
        except Exception as exc:  # a tool's bug must not end the session; the model sees a short error
            yield ErrorRaised(step, f"tool:{call.name}", "".join(traceback.format_exception_only(exc)).strip())
            result = ToolResult(f"Error: the {call.name} tool failed ({type(exc).__name__}). Try another call.")
        elapsed = time.monotonic() - started
        self.totals.tool_s += elapsed
        for url in result.visited_urls:
            self.visited.setdefault(url, None)
        self.unreadable.update(failure.target for failure in result.failures)
        for a in result.attempts:
            yield ToolAttempted(step, call.name, a.backend, a.target, a.outcome, a.detail, a.waited_s)
        yield ToolReturned(step, call.name, len(result.text), list(result.visited_urls),
                           [f.to_dict() for f in result.failures], round(elapsed, 3))
        return result, round(elapsed, 3)

    def _record_turn(self, step: int, attempt: _Attempt, observation: str | None,
                     result: ToolResult, tool_s: float | None = None) -> Iterator[Event]:
        parsed, completion, call = attempt.parsed, attempt.completion, attempt.call
        assert parsed is not None and completion is not None
        if parsed.kind == "answer" and completion.logprobs:  # the confidence that test-time aggregation weighs
            self.totals.final_turn_mean_logprob = sum(completion.logprobs) / len(completion.logprobs)
        turn = Turn(
            index=step, kind=parsed.kind, content=parsed.content,
            generated=parsed.generated if parsed.generated != parsed.content else None,
            token_ids=tuple(completion.token_ids),
            logprobs=tuple(completion.logprobs) if completion.logprobs is not None else None,
            finish_reason=completion.finish_reason, attempts=self._new_samples(),
            format_errors=tuple(e.to_dict() for e in parsed.errors),
            tool_call={"name": call.name, "arguments": call.arguments} if call else None,
            dropped_arguments=tuple(call.dropped) if call else (),
            argument_changes=tuple(call.changes) if call else (),
            observation=observation, visited_urls=tuple(result.visited_urls),
            tool_failures=tuple(f.to_dict() for f in result.failures),
            tool_attempts=tuple(a.to_dict() for a in result.attempts), tool_s=tool_s,
            replaces_last_observation=self.pending_notice, stats=completion.stats.to_dict(),
        )
        if self.journal:
            self.journal.turn(turn)
        yield TurnCompleted(turn)

    # ------------------------------------------------------------------------------------------- helpers
    def _prompt_ids(self, messages: Sequence[Mapping[str, str]] | None = None) -> list[int]:
        """Token ids of the rendered conversation, built so that the KV cache is reused to the last token.

        Each message is tokenized once and cached. When the history renders a model turn exactly as it was
        generated, that message keeps the sampled token ids rather than a re-tokenization of its text: the text
        is the same, but a sampler may pick token boundaries the tokenizer would not, and every token after the
        first difference would be evaluated again.
        """
        messages = self.messages if messages is None else messages
        ids: list[int] = []
        for index, part in enumerate(protocol.render_parts(messages)):
            key = (index, part)
            if key not in self._segments:
                self._segments[key] = self._segment_ids(index, part, messages)
            ids.extend(self._segments[key])
        return ids

    def _segment_ids(self, index: int, part: str, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of message ``index`` of ``messages`` rendered as ``part``.

        A sampled turn in canonical form keeps its sampled ids; a sampled turn the loop rewrote (a turn cut at
        ``max_tokens`` and closed, a non-canonical one re-rendered) keeps the sampled ids of the longest prefix
        that the rewrite left unchanged, so the KV cache holds up to the first changed token; any other message
        goes through ``protocol.tokenize_message``, so control-token text in a content (a page in an observation,
        a model turn quoting it) cannot close the message.
        """
        tokenize = self.engine.tokenize
        sampled = self._sampled.get(index)
        head, tail = protocol.GENERATION_PROMPT, f"{protocol.IM_END}\n"
        if sampled is not None:
            if part == head + sampled.text + tail and self.engine.detokenize(sampled.token_ids) == sampled.text:
                return tokenize(head) + sampled.token_ids + tokenize(tail)
            if part.startswith(head) and part.endswith(tail) and (kept := self._kept_prefix(sampled, part[len(
                    head):-len(tail)])):
                text = self.engine.detokenize(sampled.token_ids[:kept])
                rest = part[len(head) + len(text):-len(tail)]
                return tokenize(head) + sampled.token_ids[:kept] + protocol.tokenize_message(tokenize, "", rest, tail)
        message = messages[index] if index < len(messages) else None
        if message is not None and message["role"] != "system":
            head = f"{protocol.IM_START}{message['role']}\n"
            if part.startswith(head) and part.endswith(tail):
                return protocol.tokenize_message(tokenize, head, part[len(head) : -len(tail)], tail)
        return tokenize(part)

    def _kept_prefix(self, sampled: _Sampled, content: str) -> int:
        """How many of ``sampled``'s ids detokenize to a prefix of ``content`` (the turn as rewritten), ending on a
        whole character: a binary search, as each probe is a detokenize call (a request, on a model server). 0 when
        none do.

        A prefix that ends inside a multi-byte character decodes with a trailing U+FFFD, which ``content`` need not
        hold there; the search compares the whole characters only (so its predicate is monotone), then steps back
        off a partial character, whose bytes followed by fresh tokens would decode to other text.
        """
        ids = sampled.token_ids

        def decoded(n: int) -> str:
            return self.engine.detokenize(ids[:n])

        low, high = 0, len(ids)
        while low < high:
            middle = (low + high + 1) // 2
            if content.startswith(decoded(middle).rstrip(_REPLACEMENT_CHAR)):
                low = middle
            else:
                high = middle - 1
        while low and (text := decoded(low)).endswith(_REPLACEMENT_CHAR) and not content.startswith(text):
            low -= 1
        return low

    def _end(self, termination: str, answer: str | None, *, record_end: bool = True) -> Generator[Event, None, Result]:
        result = self._finish(termination, answer, record_end=record_end)
        yield SessionFinished(result)
        return result

    def _finish(self, termination: str, answer: str | None, *, record_end: bool = True, **extra: Any) -> Result:
        """Write the end record (``extra`` fields too: ``error``) and return the session's ``Result``. Without
        ``record_end`` (a battery stop) the journal keeps the session open, so that it resumes."""
        self.ended = True
        elapsed = round(time.monotonic() - self.start, 3)
        sources = list(self.visited)
        cited = unvisited_citations(answer or "", sources)
        totals = self.totals.rounded()
        if self.journal and record_end:
            self.journal.end(termination=termination, answer=answer, sources=sources, unvisited_citations=cited,
                             messages=self.messages, elapsed_s=elapsed, totals=totals.to_dict(), turns=self.turns,
                             **extra)
        return Result(answer, termination, sources, cited, self.turns, list(self.messages), elapsed, totals,
                      self.journal_path, self.session_id, journal_error=self.journal.error if self.journal else None)


_REPLACEMENT_CHAR = "\ufffd"  # what a detokenizer gives for the bytes of a cut character
_URL_RE = re.compile(r"\b(?:https?|corpus)://[^\s<>()\[\]\"']+")


def unvisited_citations(answer: str, visited: Iterable[str]) -> list[str]:
    """URLs written in ``answer`` that were never read by a tool (trailing punctuation ignored)."""
    seen = {url.rstrip("/") for url in visited}
    cited = [url.rstrip(".,;:!?/") for url in _URL_RE.findall(answer)]
    return [url for url in dict.fromkeys(cited) if url.rstrip("/") not in seen]
