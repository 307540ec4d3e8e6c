"""Research sessions that share one loaded model: a bounded queue, worker threads, live event fan-out.

``ResearchService`` knows nothing of HTTP; the FastAPI app (``venus_edge.server.app``) and the MCP server
(``venus_edge.server.mcp``) both drive it. A session runs ``Agent.events`` on a worker thread; every event is
kept (``SessionHandle.events``, as ``Event.to_dict()``) and pushed to the listeners of that session, so a
listener that joins late replays what it missed, then follows live.

Sessions decode one at a time on one engine, or ``len(engines)`` at a time when the engine serves sequences in
parallel (``BatchedLlamaCppEngine.sequence(i)``, an ``OpenAIEngine`` shared by several workers).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from venus_edge.agent import Agent, AgentConfig
from venus_edge.engines.base import Engine
from venus_edge.errors import ContextOverflowError, VenusEdgeError
from venus_edge.events import ErrorRaised, Event, SessionFinished, TurnCompleted
from venus_edge.pacing import PaceConfig
from venus_edge.result import CANCELLED, Result, termination_of
from venus_edge.text import valid_text
from venus_edge.tools.base import Tool
from venus_edge.trajectory import Journal, JournalReader, Trajectory

__all__ = ["QuestionTooLongError", "QueueFullError", "ResearchService", "SessionHandle", "SessionRequest",
           "answer_with_sources"]

logger = logging.getLogger(__name__)

#: Retry-After for a full queue before any session has finished (no timing known yet), in seconds.
DEFAULT_SESSION_S = 30.0


def answer_with_sources(answer: str | None, termination: str, sources: Sequence[str],
                        unvisited_citations: Sequence[str]) -> str:
    """A finished session as one text for a chat or MCP client: the answer (or why there is none), its sources
    numbered, and the URLs it cites that no tool read."""
    why = termination_of(termination).label.removeprefix("No answer: ")  # the words the CLI and the page use
    text = answer or f"(no answer: {why[:1].lower()}{why[1:]}; termination '{termination}')"
    if sources:
        text += "\n\nSources:\n" + "\n".join(f"{i}. {url}" for i, url in enumerate(sources, 1))
    if unvisited_citations:
        text += "\n\nCited but never read: " + ", ".join(unvisited_citations)
    return text


class QuestionTooLongError(VenusEdgeError, ValueError):
    """Raised by ``ResearchService.limit`` for a question over ``max_question_chars`` (HTTP 413)."""


class QueueFullError(VenusEdgeError):
    """Raised by ``ResearchService.submit`` when ``max_queue`` sessions already wait.

    Attributes:
        retry_after_s: a guess of when a place frees up: the mean session time so far times the sessions ahead,
            divided by the workers; whole seconds, at least 1.
    """

    def __init__(self, waiting: int, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"{waiting} research sessions are waiting already; retry in about {retry_after_s} s")


@dataclass(frozen=True)
class SessionRequest:
    """What a client asks for: the question and optional per-session limits.

    A limit left as None takes the server's value; a limit above the server's is lowered to it
    (``ResearchService.limit``), so a client can ask for less, never more.

    Attributes:
        question: the research question (non-empty; at most the service's ``max_question_chars``).
        max_turns: research turns at most, then one more turn asked for the final answer (``AgentConfig``).
        time_limit_s: wall-clock seconds at most.
        max_tokens: new tokens per turn at most.
    """

    question: str
    max_turns: int | None = None
    time_limit_s: float | None = None
    max_tokens: int | None = None


@dataclass
class SessionHandle:
    """One session of the service: its state, every event so far, and its listeners.

    Attributes:
        session_id: the id in events, journal and URLs (32 hex characters).
        question: the question.
        config: the agent config it runs with (the server's, with the request's limits).
        state: ``queued``, ``running`` or ``finished``.
        events: each event as ``Event.to_dict()``, in order; the last is ``session_finished``.
        result: the ``Result`` its ``SessionFinished`` event carried, once the session ended; else None.
        cancel: set to stop the session (``ResearchService.cancel``).
        interrupt: set (before ``cancel``) by ``ResearchService.close`` so that a running session stops as a
            killed process would: not ended in the journal, resumable (``Agent.events``' ``interrupt``).
        submitted_at: ``time.time()`` of the request.
    """

    session_id: str
    question: str
    config: AgentConfig
    state: str = "queued"
    events: list[dict[str, Any]] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)
    interrupt: threading.Event = field(default_factory=threading.Event)
    submitted_at: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _listeners: list[Callable[[dict[str, Any] | None], object]] = field(default_factory=list, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _result: Result | None = field(default=None, repr=False)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    @property
    def result(self) -> Result | None:
        """The session's ``Result`` (from its ``SessionFinished`` event) once the session ended, else None."""
        return self._result if self.finished else None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the session ends (or ``timeout`` seconds pass); True when it ended."""
        return self._done.wait(timeout)

    def follow(self, listener: Callable[[dict[str, Any] | None], object], *, start: int = 0) -> Callable[[], None]:
        """Call ``listener`` with each event from index ``start`` (past ones at once, on this thread), then with
        each new one as it happens (on the worker thread), then with None when the session has ended: the n-th
        call is always event ``start + n``, also when ``start`` is beyond the events so far. Returns a function
        that stops the calls. The listener must not block: hand the event to a queue."""
        with self._lock:
            for event in self.events[start:]:
                listener(event)
            if self.finished:
                listener(None)
                return lambda: None
            if start > len(self.events):
                listener = _from_index(listener, start, len(self.events))
            self._listeners.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
        return stop

    async def stream(self, *, start: int = 0) -> Any:
        """An async iterator over the events from index ``start``, live, ending after ``session_finished``."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        stop = self.follow(lambda event: loop.call_soon_threadsafe(inbox.put_nowait, event), start=start)
        try:
            while (event := await inbox.get()) is not None:
                yield event
        finally:
            stop()

    def _publish(self, event: Event | None) -> None:
        """Keep ``event`` as its ``to_dict()`` (its result too, when it ends the session) and pass that to the
        listeners; None ends the session."""
        data = None if event is None else event.to_dict()
        with self._lock:
            if isinstance(event, SessionFinished):
                self._result = event.result
            if data is not None:
                self.events.append(data)
            else:
                self._done.set()
            listeners = list(self._listeners)
            if data is None:
                self._listeners.clear()
        for listener in listeners:
            try:
                listener(data)
            except Exception:  # a listener whose loop closed: the session goes on
                logger.debug("a listener of session %s failed", self.session_id, exc_info=True)


def _from_index(listener: Callable[[dict[str, Any] | None], object], start: int,
                next_index: int) -> Callable[[dict[str, Any] | None], object]:
    """``listener`` called only from the event of index ``start`` on (the end, None, always passes)."""
    position = [next_index]

    def skipping(event: dict[str, Any] | None) -> None:
        if event is None or position[0] >= start:
            listener(event)
        position[0] += 1
    return skipping


class ResearchService:
    """Research sessions over one loaded model and one set of tools.

    Args:
        engines: one engine per worker; more than one only when they decode in parallel (the sequences of a
            ``BatchedLlamaCppEngine``, or one ``OpenAIEngine`` given several times). Sessions beyond the workers
            wait in the queue.
        tools: the tools every session uses.
        config: the server's agent config: its limits are the maxima a request may ask for.
        journal_path: the JSONL journal every session is written to (``venus_edge.trajectory``).
        max_queue: sessions that may wait for a worker; one more gets ``QueueFullError``.
        max_question_chars: longest question accepted, in characters.
        keep_finished: ended sessions kept in memory with their events (``get``, live replay); older ones are
            read from the journal only.
        pace: pace every session for a device that heats and drains (``venus_edge.pacing``; ``serve --pace``),
            None: off. Sessions on one engine share its threads: one lowers them, a later one raises them again.

    The service owns neither the engines nor the tools: close them after ``close()``.
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        tools: Sequence[Tool],
        config: AgentConfig,
        *,
        journal_path: str | Path,
        max_queue: int = 8,
        max_question_chars: int = 4_000,
        keep_finished: int = 64,
        pace: PaceConfig | None = None,
    ) -> None:
        if not engines:
            raise ValueError("the service needs at least one engine")
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        self.engines = list(engines)
        self.tools = list(tools)
        self.config = config
        self.journal_path = Path(journal_path)
        self.max_queue = max_queue
        self.max_question_chars = max_question_chars
        self.keep_finished = keep_finished
        self._finished: collections.deque[str] = collections.deque()
        self._history: tuple[tuple[int, int], Journal] | None = None  # (size, mtime_ns) -> what it holds
        self._history_reader = JournalReader(self.journal_path)  # reads only what was appended since
        self._history_lock = threading.Lock()  # one read at a time; the requests that wait share its result
        self.agents = [Agent(engine, self.tools, config=config, trajectory_path=self.journal_path, pace=pace)
                       for engine in self.engines]
        self.sessions: dict[str, SessionHandle] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        self.figures: dict[str, float] = collections.defaultdict(float)
        self._lock = threading.Lock()
        self._waiting: collections.deque[SessionHandle] = collections.deque()
        self._ready = threading.Condition(self._lock)
        self._running = 0
        self._closed = False
        self._session_seconds: list[float] = []
        self._workers = [threading.Thread(target=self._work, args=(agent,), name=f"research-{i}", daemon=True)
                         for i, agent in enumerate(self.agents)]
        for worker in self._workers:
            worker.start()

    @property
    def model_info(self) -> dict[str, Any]:
        """The engine's ``model_info`` and the observation style the server's sessions are rendered in."""
        return {**self.engines[0].model_info(), "observation_style": self.config.observation_style}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return self._running

    # ------------------------------------------------------------------------------------------ requests
    def limit(self, request: SessionRequest) -> AgentConfig:
        """The config of a request: the server's, with each limit the request sets lowered to it (never raised).

        Raises:
            ValueError: an empty question or a limit below 1; ``QuestionTooLongError`` for an over-long one.
        """
        question = request.question.strip()
        if not question:
            raise ValueError("the question is empty")
        if len(request.question) > self.max_question_chars:
            raise QuestionTooLongError(f"the question has {len(request.question):,} characters; this server takes "
                                       f"at most {self.max_question_chars:,}")
        for name in ("max_turns", "time_limit_s", "max_tokens"):
            value = getattr(request, name)
            if value is not None and not (isinstance(value, (int, float)) and value >= 1):
                raise ValueError(f"{name} must be a number >= 1, got {value!r}")
        config = self.config
        if request.max_turns is not None:
            config = replace(config, max_turns=min(int(request.max_turns), config.max_turns))
        if request.time_limit_s is not None:
            config = replace(config, time_limit_s=min(float(request.time_limit_s), config.time_limit_s))
        if request.max_tokens is not None:
            config = replace(config, sampling=replace(config.sampling, max_tokens=min(
                int(request.max_tokens), config.sampling.max_tokens)))
        return config

    def submit(self, request: SessionRequest) -> SessionHandle:
        """Queue a session and return its handle at once; a worker runs it when one is free.

        Raises:
            ValueError: a bad request (``limit``).
            QueueFullError: ``max_queue`` sessions wait already.
            RuntimeError: the service is closed.
        """
        config = self.limit(request)
        with self._lock:
            if self._closed:
                raise RuntimeError("the research service is closed")
            idle = max(0, len(self.agents) - self._running)  # workers about to take a waiting session
            if len(self._waiting) - idle >= self.max_queue:
                raise QueueFullError(len(self._waiting), self._retry_after())
            question = valid_text(request.question, source="a research request's question")  # before it is shown
            handle = SessionHandle(uuid.uuid4().hex, question, config)
            self.sessions[handle.session_id] = handle
            self._waiting.append(handle)
            self.counters["submitted"] += 1
            self._ready.notify()
        return handle

    def get(self, session_id: str) -> SessionHandle | None:
        """A queued or running session, or one of the last ``keep_finished`` ended ones; else None (the journal
        has the others: ``journal``)."""
        return self.sessions.get(session_id)

    def cancel(self, session_id: str) -> bool:
        """Stop a session: a queued one never runs, a running one stops at its next token (termination
        ``cancelled``, journaled). False when the service has no such session or it has ended already."""
        handle = self.sessions.get(session_id)
        if handle is None or handle.finished:
            return False
        handle.cancel.set()
        with self._lock:
            queued = handle in self._waiting
            if queued:
                self._waiting.remove(handle)
        if queued:
            self._finish_unrun(handle)
        return True

    def journal(self, session_id: str) -> Trajectory | None:
        """The session as the journal holds it (ended, running, or from an earlier run of the server), or None.
        Reads the file (``history``): call it off the event loop."""
        return next((t for t in self.history() if t.session_id == session_id), None)

    def history(self) -> list[Trajectory]:
        """Every session in the journal, oldest first (``read_history``). Reads the file: call it off the event
        loop."""
        return self.read_history().trajectories

    def read_history(self) -> Journal:
        """What the journal holds: its sessions, oldest first, and the lines skipped (a record of the wrong shape,
        a second writer's turn; ``venus_edge.trajectory.read_journal``), so that no record can fail a request.
        Read again only when the file changed; a journal that cannot be read at all (a folder, no permission) is
        logged and read as empty. Reads the file: call it off the event loop.

        Concurrent requests share one read (a lock, then the cache checked again), and a read parses only the lines
        appended since the last one (``JournalReader``): 12 requests at once after a change to a 50 MB journal
        each parsed all of it, and held 1.8 GB between them."""
        with self._history_lock:
            return self._read_history()

    def _read_history(self) -> Journal:
        try:
            stat = self.journal_path.stat()
        except FileNotFoundError:
            return Journal([], [])
        key = (stat.st_size, stat.st_mtime_ns)
        cached = self._history
        if cached is None or cached[0] != key:
            try:
                journal = self._history_reader.read()
            except (OSError, VenusEdgeError) as exc:
                logger.warning("the journal %s cannot be read: %s", self.journal_path, exc)
                journal = Journal([], [])
            reported = set(cached[1].skipped) if cached is not None else set()
            for line in journal.skipped:  # each once, not on every re-read of a growing journal
                if line not in reported:
                    logger.warning("journal %s:%d skipped: %s", self.journal_path, line.line, line.reason)
            cached = self._history = (key, journal)
        return cached[1]

    def snapshot(self) -> tuple[dict[str, int], dict[str, float]]:
        """Copies of the counters and figures (``/metrics``), taken under the lock the workers update them with."""
        with self._lock:
            return dict(self.counters), dict(self.figures)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the workers (waiting at most ``timeout_s``, once: a second call returns at once): a queued session is
        cancelled (it never started); a running one is interrupted: its client is told ``interrupted``, and the
        journal keeps it open, so that ``research --resume`` goes on with it (a server stopped with Ctrl-C loses no
        session). One its client already cancelled stays cancelled."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._ready.notify_all()
        for handle in waiting:
            handle.cancel.set()
            self._finish_unrun(handle)
        for handle in list(self.sessions.values()):
            if not handle.cancel.is_set():  # a DELETE before the shutdown is the client's word: cancelled
                handle.interrupt.set()
            handle.cancel.set()
        deadline = time.monotonic() + timeout_s
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------------------------------ workers
    def _retry_after(self) -> int:
        mean = sum(self._session_seconds) / len(self._session_seconds) if self._session_seconds else DEFAULT_SESSION_S
        return max(1, math.ceil(mean * (len(self._waiting) + 1) / len(self.agents)))

    def _work(self, agent: Agent) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                handle = self._waiting.popleft()
                handle.state = "running"
                self._running += 1
            try:
                self._run(agent, handle)
            except BaseException:  # _run reports its session's failures; this keeps the worker alive regardless
                logger.exception("research worker failed on session %s", handle.session_id)
            finally:
                with self._lock:
                    self._running -= 1

    def _run(self, agent: Agent, handle: SessionHandle) -> None:
        started = time.monotonic()
        termination = "error"
        try:
            session = Agent(agent.engine, self.tools, config=handle.config, trajectory_path=self.journal_path,
                            pace=agent.pace)
            stream = session.events(handle.question, cancel=handle.cancel, interrupt=handle.interrupt,
                                    session_id=handle.session_id)
            for event in stream:
                self._observe(event)
                if isinstance(event, SessionFinished):
                    termination = event.result.termination
                    if event.result.journal_error:  # the client still gets its answer; the operator is told
                        logger.warning("%s", event.result.journal_error)
                handle._publish(event)
        except Exception as exc:  # the session fails, the server goes on: the client gets the reason
            termination = "token_limit_no_answer" if isinstance(exc, ContextOverflowError) else "error"
            if not isinstance(exc, VenusEdgeError):
                logger.exception("research session %s failed", handle.session_id)
            if not isinstance(exc, ContextOverflowError):  # the agent reported that one already
                handle._publish(ErrorRaised(0, "server", f"{type(exc).__name__}: {exc}"))
            handle._publish(SessionFinished(Result.unrun(termination, session_id=handle.session_id,
                                                         elapsed_s=round(time.monotonic() - started, 3))))
        finally:
            handle.state = "finished"
            with self._lock:
                self._session_seconds = (self._session_seconds + [time.monotonic() - started])[-20:]
                self.counters[f"finished:{termination}"] += 1
                self._forget_old(handle)
            handle._publish(None)

    def _finish_unrun(self, handle: SessionHandle) -> None:
        handle.state = "finished"
        with self._lock:
            self.counters[f"finished:{CANCELLED}"] += 1
            self._forget_old(handle)
        handle._publish(SessionFinished(Result.unrun(CANCELLED, session_id=handle.session_id)))
        handle._publish(None)

    def _forget_old(self, handle: SessionHandle) -> None:
        """Keep the last ``keep_finished`` ended sessions in memory (their events are per token); the journal
        keeps them all. Called with the lock held."""
        self._finished.append(handle.session_id)
        while len(self._finished) > self.keep_finished:
            self.sessions.pop(self._finished.popleft(), None)

    def _observe(self, event: Event) -> None:
        """Keep the server's running figures (``/metrics``)."""
        if isinstance(event, TurnCompleted):
            stats = event.record.stats
            with self._lock:
                for name in ("prompt_tokens_evaluated", "prompt_tokens_reused", "tokens_decoded", "prefill_s",
                             "decode_s"):
                    self.figures[name] += float(stats.get(name, 0) or 0)
                self.counters["turns"] += 1
