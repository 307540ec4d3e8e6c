"""Rendering DR-Venus's wire protocol: the tags, the system prompt, the ChatML conversation and the
observations, byte-exact.

Sources (see ``shared/PROTOCOL.md``): the system prompt and the forced-answer notices follow DR-Venus
``Inference/run_demo.py`` in the ``inference`` observation style and the released RL rollouts in the ``rl`` style
(``tools.observation_styles`` holds what the two styles render differently); the rendering rules follow the Qwen3 chat
template (``Qwen-Qwen3-0.6B.jinja`` in llama.cpp's ``models/templates``) with the Thinking-2507 generation prompt,
which opens ``<think>\\n``; the format check follows ``RL/verl/utils/reward_score/format_checker.py`` as summarized
in PROTOCOL.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date as Date
from typing import Any, Literal

from venus_edge.tools.observation_styles import (
    DEFAULT_OBSERVATION_STYLE,
    OBSERVATION_STYLES,
    ObservationStyle,
    ProtocolStyle,
    observation_style,
    protocol_style,
    search_hit,
)
from venus_edge.tools.python_interpreter import PYTHON_INTERPRETER_NAME, PYTHON_INTERPRETER_SCHEMA

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "CONTEXT_LIMIT_NOTICE",
    "CONTROL_TOKEN_OPEN",
    "DATE_LINE_PREFIX",
    "DEFAULT_OBSERVATION_STYLE",
    "FORMAT_ERROR_NOTICE",
    "GENERATION_PROMPT",
    "IM_END",
    "IM_START",
    "OBSERVATION_STYLES",
    "PERSONA",
    "STEP_LIMIT_NOTICE",
    "STOP_STRINGS",
    "SUMMARY_NOTICE",
    "THINK_CLOSE",
    "THINK_OPEN",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "TOOL_RESPONSE_CLOSE",
    "TOOL_RESPONSE_OPEN",
    "LimitKind",
    "ObservationStyle",
    "ProtocolStyle",
    "format_error_message",
    "is_observation",
    "is_omitted_result",
    "limit_kind",
    "limit_message",
    "observation",
    "observation_style",
    "observation_text",
    "omitted_result",
    "prompt_tool_schemas",
    "protocol_style",
    "render_chat",
    "render_chat_parts",
    "render_messages",
    "render_parts",
    "render_system_prompt",
    "restart_question",
    "search_hit",
    "tokenize_message",
]

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

#: The last line of the system prompt starts so; the prompt cache keeps the KV state of all before it.
DATE_LINE_PREFIX = "Current date: "

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

# Observation texts of the reference inference loop (Inference/run_demo.py), verbatim; the RL loop's own are in
# ``tools.observation_styles`` with the rest of what the styles render differently.
FORMAT_ERROR_NOTICE = protocol_style("inference").format_error_notice
CONTEXT_LIMIT_NOTICE = protocol_style("inference").context_limit_notice
STEP_LIMIT_NOTICE = protocol_style("inference").step_limit_notice

Role = Literal["system", "user", "assistant"]

# Texts of our context policies (``venus_edge.policies``), not of the reference: DR-Venus never compacts its context.
# Written in the voice of the notices above, so that an observation still reads as the tool layer speaking.
SUMMARY_NOTICE = (
    "The context is nearly full. Write down everything you have found so far that helps answer the question: the "
    "facts, names, dates and numbers, the URL each came from, and what is still missing. Put these notes in "
    "`<answer></answer>` tags; the research will continue from them."
)
_OMITTED_PREFIX = "[Result omitted to free context: "
_OMITTED_SUFFIX = ". Call the tool again if you need it.]"
_RESTART_NOTES = "\n\nNotes from your research so far (earlier turns were removed to free context):\n"
_RESTART_SOURCES = "\n\nPages already read:\n"


def omitted_result(call: Mapping[str, Any]) -> str:
    """The stub that replaces a tool result dropped by the ``keep-last-k`` policy: it names the call (its query,
    or its URL and goal), so the model knows what it had and can call again. ``call`` is ``{"name", "arguments"}``."""
    arguments = call.get("arguments")
    shown: Any = arguments
    if isinstance(arguments, Mapping):
        shown = {key: arguments[key] for key in ("query", "url", "goal") if key in arguments} or dict(arguments)
    return f"{_OMITTED_PREFIX}{call.get('name')} {json.dumps(shown, ensure_ascii=False)}{_OMITTED_SUFFIX}"


def is_omitted_result(content: str) -> bool:
    """True for an observation message that is an ``omitted_result`` stub."""
    return is_observation(content) and content[len(TOOL_RESPONSE_OPEN) + 1:].startswith(_OMITTED_PREFIX)


def restart_question(question: str, notes: str, visited: Sequence[str]) -> str:
    """The user message a ``summarize`` restart begins with: the question, the model's notes, the pages read."""
    text = f"{question}{_RESTART_NOTES}{notes}"
    if visited:
        text += _RESTART_SOURCES + "\n".join(f"- {url}" for url in visited)
    return text



