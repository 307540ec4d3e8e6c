"""Parsing a DR-Venus model turn: reasoning, one tool call or one answer, and every way it departs from the format.

A turn is ``<think>\\n REASONING </think> ACTION`` with ACTION one ``<tool_call>\\n{json}\\n</tool_call>`` or one
``<answer>\\n...\\n</answer>`` (PROTOCOL.md, "A well-formed turn"). The parser is at least as forgiving as the
reference (DR-Venus ``Inference/run_demo.py`` reads the text between the first ``<tool_call>`` and the next
``</tool_call>`` with json5), and tag text written as content stays content:

- a call body is scanned like JSON: strings (in double quotes, or in single quotes where a JSON5 value may start)
  are skipped, so a ``</tool_call>`` inside a string argument does not close the block; the block ends at the
  first ``</tool_call>`` outside strings, and a call whose JSON is cut off (no closing bracket, no close tag) is
  ``truncated_call`` and never runs;
- a ``PythonInterpreter`` call (the RL loop's shape, ``RL/scrl/llm_agent/dr_agent_loop.py``) is the JSON
  ``{"name": "PythonInterpreter", "arguments": {}}`` and then a ``<code>`` block inside the ``<tool_call>``; the JSON
  ends the scan, the code is Python, not JSON, and ends at the first ``</code>`` followed only by whitespace and
  ``</tool_call>`` (or the end of the text), so ``</code>`` and ``</tool_call>`` inside a Python string stay code;
  the code goes into the call's ``code`` argument (stripped, as the RL loop strips it);
- an answer ends at its first ``</answer>``, as the reference's non-greedy ``<answer>(.*?)</answer>`` reads it (what
  the RL reward was computed on); text after it is ``text_after_action``, a second block ``several_answers``;
- the reasoning ends at the first ``</think>`` that an action follows; without any ``</think>``, at the start of
  the action the turn ends with, and only such an action counts: an answer or a call followed by more text is in
  reasoning that never ended (a turn cut at its token limit) and is not acted on.

Every scan moves forward only, so parsing is linear in the turn's length (a turn holds up to 15,000 tokens).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import json5
import json_repair

from venus_edge.protocol.render import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_OPEN,
)
from venus_edge.text import nesting_depth, valid_text
from venus_edge.tools.base import unknown_tool_message
from venus_edge.tools.python_interpreter import PYTHON_INTERPRETER_NAME

__all__ = [
    "CODE_CLOSE",
    "CODE_OPEN",
    "FormatError",
    "ParsedTurn",
    "ToolCall",
    "action_complete",
    "assistant_content",
    "canonical_turn",
    "check_format",
    "decode_call",
    "parse_turn",
    "turn_end",
]


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: ``{"name": name, "arguments": arguments}``, arguments as the model wrote them (the
    tool layer coerces them to the schema: ``venus_edge.tools.base.coerce_arguments``)."""

    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class FormatError:
    """One way a turn departs from the trained format.

    Attributes:
        code: a stable identifier (``missing_think``, ``invalid_json``, ...; see ``parse_turn``).
        message: the explanation, written so it can be shown to the model.
        fatal: the turn cannot be acted on (the reference loop retries it); a non-fatal error only fails the
            strict RL format check.
    """

    code: str
    message: str
    fatal: bool

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "fatal": self.fatal}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FormatError:
        return cls(str(data["code"]), str(data["message"]), bool(data["fatal"]))


