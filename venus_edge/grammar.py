"""Strict mode: a GBNF grammar of one well-formed DR-Venus turn, so that even a small model emits the protocol.

The turn shape is the one ``venus_edge.protocol`` parses (PROTOCOL.md, "A well-formed turn"); the grammar format is
llama.cpp's (``grammars/README.md``). Measured facts behind the bounds: TEST_MODELS.md, "Strict turns with a grammar".
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["GrammarLimits"]


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


#: What a strict turn may do: call a tool, answer, or either.
TurnActions = Literal["call", "answer", "either"]


def turn_grammar(
    tool_schemas: Iterable[Mapping[str, Any]],
    limits: GrammarLimits = GrammarLimits(),
    *,
    actions: TurnActions = "either",
) -> str:
    """A GBNF grammar (llama.cpp ``grammars/README.md``) for one well-formed turn, generated after ``<think>\\n``.

    The turn is: reasoning without ``<`` (no whitespace at its ends) then one newline, ``</think>\\n\\n``, then either
    exactly one ``<tool_call>`` whose JSON names a tool of the session with its arguments in schema order, or one
    ``<answer>`` that starts with a visible character (the parser's ``empty_answer`` can never be sampled); ``actions``
    narrows the choice to one of the two.
    Supported argument types: string, integer, number, boolean, and arrays of those; a string (or an array's string
    items) with an ``enum`` may only be one of its values (``with_choices``).

    Raises:
        ValueError: a schema property of a type the grammar cannot express.
    """
    rules = {
        "root": 'reasoning "</think>\\n\\n" '
        + {"call": "call", "answer": "answer", "either": "( call | answer )"}[actions],
        # No whitespace at either end and one newline before </think>: the text then renders back unchanged
        # through the stripped history and the template, so its sampled tokens stay in the KV cache.
        "reasoning": f'[^< \\t\\r\\n] ( [^<]{{0,{limits.reasoning_chars - 2}}} [^< \\t\\r\\n] )? "\\n"',
        # Starts with a visible character: a blank answer is what the parser calls ``empty_answer``.
        "answer": f'"<answer>\\n" [^< \\t\\r\\n] [^<]{{0,{limits.answer_chars - 1}}} "\\n</answer>"',
        # Starts with a letter, a digit or a non-ASCII character: a query of punctuation alone finds nothing.
        "string": f'"\\"" [^\\x00-\\x2f\\x3a-\\x40\\x5b-\\x60\\x7b-\\x7f] '
                  f'( [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/bfnrt] ){{0,{limits.string_chars - 1}}} "\\""',
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
        items = spec.get("items", {})
        item = items.get("type", "string")
        if item not in ("string", "integer", "number", "boolean"):
            raise ValueError(f"strict mode cannot express arrays of {item!r} (argument {key!r})")
        if items.get("enum"):
            item = _enum_rule(items["enum"])
        return f'"[" {item} ( ", " {item} ){{0,{limits.list_items - 1}}} "]"'
    if kind == "string" and spec.get("enum"):
        return _enum_rule(spec["enum"])
    if kind in ("string", "integer", "number", "boolean"):
        return str(kind)
    raise ValueError(f"strict mode cannot express argument {key!r} of type {kind!r}")


def _enum_rule(values: Sequence[Any]) -> str:
    """One of ``values`` as its JSON text, each a GBNF literal (``"`` and ``\\`` escaped)."""
    literals = (json.dumps(value, ensure_ascii=False) for value in values)
    return "( " + " | ".join('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"' for text in literals) + " )"


def with_choices(schema: Mapping[str, Any], argument: str, choices: Sequence[str]) -> dict[str, Any]:
    """A copy of a tool schema whose string ``argument`` (or its array's string items) may only take ``choices``
    (a JSON-schema ``enum``, which ``turn_grammar`` expresses); the schema itself unchanged when the tool has no
    such argument or ``choices`` is empty. For the grammar only: the system prompt keeps the tool's own schema."""
    narrowed = copy.deepcopy(dict(schema))
    spec = narrowed.get("function", {}).get("parameters", {}).get("properties", {}).get(argument)
    if not choices or not isinstance(spec, dict):
        return narrowed
    target = spec.get("items") if spec.get("type") == "array" else spec
    if isinstance(target, dict) and target.get("type", "string") == "string":
        target["enum"] = list(choices)
    return narrowed
