"""Context policies: what a research session does when its prompt outgrows the budget.

The agent loop (``venus_edge.agent``) counts the prompt after every tool result. When it passes the budget
(``n_ctx`` minus the answer reserve, and ``AgentConfig.max_prompt_tokens``), it asks the session's policy for a
``Compaction``; ``None`` means "force the final answer", which is what DR-Venus was trained for (PROTOCOL.md,
"Decoding and limits"). Policies:

- ``force-answer`` (``ForceAnswer``): never compacts; the last observation is replaced by the context-limit notice
  and one more turn must answer.
- ``keep-last-k`` (``KeepLastK``): every tool result but the last K is replaced by a short stub that names the
  call (its query, or its URL and goal); the stubbed calls may be made again. The model goes on researching.
- ``summarize`` (``Summarize``): the model writes notes of the evidence so far (one turn, answer-shaped, asked for
  with ``notes_request``), and the conversation restarts from the question plus those notes; visited URLs carry
  over as sources.

Prefill cost: llama.cpp keeps the KV cache of the longest common token prefix, so an edit at token ``p`` forces
``tokens_after - p`` tokens to be evaluated again. Policies therefore act only when the budget is passed (never a
little every turn) and edit everything they will edit at once; ``Compaction.tokens_reevaluated`` reports the cost
and the agent emits it in a ``ContextCompacted`` event and the journal.

A policy of your own: subclass ``ContextPolicy``, implement ``compact``, and pass it as ``Agent(...,
context_policy=...)`` or register its name in ``POLICIES``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import venus_edge.protocol as protocol
from venus_edge.tools.base import cut_note
from venus_edge.tools.search import format_search_observation, parse_search_observation

__all__ = [
    "POLICIES",
    "Compaction",
    "CompactionContext",
    "ContextPolicy",
    "ForceAnswer",
    "KeepLastK",
    "Summarize",
    "fit_result",
    "make_policy",
]


@dataclass(frozen=True)
class CompactionContext:
    """What a policy sees when the prompt has passed the budget.

    Attributes:
        messages: the conversation (system, question, assistant turns and ``<tool_response>`` observations).
        tool_calls: assistant message index -> ``{"name", "arguments"}`` of the call it made (coerced arguments).
        question: the user question of the session.
        visited: URLs read so far, in first-visit order.
        prompt_tokens: tokens of the rendered conversation now.
        budget: the prompt budget in tokens that was passed.
        count_tokens: tokens of a conversation rendered with the generation prompt (the engine's tokenizer).
        notes: what the model wrote when the policy asked for notes (``ContextPolicy.notes_request``): the
            ``<answer>`` text of that turn, or None when it wrote none or none was asked for.
    """

    messages: Sequence[Mapping[str, str]]
    tool_calls: Mapping[int, Mapping[str, Any]]
    question: str
    visited: Sequence[str]
    prompt_tokens: int
    budget: int
    count_tokens: Callable[[Sequence[Mapping[str, str]]], int]
    notes: str | None = None


@dataclass(frozen=True)
class Compaction:
    """A policy's edit of the conversation.

    Attributes:
        messages: the conversation that replaces the session's.
        detail: one line for people (what was stubbed or summarized).
        forget_calls: assistant message indices whose tool calls may be made again (their result is gone); the
            agent drops them from its duplicate-call guard.
        restart: the history was replaced (``summarize``): every earlier call may be made again.
        summary: the notes a ``summarize`` restart carries, else None.
    """

    messages: list[dict[str, str]]
    detail: str
    forget_calls: tuple[int, ...] = ()
    restart: bool = False
    summary: str | None = None


class ContextPolicy(ABC):
    """Decides what happens when the prompt passes the budget. ``name`` is what ``--context-policy`` takes."""

    name: ClassVar[str] = ""

    def result_allowance(self, research_room: int) -> int | None:
        """The most tokens one tool result may take, given ``research_room`` (the budget less the system prompt and
        the question); a larger one is cut to it when it arrives (``fit_result``), since this policy could never
        keep it whole. None (the default): results are not cut."""
        return None

    def notes_request(self, context: CompactionContext) -> str | None:
        """A notice asking the model for notes before ``compact`` (``Summarize``), or None (the default). The agent
        runs that turn (its events stream like any turn's) and passes its answer as ``context.notes``."""
        return None

    @abstractmethod
    def compact(self, context: CompactionContext) -> Compaction | None:
        """The compacted conversation, or None to force the final answer now."""

    def describe(self) -> dict[str, Any]:
        """The policy and its settings, for the journal's config."""
        return {"name": self.name}

    def resume(self, compactions: Sequence[Mapping[str, Any]]) -> None:  # noqa: B027 - an optional no-op hook
        """Restore per-session state from a resumed session's journal ``compaction`` records (default: none)."""


class ForceAnswer(ContextPolicy):
    """DR-Venus's behaviour: at the budget, ask for the final answer (the model was trained on this notice)."""

    name = "force-answer"

    def compact(self, context: CompactionContext) -> Compaction | None:
        return None


@dataclass
class KeepLastK(ContextPolicy):
    """Stub every tool result but the last ``keep_last``; force the answer when that frees too little.

    A stubbed observation becomes ``protocol.observation(protocol.omitted_result(...))``, which names the call so
    that the model knows what it had and can call again. The compaction is refused (and the answer forced) when the
    stubbed conversation would still be over ``budget * max_fill``, since it would have to compact again next turn.

    Raises:
        ValueError: ``keep_last`` is negative or ``max_fill`` not in (0, 1].
    """

    keep_last: int = 3
    max_fill: float = 0.9
    name: ClassVar[str] = "keep-last-k"

    def __post_init__(self) -> None:
        if self.keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {self.keep_last}")
        if not 0 < self.max_fill <= 1:
            raise ValueError(f"max_fill must be in (0, 1], got {self.max_fill}")

    def compact(self, context: CompactionContext) -> Compaction | None:
        messages = [dict(m) for m in context.messages]
        results = [i for i, m in enumerate(messages) if i >= 2 and m["role"] == "user"
                   and protocol.is_observation(m["content"]) and i - 1 in context.tool_calls]
        kept = results[len(results) - self.keep_last:] if self.keep_last else []
        stubbed = []
        for index in results:
            if index in kept or protocol.is_omitted_result(messages[index]["content"]):
                continue
            messages[index]["content"] = protocol.observation(protocol.omitted_result(context.tool_calls[index - 1]))
            stubbed.append(index)
        if not stubbed:
            return None
        if context.count_tokens(messages) > context.budget * self.max_fill:
            return None
        return Compaction(messages, f"stubbed {len(stubbed)} tool result(s), kept the last {len(kept)}",
                          forget_calls=tuple(i - 1 for i in stubbed))

    def result_allowance(self, research_room: int) -> int | None:
        """A share of the room that lets the last ``keep_last`` results and the turns between them fit: one in
        ``keep_last + 1`` of what a compaction may fill. None with ``keep_last`` 0: no result is kept at all."""
        if self.keep_last == 0:
            return None
        return int(research_room * self.max_fill) // (self.keep_last + 1)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "keep_last": self.keep_last, "max_fill": self.max_fill}


@dataclass
class Summarize(ContextPolicy):
    """Have the model write notes of its evidence, then restart from the question plus the notes.

    At most ``max_summaries`` restarts per session; after that, or when the model writes no notes, or when the
    restarted conversation would not fit in ``budget * max_fill``, the answer is forced.

    Raises:
        ValueError: ``max_summaries`` < 1 or ``max_fill`` not in (0, 1].
    """

    max_summaries: int = 3
    max_fill: float = 0.75
    name: ClassVar[str] = "summarize"
    done: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.max_summaries < 1:
            raise ValueError(f"max_summaries must be >= 1, got {self.max_summaries}")
        if not 0 < self.max_fill <= 1:
            raise ValueError(f"max_fill must be in (0, 1], got {self.max_fill}")

    def notes_request(self, context: CompactionContext) -> str | None:
        return protocol.SUMMARY_NOTICE if self.done < self.max_summaries else None

    def result_allowance(self, research_room: int) -> int | None:
        """Half of what a restart may fill: the other half holds the notes and the turns that follow them."""
        return int(research_room * self.max_fill) // 2

    def compact(self, context: CompactionContext) -> Compaction | None:
        summary = context.notes
        if self.done >= self.max_summaries or not summary or not summary.strip():
            return None
        question = protocol.restart_question(context.question, summary.strip(), context.visited)
        messages = [dict(context.messages[0]), {"role": "user", "content": question}]
        if context.count_tokens(messages) > context.budget * self.max_fill:
            return None
        self.done += 1
        return Compaction(messages, f"summary {self.done} of {self.max_summaries}: restarted from the question and "
                          f"{len(summary.strip())} characters of notes", restart=True, summary=summary.strip())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_summaries": self.max_summaries, "max_fill": self.max_fill}

    def resume(self, compactions: Sequence[Mapping[str, Any]]) -> None:
        self.done = sum(1 for c in compactions if c.get("policy") == self.name)


def fit_result(text: str, fits: Callable[[str], bool]) -> str:
    """Tool result ``text`` (what goes inside ``<tool_response>``) cut until ``fits`` accepts it, ending with a
    ``tools.base.cut_note`` that says what was cut; unchanged when it fits.

    A search result (``tools.search.parse_search_observation``) loses its lowest-ranked hits first, one at a time
    from the query that has the most left, and stays the JSON of its style; any other text, or a search result
    that does not fit even without hits, keeps its longest beginning that fits, cut at a line break (else a
    space) where one is in its last quarter. An empty text with the note is the least it can become."""
    if fits(text):
        return text
    blocks = parse_search_observation(text)
    if blocks:
        total = sum(len(block["web_page_info_list"]) for block in blocks)
        while any(block["web_page_info_list"] for block in blocks):
            fullest = max(blocks, key=lambda block: len(block["web_page_info_list"]))
            fullest["web_page_info_list"].pop()
            shown = sum(len(block["web_page_info_list"]) for block in blocks)
            cut = (format_search_observation(blocks) + "\n" + cut_note(
                f"{shown} of {total} results shown; search again, more narrowly, for others"))
            if fits(cut):
                return cut
    low, high = 0, len(text)  # the longest beginning that fits, by bisection on characters
    while low < high:
        middle = (low + high + 1) // 2
        if fits(_text_cut(text, middle)):
            low = middle
        else:
            high = middle - 1
    return _text_cut(text, low)


def _text_cut(text: str, length: int) -> str:
    """The first ``length`` characters of ``text``, back to a line break or a space in their last quarter, with
    the note."""
    kept = text[:length]
    for separator in ("\n", " "):
        at = kept.rfind(separator)
        if at >= length * 3 // 4:
            kept = kept[:at]
            break
    return f"{kept.rstrip()}\n" + cut_note(f"the first {len(kept):,} of {len(text):,} characters shown")


#: Policy names (``--context-policy``) -> classes.
POLICIES: dict[str, type[ContextPolicy]] = {p.name: p for p in (ForceAnswer, KeepLastK, Summarize)}


def make_policy(name: str, **settings: Any) -> ContextPolicy:
    """A new policy by name with its settings (``keep_last`` for ``keep-last-k``, ...); a policy keeps per-session
    state (``Summarize`` counts its restarts), so each session gets its own.

    Raises:
        ValueError: unknown name, or a setting the policy does not take.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown context policy {name!r}; choose one of {', '.join(POLICIES)}")
    try:
        return POLICIES[name](**settings)
    except TypeError as exc:
        raise ValueError(f"context policy {name!r}: {exc}") from exc

