"""DR-Venus's wire protocol: the only module that knows the text format the model was trained on.

It renders the system prompt, the ChatML conversation and the observations byte-exact, and parses a model
turn into reasoning / tool call / answer with a list of format errors. Inference (``venus_edge.agent``), SFT
and the RL format check use these same functions.

Sources (see ``shared/PROTOCOL.md``): the system prompt and the forced-answer notices follow DR-Venus
``Inference/run_demo.py``; the rendering rules follow the Qwen3 chat template (``Qwen-Qwen3-0.6B.jinja`` in
llama.cpp's ``models/templates``) with the Thinking-2507 generation prompt, which opens ``<think>\\n``; the format
check follows ``RL/verl/utils/reward_score/format_checker.py`` as summarized in PROTOCOL.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date as Date
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import json5
import json_repair

from venus_edge.tools.base import unknown_tool_message

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Every ChatML control token (<|im_start|>, <|im_end|>, <|endoftext|>) starts so; text without it holds none.
CONTROL_TOKEN_OPEN = "<|"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

#: The Thinking-2507 generation prompt: the model's text starts inside the reasoning block.
GENERATION_PROMPT = f"{IM_START}assistant\n{THINK_OPEN}\n"
#: Generation stops here (PROTOCOL.md, "Decoding and limits"); the end-of-turn token stops it too. Pass
#: ``stop_text_if=action_complete`` with them: where the vocabulary spells ``<tool_response>`` in several tokens,
#: the text stops a turn only after its action (``turn_end``).
STOP_STRINGS: tuple[str, ...] = (TOOL_RESPONSE_OPEN,)

# The persona the model was trained with (DR-Venus Inference/run_demo.py, SYSTEM_PROMPT; Apache-2.0).
# It is part of the wire format: any change to it is a change of protocol.
PERSONA = (
    "You are a deep research assistant. Your core function is to conduct thorough, multi-source investigations "
    "into any topic. You must handle both broad, open-domain inquiries and queries within specialized academic "
    "fields. For each user request, you must actively seek out and **cross-check information** from credible and "
    "diverse sources, then integrate the findings into a response that is comprehensive, accurate, "
    "well-structured, and objective. When you have gathered sufficient information and are ready to provide the "
    "definitive response, you must enclose the entire final answer in `<answer></answer>` tags."
)

# The standard Qwen tool-prompt layout (the `tools` branch of the Qwen3 chat template), written into the system
# text rather than passed as `tools=`, followed by the date line.
_TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)

# Observation texts of the reference loop (Inference/run_demo.py), verbatim: the model saw them in training.
FORMAT_ERROR_NOTICE = (
    "ERROR!\nPlease call a tool with the correct format, or if you are ready to answer, provide the entire final "
    "answer in `<answer></answer>` tags."
)
CONTEXT_LIMIT_NOTICE = (
    "You have reached the maximum context length. Based on the information and knowledge you have gathered, "
    "please provide the entire final answer in `<answer></answer>` tags now."
)
STEP_LIMIT_NOTICE = (
    "You've reached the maximum number of tool calls. Based on the information and knowledge you have gathered, "
    "please provide the entire final answer in `<answer></answer>` tags now."
)

Role = Literal["system", "user", "assistant"]


def render_system_prompt(tool_schemas: Iterable[Mapping[str, Any]], today: Date | str) -> str:
    """Return the system message text: persona, ``# Tools`` block with one JSON schema per line, date line.

    Args:
        tool_schemas: OpenAI-style function objects, rendered with ``json.dumps`` default separators in order.
        today: the date for the ``Current date: YYYY-MM-DD`` line.

    The text ends with a newline, as in the reference ``SYSTEM_PROMPT``.
    """
    day = today.isoformat() if isinstance(today, Date) else str(today)
    schemas = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in tool_schemas)
    return f"{PERSONA}\n\n{_TOOLS_HEADER}{schemas}{_TOOLS_FOOTER}\n\nCurrent date: {day}\n"


def observation(text: str) -> str:
    """Wrap a tool result as the user message that carries it: ``<tool_response>\\n{text}\\n</tool_response>``."""
    return f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}"


def is_observation(content: str) -> bool:
    """True for a user message that is only a ``<tool_response>`` block (the template's multi-step rule)."""
    return content.startswith(TOOL_RESPONSE_OPEN) and content.endswith(TOOL_RESPONSE_CLOSE)


def render_messages(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
    """Render a conversation as the Qwen3 (Thinking-2507) chat template does, byte for byte.

    Args:
        messages: ``{"role": "system" | "user" | "assistant", "content": str}`` dicts. Tool results are user
            messages whose content is ``observation(text)``.
        add_generation_prompt: append ``GENERATION_PROMPT`` (``<|im_start|>assistant\\n<think>\\n``).

    Rules taken from the template: an assistant message after the last real user query (one that is not only a
    ``<tool_response>`` block) keeps its reasoning, re-rendered as ``<think>\\n{reasoning}\\n</think>\\n\\n{rest}``;
    earlier assistant messages keep only the text after ``</think>``.
    """
    return "".join(render_parts(messages, add_generation_prompt=add_generation_prompt))


def render_parts(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> list[str]:
    """``render_messages`` as one string per message (plus the generation prompt); each part starts with
    ``<|im_start|>``, a special token, so tokenizing the parts one by one gives the ids of the whole text."""
    last_query = len(messages) - 1
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and not is_observation(message["content"]):
            last_query = index
            break
    parts: list[str] = []
    for index, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "assistant":
            parts.append(_render_assistant(content, keep_reasoning=index > last_query, is_last=index == len(messages) - 1))
        else:
            parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
    if add_generation_prompt:
        parts.append(GENERATION_PROMPT)
    return parts


def _render_assistant(content: str, *, keep_reasoning: bool, is_last: bool) -> str:
    reasoning = ""
    if THINK_CLOSE in content:
        head, _, _ = content.partition(THINK_CLOSE)
        reasoning = head.rstrip("\n").split(THINK_OPEN)[-1].lstrip("\n")
        content = content.split(THINK_CLOSE)[-1].lstrip("\n")
    if keep_reasoning and (is_last or reasoning):
        body = f"{THINK_OPEN}\n{reasoning.strip(chr(10))}\n{THINK_CLOSE}\n\n{content.lstrip(chr(10))}"
    else:
        body = content
    return f"{IM_START}assistant\n{body}{IM_END}\n"


def render_chat(messages: Sequence[Mapping[str, str]], *, open_reasoning: bool = False) -> str:
    """Render plain ChatML for a helper call (the visit extractor), ending with an assistant generation prompt.

    ``open_reasoning`` opens ``<think>\\n`` as the Thinking-2507 model expects; generic ChatML models get a bare
    ``<|im_start|>assistant\\n``.
    """
    parts = render_chat_parts(messages, open_reasoning=open_reasoning)
    return "".join(head + content + tail for head, content, tail in parts)


def tokenize_message(tokenize: Callable[..., list[int]], head: str, content: str, tail: str) -> list[int]:
    """Token ids of one ChatML message ``head + content + tail`` where only the markup may hold control tokens.

    A content holding control-token text (a web page, a model turn quoting one) is tokenized apart with
    ``parse_special=False``, so its ``<|im_end|>`` stays text and cannot close the message. Any other content is
    tokenized whole with its markup, which gives the ids the model was trained on (tokenizing apart would split a
    ``"\n\n"`` across the markup's end). ``tokenize`` is ``Engine.tokenize``.
    """
    if CONTROL_TOKEN_OPEN in content:
        return tokenize(head) + tokenize(content, parse_special=False) + tokenize(tail)
    return tokenize(head + content + tail)


def render_chat_parts(
    messages: Sequence[Mapping[str, str]], *, open_reasoning: bool = False
) -> list[tuple[str, str, str]]:
    """``render_chat`` as ``(head, content, tail)`` triples, the contents apart from the ChatML markup around
    them, so that a caller can tokenize untrusted contents without parsing control tokens in them. The last
    triple is the generation prompt, with an empty content."""
    parts = [(f"{IM_START}{m['role']}\n", m["content"], f"{IM_END}\n") for m in messages]
    return [*parts, (GENERATION_PROMPT if open_reasoning else f"{IM_START}assistant\n", "", "")]


# --------------------------------------------------------------------------------------------------- parsing
#
# A turn is ``<think>\n REASONING </think> ACTION`` with ACTION one ``<tool_call>\n{json}\n</tool_call>`` or one
# ``<answer>\n...\n</answer>``. Block boundaries are found so that tag text written as content never closes a
# block: a call body ends where its JSON value ends (strings skipped), an answer ends at a ``</answer>`` followed
# only by whitespace or another block, and the reasoning ends at the first ``</think>`` that an action follows.
# The reference reads the text between the first ``<tool_call>`` and the next ``</tool_call>`` with json5
# (Inference/run_demo.py); every body it reads, this parser reads too.


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
    def from_dict(cls, data: Mapping[str, Any]) -> "FormatError":
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
    after a complete action, or None. The same characters earlier (reasoning that talks about tool responses)
    are text. This is the rule for vocabularies without a ``<tool_response>`` token and for engines that do not
    stop (``ScriptedEngine``); an engine whose vocabulary has the token stops on its id alone.
    """
    for match in _STOP_RE.finditer(generated):
        if action_complete(generated[: match.start()]):
            return match.start()
    return None


def action_complete(generated: str) -> bool:
    """True when ``generated`` (text after ``<think>\\n``) already holds a complete action after its reasoning: a
    closed ``<answer>``, or a ``<tool_call>`` whose JSON value has ended (closed or not). The turn has said
    what it does; anything later is not the turn."""
    end = _reasoning_end(generated)
    tail = generated if end is None else generated[end[1] :]
    return any(block.complete for block in _scan_blocks(tail))


def parse_turn(content: str, tool_names: Iterable[str]) -> ParsedTurn:
    """Parse one assistant message (``<think>\\n...``, see ``assistant_content``) tolerantly.

    Non-fatal errors (the turn runs; the history gets the canonical turn; the RL format check fails):
    ``text_before_think``, ``unbalanced_think``, ``unclosed_think`` (the reasoning ends at the first action),
    ``call_in_reasoning`` (a call inside the reasoning and none after it), ``several_calls`` (the first valid
    call runs), ``skipped_call`` (a broken call before the valid one), ``several_answers`` (the first is used),
    ``text_before_action``, ``text_after_action``, ``unclosed_call``, ``lenient_json`` (a body that only
    json5 reads: single quotes, trailing commas, comments, unquoted keys), ``repaired_json`` (a body that
    json-repair mends: Python literals, a missing brace, code fences, unescaped quotes), ``call_shape`` (a
    call wrapped in a list or a ``function`` object, or ``parameters`` for ``arguments``), ``string_arguments``.
    Fatal (the reference loop retries the turn): ``missing_think``, ``ambiguous`` (an answer and a call),
    ``no_action``, ``invalid_json``, ``missing_fields``, ``arguments_not_object``, ``unknown_tool``,
    ``truncated_call`` (cut off inside its JSON: a call is never run half-written), ``empty_answer``,
    ``unclosed_answer``.

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
        first_action = _ACTION_OPEN_RE.search(body)
        cut = first_action.start() if first_action else len(body)
        reasoning, tail = body[:cut], body[cut:]
    else:
        reasoning, tail = body[: end[0]], body[end[1] :]
    if THINK_OPEN in reasoning or THINK_CLOSE in reasoning:
        errors.append(FormatError("unbalanced_think", "<think> tags are not balanced.", fatal=False))
    reasoning = reasoning.strip()

    blocks = _scan_blocks(tail)
    if not blocks and (inner := [b for b in _scan_blocks(reasoning) if b.kind == "tool_call"]):
        errors.append(FormatError("call_in_reasoning", "The tool call is inside <think></think>.", fatal=False))
        blocks = inner[:1]
    else:
        _stray_text(tail, blocks, errors)
    calls = [block for block in blocks if block.kind == "tool_call"]
    answers = [block for block in blocks if block.kind == "answer"]
    if calls and answers:
        errors.append(FormatError("ambiguous", "A turn must hold either one <tool_call> or one <answer>, not both.", True))
        return ParsedTurn(content, content, reasoning, None, None, tuple(errors))
    if answers:
        return _answer_turn(content, reasoning, answers, errors)
    if calls:
        return _tool_call_turn(content, reasoning, calls, set(tool_names), errors)
    errors.append(
        FormatError("no_action", "After </think>, call a tool in <tool_call></tool_call> or answer in <answer></answer>.", True)
    )
    return ParsedTurn(content, content, reasoning, None, None, tuple(errors))


def canonical_turn(reasoning: str, *, tool_call: ToolCall | None = None, answer: str | None = None) -> str:
    """The assistant message in the trained format (PROTOCOL.md, "Conversation layout"), as the template renders
    it: ``<think>\\n{reasoning}\\n</think>\\n\\n`` then ``<tool_call>\\n{json}\\n</tool_call>`` (``json.dumps``,
    ``ensure_ascii=False``, as SFT/data_clean/prepare_trajectories.py writes calls) or ``<answer>\\n...\\n</answer>``.
    """
    if (tool_call is None) == (answer is None):
        raise ValueError("a turn holds exactly one of tool_call and answer")
    head = f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n"
    if tool_call is not None:
        return f"{head}{TOOL_CALL_OPEN}\n{json.dumps(tool_call.to_dict(), ensure_ascii=False)}\n{TOOL_CALL_CLOSE}"
    return f"{head}{ANSWER_OPEN}\n{answer.strip() if answer else ''}\n{ANSWER_CLOSE}"


def check_format(content: str, tool_names: Iterable[str]) -> list[FormatError]:
    """The RL format check: every error ``parse_turn`` finds (an empty list means well formed)."""
    return list(parse_turn(content, tool_names).errors)


_STOP_RE = re.compile(re.escape(TOOL_RESPONSE_OPEN))
_ACTION_OPEN_RE = re.compile(f"{re.escape(TOOL_CALL_OPEN)}|{re.escape(ANSWER_OPEN)}")
# The end of the reasoning: a </think> followed by an action; else the last </think>.
_REASONING_END_RE = re.compile(f"{re.escape(THINK_CLOSE)}(?=\\s*(?:{_ACTION_OPEN_RE.pattern}))")
_CODE_FENCE_RE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class _Block:
    kind: Literal["tool_call", "answer"]
    start: int  # the opening tag
    end: int  # just after the closing tag (len(text) when unclosed)
    body: str  # the inner text, stripped
    closed: bool
    complete: bool  # a call's JSON value ends (for an answer: closed); an unclosed call may still be complete


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
        opener = _call_block if match.group() == TOOL_CALL_OPEN else _answer_block
        block = opener(text, match.start())
        blocks.append(block)
        position = block.end
    return blocks


def _call_block(text: str, start: int) -> _Block:
    """A call block ends after its JSON value: a ``</tool_call>`` inside a string argument is text. When the
    value has no matching end (broken JSON), the next ``</tool_call>`` ends it."""
    inner = start + len(TOOL_CALL_OPEN)
    value = _skip_space(text, inner)
    if value < len(text) and text[value] in "{[":
        value_end = json_value_end(text, value)
        close = _skip_space(text, value_end) if value_end is not None else -1
        if value_end is not None and text.startswith(TOOL_CALL_CLOSE, close):
            return _Block("tool_call", start, close + len(TOOL_CALL_CLOSE), text[value:value_end], True, True)
    close = text.find(TOOL_CALL_CLOSE, inner)
    if close == -1:
        body = text[inner:].strip()
        complete = body[:1] in ("{", "[") and json_value_end(body, 0) is not None
        return _Block("tool_call", start, len(text), body, False, complete)
    return _Block("tool_call", start, close + len(TOOL_CALL_CLOSE), text[inner:close].strip(), True, True)


def _answer_block(text: str, start: int) -> _Block:
    """An answer ends at the first ``</answer>`` followed only by whitespace or another block; an answer that
    writes ``</answer>`` as text goes on past it. Without such a close, the last ``</answer>`` ends it."""
    inner = start + len(ANSWER_OPEN)
    closes = [m.start() for m in re.finditer(re.escape(ANSWER_CLOSE), text[inner:])]
    for close in (inner + offset for offset in closes):
        after = _skip_space(text, close + len(ANSWER_CLOSE))
        if after == len(text) or _ACTION_OPEN_RE.match(text, after):
            return _Block("answer", start, close + len(ANSWER_CLOSE), text[inner:close].strip(), True, True)
    if closes:
        close = inner + closes[-1]
        return _Block("answer", start, close + len(ANSWER_CLOSE), text[inner:close].strip(), True, True)
    return _Block("answer", start, len(text), text[inner:].strip(), False, False)


def json_value_end(text: str, start: int) -> int | None:
    """The index just after the JSON (or json5) object or array that opens at ``text[start]``, or None when
    it never closes. Strings in double or single quotes, their escapes, and ``//`` / ``/* */`` comments are
    skipped, so brackets and tags written inside them do not count."""
    depth, index, quote = 0, start, ""
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
        elif text.startswith("//", index):
            index = text.find("\n", index) if "\n" in text[index:] else len(text)
        elif text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = len(text) if close == -1 else close + 1
        index += 1
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
    between = "".join(tail[a.end : b.start] for a, b in zip(blocks, blocks[1:])) + tail[blocks[-1].end :]
    if between.strip():
        errors.append(FormatError("text_after_action", "There is text after the action.", fatal=False))


def _answer_turn(content: str, reasoning: str, answers: list[_Block], errors: list[FormatError]) -> ParsedTurn:
    if len(answers) > 1:
        errors.append(FormatError("several_answers", "Give exactly one <answer>; only the first was used.", fatal=False))
    first = answers[0]
    if not first.closed:
        errors.append(FormatError("unclosed_answer", "The <answer> block is not closed with </answer>.", True))
    elif not first.body:
        errors.append(FormatError("empty_answer", "The <answer> block is empty.", fatal=True))
    return _finish(content, reasoning, None, first.body, errors)


def _tool_call_turn(
    content: str, reasoning: str, calls: list[_Block], tool_names: set[str], errors: list[FormatError]
) -> ParsedTurn:
    """The first call that decodes to a known tool with object arguments runs; the others are recorded."""
    if len(calls) > 1:
        errors.append(FormatError("several_calls", "Call exactly one tool per turn; only the first valid call was used.", False))
    attempts: list[list[FormatError]] = []
    for block in calls:
        found: list[FormatError] = []
        if not block.complete:  # cut off inside its JSON (the turn ran out of tokens): never run half a call
            found.append(FormatError("truncated_call", "The tool call is cut off before its JSON ends.", fatal=True))
            attempts.append(found)
            continue
        if not block.closed:
            found.append(FormatError("unclosed_call", "The <tool_call> block is not closed with </tool_call>.", False))
        call = decode_call(block.body, tool_names, found)
        if call is not None:
            for earlier in attempts:  # broken calls before the valid one: recorded, not fatal
                errors.append(FormatError("skipped_call", "A broken call was skipped: " + earlier[-1].message, False))
            return _finish(content, reasoning, call, None, errors + found)
        attempts.append(found)
    return _finish(content, reasoning, None, None, errors + attempts[0])


def _finish(
    content: str, reasoning: str, call: ToolCall | None, answer: str | None, errors: list[FormatError]
) -> ParsedTurn:
    """The parsed turn; a usable turn with errors gets the canonical text for the history."""
    usable = not any(error.fatal for error in errors)
    history = content
    if usable and errors:
        history = canonical_turn(reasoning, tool_call=call, answer=answer)
    return ParsedTurn(history, content, reasoning, call, answer if usable else None, tuple(errors))


def decode_call(raw: str, tool_names: set[str], errors: list[FormatError]) -> ToolCall | None:
    """Decode a ``<tool_call>`` body into a call of a known tool, appending what was wrong to ``errors``.

    Leniency, in order: strict JSON; json5 (what the reference accepts); json-repair (Python literals, missing
    brackets, code fences, unescaped quotes); then the call's shape: a one-element list, an OpenAI-style
    ``{"function": {...}}`` wrapper, ``parameters`` for ``arguments``, and ``arguments`` as a JSON string.
    Returns None (with a fatal error appended) when no call can be read.
    """
    payload, leniency = _load_lenient(raw)
    if payload is None:
        errors.append(FormatError("invalid_json", "The tool call is not valid JSON.", fatal=True))
        return None
    if leniency:
        errors.append(leniency)
    payload, reshaped = _unwrap_call(payload)
    if reshaped:
        errors.append(FormatError("call_shape", f'The tool call is not {{"name": ..., "arguments": ...}}: {reshaped}.', False))
    if not isinstance(payload, dict) or "name" not in payload or "arguments" not in payload:
        errors.append(FormatError("missing_fields", 'The tool call must be {"name": <tool>, "arguments": {...}}.', True))
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
    return ToolCall(name, arguments)


def _load_lenient(raw: str) -> tuple[Any, FormatError | None]:
    """(value, the leniency it needed or None); value None when nothing reads ``raw`` as an object or array."""
    try:
        return json.loads(raw), None
    except ValueError:
        pass
    try:
        value = json5.loads(raw)
        if isinstance(value, (dict, list)):
            return value, FormatError("lenient_json", "The tool call is json5, not strict JSON.", fatal=False)
    except ValueError:
        pass
    fenced = _CODE_FENCE_RE.match(raw)
    text = fenced.group(1) if fenced else raw
    value = json_repair.loads(text) if text.strip() else None
    if isinstance(value, (dict, list)) and value:
        return value, FormatError("repaired_json", "The tool call is not valid JSON (repaired).", fatal=False)
    return None, None


def _unwrap_call(payload: Any) -> tuple[Any, str]:
    """Undo the call shapes small models write instead of ``{"name", "arguments"}``; says which one it undid."""
    if isinstance(payload, list) and len(payload) == 1 and isinstance(payload[0], dict):
        return _unwrap_call(payload[0])[0], "a list around the call"
    if isinstance(payload, dict) and "name" not in payload and isinstance(payload.get("function"), dict):
        return _unwrap_call(payload["function"])[0], "a function object around the call"
    if isinstance(payload, dict) and "arguments" not in payload and "parameters" in payload:
        return {**payload, "arguments": payload["parameters"]}, "parameters in place of arguments"
    return payload, ""
