"""The tool interface, argument validation and the registry.

A tool is a name, a JSON schema (the exact object written into the system prompt's ``<tools>`` block) and one
call that returns observation text. A tool never raises into the agent loop for anything the model or the web
did wrong: those become observation text (``ToolResult.text``) and a typed ``ToolFailure``. Only misuse by the
program (bad construction, closed resources) raises. What a backend went through to answer (engines that were
rate limited, fallbacks, back-off sleeps) comes back as ``ToolAttempt``s, which the loop reports as events.

Third-party tools register under the ``venus_edge.tools`` entry-point group; ``load_entry_point_tools`` finds
them. Arrows run one way: this package never imports the runtime (``venus_edge.engine``, ``venus_edge.agent``);
what a tool needs from the model it declares as a ``typing.Protocol`` here (``TextCompleter``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

ENTRY_POINT_GROUP = "venus_edge.tools"


@dataclass(frozen=True)
class ToolFailure:
    """One typed failure inside a tool call; the model sees it only as observation text.

    Attributes:
        kind: one of ``refused_address``, ``blocked`` (401/403/407/429/451), ``timeout``, ``too_large``,
            ``empty`` (also a JavaScript-only page), ``not_text``, ``too_many_redirects``, ``http_error``,
            ``unreachable``, ``not_found``, ``bad_arguments``, ``backend_error``, ``not_recorded`` (replay of a
            call that was never recorded).
        target: the URL or query the failure is about.
        detail: a human-readable sentence.
    """

    kind: str
    target: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "target": self.target, "detail": self.detail}


@dataclass(frozen=True)
class ToolAttempt:
    """One try of a tool's backend (a search engine, say) that the agent loop reports as an event.

    Attributes:
        backend: what was tried, e.g. the search engine ``duckduckgo``.
        target: the URL or query tried.
        outcome: ``ok``, ``empty`` (answered, nothing found), ``rate_limited``, ``timeout`` or ``error``.
        detail: a human-readable sentence (the error text, or the number of results).
        waited_s: seconds slept (back-off) just before this attempt; 0.0 when it followed at once.
    """

    backend: str
    target: str
    outcome: str
    detail: str
    waited_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "target": self.target,
            "outcome": self.outcome,
            "detail": self.detail,
            "waited_s": self.waited_s,
        }


@dataclass(frozen=True)
class ToolResult:
    """What one tool call returns.

    Attributes:
        text: the observation exactly as the model will see it inside ``<tool_response>``.
        visited_urls: URLs whose content was actually read (the citation registry is built from these).
        failures: typed failures met during the call (empty when everything worked).
        attempts: backend attempts that did not simply succeed first time: fallbacks, rate limits, back-off
            waits, in the order they were made (empty when every backend answered on its first try).
    """

    text: str
    visited_urls: tuple[str, ...] = ()
    failures: tuple[ToolFailure, ...] = field(default_factory=tuple)
    attempts: tuple[ToolAttempt, ...] = ()


@runtime_checkable
class Tool(Protocol):
    """A tool the agent can call.

    ``schema`` is the OpenAI-style function object rendered verbatim into the system prompt, e.g.
    ``{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}``.
    ``__call__`` receives arguments already checked by ``validate_arguments`` and normalized by ``normalize``.
    """

    name: str
    schema: dict[str, Any]

    def __call__(self, arguments: dict[str, Any]) -> ToolResult: ...


@runtime_checkable
class TextCompleter(Protocol):
    """The one thing a tool may ask of the local model: complete a chat and return the text.

    Satisfied by ``venus_edge.engine.LlamaCppEngine.completer()`` without this package importing the engine.
    ``messages`` are ``{"role": ..., "content": ...}`` dicts; the return value is the assistant text with any
    reasoning block removed.
    """

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str: ...


class ToolArgumentError(ValueError):
    """Raised by ``validate_arguments`` when a call's arguments do not fit the tool's schema.

    The message is written for the model: it names the tool and the valid choices.
    """


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "array": (list,),
    "object": (dict,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> None:
    """Check a tool call's arguments against the tool's JSON schema (top-level properties only).

    Rules: ``arguments`` is an object; no property outside ``properties``; every ``required`` property present;
    each value has the declared type. An ``array`` property also accepts a bare value of its item type, since the
    reference tools accept a single string for ``query`` and ``url`` (PROTOCOL.md, "Tools and observation shapes").

    Raises:
        ToolArgumentError: with a message that names the tool, the offending property and the valid ones.
    """
    function = schema["function"]
    name = function["name"]
    params = function.get("parameters", {})
    properties: Mapping[str, Any] = params.get("properties", {})
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"Arguments of {name} must be a JSON object, got {type(arguments).__name__}.")
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolArgumentError(
            f"Unknown argument(s) {', '.join(unknown)} for tool {name}; valid arguments are: "
            f"{', '.join(properties)}."
        )
    missing = [key for key in params.get("required", []) if key not in arguments]
    if missing:
        raise ToolArgumentError(f"Missing required argument(s) {', '.join(missing)} for tool {name}.")
    for key, value in arguments.items():
        _check_type(name, key, properties[key], value)


def _check_type(tool: str, key: str, spec: Mapping[str, Any], value: Any) -> None:
    expected = spec.get("type")
    if expected is None:
        return
    if expected == "array":
        item_type = spec.get("items", {}).get("type")
        items = value if isinstance(value, list) else [value]
        if item_type and not all(_is_type(item, item_type) for item in items):
            raise ToolArgumentError(f"Argument {key} of {tool} must be a list of {item_type}s.")
        if not items or (spec.get("minItems", 0) > len(items)):
            raise ToolArgumentError(f"Argument {key} of {tool} must hold at least one item.")
        return
    if not _is_type(value, expected):
        raise ToolArgumentError(f"Argument {key} of {tool} must be a {expected}, got {type(value).__name__}.")


def _is_type(value: Any, json_type: str) -> bool:
    if json_type in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _JSON_TYPES.get(json_type, (object,)))


def as_list(value: Any) -> list[Any]:
    """Normalize a bare value or a list into a list (``"a"`` -> ``["a"]``)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


class ToolRegistry:
    """The tools of one session, by name, in the order their schemas appear in the system prompt."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique")
            if tool.schema.get("function", {}).get("name") != tool.name:
                raise ValueError(f"tool {tool.name!r} has a schema whose function name differs from its name")
            self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool:
        """Return the tool called ``name``.

        Raises:
            KeyError: naming the closest valid tool names.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(unknown_tool_message(name, self.names)) from None

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Validate ``arguments`` and call tool ``name``.

        Raises:
            KeyError: unknown tool.
            ToolArgumentError: arguments that do not fit the schema.
        """
        tool = self.get(name)
        validate_arguments(tool.schema, arguments)
        return tool(arguments)


def unknown_tool_message(name: str, valid: Sequence[str]) -> str:
    """The text shown to the model for an unknown tool name: the valid choices and the nearest one."""
    close = difflib.get_close_matches(str(name), list(valid), n=1)
    hint = f" Did you mean {close[0]}?" if close else ""
    return f"Unknown tool {name!r}, should be one of: {', '.join(valid)}.{hint}"


def load_entry_point_tools() -> dict[str, type]:
    """Return the tool classes registered under the ``venus_edge.tools`` entry-point group, by name.

    Loading does not instantiate: a class may need a corpus, a completer or an HTTP client first.
    """
    return {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
