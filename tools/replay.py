"""Record tool calls to disk and replay them byte for byte, so sessions, tests and benchmarks need no network.

A call is keyed by the tool name and its arguments coerced to the tool's schema (``base.coerce_arguments``:
``{"query": "q"}`` and ``{"query": ["q"]}`` are the same call, as the tools treat them the same), written as
``base.call_key`` (the agent's duplicate-call guard uses the same text); the record's name is the SHA-256 of
that text. Each record is one JSON file, ``{cache_dir}/{tool}/{key[:2]}/{key}.json``, holding the tool, the
coerced arguments and the ``ToolResult`` (text, visited URLs, typed failures). Files are written with
``ensure_ascii=True`` so any Python string, lone surrogates included, comes back identical, and renamed into
place so a crash never leaves half a record. A record carries the SHA-256 of its content (tool, arguments,
result as canonical JSON); one that is not JSON, lacks a field or fails its checksum is damaged: it is never
served, a warning is logged, ``RecordingTool`` calls the live tool and records it again, and ``ReplayTool``
answers with a ``not_recorded`` failure that says the record is damaged. Records of format 1 (before the
checksum) are still read.

``RecordingTool`` wraps a live tool and records every call (``reuse=True`` also answers repeated calls from the
cache). ``ReplayTool`` answers only from the cache; a call never recorded gets an observation saying so and a
``not_recorded`` ``ToolFailure``, never an exception.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from venus_edge.tools.base import (
    Deadline,
    Tool,
    ToolFailure,
    ToolResult,
    arguments_schema,
    call_key,
    coerce_arguments,
    takes_deadline,
)

__all__ = ["RecordingTool", "ReplayTool", "ToolCache"]

RECORD_FORMAT_VERSION = 2  # 2: the record carries the SHA-256 of its content
logger = logging.getLogger(__name__)
NOT_RECORDED_TEMPLATE = (
    "No recorded result for this {tool} call: the session is being replayed from a recording, and this call "
    "(arguments {arguments}) was not made when it was recorded. Only calls made in the recorded session can be "
    "answered."
)


def record_name(name: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of ``call_key(name, arguments)``, arguments already coerced: the record's file name."""
    return hashlib.sha256(call_key(name, arguments).encode("ascii")).hexdigest()