@dataclass(frozen=True)
class ParsedTurn:
    """A model turn split into its parts.

    Attributes:
        content: the assistant message as it goes into the history. A well-formed turn keeps the text as
            generated; a usable turn with format errors is rebuilt canonically (``canonical_turn``), as the
            reference's SFT cleaning rebuilds turns, so the history only ever shows the trained format; an
            unusable turn keeps its text.
        generated: the text as the model wrote it (``assistant_content``: stop-cut, stripped, ``<think>\\n`` first).
        reasoning: the text inside the reasoning block ('' if none).
        tool_call: the call to execute, or None.
        answer: the final answer text, or None.
        errors: every format error found; ``usable`` is False if any is fatal.
    """

    content: str
    generated: str
    reasoning: str
    tool_call: ToolCall | None
    answer: str | None
    errors: tuple[FormatError, ...] = ()

    @property
    def usable(self) -> bool:
        return not any(error.fatal for error in self.errors)

    @property
    def well_formed(self) -> bool:
        """The strict RL format check (PROTOCOL.md, "A well-formed turn")."""
        return not self.errors

    @property
    def kind(self) -> Literal["tool_call", "answer", "malformed"]:
        if not self.usable:
            return "malformed"
        return "answer" if self.answer is not None else "tool_call"


def assistant_content(generated: str) -> str:
    """The assistant message for text generated after the ``<think>\\n`` generation prompt.

    The text is cut at the turn's end (``turn_end``), ``.strip()``ped as the reference does (``_call_llm_once``
    in Inference/run_demo.py), and prefixed with the ``<think>\\n`` that the prompt already opened.
    """
    cut = turn_end(generated)
    return f"{THINK_OPEN}\n{(generated if cut is None else generated[:cut]).strip()}"


def turn_end(generated: str) -> int | None:
    """Where the turn ends in ``generated`` (text after ``<think>\\n``): the first ``<tool_response>`` written
    right after a complete action (``action_complete``), or None. The same characters elsewhere (reasoning that
    talks about tool responses, a string argument) are text. This is the rule for vocabularies without a
    ``<tool_response>`` token and for engines that do not stop (``ScriptedEngine``); an engine whose vocabulary
    has the token stops on its id alone.
    """
    for match in _STOP_RE.finditer(generated):
        if action_complete(generated[: match.start()]):
            return match.start()
    return None


def action_complete(generated: str) -> bool:
    """True when ``generated`` (text after ``<think>\\n``) ends with a complete action: after ``</think>``, a
    closed ``<answer>`` or a ``<tool_call>`` whose JSON has ended (closed or not), with only whitespace after it;
    without ``</think>``, such a block that the text ends with. A call quoted as an example in the middle of the
    reasoning is not an action. Cheap when the text does not end with a closing tag or bracket."""
    stripped = generated.rstrip()
    if not stripped.endswith((TOOL_CALL_CLOSE, ANSWER_CLOSE, CODE_CLOSE, "}", "]")):
        return False
    end = _reasoning_end(generated)
    if end is None:
        return _final_block(generated) is not None
    blocks = _scan_blocks(generated[end[1] :])
    return bool(blocks) and blocks[-1].complete and not generated[end[1] + blocks[-1].end :].strip()