def render_system_prompt(tool_schemas: Iterable[Mapping[str, Any]], today: Date | str, *,
                         style: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> str:
    """Return the system message text: persona, ``# Tools`` block with one JSON schema per line, date line.

    Args:
        tool_schemas: OpenAI-style function objects, rendered with ``json.dumps`` default separators in order.
        today: the date for the ``Current date: YYYY-MM-DD`` line.
        style: the observation style (``tools.observation_styles``). ``inference`` ends the text with a newline, as the
            reference ``SYSTEM_PROMPT`` does; ``rl`` is the RL rollouts' system message byte for byte: the tools of
            ``prompt_tool_schemas``, each description written raw, and no newline after the date.
    """
    chosen = protocol_style(style)
    day = today.isoformat() if isinstance(today, Date) else str(today)
    schemas = "\n".join(_schema_line(schema, raw_description=chosen.raw_descriptions)
                        for schema in prompt_tool_schemas(tool_schemas, style=chosen))
    end = "\n" if chosen.prompt_final_newline else ""
    return f"{PERSONA}\n\n{_TOOLS_HEADER}{schemas}{_TOOLS_FOOTER}\n\n{DATE_LINE_PREFIX}{day}{end}"


def prompt_tool_schemas(tool_schemas: Iterable[Mapping[str, Any]], *,
                        style: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> list[Mapping[str, Any]]:
    """The tools the system prompt lists in ``style``: the session's, and in ``rl`` also ``PythonInterpreter``
    after them when the session has no tool of that name (the RL prompt always lists the three)."""
    listed = list(tool_schemas)
    names = {schema.get("function", {}).get("name") for schema in listed}
    if protocol_style(style).lists_python_interpreter and PYTHON_INTERPRETER_NAME not in names:
        listed.append(PYTHON_INTERPRETER_SCHEMA)
    return listed


def _schema_line(schema: Mapping[str, Any], *, raw_description: bool) -> str:
    """One tool's line of the ``<tools>`` block; ``raw_description`` writes the description unescaped, as the RL
    prompt does (its text is then no JSON where the description holds a line break or a double quote)."""
    line = json.dumps(schema, ensure_ascii=False)
    description = schema.get("function", {}).get("description")
    if raw_description and isinstance(description, str):
        key = f'"description": {json.dumps(description, ensure_ascii=False)}'
        line = line.replace(key, f'"description": "{description}"', 1)  # the function's: the first one written
    return line


LimitKind = Literal["context", "steps"]


def format_error_message(style: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> str:
    """The user message that answers a turn that could not be parsed (at its last attempt), in ``style``."""
    return observation(protocol_style(style).format_error_notice)


def limit_message(kind: LimitKind, style: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> str:
    """The user message that asks for the final answer at the context (``kind="context"``) or turn (``"steps"``)
    limit, in ``style``: inside ``<tool_response>`` (``inference``) or as a plain message (``rl``)."""
    chosen = protocol_style(style)
    notice = chosen.context_limit_notice if kind == "context" else chosen.step_limit_notice
    return observation(notice) if chosen.limit_notice_as_observation else notice


def limit_kind(content: str) -> LimitKind | None:
    """Which limit a user message (``limit_message``, of either style) announces, or None for any other."""
    for name in OBSERVATION_STYLES:
        if content == limit_message("context", name):
            return "context"
        if content == limit_message("steps", name):
            return "steps"
    return None


def observation(text: str) -> str:
    """Wrap a tool result as the user message that carries it: ``<tool_response>\\n{text}\\n</tool_response>``."""
    return f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}"


def observation_text(content: str) -> str:
    """The tool result inside an observation message (the inverse of ``observation``).

    Raises:
        ValueError: ``content`` is not an observation.
    """
    if not is_observation(content):
        raise ValueError(f"not a {TOOL_RESPONSE_OPEN} message: {content[:60]!r}")
    return content[len(TOOL_RESPONSE_OPEN) + 1: len(content) - len(TOOL_RESPONSE_CLOSE) - 1]


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
            is_last = index == len(messages) - 1
            parts.append(_render_assistant(content, keep_reasoning=index > last_query, is_last=is_last))
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
