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
2. The prompt budget is also capped by the engine's ``n_ctx`` minus ``answer_reserve_tokens``.

Usage:

    agent = Agent(engine, tools=[SearchTool(...), VisitTool(...)])
    result = agent.run("When was tomllib added to Python?")
    for event in agent.events("..."):   # the same loop, as a stream of typed events
        ...
"""

from __future__ import annotations

import re
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from datetime import date as Date
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generator, Iterable, Iterator

from venus_edge import protocol
from venus_edge.engine import Completion, Engine, SamplingParams
from venus_edge.errors import ContextOverflowError, EngineConnectionError
from venus_edge.grammar import GrammarLimits, turn_grammar
from venus_edge.events import (
    ErrorRaised,
    Event,
    LimitReached,
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
from venus_edge.tools.base import PreparedCall, Tool, ToolRegistry, ToolResult
from venus_edge.tools.errors import ToolArgumentError
from venus_edge.trajectory import TrajectoryWriter
from venus_edge.turn import Turn

__all__ = ["Agent", "AgentConfig", "Result"]

# Termination reasons, as the reference loop records them.
ANSWERED = "answered"
ANSWERED_TOKEN_LIMIT = "answered_token_limit"
ANSWERED_MAX_STEPS = "answered_max_steps"
TOKEN_LIMIT_NO_ANSWER = "token_limit_no_answer"
MAX_STEPS = "max_steps"
TIMEOUT = "timeout"
LLM_ERROR = "llm_error"


@dataclass(frozen=True)
class AgentConfig:
    """Limits and guards of one research session. Defaults are DR-Venus's (PROTOCOL.md, "Decoding and limits").

    Attributes:
        max_turns: model turns at most before the final answer is forced (reference: 200).
        max_prompt_tokens: prompt budget in tokens before the final answer is forced (reference: ~240K); the
            engine's ``n_ctx - answer_reserve_tokens`` caps it too.
        answer_reserve_tokens: room kept free in ``n_ctx`` for the forced answer turn.
        time_limit_s: wall-clock budget in seconds (reference: 9,000).
        max_retries: attempts per turn (reference: 5).
        repetition_tail_chars: length of the tail checked by the repetition detector (reference: 50).
        repetition_max_count: the tail may occur at most this many times (reference: 5).
        sampling: decoding settings; ``max_tokens`` is the per-turn budget (reference: 15,000).
        strict: constrain each turn with a grammar built from the tool schemas (``grammar.turn_grammar``).
        min_tool_calls: in strict mode, the grammar allows no answer before this many tool calls were made, so
            that even a small model researches before it answers (ignored without ``strict``).
        grammar_limits: length bounds used in strict mode.
        seed: base sampling seed; attempt ``k`` of the session samples with ``seed + k``.
        today: the date written into the system prompt (default: today).
    """

    max_turns: int = 200
    max_prompt_tokens: int = 240_000
    answer_reserve_tokens: int = 1_024
    time_limit_s: float = 9_000.0
    max_retries: int = 5
    repetition_tail_chars: int = 50
    repetition_max_count: int = 5
    sampling: SamplingParams = field(default_factory=SamplingParams)
    strict: bool = False
    min_tool_calls: int = 0
    grammar_limits: GrammarLimits = field(default_factory=GrammarLimits)
    seed: int = 0
    today: Date | None = None

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_retries < 1:
            raise ValueError(f"max_retries must be >= 1, got {self.max_retries}")
        if self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["today"] = self.today.isoformat() if self.today else None
        return data


@dataclass
class Result:
    """The outcome of ``Agent.run``.

    Attributes:
        answer: the final answer text, or None when the session ended without one.
        termination: one of the reference termination reasons (``answered``, ``answered_max_steps``, ...).
        sources: URLs whose content a tool actually read, in first-visit order.
        unvisited_citations: URLs cited in the answer that no tool read (a warning sign).
        turns: model turns in the history.
        messages: the conversation, exactly as the model saw it.
        elapsed_s: wall-clock seconds.
        totals: summed token and time figures (prompt tokens evaluated / reused, tokens decoded, seconds), tool
            calls made, and ``final_turn_mean_logprob`` when the engine returned log-probabilities
            (``SamplingParams.logprobs``).
        trajectory_path: the JSONL journal, when one was written.
        session_id: the journal's session id.
    """

    answer: str | None
    termination: str
    sources: list[str]
    unvisited_citations: list[str]
    turns: int
    messages: list[dict[str, str]]
    elapsed_s: float
    totals: dict[str, Any]
    trajectory_path: Path | None
    session_id: str


@dataclass
class _Attempt:
    parsed: protocol.ParsedTurn | None
    completion: Completion | None
    attempts: int
    call: PreparedCall | None = None


class Agent:
    """A DR-Venus research agent over an ``Engine`` and a set of tools.

    Args:
        engine: the model (``LlamaCppEngine`` or any ``Engine``).
        tools: the tools, in the order their schemas appear in the system prompt.
        config: limits and guards.
        trajectory_path: append the session's journal here (JSONL, see ``venus_edge.trajectory``).
    """

    def __init__(
        self,
        engine: Engine,
        tools: Iterable[Tool],
        *,
        config: AgentConfig | None = None,
        trajectory_path: str | Path | None = None,
    ) -> None:
        self.engine = engine
        self.registry = ToolRegistry(tools)
        self.config = config or AgentConfig()
        self.trajectory_path = Path(trajectory_path) if trajectory_path else None

    def grammar(self, tool_calls_made: int, *, forcing: bool = False) -> str | None:
        """The strict-mode grammar for the next turn (None in free mode): a forced final turn may only answer, and
        no answer is allowed before ``min_tool_calls`` calls."""
        if not self.config.strict:
            return None
        actions = "answer" if forcing else "either" if tool_calls_made >= self.config.min_tool_calls else "call"
        return turn_grammar(self.registry.schemas, self.config.grammar_limits, actions=actions)

    def run(self, question: str) -> Result:
        """Research ``question`` to a termination and return the result (events are consumed silently).

        Raises:
            ContextOverflowError: the question alone does not fit in the prompt budget.
        """
        stream = self.events(question)
        while True:
            try:
                next(stream)
            except StopIteration as stop:
                return stop.value

    def events(self, question: str) -> Generator[Event, None, Result]:
        """Run the session as a generator of typed events; its return value (``StopIteration.value``) is the
        ``Result``. The trajectory journal is written as the events happen."""
        return _Session(self, question).run()


class _Session:
    """The state of one run: messages, dedup keys, visited URLs, counters, journal."""

    def __init__(self, agent: Agent, question: str) -> None:
        self.agent = agent
        self.engine = agent.engine
        self.config = agent.config
        self.question = question
        self.session_id = uuid.uuid4().hex
        self.system_prompt = protocol.render_system_prompt(agent.registry.schemas, self.config.today or Date.today())
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": question},
        ]
        self.call_keys: set[str] = set()
        self.visited: dict[str, None] = {}
        self.turns = 0
        self.samples = 0
        self.start = time.monotonic()
        self.totals = {"prompt_tokens_evaluated": 0, "prompt_tokens_reused": 0, "tokens_decoded": 0,
                       "prefill_s": 0.0, "decode_s": 0.0, "tool_s": 0.0, "retries": 0, "format_errors": 0,
                       "tool_calls": 0, "generated_turns": 0, "well_formed_turns": 0}
        self.journal = TrajectoryWriter(agent.trajectory_path, self.session_id) if agent.trajectory_path else None
        self.pending_notice: str | None = None
        self.budget = min(self.config.max_prompt_tokens, self.engine.n_ctx - self.config.answer_reserve_tokens)
        self._segments: dict[tuple[int, str], list[int]] = {}
        self._sampled: dict[int, Completion] = {}  # message index -> the completion that wrote it

    # ------------------------------------------------------------------------------------------- main loop
    def run(self) -> Generator[Event, None, Result]:
        """The session; a model server that fails (``EngineConnectionError``, after its retries) ends it with
        ``llm_error`` and an ``ErrorRaised`` event, its journal whole."""
        try:
            return (yield from self._loop())
        except EngineConnectionError as exc:
            yield ErrorRaised(self.turns, "engine", f"{type(exc).__name__}: {exc}")
            return (yield from self._end(LLM_ERROR, None))

    def _loop(self) -> Generator[Event, None, Result]:
        prompt_tokens = len(self._prompt_ids())
        model = self.engine.model_info()
        if self.journal:
            self.journal.start(
                question=self.question, system_prompt=self.system_prompt, tools=self.agent.registry.schemas,
                model=model, config=self.config.to_dict(),
                started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
        yield SessionStarted(self.session_id, self.question, model, prompt_tokens)
        if prompt_tokens > self.budget:
            error = ContextOverflowError(
                prompt_tokens, self.engine.n_ctx,
                f"the question and system prompt leave no room for research (budget {self.budget:,} tokens); "
                "raise n_ctx or shorten the question",
            )
            yield ErrorRaised(0, "prompt", str(error))
            self._finish(TOKEN_LIMIT_NO_ANSWER, None)
            raise error

        for step in range(self.config.max_turns):
            if time.monotonic() - self.start > self.config.time_limit_s:
                yield LimitReached(step, "time", f"{self.config.time_limit_s:.0f} s elapsed")
                return (yield from self._end(TIMEOUT, None))
            attempt = yield from self._generate_turn(step)
            if attempt.parsed is None:
                return (yield from self._end(LLM_ERROR, None))
            parsed = attempt.parsed
            self._sampled[len(self.messages)] = attempt.completion
            self.messages.append({"role": "assistant", "content": parsed.content})
            self.turns += 1
            if parsed.kind == "answer":
                yield from self._record_turn(step, attempt, None, ToolResult(""))
                return (yield from self._end(ANSWERED, parsed.answer))
            if attempt.call is not None:
                result = yield from self._call_tool(step, attempt.call)
                text = protocol.observation(result.text)
            else:
                result, text = ToolResult(""), protocol.observation(protocol.FORMAT_ERROR_NOTICE)
            self.messages.append({"role": "user", "content": text})
            yield from self._record_turn(step, attempt, text, result)
            used = len(self._prompt_ids())
            if used > self.budget:
                yield LimitReached(step, "context", f"prompt is {used:,} tokens; budget is {self.budget:,}")
                return (yield from self._force_answer(step + 1, protocol.CONTEXT_LIMIT_NOTICE,
                                                      ANSWERED_TOKEN_LIMIT, TOKEN_LIMIT_NO_ANSWER))
        yield LimitReached(self.config.max_turns, "turns", f"{self.config.max_turns} turns used")
        return (yield from self._force_answer(self.config.max_turns, protocol.STEP_LIMIT_NOTICE,
                                              ANSWERED_MAX_STEPS, MAX_STEPS))

    def _force_answer(self, step: int, notice: str, ok: str, failed: str) -> Generator[Event, None, Result]:
        """Replace the last observation by ``notice`` and generate one more turn (reference ``_force_answer``)."""
        self.pending_notice = protocol.observation(notice)
        self.messages[-1] = {"role": "user", "content": self.pending_notice}
        try:
            attempt = yield from self._generate_turn(step)
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
    def _generate_turn(self, step: int) -> Generator[Event, None, _Attempt]:
        """Sample until a turn passes the guards, or the attempts run out (reference ``_generate``)."""
        prompt_ids = self._prompt_ids()
        last: _Attempt = _Attempt(None, None, 0)
        for attempt in range(self.config.max_retries):
            final_try = attempt == self.config.max_retries - 1
            yield TurnStarted(step, attempt, len(prompt_ids), self.engine.n_ctx)
            deltas: list[str] = []
            completion = self.engine.generate(
                prompt_ids, sampling=self.config.sampling, stop=protocol.STOP_STRINGS,
                stop_text_if=protocol.action_complete,
                grammar=self.agent.grammar(len(self.call_keys), forcing=self.pending_notice is not None),
                on_text=deltas.append, seed=self.config.seed + self.samples,
            )
            self.samples += 1
            self.totals["generated_turns"] += 1
            self._count(completion)
            for text in deltas:
                yield TextDelta(step, text)
            if not completion.text.strip():
                yield from self._retry(step, attempt, "empty", "the model produced no text")
                continue
            content = protocol.assistant_content(completion.text)
            parsed = protocol.parse_turn(content, self.agent.registry.names)
            self.totals["well_formed_turns"] += parsed.well_formed
            call = None
            if parsed.tool_call is not None:
                call = self.agent.registry.prepare(parsed.tool_call.name, parsed.tool_call.arguments)
            last = _Attempt(parsed, completion, attempt + 1, call)
            if self._is_repetitive(completion.text) and not final_try:
                yield from self._retry(step, attempt, "repetition", "the output repeats its last characters")
                continue
            if not parsed.usable:
                self.totals["format_errors"] += 1
                if not final_try:
                    detail = "; ".join(e.message for e in parsed.errors if e.fatal)
                    yield from self._retry(step, attempt, "format", detail)
                    continue
            elif call is not None and call.key in self.call_keys and not final_try:
                yield from self._retry(step, attempt, "duplicate_call", call.key)
                continue
            return last
        return last

    def _retry(self, step: int, attempt: int, reason: str, detail: str) -> Iterator[Event]:
        self.totals["retries"] += 1
        yield TurnRetried(step, attempt, reason, detail)

    def _is_repetitive(self, text: str) -> bool:
        """The reference detector: the last ``tail`` characters occur more than ``max_count`` times."""
        tail_len = self.config.repetition_tail_chars
        return len(text) >= tail_len and text.count(text[-tail_len:]) > self.config.repetition_max_count

    def _call_tool(self, step: int, call: PreparedCall) -> Generator[Event, None, ToolResult]:
        self.call_keys.add(call.key)
        self.totals["tool_calls"] += 1
        yield ToolCalled(step, call.name, call.arguments, list(call.dropped), list(call.changes))
        started = time.monotonic()
        try:
            result = self.agent.registry.run(call)
        except ToolArgumentError as exc:
            result = ToolResult(f"Error: {exc}")
        except Exception as exc:  # a tool's bug must not end the session; the model sees a short error
            yield ErrorRaised(step, f"tool:{call.name}", "".join(traceback.format_exception_only(exc)).strip())
            result = ToolResult(f"Error: the {call.name} tool failed ({type(exc).__name__}). Try another call.")
        elapsed = time.monotonic() - started
        self.totals["tool_s"] += elapsed
        for url in result.visited_urls:
            self.visited.setdefault(url, None)
        for a in result.attempts:
            yield ToolAttempted(step, call.name, a.backend, a.target, a.outcome, a.detail, a.waited_s)
        yield ToolReturned(step, call.name, len(result.text), list(result.visited_urls),
                           [f.to_dict() for f in result.failures], round(elapsed, 3))
        return result

    def _record_turn(self, step: int, attempt: _Attempt, observation: str | None, result: ToolResult) -> Iterator[Event]:
        parsed, completion, call = attempt.parsed, attempt.completion, attempt.call
        assert parsed is not None and completion is not None
        if parsed.kind == "answer" and completion.logprobs:  # the confidence that test-time aggregation weighs
            self.totals["final_turn_mean_logprob"] = sum(completion.logprobs) / len(completion.logprobs)
        turn = Turn(
            index=step, kind=parsed.kind, content=parsed.content,
            generated=parsed.generated if parsed.generated != parsed.content else None,
            token_ids=tuple(completion.token_ids),
            logprobs=tuple(completion.logprobs) if completion.logprobs is not None else None,
            finish_reason=completion.finish_reason, attempts=attempt.attempts,
            format_errors=tuple(e.to_dict() for e in parsed.errors),
            tool_call={"name": call.name, "arguments": call.arguments} if call else None,
            dropped_arguments=tuple(call.dropped) if call else (),
            argument_changes=tuple(call.changes) if call else (),
            observation=observation, visited_urls=tuple(result.visited_urls),
            tool_failures=tuple(f.to_dict() for f in result.failures),
            tool_attempts=tuple(a.to_dict() for a in result.attempts),
            replaces_last_observation=self.pending_notice, stats=completion.stats.to_dict(),
        )
        if self.journal:
            self.journal.turn(turn)
        yield TurnCompleted.from_turn(turn)

    # ------------------------------------------------------------------------------------------- helpers
    def _prompt_ids(self) -> list[int]:
        """Token ids of the rendered conversation, built so that the KV cache is reused to the last token.

        Each message is tokenized once and cached. When the history renders a model turn exactly as it was
        generated, that message keeps the sampled token ids rather than a re-tokenization of its text: the text
        is the same, but a sampler may pick token boundaries the tokenizer would not, and every token after the
        first difference would be evaluated again.
        """
        ids: list[int] = []
        for index, part in enumerate(protocol.render_parts(self.messages)):
            key = (index, part)
            if key not in self._segments:
                self._segments[key] = self._segment_ids(index, part)
            ids.extend(self._segments[key])
        return ids

    def _segment_ids(self, index: int, part: str) -> list[int]:
        """Token ids of message ``index`` rendered as ``part``.

        A sampled turn in canonical form keeps its sampled ids; any other message goes through
        ``protocol.tokenize_message``, so control-token text in a content (a page in an observation, a model
        turn quoting it) cannot close the message.
        """
        tokenize = self.engine.tokenize
        sampled = self._sampled.get(index)
        head, tail = protocol.GENERATION_PROMPT, f"{protocol.IM_END}\n"
        if sampled is not None:
            if part == head + sampled.text + tail and self.engine.detokenize(sampled.token_ids) == sampled.text:
                return tokenize(head) + sampled.token_ids + tokenize(tail)
        message = self.messages[index] if index < len(self.messages) else None
        if message is not None and message["role"] != "system":
            head = f"{protocol.IM_START}{message['role']}\n"
            if part.startswith(head) and part.endswith(tail):
                return protocol.tokenize_message(tokenize, head, part[len(head) : -len(tail)], tail)
        return tokenize(part)

    def _count(self, completion: Completion) -> None:
        stats = completion.stats
        self.totals["prompt_tokens_evaluated"] += stats.prompt_tokens_evaluated
        self.totals["prompt_tokens_reused"] += stats.prompt_tokens_reused
        self.totals["tokens_decoded"] += stats.tokens_decoded
        self.totals["prefill_s"] += stats.prefill_s
        self.totals["decode_s"] += stats.decode_s

    def _end(self, termination: str, answer: str | None) -> Generator[Event, None, Result]:
        result = self._finish(termination, answer)
        yield SessionFinished(termination, answer, result.sources, self.turns, result.elapsed_s, result.totals)
        return result

    def _finish(self, termination: str, answer: str | None) -> Result:
        elapsed = round(time.monotonic() - self.start, 3)
        sources = list(self.visited)
        cited = unvisited_citations(answer or "", sources)
        totals = {k: round(v, 3) if isinstance(v, float) else v for k, v in self.totals.items()}
        if self.journal:
            self.journal.end(termination=termination, answer=answer, sources=sources, unvisited_citations=cited,
                             messages=self.messages, elapsed_s=elapsed, totals=totals, turns=self.turns)
        return Result(answer, termination, sources, cited, self.turns, list(self.messages), elapsed, totals,
                      self.agent.trajectory_path, self.session_id)


_URL_RE = re.compile(r"\b(?:https?|corpus)://[^\s<>()\[\]\"']+")


def unvisited_citations(answer: str, visited: Iterable[str]) -> list[str]:
    """URLs written in ``answer`` that were never read by a tool (trailing punctuation ignored)."""
    seen = {url.rstrip("/") for url in visited}
    cited = [url.rstrip(".,;:!?/") for url in _URL_RE.findall(answer)]
    return [url for url in dict.fromkeys(cited) if url.rstrip("/") not in seen]