def parse_turn(content: str, tool_names: Iterable[str]) -> ParsedTurn:
    """Parse one assistant message (``<think>\\n...``, see ``assistant_content``) tolerantly.

    Non-fatal errors (the turn runs; the history gets the canonical turn; the RL format check fails):
    ``text_before_think``, ``unbalanced_think``, ``unclosed_think`` (the reasoning ends where the turn's final
    action starts), ``call_in_reasoning`` (a call inside the closed reasoning and no action after it; the reference
    reads the first call anywhere), ``several_calls`` (the
    first valid call runs), ``skipped_call`` (a broken call before the valid one), ``several_answers`` (the first
    is used), ``text_before_action``, ``text_after_action``, ``unclosed_call``, ``lenient_json`` (a body that
    only json5 reads: single quotes, trailing commas, comments, unquoted keys), ``repaired_json`` (a body that
    json-repair mends: Python literals, a missing brace, code fences, unescaped quotes), ``call_shape`` (a call
    wrapped in a list or a ``function`` object, or ``parameters`` for ``arguments``), ``string_arguments``.
    Fatal (the reference loop retries the turn): ``missing_think``, ``ambiguous`` (an answer and a call),
    ``no_action``, ``invalid_json``, ``missing_fields``, ``arguments_not_object``, ``unknown_tool``,
    ``truncated_call`` (cut off inside its JSON: a call is never run half-written), ``empty_answer``,
    ``unclosed_answer``.

    A ``PythonInterpreter`` call: non-fatal ``code_in_arguments`` (the code given as ``arguments.code`` instead of a
    ``<code>`` block: it runs, and the history gets the ``<code>`` shape) and ``both_code_forms`` (a ``<code>``
    block and ``arguments.code``: the block runs, as in the RL loop, which reads the block first); fatal
    ``unclosed_code`` (a ``<code>`` block with no ``</code>`` before ``</tool_call>``: the RL loop fails such a turn
    too, and half-written code never runs), ``code_for_other_tool`` (a ``<code>`` block after another tool's JSON),
    and ``truncated_call`` for a turn cut off inside its code.

    Departure from the reference: its format check (RL/verl/utils/reward_score/format_checker.py) passes a
    json5 body and fails any tag text written as content; here a json5 body is recorded (``lenient_json``,
    the history keeps strict JSON) and quoted tags are content.

    Args:
        content: the assistant message.
        tool_names: the names of the tools of the session.
    """
    errors: list[FormatError] = []
    start = content.find(THINK_OPEN)
    if start == -1:
        errors.append(FormatError("missing_think", "The turn must start with <think>.", fatal=True))
        return ParsedTurn(content, content, "", None, None, tuple(errors))
    if content[:start].strip():
        errors.append(FormatError("text_before_think", "There is text before <think>.", fatal=False))
    body = content[start + len(THINK_OPEN) :]
    end = _reasoning_end(body)
    if end is None:
        errors.append(FormatError("unclosed_think", "The <think> block is not closed with </think>.", fatal=False))
        final = _final_block(body)
        truncated = _truncated_call(body) if final is None else None
        cut = final.start if final is not None else truncated if truncated is not None else len(body)
        reasoning, tail = body[:cut], body[cut:]
    else:
        reasoning, tail = body[: end[0]], body[end[1] :]
    if THINK_OPEN in reasoning or THINK_CLOSE in reasoning:
        errors.append(FormatError("unbalanced_think", "<think> tags are not balanced.", fatal=False))
    reasoning = reasoning.strip()

    blocks = _scan_blocks(tail)
    history_reasoning = reasoning
    inner = _scan_blocks(reasoning) if not blocks and end is not None else []
    if calls_inside := [block for block in inner if block.kind == "tool_call"]:
        errors.append(FormatError("call_in_reasoning", "The tool call is inside <think></think>.", fatal=False))
        blocks = calls_inside[:1]
        history_reasoning = reasoning[: calls_inside[0].start] + reasoning[calls_inside[0].end :]
    else:
        _stray_text(tail, blocks, errors)
    calls = [block for block in blocks if block.kind == "tool_call"]
    answers = [block for block in blocks if block.kind == "answer"]
    if calls and answers:
        errors.append(
            FormatError("ambiguous", "A turn must hold either one <tool_call> or one <answer>, not both.", True)
        )
        return ParsedTurn(content, content, reasoning, None, None, tuple(errors))
    if answers:
        return _answer_turn(content, reasoning, history_reasoning, answers, errors)
    if calls:
        return _tool_call_turn(content, reasoning, history_reasoning, calls, set(tool_names), errors)
    errors.append(
        FormatError(
            "no_action", "After </think>, call a tool in <tool_call></tool_call> or answer in <answer></answer>.", True
        )
    )
    return ParsedTurn(content, content, reasoning, None, None, tuple(errors))