def _content_sha256(content: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a record's content as canonical JSON (sorted keys, ASCII)."""
    return hashlib.sha256(json.dumps(content, ensure_ascii=True, sort_keys=True).encode("ascii")).hexdigest()


class ToolCache:
    """The on-disk records of tool calls under ``cache_dir`` (created on first write)."""

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.cache_dir = Path(cache_dir)

    def path(self, name: str, key: str) -> Path:
        return self.cache_dir / name / key[:2] / f"{key}.json"

    def get(self, name: str, arguments: Mapping[str, Any]) -> ToolResult | None:
        """The recorded result of ``name(arguments)`` (arguments coerced), or ``None`` (none, or damaged)."""
        return self.lookup(name, arguments)[0]

    def lookup(self, name: str, arguments: Mapping[str, Any]) -> tuple[ToolResult | None, str | None]:
        """(the recorded result or None, why a record that is there cannot be served or None)."""
        path = self.path(name, record_name(name, arguments))
        if not path.is_file():
            return None, None
        try:
            record = json.loads(path.read_text(encoding="ascii"))
            content = {key: record[key] for key in ("tool", "arguments", "result")}
            if record.get("version", 1) >= 2 and record.get("sha256") != _content_sha256(content):
                raise ValueError("its content does not match its SHA-256")
            result = record["result"]
            return ToolResult(
                text=str(result["text"]),
                visited_urls=tuple(str(url) for url in result["visited_urls"]),
                failures=tuple(ToolFailure(**failure) for failure in result["failures"]),
            ), None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
            problem = f"the record {path} is damaged ({type(exc).__name__}: {exc})"
            logger.warning("%s; it is not served", problem)
            return None, problem

    def put(self, name: str, arguments: Mapping[str, Any], result: ToolResult) -> Path:
        """Record ``result`` for ``name(arguments)`` (arguments coerced), replacing any earlier record."""
        path = self.path(name, record_name(name, arguments))
        content = {
            "tool": name,
            "arguments": arguments,
            "result": {
                "text": result.text,
                "visited_urls": list(result.visited_urls),
                "failures": [failure.to_dict() for failure in result.failures],
            },
        }
        record = {"version": RECORD_FORMAT_VERSION, **content, "sha256": _content_sha256(content)}
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="ascii", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump(record, f, ensure_ascii=True, sort_keys=True, indent=1)
        os.replace(f.name, path)
        return path

    def __len__(self) -> int:
        return sum(1 for _ in self.cache_dir.glob("*/*/*.json"))


class RecordingTool:
    """Wrap a live tool and record each call's ``ToolResult`` on disk.

    Args:
        tool (`Tool`): the live tool; its ``name``, ``schema`` and the optional ``arguments_schema`` and ``listed``
            (``tools.base.Tool``) are this tool's.
        cache_dir (`str | PathLike`): where records are written.
        reuse (`bool`, default `False`): answer a call already recorded from the record instead of the live
            tool (a read-through cache); by default every call goes to the live tool and overwrites its record.
    """

    def __init__(self, tool: Tool, cache_dir: str | os.PathLike[str], *, reuse: bool = False) -> None:
        self.tool = tool
        self.name = tool.name
        self.schema = tool.schema
        self.arguments_schema = arguments_schema(tool)
        self.listed: bool = getattr(tool, "listed", True)
        self.cache = ToolCache(cache_dir)
        self.reuse = reuse

    def __call__(self, arguments: dict[str, Any], *, deadline: Deadline | None = None) -> ToolResult:
        """The live tool's result (given ``deadline`` when it takes one), recorded."""
        coerced = coerce_arguments(self.arguments_schema, arguments).arguments
        if self.reuse and (recorded := self.cache.get(self.name, coerced)) is not None:
            return recorded
        keywords = {"deadline": deadline} if deadline is not None and takes_deadline(self.tool) else {}
        result = self.tool(coerced, **keywords)
        self.cache.put(self.name, coerced, result)
        return result

    def failure_result(self, arguments: dict[str, Any], failure: ToolFailure) -> ToolResult:
        """The live tool's text for an abandoned call (its ``failure_result``), or a short error text."""
        failure_result = getattr(self.tool, "failure_result", None)
        if callable(failure_result):
            result: ToolResult = failure_result(arguments, failure)
            return result
        return ToolResult(f"Error: the {self.name} tool did not finish: {failure.detail}.", failures=(failure,))

    def close(self) -> None:
        """Close the live tool, if it has anything to close (visit's HTTP client)."""
        close = getattr(self.tool, "close", None)
        if callable(close):
            close()


class ReplayTool:
    """Answer calls of tool ``name`` from the records in ``cache_dir`` only; nothing live is called.

    Args:
        name (`str`): the tool name, as recorded.
        schema (`dict`): the tool's schema (rendered into the system prompt; it must match the recording's tool
            so the model sees the same prompt).
        cache_dir (`str | PathLike`): where the records are.
        arguments (`dict`, optional): the schema the arguments are coerced to, when it is not ``schema`` (the
            recorded tool's ``arguments_schema``).
        listed (`bool`, default `True`): whether the system prompt lists the tool (the recorded tool's ``listed``).
    """

    def __init__(self, name: str, schema: dict[str, Any], cache_dir: str | os.PathLike[str], *,
                 arguments: dict[str, Any] | None = None, listed: bool = True) -> None:
        if schema.get("function", {}).get("name") != name:
            raise ValueError(f"schema names tool {schema.get('function', {}).get('name')!r}, not {name!r}")
        self.name = name
        self.schema = schema
        self.arguments_schema = arguments or schema
        self.listed = listed
        self.cache = ToolCache(cache_dir)

    @classmethod
    def like(cls, tool: Tool, cache_dir: str | os.PathLike[str]) -> ReplayTool:
        """A replay tool with the name, schemas and listing of ``tool`` (which is never called)."""
        return cls(tool.name, tool.schema, cache_dir, arguments=arguments_schema(tool),
                   listed=getattr(tool, "listed", True))

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        coerced = coerce_arguments(self.arguments_schema, arguments).arguments
        recorded, problem = self.cache.lookup(self.name, coerced)
        if recorded is not None:
            return recorded
        shown = json.dumps(coerced, ensure_ascii=False, sort_keys=True)
        text = NOT_RECORDED_TEMPLATE.format(tool=self.name, arguments=shown)
        detail = problem or f"no record in {self.cache.cache_dir}"
        return ToolResult(text, failures=(ToolFailure("not_recorded", shown, detail),))
