"""The records of a finished session: ``Result`` (what ``Agent.run`` returns and ``SessionFinished`` carries), its
``SessionTotals``, and the ways a session ends (``TERMINATIONS``: each reason with the words people read for it,
shared by the CLI, the research page, the chat endpoint and MCP). Below the agent and its events, so that both can
name them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

__all__ = ["NO_SOURCES", "TERMINATIONS", "Result", "SessionTotals", "Termination", "termination_of"]

# Termination reasons, as the reference loop records them (``Result.termination``, the journal's end record).
ANSWERED = "answered"
ANSWERED_TOKEN_LIMIT = "answered_token_limit"
ANSWERED_MAX_STEPS = "answered_max_steps"
TOKEN_LIMIT_NO_ANSWER = "token_limit_no_answer"
MAX_STEPS = "max_steps"
TIMEOUT = "timeout"
LLM_ERROR = "llm_error"
#: Ended by the caller (``cancel`` set): the turn in flight stops at its next token and is not recorded.
CANCELLED = "cancelled"
#: Ended by an unexpected exception (an engine's, a bug): the end record holds it as ``error`` and the exception
#: goes on to the caller (the server answers ``session_finished`` with this termination).
ERROR = "error"
#: Stopped by pacing (``venus_edge.pacing``) before a turn, a discharging battery being below its floor. No end record
#: is written, so the journal resumes the session (it reads back as ``incomplete``).
BATTERY_LOW = "battery_low"
#: Stopped by its caller as a killed process would be (``interrupt`` set: a server shutting down): the turn in flight
#: is not recorded and no end record is written, so the journal resumes the session (it reads back as ``incomplete``).
INTERRUPTED = "interrupted"
#: Not a reason a session gives: a journaled session without an end record (a killed run; resumable).
INCOMPLETE = "incomplete"

#: What the CLI and the page say of the sources of a session whose tools read no page: ``Sources: none (no page was
#: read)``.
NO_SOURCES = "none (no page was read)"

Outcome = Literal["answer", "forced_answer", "no_answer"]


@dataclass(frozen=True)
class Termination:
    """One way a session ends, as people read it.

    Attributes:
        name: the reason as recorded (``Result.termination``).
        label: the words shown for it: ``Answered``, ``Answer forced at the turn limit``, ``No answer: time limit``.
        outcome: ``answer`` (the model chose to answer), ``forced_answer`` (it answered because a limit told it to:
            an answer, but not one it was ready to give) or ``no_answer``. Only ``answer`` reads as a success.
    """

    name: str
    label: str
    outcome: Outcome

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "label": self.label, "outcome": self.outcome}


#: Every termination reason with its words; ``termination_of`` reads it (and names an unknown one plainly).
TERMINATIONS: dict[str, Termination] = {t.name: t for t in (
    Termination(ANSWERED, "Answered", "answer"),
    Termination(ANSWERED_MAX_STEPS, "Answer forced at the turn limit", "forced_answer"),
    Termination(ANSWERED_TOKEN_LIMIT, "Answer forced at the context limit", "forced_answer"),
    Termination(MAX_STEPS, "No answer: turn limit", "no_answer"),
    Termination(TOKEN_LIMIT_NO_ANSWER, "No answer: context full", "no_answer"),
    Termination(TIMEOUT, "No answer: time limit", "no_answer"),
    Termination(LLM_ERROR, "No answer: model error", "no_answer"),
    Termination(CANCELLED, "Cancelled", "no_answer"),
    Termination(ERROR, "Failed", "no_answer"),
    Termination(BATTERY_LOW, "Stopped: battery low (resumable)", "no_answer"),
    Termination(INTERRUPTED, "Interrupted (resumable)", "no_answer"),
    Termination(INCOMPLETE, "Incomplete (never finished)", "no_answer"),
)}


def termination_of(name: str) -> Termination:
    """The ``Termination`` of the reason ``name``; an unknown reason (a newer journal) reads as its own words, as no
    answer. A reader that holds a session without answer text shows it as no answer whatever this says."""
    return TERMINATIONS.get(name) or Termination(name, name.replace("_", " ").capitalize() or "Ended", "no_answer")


#: ``GenerationStats``' figures of speculative decoding, summed by ``SessionTotals``.
_DRAFTING_FIGURES = ("drafted_tokens", "accepted_tokens", "verify_steps")


@dataclass
class SessionTotals:
    """The summed figures of one session: ``Result.totals``; its ``to_dict()`` is the ``totals`` of the journal's end
    record and of the ``session_finished`` event.

    Attributes:
        prompt_tokens_evaluated: prompt tokens the engine ran through the model (prefill), over all samples.
        prompt_tokens_reused: prompt tokens whose KV entries the engine kept from its previous call.
        tokens_decoded: tokens sampled (each sample's end-of-generation token included).
        prefill_s: seconds of prompt evaluation.
        decode_s: seconds of decoding.
        tool_s: seconds in tool calls.
        retries: samples thrown away (empty, repetitive, malformed or a duplicate call).
        format_errors: samples that did not parse.
        tool_calls: tool calls made.
        generated_turns: samples drawn (kept and thrown away).
        well_formed_turns: samples that passed the strict format check.
        compactions: edits a context policy made.
        compaction_tokens_reevaluated: prompt tokens those edits made the next prefills evaluate again.
        resumed_at_turn: the turn a resumed session went on from (``Agent.resume``), else None.
        final_turn_mean_logprob: the mean log-probability of the answer turn's tokens, when the engine returned
            log-probabilities (``SamplingParams.logprobs``), else None.
        drafted_tokens: tokens speculative decoding drafted and the model verified (``GenerationStats``); 0 without
            drafting.
        accepted_tokens: drafted tokens the model kept.
        verify_steps: decode steps of the samples that drafted (each one verification of a draft, or a plain step).
    """

    prompt_tokens_evaluated: int = 0
    prompt_tokens_reused: int = 0
    tokens_decoded: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tool_s: float = 0.0
    retries: int = 0
    format_errors: int = 0
    tool_calls: int = 0
    generated_turns: int = 0
    well_formed_turns: int = 0
    compactions: int = 0
    compaction_tokens_reevaluated: int = 0
    resumed_at_turn: int | None = None
    final_turn_mean_logprob: float | None = None
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0

    def add(self, stats: Mapping[str, Any]) -> None:
        """Count one sample's ``GenerationStats.to_dict()`` (a journal turn record's ``stats``)."""
        self.prompt_tokens_evaluated += stats.get("prompt_tokens_evaluated", 0)
        self.prompt_tokens_reused += stats.get("prompt_tokens_reused", 0)
        self.tokens_decoded += stats.get("tokens_decoded", 0)
        self.prefill_s += stats.get("prefill_s", 0)
        self.decode_s += stats.get("decode_s", 0)
        for name in _DRAFTING_FIGURES:  # absent from the stats of a journal written before drafting
            setattr(self, name, getattr(self, name) + stats.get(name, 0))

    def rounded(self) -> SessionTotals:
        """A copy with every float rounded to 3 decimals (milliseconds), as results and the journal keep them."""
        rounded: dict[str, Any] = {name: round(value, 3) for name, value in vars(self).items()
                                   if isinstance(value, float)}
        return replace(self, **rounded)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every figure; ``resumed_at_turn`` and ``final_turn_mean_logprob`` only when they are set, the
        drafting figures only when something was drafted (a session without drafting keeps the same record)."""
        drafted = self.drafted_tokens > 0
        return {name: value for name, value in asdict(self).items()
                if (value is not None or name not in ("resumed_at_turn", "final_turn_mean_logprob"))
                and (drafted or name not in _DRAFTING_FIGURES)}


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
            (``SamplingParams.logprobs``): ``SessionTotals``.
        trajectory_path: the JSONL journal, when one was written.
        session_id: the journal's session id.
        journal_error: None when every journal record was saved (or no journal was asked for); else one line saying
            which record was the first not saved, where, and why (a full or read-only disk:
            ``TrajectoryWriter.error``). The session itself ran to its end.
    """

    answer: str | None
    termination: str
    sources: list[str]
    unvisited_citations: list[str]
    turns: int
    messages: list[dict[str, str]]
    elapsed_s: float
    totals: SessionTotals
    trajectory_path: Path | None
    session_id: str
    journal_error: str | None = None

    @classmethod
    def unrun(cls, termination: str, *, session_id: str, elapsed_s: float = 0.0) -> Result:
        """The result of a session that ended before its loop recorded anything (cancelled while it waited, or it
        failed to start): no answer, no turns, zero totals."""
        return cls(None, termination, [], [], 0, [], elapsed_s, SessionTotals(), None, session_id)