def canonical_turn(reasoning: str, *, tool_call: ToolCall | None = None, answer: str | None = None) -> str:
    """The assistant message in the trained format (PROTOCOL.md, "Conversation layout"), as the template renders
    it: ``<think>\\n{reasoning}\\n</think>\\n\\n`` then ``<tool_call>\\n{json}\\n</tool_call>`` (``json.dumps``,
    ``ensure_ascii=False``, as SFT/data_clean/prepare_trajectories.py writes calls) or ``<answer>\\n...\\n</answer>``.
    Think tags written inside the reasoning are dropped (the reference cleaning drops stray tags from it too).

    A ``PythonInterpreter`` call is written in the RL prompt's shape, ``{"name": "PythonInterpreter", "arguments":
    {}}`` then ``<code>\\n{code}\\n</code>``, whichever form the model used: that is the shape the RL system prompt
    asks for and the RL loop keeps in its history (it appends the turn as generated), and code stays readable there
    rather than escaped inside a JSON string.
    """
    if (tool_call is None) == (answer is None):
        raise ValueError("a turn holds exactly one of tool_call and answer")
    thought = _without_think_tags(reasoning).strip()
    head = f"{THINK_OPEN}\n{thought}\n{THINK_CLOSE}\n\n"
    if tool_call is not None and tool_call.name == PYTHON_INTERPRETER_NAME and "code" in tool_call.arguments:
        rest = {key: value for key, value in tool_call.arguments.items() if key != "code"}
        call = json.dumps({"name": tool_call.name, "arguments": rest}, ensure_ascii=False)
        code = f"{CODE_OPEN}\n{str(tool_call.arguments['code']).strip()}\n{CODE_CLOSE}"
        return f"{head}{TOOL_CALL_OPEN}\n{call}\n{code}\n{TOOL_CALL_CLOSE}"
    if tool_call is not None:
        return f"{head}{TOOL_CALL_OPEN}\n{json.dumps(tool_call.to_dict(), ensure_ascii=False)}\n{TOOL_CALL_CLOSE}"
    return f"{head}{ANSWER_OPEN}\n{answer.strip() if answer else ''}\n{ANSWER_CLOSE}"


def _without_think_tags(text: str) -> str:
    """``text`` with every think tag removed, also those that removing one joins (``<thi<think>nk>``): one pass,
    each character appended and a tag dropped as soon as the kept text ends with one."""
    if "think>" not in text:
        return text
    kept: list[str] = []
    for char in text:
        kept.append(char)
        if char == ">":
            for tag in (THINK_OPEN, THINK_CLOSE):
                if len(kept) >= len(tag) and "".join(kept[-len(tag):]) == tag:
                    del kept[-len(tag):]
                    break
    return "".join(kept)


def check_format(content: str, tool_names: Iterable[str]) -> list[FormatError]:
    """The RL format check: every error ``parse_turn`` finds (an empty list means well formed)."""
    return list(parse_turn(content, tool_names).errors)


# ----------------------------------------------------------------------------------------------- block scanning

#: The tags around a ``PythonInterpreter`` call's code, after the call's JSON (the RL system prompt's shape).
CODE_OPEN, CODE_CLOSE = "<code>", "</code>"
# The end of a call's code: a </code> that only whitespace and </tool_call> (or the end of the text) follow.
_CODE_END_RE = re.compile(f"{re.escape(CODE_CLOSE)}(?=\\s*(?:{re.escape(TOOL_CALL_CLOSE)}|\\Z))")
_STOP_RE = re.compile(re.escape(TOOL_RESPONSE_OPEN))
_ACTION_OPEN_RE = re.compile(f"{re.escape(TOOL_CALL_OPEN)}|{re.escape(ANSWER_OPEN)}")
# The end of the reasoning: a </think> followed by an action; else the last </think>.
_REASONING_END_RE = re.compile(f"{re.escape(THINK_CLOSE)}(?=\\s*(?:{_ACTION_OPEN_RE.pattern}))")
# Call blocks decoded at most in one turn, looking for a valid one (a turn of thousands of broken blocks is junk).
MAX_CALLS_TRIED = 8
#: Lists and objects nest at most this deep in a call body; tool arguments never need more.
MAX_CALL_DEPTH = 32
# Where a JSON5 string may start: after these (outside strings), or at the start of the value.
_VALUE_STARTS = frozenset("{[,:")
# A comment starts only after whitespace or these (so the // of an unquoted https:// is not one).
_COMMENT_AFTER = frozenset(" \t\r\n{[,")


