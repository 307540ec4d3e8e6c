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
from dataclasses import dataclass, field
from datetime import date as Date
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

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
#: Generation stops here (PROTOCOL.md, "Decoding and limits"); the end-of-turn token stops it too.
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


def assistant_content(generated: str) -> str:
    """The assistant message for text generated after the ``<think>\\n`` generation prompt.

    The prompt already opened the reasoning block, so the message is ``<think>\\n`` + the generated text, cut at
    the first stop string (as the reference ``_sanitize_content`` does).
    """
    for stop in STOP_STRINGS:
        cut = generated.find(stop)
        if cut != -1:
            generated = generated[:cut]
    return f"{THINK_OPEN}\n{generated}"


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


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: ``{"name": name, "arguments": arguments}``."""

    name: str
    arguments: Any

    def key(self) -> str:
        """Identity for duplicate detection: name and arguments, keys sorted (reference ``_tool_call_key``)."""
        return json.dumps({"name": self.name, "arguments": self.arguments}, sort_keys=True, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class FormatError:
    """One way a turn departs from the trained format.

    Attributes:
        code: a stable identifier (``missing_think``, ``invalid_json``, ...).
        message: the explanation, written so it can be shown to the model.
        fatal: the turn cannot be acted on (the reference loop retries it); a non-fatal error only fails the
            strict RL format check.
    """

    code: str
    message: str
    fatal: bool

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "fatal": self.fatal}


@dataclass(frozen=True)
class ParsedTurn:
    """A model turn split into its parts.

    Attributes:
        content: the assistant message as it goes into the history (``<think>\\n`` + generated text, stop-cut).
        reasoning: the text inside the reasoning block ('' if none).
        tool_call: the call to execute, or None.
        answer: the final answer text, or None.
        errors: every format error found; ``usable`` is False if any is fatal.
    """

    content: str
    reasoning: str
    tool_call: ToolCall | None
    answer: str | None
    errors: tuple[FormatError, ...] = field(default_factory=tuple)

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


_BLOCK_RE = {
    "tool_call": re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL),
    "answer": re.compile(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), re.DOTALL),
}


def parse_turn(content: str, tool_names: Iterable[str]) -> ParsedTurn:
    """Parse one assistant message (``<think>\\n...``) tolerantly.

    Tolerated, recorded as non-fatal errors: text before ``<think>``, an unclosed ``<think>`` (the reasoning is
    taken to end at the first ``<tool_call>`` or ``<answer>``), a tool call written inside the reasoning when none
    follows it, more than one tool call (the first is used), text after the closing tag, a JSON string as
    ``arguments``.
    Fatal (the turn is retried): no reasoning block at all, both or neither of answer and tool call, invalid
    JSON, a call without ``name`` or dict ``arguments``, an unknown tool, an empty or unclosed answer.

    Args:
        content: the assistant message (see ``assistant_content``).
        tool_names: the names of the tools of the session.
    """
    errors: list[FormatError] = []
    reasoning, tail = _split_reasoning(content, errors)
    if reasoning is None:
        return ParsedTurn(content, "", None, None, tuple(errors))

    calls = _BLOCK_RE["tool_call"].findall(tail)
    answers = _BLOCK_RE["answer"].findall(tail)
    if not calls and not answers:
        inner_calls = _BLOCK_RE["tool_call"].findall(reasoning)
        if inner_calls:
            errors.append(FormatError("call_in_reasoning", "The tool call is inside <think></think>.", fatal=False))
            calls = inner_calls[:1]
    if calls and answers:
        errors.append(FormatError("ambiguous", "A turn must hold either one <tool_call> or one <answer>, not both.", True))
        return ParsedTurn(content, reasoning, None, None, tuple(errors))
    if answers:
        return _answer_turn(content, reasoning, tail, answers, errors)
    if calls:
        return _tool_call_turn(content, reasoning, tail, calls, set(tool_names), errors)
    if ANSWER_OPEN in tail:
        errors.append(FormatError("unclosed_answer", "The <answer> block is not closed with </answer>.", True))
    else:
        errors.append(
            FormatError("no_action", "After </think>, call a tool in <tool_call></tool_call> or answer in <answer></answer>.", True)
        )
    return ParsedTurn(content, reasoning, None, None, tuple(errors))


def _split_reasoning(content: str, errors: list[FormatError]) -> tuple[str | None, str]:
    start = content.find(THINK_OPEN)
    if start == -1:
        errors.append(FormatError("missing_think", "The turn must start with <think>.", fatal=True))
        return None, content
    if content[:start].strip():
        errors.append(FormatError("text_before_think", "There is text before <think>.", fatal=False))
    body = content[start + len(THINK_OPEN):]
    if body.count(THINK_OPEN) or content.count(THINK_CLOSE) > 1:
        errors.append(FormatError("unbalanced_think", "<think> tags are not balanced.", fatal=False))
    end = body.rfind(THINK_CLOSE)
    if end != -1:
        return body[:end].strip(), body[end + len(THINK_CLOSE):]
    # Unclosed reasoning: it ends where the first action starts (reference _sanitize_content).
    errors.append(FormatError("unclosed_think", "The <think> block is not closed with </think>.", fatal=False))
    cut = min((p for p in (body.find(TOOL_CALL_OPEN), body.find(ANSWER_OPEN)) if p != -1), default=len(body))
    return body[:cut].strip(), body[cut:]


def _answer_turn(content: str, reasoning: str, tail: str, answers: list[str], errors: list[FormatError]) -> ParsedTurn:
    if len(answers) > 1:
        errors.append(FormatError("several_answers", "Give exactly one <answer>.", fatal=False))
    before, _, after = tail.partition(ANSWER_OPEN)
    if before.strip():
        errors.append(FormatError("text_before_action", "There is text between </think> and <answer>.", fatal=False))
    if after.split(ANSWER_CLOSE, 1)[-1].strip():
        errors.append(FormatError("text_after_action", "There is text after </answer>.", fatal=False))
    answer = answers[0].strip()
    if not answer:
        errors.append(FormatError("empty_answer", "The <answer> block is empty.", fatal=True))
    return ParsedTurn(content, reasoning, None, answer, tuple(errors))


def _tool_call_turn(
    content: str, reasoning: str, tail: str, calls: list[str], tool_names: set[str], errors: list[FormatError]
) -> ParsedTurn:
    if len(calls) > 1:
        errors.append(FormatError("several_calls", "Call exactly one tool per turn; only the first call was used.", False))
    before, _, after = tail.partition(TOOL_CALL_OPEN)
    if TOOL_CALL_OPEN in tail and before.strip():
        errors.append(FormatError("text_before_action", "There is text between </think> and <tool_call>.", fatal=False))
    if TOOL_CALL_OPEN in tail and after.split(TOOL_CALL_CLOSE, 1)[-1].strip():
        errors.append(FormatError("text_after_action", "There is text after </tool_call>.", fatal=False))
    call = _decode_call(calls[0].strip(), tool_names, errors)
    return ParsedTurn(content, reasoning, call, None, tuple(errors))


def _decode_call(raw: str, tool_names: set[str], errors: list[FormatError]) -> ToolCall | None:
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as exc:
        errors.append(FormatError("invalid_json", f"The tool call is not valid JSON ({exc.msg} at char {exc.pos}).", True))
        return None
    if not isinstance(payload, dict) or "name" not in payload or "arguments" not in payload:
        errors.append(
            FormatError("missing_fields", 'The tool call must be {"name": <tool>, "arguments": {...}}.', fatal=True)
        )
        return None
    name, arguments = payload["name"], payload["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
            errors.append(FormatError("string_arguments", "arguments should be a JSON object, not a string.", False))
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        errors.append(FormatError("arguments_not_object", "arguments must be a JSON object.", fatal=True))
        return None
    if name not in tool_names:
        errors.append(FormatError("unknown_tool", unknown_tool_message(name, sorted(tool_names)), fatal=True))
        return None
    return ToolCall(str(name), arguments)


def check_format(content: str, tool_names: Iterable[str]) -> list[FormatError]:
    """The RL format check: every error ``parse_turn`` finds (an empty list means well formed)."""
    return list(parse_turn(content, tool_names).errors)


# --------------------------------------------------------------------------------------------------- strict mode


@dataclass(frozen=True)
class GrammarLimits:
    """Length bounds of a strict-mode turn, in characters. A small model fills an unbounded field until
    ``max_tokens`` and never closes the turn (TEST_MODELS.md, "Strict turns with a grammar"). llama.cpp expands
    ``x{1,n}`` into n nested rules and its cost grows faster than n: SmolLM2-135M decoded 52 tok/s with a
    200-character reasoning bound and 2.4 tok/s with 600 (measured here)."""

    reasoning_chars: int = 256
    string_chars: int = 100
    list_items: int = 3
    answer_chars: int = 256


def turn_grammar(
    tool_schemas: Iterable[Mapping[str, Any]],
    limits: GrammarLimits = GrammarLimits(),
    *,
    actions: Literal["call", "answer", "either"] = "either",
) -> str:
    """A GBNF grammar (llama.cpp ``grammars/README.md``) for one well-formed turn, generated after ``<think>\\n``.

    The turn is: reasoning without ``<`` ending in one newline, ``</think>\\n\\n``, then either exactly one ``<tool_call>`` whose JSON
    names a tool of the session with its arguments in schema order, or one non-empty ``<answer>``; ``actions``
    narrows the choice to one of the two.
    Supported argument types: string, integer, number, boolean, and arrays of those.

    Raises:
        ValueError: a schema property of a type the grammar cannot express.
    """
    rules = {
        "root": 'reasoning "</think>\\n\\n" ' + {"call": "call", "answer": "answer", "either": "( call | answer )"}[actions],
        # No newline at either end and one before </think>: the text then renders back unchanged through the
        # template (which strips the reasoning's newlines), so its sampled tokens stay in the KV cache.
        "reasoning": f'[^<\\n] ( [^<]{{0,{limits.reasoning_chars - 2}}} [^<\\n] )? "\\n"',
        "answer": f'"<answer>\\n" [^<]{{1,{limits.answer_chars}}} "\\n</answer>"',
        "string": f'"\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/bfnrt] ){{1,{limits.string_chars}}} "\\""',
        "integer": '"-"? [0-9]{1,12}',
        "number": '"-"? [0-9]{1,12} ( "." [0-9]{1,6} )?',
        "boolean": '"true" | "false"',
    }
    calls = []
    for schema in tool_schemas:
        function = schema["function"]
        name = function["name"]
        rule = "args-" + re.sub(r"[^a-zA-Z0-9]", "-", name)
        rules[rule] = _arguments_rule(function.get("parameters", {}), limits)
        calls.append(f'"<tool_call>\\n{{\\"name\\": \\"{name}\\", \\"arguments\\": " {rule} "}}\\n</tool_call>"')
    rules["call"] = " | ".join(calls) if calls else '"<tool_call>"'
    return "\n".join(f"{key} ::= {value}" for key, value in rules.items()) + "\n"


def _arguments_rule(parameters: Mapping[str, Any], limits: GrammarLimits) -> str:
    properties: Mapping[str, Any] = parameters.get("properties", {})
    required = [key for key in properties if key in parameters.get("required", [])]
    parts = []
    for index, key in enumerate(required):
        spec = properties[key]
        value = _value_rule(key, spec, limits)
        separator = '", "' if index else ""
        parts.append(f'{separator} "\\"{key}\\": " {value}'.strip())
    body = " ".join(parts)
    return f'"{{" {body} "}}"' if body else '"{}"'


def _value_rule(key: str, spec: Mapping[str, Any], limits: GrammarLimits) -> str:
    kind = spec.get("type")
    if kind == "array":
        item = spec.get("items", {}).get("type", "string")
        if item not in ("string", "integer", "number", "boolean"):
            raise ValueError(f"strict mode cannot express arrays of {item!r} (argument {key!r})")
        return f'"[" {item} ( ", " {item} ){{0,{limits.list_items - 1}}} "]"'
    if kind in ("string", "integer", "number", "boolean"):
        return str(kind)
    raise ValueError(f"strict mode cannot express argument {key!r} of type {kind!r}")
