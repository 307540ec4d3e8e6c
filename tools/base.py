"""The tool interface, argument validation and the registry.

A tool is a name, a JSON schema (the exact object written into the system prompt's ``<tools>`` block) and one
call that returns observation text. A tool never raises into the agent loop for anything the model or the web
did wrong: those become observation text (``ToolResult.text``) and a typed ``ToolFailure``. Only misuse by the
program (bad construction, closed resources) raises. What a backend went through to answer (engines that were
rate limited, fallbacks, back-off sleeps) comes back as ``ToolAttempt``s, which the loop reports as events.

Every call runs under a ``Deadline``: the session's time limit and its cancel event. ``ToolRegistry.run`` runs a
call on a thread of its own and stops waiting for it ``TOOL_GRACE_S`` after the deadline (at once on cancel),
raising ``ToolTimeout`` or ``ToolCancelled``; the call is then abandoned (a thread cannot be killed). A tool whose
``__call__`` takes a ``deadline`` keyword (ours: ``search``, ``visit``, the recording wrapper) gets it and stops by
itself, returning what it has; a tool with a ``failure_result(arguments, failure)`` method says what the model sees
for a call that was abandoned (the protocol's failure text), others get a short error text.

Third-party tools register under the ``venus_edge.tools`` entry-point group; ``load_entry_point_tools`` finds
them. Arrows run one way: this package never imports the runtime (``venus_edge.engines``, ``venus_edge.agent``);
what a tool needs from the model it declares as a ``typing.Protocol`` here (``TextCompleter``).
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import json5

from venus_edge.text import valid_text
from venus_edge.tools.errors import ToolArgumentError, ToolCancelled, ToolInterrupted, ToolTimeout

__all__ = [
    "ENTRY_POINT_GROUP",
    "TOOL_GRACE_S",
    "Deadline",
    "PreparedCall",
    "TextCompleter",
    "Tool",
    "ToolAttempt",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "arguments_schema",
    "call_key",
    "coerce_arguments",
    "cut_note",
    "load_entry_point_tools",
    "split_cut_note",
    "takes_deadline",
    "validate_arguments",
]

ENTRY_POINT_GROUP = "venus_edge.tools"
#: Seconds a call may run past its deadline before ``ToolRegistry.run`` abandons it: room for a tool that takes the
#: deadline to notice it and return what it has.
TOOL_GRACE_S = 2.0
# How often a wait for a call looks at the cancel event, in seconds.
_CANCEL_POLL_S = 0.05


@dataclass(frozen=True)
class ToolFailure:
    """One typed failure inside a tool call; the model sees it only as observation text.

    Attributes:
        kind: one of ``refused_address``, ``blocked`` (401/403/407/429/451), ``timeout``, ``too_large``,
            ``empty`` (also a JavaScript-only page), ``not_text``, ``too_many_redirects``, ``http_error``,
            ``unreachable``, ``not_found``, ``bad_arguments``, ``backend_error``, ``not_recorded`` (replay of a
            call that was never recorded), ``cancelled`` (the session was cancelled during the call),
            ``too_many_urls`` (a URL past visit's ``max_urls_per_call``), ``code_error`` (code that ended with an
            error status or signal), ``not_found`` (a tool that is off in this session).
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