@dataclass(frozen=True)
class _Block:
    kind: Literal["tool_call", "answer"]
    start: int  # the opening tag
    end: int  # just after the closing tag (where the block stops when unclosed)
    body: str  # the inner text, stripped
    closed: bool
    complete: bool  # a call's JSON has ended or its close tag was written; an answer's close tag was written
    code: str | None = None  # a PythonInterpreter call's <code> block, stripped (None: none, or never closed)
    code_opened: bool = False  # a <code> block follows the call's JSON


def _reasoning_end(body: str) -> tuple[int, int] | None:
    """(start, end) of the ``</think>`` that closes the reasoning in ``body``, or None when there is none."""
    match = _REASONING_END_RE.search(body)
    if match:
        return match.start(), match.end()
    last = body.rfind(THINK_CLOSE)
    return None if last == -1 else (last, last + len(THINK_CLOSE))


def _scan_blocks(text: str) -> list[_Block]:
    """The ``<tool_call>`` and ``<answer>`` blocks of ``text`` in order; tag text inside a block is its content."""
    blocks: list[_Block] = []
    position = 0
    while (match := _ACTION_OPEN_RE.search(text, position)) is not None:
        block = _block_at(text, match.start())
        blocks.append(block)
        position = block.end
    return blocks


def _block_at(text: str, start: int) -> _Block:
    return _call_block(text, start) if text.startswith(TOOL_CALL_OPEN, start) else _answer_block(text, start)


def _final_block(body: str) -> _Block | None:
    """The complete block that ``body`` ends with (only whitespace after it), scanning openings from the last:
    the action of a turn whose reasoning was never closed."""
    starts = [match.start() for match in _ACTION_OPEN_RE.finditer(body)]
    for start in reversed(starts):
        block = _block_at(body, start)
        if block.complete and not body[block.end :].strip():
            return block
    return None


def _call_block(text: str, start: int) -> _Block:
    """A call block: its body is scanned like JSON (see ``scan_call_body``) up to the first ``</tool_call>``
    outside strings. Unclosed, it stops at the next ``<tool_call>`` outside strings, or at the end of the text."""
    inner = start + len(TOOL_CALL_OPEN)
    value_end, close, stop = scan_call_body(text, inner)
    if value_end is not None and close is None and text.startswith(CODE_OPEN, _skip_space(text, value_end)):
        return _code_call_block(text, start, _skip_space(text, inner), value_end)
    if close is not None:
        value = _skip_space(text, inner)
        only_json = value_end is not None and not text[value_end:close].strip()
        body = text[value:value_end] if only_json else text[inner:close].strip()
        return _Block("tool_call", start, close + len(TOOL_CALL_CLOSE), body, True, True)
    return _Block("tool_call", start, stop, text[inner:stop].strip(), False, value_end is not None)


def _code_call_block(text: str, start: int, value: int, value_end: int) -> _Block:
    """A call whose JSON (``text[value:value_end]``) a ``<code>`` block follows. The code ends at the first
    ``</code>`` that only whitespace and ``</tool_call>`` or the end of the text follow; without one, the block is
    closed by the first ``</tool_call>`` after ``<code>`` with its code unclosed, or, with none, cut off."""
    code_start = _skip_space(text, value_end) + len(CODE_OPEN)
    body = text[value:value_end]
    end = _CODE_END_RE.search(text, code_start)
    if end is not None:
        after = _skip_space(text, end.end())
        closed = text.startswith(TOOL_CALL_CLOSE, after)
        stop = after + len(TOOL_CALL_CLOSE) if closed else end.end()
        return _Block("tool_call", start, stop, body, closed, True, text[code_start : end.start()].strip(), True)
    close = text.find(TOOL_CALL_CLOSE, code_start)
    if close == -1:
        return _Block("tool_call", start, len(text), body, False, False, None, True)
    return _Block("tool_call", start, close + len(TOOL_CALL_CLOSE), body, True, True, None, True)


