"""Cleaning trajectories into the trained protocol, one function per rule, with a report of what each changed.

The rules are those of DR-Venus's SFT data preparation (PROTOCOL.md, "Training facts"; the authors'
``SFT/data_clean/prepare_trajectories.py``), written on the runtime's own parts so that training data and
inference share one definition of the format: the system prompt is ``venus_edge.protocol.render_system_prompt``,
turns are parsed by ``parse_turn`` and rebuilt by ``canonical_turn``, arguments are coerced by the tool layer's
``coerce_arguments`` and compared by its ``call_key``, search results take the ``search`` tool's JSON shape.

In the order ``clean_samples`` applies them (each rule is ``rule(sample, context) -> sample`` and raises
``Dropped`` to drop the whole sample):

1. ``fix_text``: lone surrogates (half an emoji from a ``\\ud83d`` escape) become U+FFFD; no tokenizer takes them.
2. ``set_system_prompt``: the system message is the runtime's, with the given date (added where missing).
3. ``convert_search_results``: a search result in the Markdown shape of the open data (``A Google search for 'q'
   found N results:`` / ``## Web Results`` / ``1. [title](url)``) becomes the JSON shape.
4. ``prune_unknown_tools``: a turn calling a tool other than the session's is removed with its tool response.
5. ``rebuild_turns``: every assistant turn is parsed and rebuilt canonically; a tool-call turn that cannot be
   acted on (or has no reasoning) is removed with its tool response; a last turn that is not an answer drops the
   sample.
6. ``normalize_arguments``: call arguments coerced to the tool's schema (``query|queries`` -> list, ``url|urls``
   -> list, ``goal`` -> str, arguments outside the schema dropped).
7. ``drop_duplicate_calls``: a call identical to an earlier one (after coercion) is removed with its response.
8. ``validate_structure``: system, question, then (well-formed tool-call turn, ``<tool_response>`` message)*, then a
   well-formed answer turn; anything else drops the sample.
9. ``keep_correct`` (only with a judge): the final answer judged against the ground truth; wrong or ungradable
   samples are dropped.

Departure from the reference: a dated search result keeps its date as the runtime shows it (``Date published:
...`` and a blank line, PROTOCOL.md), where the reference cleaning strips it; the model then sees in training what
it sees at inference. With ``observation_style="rl"`` (``tools.observation_styles``) the data is written as the RL
rollouts show it instead: the RL system prompt (three tools, no newline after the date) and search hits with a
``date`` key.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date as Date
from typing import Any

from venus_edge.eval.metrics import exact_match
from venus_edge.protocol import (
    DEFAULT_OBSERVATION_STYLE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    ObservationStyle,
    ToolCall,
    canonical_turn,
    check_format,
    is_observation,
    observation,
    observation_style,
    parse_turn,
    render_system_prompt,
)
from venus_edge.text import valid_text
from venus_edge.tools.base import (
    PreparedCall,
    as_list,
    call_key,
    coerce_arguments,
    validate_arguments,
)
from venus_edge.tools.corpus import Hit
from venus_edge.tools.errors import ToolArgumentError
from venus_edge.tools.search import SEARCH_SCHEMA, format_search_observation
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.data import Sample
from venus_edge.train.errors import Dropped

__all__ = [
    "RULES",
    "CleanContext",
    "CleanReport",
    "Judge",
    "clean_samples",
    "convert_search_results",
    "drop_duplicate_calls",
    "exact_match_judge",
    "fix_text",
    "keep_correct",
    "normalize_arguments",
    "parse_markdown_search",
    "prune_unknown_tools",
    "rebuild_turns",
    "set_system_prompt",
    "validate_structure",
]

#: ``judge(question, final answer, accepted answers) -> correct``; an object with a ``correct`` attribute (the
#: eval package's ``JudgeVerdict``) is read through it.
Judge = Callable[[str, str, Sequence[str]], Any]


@dataclass(frozen=True)
class CleanContext:
    """What the rules need besides the sample.

    Attributes:
        today: the date of the system prompt's ``Current date:`` line (the reference writes a fixed 2026-03-01).
        tool_schemas: the tools the cleaned data may call, in the system prompt's order (search and visit).
        judge: the correctness filter of ``keep_correct``; None keeps every sample.
        observation_style: the style of the system prompt and of converted search results
            (``tools.observation_styles``): ``inference`` (the authors' inference code) or ``rl`` (their RL rollouts).
    """

    today: Date | str
    tool_schemas: tuple[Mapping[str, Any], ...] = (SEARCH_SCHEMA, VISIT_SCHEMA)
    judge: Judge | None = None
    observation_style: ObservationStyle = DEFAULT_OBSERVATION_STYLE

    def __post_init__(self) -> None:
        observation_style(self.observation_style)  # an unknown style fails here, naming the styles

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(schema["function"]["name"] for schema in self.tool_schemas)

    def schema(self, name: str) -> Mapping[str, Any] | None:
        return next((s for s in self.tool_schemas if s["function"]["name"] == name), None)


# ---------------------------------------------------------------------------------------------------- the rules


def fix_text(sample: Sample, context: CleanContext) -> Sample:
    """Replace lone surrogates in every message with U+FFFD (``venus_edge.text.valid_text``)."""
    return sample.replace_messages(valid_text([dict(m) for m in sample.messages]))


def set_system_prompt(sample: Sample, context: CleanContext) -> Sample:
    """Make the first message the runtime's system prompt for ``context.tool_schemas`` and ``context.today``."""
    system = {"role": "system", "content": render_system_prompt(context.tool_schemas, context.today,
                                                                   style=context.observation_style)}
    rest = sample.messages[1:] if sample.messages and sample.messages[0]["role"] == "system" else sample.messages
    return sample.replace_messages([system, *rest])


_SEARCH_HEADER = re.compile(r"^\s*A Google search for (?P<query>.+?) found \d+ results?\s*:?\s*$", re.MULTILINE)
_RESULT_START = re.compile(r"^[ \t]*\d+\.[ \t]+\[", re.MULTILINE)
_DATE_LINE = re.compile(r"^\s*Date\s+(?:published|updated)\s*:\s*(?P<date>.+?)\s*$", re.IGNORECASE)


def parse_markdown_search(text: str, style: ObservationStyle = DEFAULT_OBSERVATION_STYLE,
                          ) -> list[dict[str, Any]] | None:
    """The blocks of a Markdown search result (the open data's shape) as ``[{"query", "web_page_info_list"}]``,
    its hits shown in ``style`` (``Hit.to_dict``), or None when ``text`` is not one. A result is ``N. [title](url)``
    (brackets and parentheses may nest), then an optional ``Date published:`` line, then the snippet lines."""
    if "## Web Results" not in text and not _SEARCH_HEADER.search(text):
        return None
    headers = list(_SEARCH_HEADER.finditer(text))
    spans = [(m.group("query"), m.end(), headers[i + 1].start() if i + 1 < len(headers) else len(text))
             for i, m in enumerate(headers)] or [("", 0, len(text))]
    blocks = []
    for raw_query, start, end in spans:
        query = raw_query.strip()
        if len(query) >= 2 and query[0] == query[-1] and query[0] in "'\"":
            query = query[1:-1]
        blocks.append({"query": query, "web_page_info_list": [hit.to_dict(style) for hit in _hits(text[start:end])]})
    return blocks


def _hits(section: str) -> list[Hit]:
    section = section.split("## Web Results", 1)[-1]
    starts = [m.start() for m in _RESULT_START.finditer(section)]
    hits = []
    for i, start in enumerate(starts):
        entry = section[start : starts[i + 1] if i + 1 < len(starts) else len(section)]
        first, _, body = entry.partition("\n")
        link = _markdown_link(first.strip())
        if link is None:
            continue
        title, url, trailing = link
        lines = [line.strip() for line in [trailing, *body.split("\n")]]
        while lines and not lines[0]:
            lines.pop(0)
        date = None
        if lines and (match := _DATE_LINE.match(lines[0])):
            date = match.group("date")
            lines.pop(0)
        snippet = "\n".join(line for line in lines if line)
        hits.append(Hit(title, url, snippet, date))
    return hits


def _markdown_link(line: str) -> tuple[str, str, str] | None:
    """``N. [title](url) rest`` -> (title, url, rest), counting nested brackets and parentheses."""
    index = line.find("[")
    if index == -1:
        return None
    depth, close = 0, -1
    for i in range(index, len(line)):
        depth += {"[": 1, "]": -1}.get(line[i], 0)
        if depth == 0:
            close = i
            break
    if close == -1 or line[close + 1 : close + 2] != "(":
        return None
    depth, end = 0, -1
    for i in range(close + 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            end = i
            break
    if end == -1:
        return None
    title, url = line[index + 1 : close].strip(), line[close + 2 : end].strip()
    return (title, url, line[end + 1 :]) if title and url else None


def convert_search_results(sample: Sample, context: CleanContext) -> Sample:
    """Rewrite each response to a ``search`` call that holds a Markdown search result in the tool's JSON shape
    (a visit's page that quotes search results is left as it is)."""
    messages: list[Mapping[str, str]] = []
    for message in sample.messages:
        after_search = bool(messages) and _call_name(messages[-1], context) == "search"
        if after_search and _is_response(message):
            body = _observation_body(message["content"])
            blocks = None if body.lstrip().startswith("[") else parse_markdown_search(body, context.observation_style)
            if blocks is not None:
                message = {"role": "user", "content": observation(format_search_observation(blocks))}
        messages.append(message)
    return sample.replace_messages(messages)


def _call_name(message: Mapping[str, str], context: CleanContext) -> str | None:
    """The name of the session tool an assistant message calls, or None."""
    if message["role"] != "assistant" or TOOL_CALL_OPEN not in message["content"]:
        return None
    call = parse_turn(_with_think(message["content"]), context.tool_names).tool_call
    return call.name if call is not None else None


def prune_unknown_tools(sample: Sample, context: CleanContext) -> Sample:
    """Remove every assistant turn that calls a tool outside ``context.tool_names``, with its tool responses."""
    def unknown(content: str) -> bool:
        errors = parse_turn(_with_think(content), context.tool_names).errors
        return any(error.code == "unknown_tool" for error in errors)

    return sample.replace_messages(_without_turns(sample.messages, unknown))


def rebuild_turns(sample: Sample, context: CleanContext) -> Sample:
    """Parse every assistant turn with the runtime's parser and write it back canonically (``canonical_turn``).

    A turn before the last that is not a usable tool call with reasoning is removed with its tool response; a last
    turn that is not a usable answer drops the sample (``Dropped("no answer: ...")``).
    """
    names = context.tool_names
    last = max((i for i, m in enumerate(sample.messages) if m["role"] == "assistant"), default=-1)
    messages: list[Mapping[str, str]] = []
    skip_response = False
    for index, message in enumerate(sample.messages):
        if message["role"] != "assistant":
            if skip_response and _is_response(message):
                continue
            skip_response = False
            messages.append(message)
            continue
        parsed = parse_turn(_with_think(message["content"]), names)
        if index == last:
            if parsed.kind != "answer" or not parsed.answer or not parsed.answer.strip():
                codes = ", ".join(e.code for e in parsed.errors if e.fatal) or "a tool call"
                raise Dropped(f"no answer: the last turn is not an answer ({codes})")
            messages.append({"role": "assistant", "content": canonical_turn(parsed.reasoning, answer=parsed.answer)})
            continue
        skip_response = parsed.kind != "tool_call" or not parsed.reasoning
        if not skip_response:
            # a turn with errors comes back canonical from the parser (a call written inside the reasoning moved
            # out of it), as the runtime's history holds it; a well-formed one is rewritten with strict JSON
            content = parsed.content if parsed.errors else canonical_turn(parsed.reasoning, tool_call=parsed.tool_call)
            messages.append({"role": "assistant", "content": content})
    return sample.replace_messages(messages)


def normalize_arguments(sample: Sample, context: CleanContext) -> Sample:
    """Coerce every call's arguments to its tool's schema (``coerce_arguments``) and rewrite the turn; a call whose
    arguments stay invalid (a required one missing, an empty query, a value only its JSON text could stand for) is
    removed with its tool response, as the reference cleaning drops it."""
    invalid: set[int] = set()
    messages = []
    for index, message in enumerate(sample.messages):
        parsed = parse_turn(message["content"], context.tool_names) if message["role"] == "assistant" else None
        if parsed is not None and parsed.tool_call is not None and (schema := context.schema(parsed.tool_call.name)):
            prepared = coerce_arguments(schema, parsed.tool_call.arguments)
            if not _valid_arguments(schema, prepared):
                invalid.add(index)
            elif prepared.arguments != parsed.tool_call.arguments:
                call = ToolCall(prepared.name, prepared.arguments)
                message = {"role": "assistant", "content": canonical_turn(parsed.reasoning, tool_call=call)}
        messages.append(message)
    if invalid:
        contents = {sample.messages[i]["content"] for i in invalid}
        messages = _without_turns(messages, lambda content: content in contents)
    return sample.replace_messages(messages)


def _valid_arguments(schema: Mapping[str, Any], prepared: PreparedCall) -> bool:
    try:
        validate_arguments(schema, prepared.arguments)
    except ToolArgumentError:
        return False
    if any("JSON text" in change for change in prepared.changes):  # an object or null standing in for a string
        return False
    values = [v for value in prepared.arguments.values() for v in (value if isinstance(value, list) else [value])]
    return all(not isinstance(v, str) or v.strip() for v in values)


def drop_duplicate_calls(sample: Sample, context: CleanContext) -> Sample:
    """Remove a call that repeats an earlier one of the sample, with its tool response.

    Repeats as the reference cleaning counts them (``canonical_signature`` in prepare_trajectories.py), after
    coercion: a search of the same set of queries in any order, a visit of the same set of URLs whatever the goal.
    (The runtime's duplicate-call guard, ``PreparedCall.key``, is stricter: it compares every argument.)
    """
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def repeated(content: str) -> bool:
        call = parse_turn(content, context.tool_names).tool_call
        schema = context.schema(call.name) if call is not None else None
        if call is None or schema is None:
            return False
        arguments = coerce_arguments(schema, call.arguments).arguments
        values = arguments.get({"search": "query", "visit": "url"}.get(call.name, ""))
        if values is None:
            key: tuple[str, tuple[str, ...]] = (call.name, (call_key(call.name, arguments),))
        else:
            key = (call.name, tuple(sorted({str(v).strip() for v in as_list(values)})))
        if key in seen:
            return True
        seen.add(key)
        return False

    return sample.replace_messages(_without_turns(sample.messages, repeated))


def validate_structure(sample: Sample, context: CleanContext) -> Sample:
    """Check the layout of PROTOCOL.md ("Conversation layout") and the RL format check on every turn.

    Raises:
        Dropped: with the first departure found.
    """
    messages = sample.messages
    if len(messages) < 3:
        raise Dropped(f"bad structure: {len(messages)} messages, at least system, question and answer needed")
    if messages[0]["role"] != "system":
        raise Dropped("bad structure: the first message is not the system prompt")
    if messages[1]["role"] != "user" or is_observation(messages[1]["content"]):
        raise Dropped("bad structure: the second message is not the question")
    for index, message in enumerate(messages[2:], start=2):
        expected = "assistant" if index % 2 == 0 else "user"
        if message["role"] != expected:
            raise Dropped(f"bad structure: message {index} is {message['role']}, expected {expected}")
        if expected == "user" and not _is_response(message):
            raise Dropped(f"bad structure: message {index} is not one <tool_response> block")
        if expected == "assistant":
            errors = check_format(message["content"], context.tool_names)
            if errors:
                raise Dropped(f"malformed turn: message {index}: {', '.join(e.code for e in errors)}")
            is_last = index == len(messages) - 1
            if is_last != (parse_turn(message["content"], context.tool_names).answer is not None):
                raise Dropped(f"bad structure: message {index} " + ("has no answer" if is_last else "answers early"))
    if len(messages) % 2 == 0:
        raise Dropped("bad structure: the conversation ends with a tool response")
    return sample


def keep_correct(sample: Sample, context: CleanContext) -> Sample:
    """Drop the sample unless ``context.judge`` finds its final answer correct (no judge: keep every sample)."""
    if context.judge is None:
        return sample
    if not sample.answers:
        raise Dropped("ungradable: no ground-truth answer")
    answer = parse_turn(sample.messages[-1]["content"], context.tool_names).answer or ""
    verdict = context.judge(sample.question, answer, sample.answers)
    if not bool(getattr(verdict, "correct", verdict)):
        raise Dropped("wrong answer")
    return sample


def exact_match_judge(question: str, answer: str, answers: Sequence[str]) -> bool:
    """The judge without a model: the answer equals an accepted one after the usual normalization
    (``venus_edge.eval.metrics.exact_match``)."""
    return exact_match(answer, answers) == 1.0


RULES: tuple[Callable[[Sample, CleanContext], Sample], ...] = (
    fix_text, set_system_prompt, convert_search_results, prune_unknown_tools, rebuild_turns, normalize_arguments,
    drop_duplicate_calls, validate_structure, keep_correct,
)


# -------------------------------------------------------------------------------------------- the pipeline


@dataclass
class CleanReport:
    """How many samples each rule changed and dropped, and the drop reasons.

    Attributes:
        read: samples given to ``clean_samples``.
        kept: samples that passed every rule.
        changed: rule name -> samples it changed (and did not drop).
        dropped: rule name -> samples it dropped.
        reasons: (rule name, reason kind) -> samples dropped for it.
        examples: (rule name, reason kind) -> the first dropped sample's source and full reason.
    """

    read: int = 0
    kept: int = 0
    changed: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: dict[tuple[str, str], str] = field(default_factory=dict)

    def markdown(self, rules: Sequence[Callable[..., Any]] = RULES) -> str:
        """The report as a Markdown table: one row per rule, then one per drop reason."""
        lines = [f"{self.read} samples read, {self.kept} kept", "", "| rule | changed | dropped |", "|---|---|---|"]
        lines += [f"| {r.__name__} | {self.changed[r.__name__]} | {self.dropped[r.__name__]} |" for r in rules]
        if self.reasons:
            lines += ["", "| rule | reason | dropped | first example |", "|---|---|---|---|"]
            lines += [f"| {rule} | {reason} | {n} | {self.examples[(rule, reason)]} |"
                      for (rule, reason), n in self.reasons.most_common()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "kept": self.kept, "changed": dict(self.changed), "dropped": dict(self.dropped),
                "reasons": [{"rule": rule, "reason": reason, "count": n, "example": self.examples[(rule, reason)]}
                            for (rule, reason), n in self.reasons.most_common()]}


def clean_samples(
    samples: Sequence[Sample],
    context: CleanContext,
    *,
    rules: Sequence[Callable[[Sample, CleanContext], Sample]] = RULES,
) -> tuple[list[Sample], CleanReport]:
    """Apply ``rules`` in order to every sample; returns the kept samples and the report."""
    report = CleanReport(read=len(samples))
    kept = []
    for sample in samples:
        for rule in rules:
            try:
                cleaned = rule(sample, context)
            except Dropped as drop:
                kind = str(drop).split(":")[0]
                report.dropped[rule.__name__] += 1
                report.reasons[(rule.__name__, kind)] += 1
                report.examples.setdefault((rule.__name__, kind), f"{sample.source}: {drop}")
                break
            if cleaned.messages != sample.messages:
                report.changed[rule.__name__] += 1
            sample = cleaned
        else:
            kept.append(sample)
    report.kept = len(kept)
    return kept, report


# -------------------------------------------------------------------------------------------- helpers


def _observation_body(content: str) -> str:
    text = content.strip()
    return text[len(TOOL_RESPONSE_OPEN) : len(text) - len(TOOL_RESPONSE_CLOSE)].strip("\n")


def _is_response(message: Mapping[str, str]) -> bool:
    return message["role"] == "user" and is_observation(message["content"])


def _with_think(content: str) -> str:
    """Open data may start a turn inside the reasoning (the generation prompt's ``<think>\\n``, left out)."""
    stripped = content.lstrip()
    return content if stripped.startswith("<think>") or "</think>" not in stripped else "<think>\n" + stripped


def _without_turns(messages: Sequence[Mapping[str, str]], remove: Callable[[str], bool]) -> list[Mapping[str, str]]:
    """``messages`` without each assistant turn for which ``remove(content)`` holds, and the tool responses right
    after it."""
    kept: list[Mapping[str, str]] = []
    skipping = False
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            skipping = index < len(messages) - 1 and remove(message["content"])
            if skipping:
                continue
        elif skipping and _is_response(message):
            continue
        else:
            skipping = False
        kept.append(message)
    return kept