@dataclass(frozen=True)
class Deadline:
    """When a tool call must end: at a ``time.monotonic()`` instant, when a cancel event is set, or both; with
    neither, never.

    ``Deadline.after(30.0)`` ends 30 s from now; ``Deadline(cancel=event)`` ends when ``event`` is set. The agent
    gives every call the session's deadline (its start plus ``time_limit_s``) and cancel event.

    Attributes:
        at_s: the ``time.monotonic()`` value at which the call is over time, or None.
        cancel: set (from any thread) to stop the call, or None.
    """

    at_s: float | None = None
    cancel: threading.Event | None = None

    @classmethod
    def after(cls, seconds: float, cancel: threading.Event | None = None) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(time.monotonic() + seconds, cancel)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def left_s(self) -> float:
        """Seconds left (``math.inf`` without ``at_s``; 0.0 once past it or cancelled)."""
        if self.cancelled:
            return 0.0
        return math.inf if self.at_s is None else max(0.0, self.at_s - time.monotonic())

    def expired(self) -> bool:
        return self.left_s() <= 0.0

    def capped(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now, with the same cancel event."""
        at_s = time.monotonic() + seconds
        return Deadline(at_s if self.at_s is None else min(self.at_s, at_s), self.cancel)

    def interrupted(self, what: str) -> ToolInterrupted:
        """The error for ``what`` (a tool name) stopped by this deadline: ``ToolCancelled`` or ``ToolTimeout``."""
        if self.cancelled:
            return ToolCancelled(what, "the session was cancelled during the call")
        return ToolTimeout(what, "the call's time ran out (the session's time limit or the tool's own cap)")

    def failure(self, target: str) -> ToolFailure:
        """The ``ToolFailure`` of ``target`` (a URL, a query) left undone because this deadline passed."""
        error = self.interrupted("")
        return ToolFailure(error.kind, target, error.detail)


def takes_deadline(tool: Any) -> bool:
    """Whether ``tool``'s ``__call__`` takes a ``deadline`` keyword (it then stops by itself at the deadline)."""
    try:
        parameters = inspect.signature(tool).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return "deadline" in parameters and parameters["deadline"].kind in (
        inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def call_with_deadline(tool: Tool, arguments: dict[str, Any], deadline: Deadline, *,
                       grace_s: float = TOOL_GRACE_S) -> ToolResult:
    """``tool(arguments)`` (with ``deadline=`` when it takes one), abandoned when it overruns ``deadline``.

    The call runs on a daemon thread; this waits until it returns, the cancel event is set, or ``deadline.at_s``
    passes (plus ``grace_s`` for a tool that takes the deadline). A call whose deadline passed before it started is
    not started.

    Raises:
        ToolCancelled: the cancel event was set first (the call is abandoned).
        ToolTimeout: the deadline passed, plus the grace (the call is abandoned and runs on until it returns).
        Exception: whatever the tool raised.
    """
    if deadline.expired():
        raise deadline.interrupted(tool.name)
    if deadline.at_s is None and deadline.cancel is None:
        return tool(arguments)
    outcome: dict[str, Any] = {}
    done = threading.Event()

    keywords = {"deadline": deadline} if takes_deadline(tool) else {}

    def work() -> None:
        try:
            outcome["result"] = tool(arguments, **keywords)
        except BaseException as exc:  # handed to the caller, raised there
            outcome["error"] = exc
        finally:
            done.set()

    # A daemon thread: a call that never returns must not keep the process alive at exit.
    threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True).start()
    # The grace is for a tool that watches the deadline itself; another one cannot use it.
    give_up_s = math.inf if deadline.at_s is None else deadline.at_s + (grace_s if keywords else 0.0)
    while not done.is_set():
        if deadline.cancelled:
            raise ToolCancelled(tool.name, "the session was cancelled during the call; the call was abandoned")
        left = give_up_s - time.monotonic()
        if left <= 0:
            raise ToolTimeout(tool.name, "the call ran past the session's time limit; it was abandoned")
        done.wait(min(left, _CANCEL_POLL_S) if deadline.cancel is not None else left)
    if "error" in outcome:
        raise outcome["error"]
    result: ToolResult = outcome["result"]
    return result


@runtime_checkable
class Tool(Protocol):
    """A tool the agent can call.

    ``schema`` is the OpenAI-style function object rendered verbatim into the system prompt, e.g.
    ``{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}``.
    ``__call__`` receives arguments coerced by ``coerce_arguments`` and checked by ``validate_arguments``; when it
    also takes a keyword ``deadline`` (a ``Deadline``), it is given the session's and should stop by then.

    Two optional attributes: ``arguments_schema``, a schema of the same shape whose ``parameters`` the arguments are
    coerced to and checked against instead of ``schema``'s (``PythonInterpreter``: its prompt lists no argument, the
    parser puts the ``<code>`` block in ``code``); ``listed = False`` keeps a tool out of the system prompt and the
    grammar while its calls still run (a tool that is off and answers as the RL environment did).
    """

    name: str
    schema: dict[str, Any]

    def __call__(self, arguments: dict[str, Any]) -> ToolResult: ...


@runtime_checkable
class TextCompleter(Protocol):
    """The one thing a tool may ask of the local model (``visit``'s evidence and summary): complete a chat and
    return the text.

    Declared here, the tool layer's own protocol, so that this package imports no engine; every engine with the
    ``venus_edge.engines.base.TextCompleter`` ability (``LlamaCppEngine``, ``OpenAIEngine``) satisfies it.
    ``messages`` are ``{"role": ..., "content": ...}`` dicts; the return value is the assistant text with any
    reasoning block removed.
    """

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str: ...


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


def _is_type(value: Any, json_type: str | Sequence[str]) -> bool:
    """``value`` is of the JSON type (or of one of a union's types: ``["string", "null"]``)."""
    if not isinstance(json_type, str):
        return any(_is_type(value, one) for one in json_type)
    if json_type == "null":
        return value is None
    if json_type in ("integer", "number") and isinstance(value, bool):
        return False
    if json_type in ("integer", "number") and isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, _JSON_TYPES.get(json_type, (object,)))