def scan_call_body(text: str, start: int) -> tuple[int | None, int | None, int]:
    """Scan a call body from ``start`` once: ``(value_end, close, stop)``.

    ``value_end`` is the index just after the JSON (json5) object or array that the body opens with (None when it
    opens with something else or never closes); ``close`` is the index of the first ``</tool_call>`` outside
    strings (None when there is none); ``stop`` is where the scan stopped: ``close``, a ``<tool_call>`` outside
    strings (the next block), ``value_end`` when a ``<code>`` block follows the JSON (its code is Python, scanned
    by ``_code_call_block``), or the end of the text. Strings in double quotes, and in single quotes where a
    JSON5 value may start (so an apostrophe in prose opens none), with their escapes, and ``//`` and ``/* */``
    comments (after whitespace or a bracket or comma) are skipped.
    """
    depth, index, quote, previous = 0, start, "", ""
    value_end: int | None = None
    opens_value = text[_skip_space(text, start) : _skip_space(text, start) + 1] in ("{", "[")
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote, previous = "", char
        elif char == "<" and text.startswith(TOOL_CALL_CLOSE, index):
            return value_end, index, index
        elif char == "<" and text.startswith(TOOL_CALL_OPEN, index):
            return value_end, None, index
        elif char.isspace():
            pass
        elif char == '"' or (char == "'" and (not previous or previous in _VALUE_STARTS)):
            quote = char
        elif text.startswith(("//", "/*"), index) and (index == start or text[index - 1] in _COMMENT_AFTER):
            line = text[index + 1] == "/"
            close = text.find("\n" if line else "*/", index + 2)
            index = len(text) - 1 if close == -1 else close + (0 if line else 1)
        else:
            if char in "{[":
                depth += 1
            elif char in "}]" and depth > 0:
                depth -= 1
                if depth == 0 and opens_value and value_end is None:
                    value_end = index + 1
                    if text.startswith(CODE_OPEN, _skip_space(text, value_end)):
                        return value_end, None, value_end
            previous = char
        index += 1
    return value_end, None, len(text)


def _answer_block(text: str, start: int) -> _Block:
    """An answer ends at its first ``</answer>`` (the reference's non-greedy match); unclosed, at the end."""
    inner = start + len(ANSWER_OPEN)
    close = text.find(ANSWER_CLOSE, inner)
    if close != -1:
        return _Block("answer", start, close + len(ANSWER_CLOSE), text[inner:close].strip(), True, True)
    return _Block("answer", start, len(text), text[inner:].strip(), False, False)


def _truncated_call(body: str) -> int | None:
    """Where the call that ``body`` (reasoning never closed) ends in, cut off inside its JSON or code, starts; None
    when it ends in none: such a call is ``truncated_call``, not a call left in the reasoning. Blocks are scanned as
    ``_scan_blocks`` scans them, so a tag inside a call's string is text."""
    blocks = _scan_blocks(body)
    if blocks and blocks[-1].kind == "tool_call" and not blocks[-1].complete:
        return blocks[-1].start
    return None


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _stray_text(tail: str, blocks: list[_Block], errors: list[FormatError]) -> None:
    """Record non-whitespace text around the blocks of the part after ``</think>``."""
    if not blocks:
        return
    if tail[: blocks[0].start].strip():
        errors.append(FormatError("text_before_action", "There is text between </think> and the action.", fatal=False))
    between = "".join(tail[a.end : b.start] for a, b in itertools.pairwise(blocks)) + tail[blocks[-1].end :]
    if between.strip():
        errors.append(FormatError("text_after_action", "There is text after the action.", fatal=False))


# ----------------------------------------------------------------------------------------------- the action


def _answer_turn(
    content: str, reasoning: str, history_reasoning: str, answers: list[_Block], errors: list[FormatError]
) -> ParsedTurn:
    if len(answers) > 1:
        errors.append(
            FormatError("several_answers", "Give exactly one <answer>; only the first was used.", fatal=False)
        )
    first = answers[0]
    if not first.closed:
        errors.append(FormatError("unclosed_answer", "The <answer> block is not closed with </answer>.", True))
    elif not first.body:
        errors.append(FormatError("empty_answer", "The <answer> block is empty.", fatal=True))
    return _finish(content, reasoning, history_reasoning, None, first.body, errors)


