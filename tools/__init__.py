"""The pluggable tool layer: the Tool interface, the registry, search and visit over a local corpus or the web,
and record/replay of tool calls."""

from venus_edge.tools.base import (
    ENTRY_POINT_GROUP,
    TextCompleter,
    Tool,
    ToolArgumentError,
    ToolAttempt,
    ToolFailure,
    ToolRegistry,
    ToolResult,
    load_entry_point_tools,
    validate_arguments,
)
from venus_edge.tools.corpus import Corpus, CorpusError, Document, DocumentNotFoundError, EmptyCorpusError, Hit
from venus_edge.tools.fetch import FetchError, FetchLimits
from venus_edge.tools.pdf import PdfError
from venus_edge.tools.replay import RecordingTool, ReplayTool, ToolCache
from venus_edge.tools.search import SEARCH_SCHEMA, BackendAttempt, CorpusSearchBackend, SearchBackend, SearchTool
from venus_edge.tools.visit import VISIT_SCHEMA, VisitTool
from venus_edge.tools.web_search import DdgsSearchBackend, SearchAttempt, WebSearchError

__all__ = [
    "ENTRY_POINT_GROUP",
    "SEARCH_SCHEMA",
    "VISIT_SCHEMA",
    "BackendAttempt",
    "Corpus",
    "CorpusError",
    "CorpusSearchBackend",
    "DdgsSearchBackend",
    "Document",
    "DocumentNotFoundError",
    "EmptyCorpusError",
    "FetchError",
    "FetchLimits",
    "Hit",
    "PdfError",
    "RecordingTool",
    "ReplayTool",
    "SearchAttempt",
    "SearchBackend",
    "SearchTool",
    "TextCompleter",
    "Tool",
    "ToolArgumentError",
    "ToolAttempt",
    "ToolCache",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "VisitTool",
    "WebSearchError",
    "load_entry_point_tools",
    "validate_arguments",
]