def as_list(value: Any) -> list[Any]:
    """Normalize a bare value or a list into a list (``"a"`` -> ``["a"]``)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class PreparedCall:
    """A tool call with its arguments coerced to the tool's schema: what runs, what is recorded, what is compared.

    Attributes:
        name: the tool name.
        arguments: the coerced arguments (``coerce_arguments``).
        dropped: names of arguments outside the schema, dropped as the reference does (``_filter_args`` in
            DR-Venus Inference/run_demo.py); the model is not told.
        changes: one sentence per coercion made (a JSON-encoded list decoded, a renamed alias, ...).
    """

    name: str
    arguments: dict[str, Any]
    dropped: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The call's identity (``call_key``): the duplicate-call guard and the replay records both use it."""
        return call_key(self.name, self.arguments)


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call of ``name`` with already coerced ``arguments``: ``{"arguments", "tool"}`` as JSON,
    keys sorted, ASCII only (reference ``_tool_call_key``, with the tool name under ``tool``)."""
    return json.dumps({"tool": name, "arguments": arguments}, sort_keys=True, ensure_ascii=True)


def coerce_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> PreparedCall:
    """Coerce a call's arguments to the tool's JSON schema, the way the reference treats what models write.

    Rules (top-level properties): an argument outside ``properties`` is dropped, unless it is the plural or
    singular of a missing property (``queries``/``query``, ``urls``/``url``: SFT/data_clean/
    prepare_trajectories.py maps these); an ``array`` takes a list, a JSON- or Python-encoded list in a string
    (``"[\\"a\\", \\"b\\"]"``), or a bare value (wrapped); a ``string`` given a list takes its first item (as the
    reference cleaning does for ``goal``) and a number or boolean its JSON text; ``integer``, ``number`` and
    ``boolean`` read their JSON text from a string; an ``object`` decodes a JSON string. Array items are coerced
    to the item type. A value that fits no rule is kept as is, for ``validate_arguments`` to report.
    """
    function = schema.get("function", {})
    properties: Mapping[str, Any] = function.get("parameters", {}).get("properties", {})
    coerced: dict[str, Any] = {}
    dropped: list[str] = []
    changes: list[str] = []
    for key, value in valid_text(dict(arguments)).items():
        target = key if key in properties else _alias_of(key, properties, arguments)
        if target is None or target in coerced:  # outside the schema, or a second alias of one property
            dropped.append(key)
            continue
        if target != key:
            changes.append(f"{key} read as {target}")
        value, note = _coerce_value(value, properties[target])
        if note:
            changes.append(f"{target}: {note}")
        coerced[target] = value
    return PreparedCall(str(function.get("name", "")), coerced, tuple(dropped), tuple(changes))


def _alias_of(key: str, properties: Mapping[str, Any], given: Mapping[str, Any]) -> str | None:
    """The property that ``key`` names in the plural or singular, when that property was not given itself."""
    for name in properties:
        if name not in given and _singular(key) == _singular(name):
            return name
    return None


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _coerce_value(value: Any, spec: Mapping[str, Any]) -> tuple[Any, str]:
    """(value coerced to ``spec``'s type, a note of what changed or ''); a union type coerces to its first
    non-null member unless the value already has one of its types."""
    kind = spec.get("type")
    if isinstance(kind, list):
        if _is_type(value, kind):
            return value, ""
        kind = next((one for one in kind if one != "null"), None)
    if kind == "array":
        note = ""
        if isinstance(value, str) and (decoded := _decoded_text(value, list)) is not None:
            value, note = decoded, "a JSON-encoded list read as a list"
        elif not isinstance(value, (list, tuple)):
            value, note = [value], "a single value read as a one-item list"
        coerced = [_coerce_value(item, spec.get("items", {})) for item in value]
        item_notes = sorted({f"items: {item_note}" for _, item_note in coerced if item_note})
        return [item for item, _ in coerced], "; ".join(filter(None, [note, *item_notes]))
    if kind == "string" and not isinstance(value, str):
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], str):
            return value[0], "a list read as its first item"
        if isinstance(value, (int, float, bool, dict, list)):
            return json.dumps(value, ensure_ascii=False), "a non-string read as its JSON text"
    if kind == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true", f"the string {value!r} read as a boolean"
    if kind in ("integer", "number") and isinstance(value, str):
        decoded = _decoded_text(value, (int, float))
        decoded = _as_integer(decoded) if kind == "integer" else decoded
        if decoded is not None and _is_type(decoded, kind):
            return decoded, f"the string {value!r} read as a {kind}"
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value), "an integral number read as an integer"
    if kind == "object" and isinstance(value, str) and (decoded := _decoded_text(value, dict)) is not None:
        return decoded, "a JSON-encoded object read as an object"
    return value, ""


def _decoded_text(text: str, types: type | tuple[type, ...]) -> Any:
    """``text`` read as JSON (or json5: single quotes, as Python writes a list) when it holds one of ``types``."""
    for loads in (json.loads, json5.loads):
        try:
            value = loads(text.strip())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, types):
            return value
    return None


def _as_integer(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


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
        """The schemas of the system prompt: every tool's but those with ``listed = False``."""
        return [tool.schema for tool in self._tools.values() if getattr(tool, "listed", True)]

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

    def prepare(self, name: str, arguments: Mapping[str, Any]) -> PreparedCall:
        """``coerce_arguments`` with tool ``name``'s schema.

        Raises:
            KeyError: unknown tool.
        """
        return coerce_arguments(arguments_schema(self.get(name)), arguments)

    def run(self, call: PreparedCall, *, deadline: Deadline | None = None) -> ToolResult:
        """Validate the prepared arguments and call the tool, under ``deadline`` when given
        (``call_with_deadline``).

        Raises:
            KeyError: unknown tool.
            ToolArgumentError: arguments that do not fit the schema even after coercion (a missing required one,
                a wrong type).
            ToolInterrupted: the call overran ``deadline`` (``ToolTimeout``) or was cancelled (``ToolCancelled``)
                and was abandoned; ``interrupted_result`` gives what the model sees.
        """
        tool = self.get(call.name)
        validate_arguments(arguments_schema(tool), call.arguments)
        if deadline is None:
            return tool(call.arguments)
        return call_with_deadline(tool, call.arguments, deadline)

    def interrupted_result(self, call: PreparedCall, error: ToolInterrupted) -> ToolResult:
        """What an abandoned call returns: the tool's own failure text (``failure_result``) when it has one, else a
        short error text; its ``failures`` hold the interruption (kind ``timeout`` or ``cancelled``)."""
        failure = ToolFailure(error.kind, call.name, error.detail)
        failure_result = getattr(self.get(call.name), "failure_result", None)
        if callable(failure_result):
            result: ToolResult = failure_result(call.arguments, failure)
            return result
        return ToolResult(f"Error: the {call.name} tool did not finish: {error.detail}.", failures=(failure,))

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """``run(prepare(name, arguments))``."""
        return self.run(self.prepare(name, arguments))


def arguments_schema(tool: Tool) -> dict[str, Any]:
    """The schema ``tool``'s arguments are coerced to and checked against: its ``arguments_schema`` if it has one,
    else its ``schema``."""
    schema: dict[str, Any] = getattr(tool, "arguments_schema", None) or tool.schema
    return schema


_CUT_PREFIX = "[Cut to fit the context: "


def cut_note(detail: str) -> str:
    """The line a tool result cut to fit the context ends with, after a line break (``policies.fit_result``):
    ``[Cut to fit the context: {detail}.]``. Our text, not the reference's; it lives with the tool results because
    the tools read results back (``search.parse_search_observation``)."""
    return f"{_CUT_PREFIX}{detail}.]"


def split_cut_note(text: str) -> tuple[str, str | None]:
    """``text`` without the ``cut_note`` it ends with, and that note (None when it has none)."""
    start = text.rfind("\n" + _CUT_PREFIX)
    if start < 0 or not text.endswith(".]"):
        return text, None
    return text[:start], text[start + 1:]


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