def _tool_call_turn(
    content: str,
    reasoning: str,
    history_reasoning: str,
    calls: list[_Block],
    tool_names: set[str],
    errors: list[FormatError],
) -> ParsedTurn:
    """The first call that decodes to a known tool with object arguments runs; the others are recorded."""
    if len(calls) > 1:
        errors.append(
            FormatError("several_calls", "Call exactly one tool per turn; only the first valid call was used.", False)
        )
    attempts: list[list[FormatError]] = []
    for block in calls[:MAX_CALLS_TRIED]:
        found: list[FormatError] = []
        if not block.complete:  # cut off inside its JSON or code (out of tokens): never run half a call
            where = "inside its <code> block" if block.code_opened else "before its JSON ends"
            found.append(FormatError("truncated_call", f"The tool call is cut off {where}.", fatal=True))
            attempts.append(found)
            continue
        if block.code_opened and block.code is None:
            found.append(FormatError("unclosed_code", "The <code> block is not closed with </code> before "
                                     "</tool_call>.", fatal=True))
            attempts.append(found)
            continue
        if not block.closed:
            found.append(FormatError("unclosed_call", "The <tool_call> block is not closed with </tool_call>.", False))
        call = decode_call(block.body, tool_names, found, code=block.code)
        if call is not None:
            for earlier in attempts:  # broken calls before the valid one: recorded, not fatal
                errors.append(FormatError("skipped_call", "A broken call was skipped: " + earlier[-1].message, False))
            return _finish(content, reasoning, history_reasoning, call, None, errors + found)
        attempts.append(found)
    return _finish(content, reasoning, history_reasoning, None, None, errors + attempts[0])


def _finish(
    content: str,
    reasoning: str,
    history_reasoning: str,
    call: ToolCall | None,
    answer: str | None,
    errors: list[FormatError],
) -> ParsedTurn:
    """The parsed turn; a usable turn with errors gets the canonical text for the history."""
    usable = not any(error.fatal for error in errors)
    history = content
    if usable and errors:
        history = canonical_turn(history_reasoning, tool_call=call, answer=answer)
    return ParsedTurn(history, content, reasoning, call, answer if usable else None, tuple(errors))


def decode_call(
    raw: str, tool_names: set[str], errors: list[FormatError], *, code: str | None = None
) -> ToolCall | None:
    """Decode a ``<tool_call>`` body into a call of a known tool, appending what was wrong to ``errors``.

    Leniency, in order: strict JSON; json5 (what the reference accepts); json-repair (Python literals, missing
    brackets, code fences, unescaped quotes); then the call's shape: a one-element list, an OpenAI-style
    ``{"function": {...}}`` wrapper, ``parameters`` for ``arguments``, and ``arguments`` as a JSON string.
    ``code`` is the ``<code>`` block that followed the JSON, if any: it becomes the ``PythonInterpreter`` call's
    ``code`` argument (see ``parse_turn`` for the errors of the two forms). Returns None (with a fatal error
    appended) when no call can be read; never raises, however deep or odd the body.
    """
    payload, leniency = _load_lenient(raw)
    if payload is None:
        errors.append(FormatError("invalid_json", "The tool call is not valid JSON.", fatal=True))
        return None
    if nesting_depth(payload) > MAX_CALL_DEPTH:  # every later walk (coercion, json.dumps) would recurse that deep
        errors.append(
            FormatError("invalid_json", f"The tool call nests deeper than {MAX_CALL_DEPTH} levels.", fatal=True)
        )
        return None
    payload = valid_text(payload)
    if leniency:
        errors.append(leniency)
    payload, reshaped = _unwrap_call(payload)
    if reshaped:
        errors.append(
            FormatError("call_shape", f'The tool call is not {{"name": ..., "arguments": ...}}: {reshaped}.', False)
        )
    if not isinstance(payload, dict) or "name" not in payload or "arguments" not in payload:
        errors.append(
            FormatError("missing_fields", 'The tool call must be {"name": <tool>, "arguments": {...}}.', True)
        )
        return None
    name, arguments = payload["name"], payload["arguments"]
    if isinstance(arguments, str):
        decoded, _ = _load_lenient(arguments)
        if isinstance(decoded, dict):
            errors.append(FormatError("string_arguments", "arguments should be a JSON object, not a string.", False))
            arguments = decoded
    if not isinstance(arguments, dict):
        errors.append(FormatError("arguments_not_object", "arguments must be a JSON object.", fatal=True))
        return None
    if not isinstance(name, str) or name not in tool_names:
        errors.append(FormatError("unknown_tool", unknown_tool_message(str(name), sorted(tool_names)), fatal=True))
        return None
    if name == PYTHON_INTERPRETER_NAME:
        return ToolCall(name, _code_argument(arguments, code, errors))
    if code is not None:
        errors.append(FormatError("code_for_other_tool", f"A <code> block goes only with {PYTHON_INTERPRETER_NAME}; "
                                  f"{name} takes its arguments in the JSON.", fatal=True))
        return None
    return ToolCall(name, arguments)


def _code_argument(arguments: dict[str, Any], code: str | None, errors: list[FormatError]) -> dict[str, Any]:
    """A ``PythonInterpreter`` call's arguments with the code in ``code``: the ``<code>`` block's when there is one
    (it wins over ``arguments.code``, as in the RL loop), else the arguments as given."""
    if code is None:
        if "code" in arguments:
            errors.append(FormatError("code_in_arguments", "Put the code in a <code> block after the JSON, with "
                                      "empty arguments, not in arguments.code.", fatal=False))
        return arguments
    if "code" in arguments:
        errors.append(FormatError("both_code_forms", "The code is both in arguments.code and in a <code> block; "
                                  "the <code> block was run.", fatal=False))
    return {**arguments, "code": code}


def _load_lenient(raw: str) -> tuple[Any, FormatError | None]:
    """(value, the leniency it needed or None); value None when nothing reads ``raw`` as an object or array."""
    try:
        return json.loads(raw), None
    except (ValueError, RecursionError):
        pass
    try:
        value = json5.loads(raw)
        if isinstance(value, (dict, list)):
            return value, FormatError("lenient_json", "The tool call is json5, not strict JSON.", fatal=False)
    except (ValueError, RecursionError):
        pass
    text = _strip_code_fence(raw)
    try:
        value = json_repair.loads(text) if text.strip() else None
    except Exception:  # a fault of the repair library on hostile input: the body is unreadable, never a crash
        value = None
    if isinstance(value, (dict, list)) and value:
        return value, FormatError("repaired_json", "The tool call is not valid JSON (repaired).", fatal=False)
    return None, None


def _strip_code_fence(raw: str) -> str:
    """``raw`` without a Markdown code fence around it (```json ... ```), in one linear pass."""
    text = raw.strip()
    if not text.startswith("```"):
        return raw
    index = 3
    while index < len(text) and (text[index].isalnum() or text[index] in "_-"):  # the language: ```json
        index += 1
    text = text[index:].strip()
    return text[:-3] if text.endswith("```") else text


def _unwrap_call(payload: Any) -> tuple[Any, str]:
    """Undo the call shapes small models write instead of ``{"name", "arguments"}``; says which one it undid."""
    if isinstance(payload, list) and len(payload) == 1 and isinstance(payload[0], dict):
        return _unwrap_call(payload[0])[0], "a list around the call"
    if isinstance(payload, dict) and "name" not in payload and isinstance(payload.get("function"), dict):
        return _unwrap_call(payload["function"])[0], "a function object around the call"
    if isinstance(payload, dict) and "arguments" not in payload and "parameters" in payload:
        return {**payload, "arguments": payload["parameters"]}, "parameters in place of arguments"
    return payload, ""
