"""venus-edge: run the DR-Venus deep-research agent in-process on llama.cpp.

    from venus_edge import Agent, LlamaCppEngine, default_tools
    engine = LlamaCppEngine("DR-Venus-4B-RL-Q4_K_M.gguf")
    result = Agent(engine, default_tools(["docs/"], completer=engine)).run("When was tomllib added?")

Every name a runtime module lists in its ``__all__`` is exported here (``protocol`` and ``testing`` are used as
modules: ``from venus_edge import protocol``), with the tool layer's ``Tool``, ``ToolResult`` and ``ToolError``.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

# Names load on first use, so that `venus-edge --help` and tools that only need the protocol stay light.
_MODULE_EXPORTS = {
    "agent": ("Agent", "AgentConfig", "Result", "SessionTotals"),
    "batched": ("BatchedLlamaCppEngine", "SequenceEngine"),
    "engine": ("Completion", "Engine", "GenerationStats", "LlamaCppEngine", "SamplingParams", "StopStream",
               "stream_generation"),
    "errors": ("ContextOverflowError", "ContextSettingsError", "EngineConnectionError", "EngineStateError",
               "GenerationCancelled", "MemoryPlanError", "ModelLoadError", "ModelNotFoundError", "TrajectoryError", "VenusEdgeError"),
    "events": ("ContextCompacted", "ErrorRaised", "Event", "LimitReached", "SessionFinished", "SessionStarted",
               "TextDelta", "ToolAttempted", "ToolCalled", "ToolReturned", "TurnCompleted", "TurnRetried", "TurnStarted"),
    "grammar": ("GrammarLimits",),
    "models": ("resolve_model",),
    "openai_engine": ("OpenAIEngine",),
    "prompt_cache": ("PromptCache", "PromptCacheCounts", "default_prompt_cache_dir", "stable_prefix_length"),
    "toolbox": ("MergedSearchBackend", "close_tools", "default_tools"),
    "trajectory": ("Journal", "SkippedLine", "Trajectory", "TrajectoryWriter", "read_journal", "read_trajectories"),
    "turn": ("Turn",),
    "vocab": ("Vocabulary",),
    "tools": ("Tool", "ToolError", "ToolResult"),
}
_EXPORTS = {name: module for module, names in _MODULE_EXPORTS.items() for name in names}

if _TYPE_CHECKING:
    from venus_edge.agent import Agent, AgentConfig, Result, SessionTotals
    from venus_edge.batched import BatchedLlamaCppEngine, SequenceEngine
    from venus_edge.engine import (
        Completion,
        Engine,
        GenerationStats,
        LlamaCppEngine,
        SamplingParams,
        StopStream,
        stream_generation,
    )
    from venus_edge.errors import (
        ContextOverflowError,
        ContextSettingsError,
        EngineConnectionError,
        EngineStateError,
        GenerationCancelled,
        MemoryPlanError,
        ModelLoadError,
        ModelNotFoundError,
        TrajectoryError,
        VenusEdgeError,
    )
    from venus_edge.events import (
        ContextCompacted,
        ErrorRaised,
        Event,
        LimitReached,
        SessionFinished,
        SessionStarted,
        TextDelta,
        ToolAttempted,
        ToolCalled,
        ToolReturned,
        TurnCompleted,
        TurnRetried,
        TurnStarted,
    )
    from venus_edge.grammar import GrammarLimits
    from venus_edge.models import resolve_model
    from venus_edge.openai_engine import OpenAIEngine
    from venus_edge.prompt_cache import PromptCache, PromptCacheCounts, default_prompt_cache_dir, stable_prefix_length
    from venus_edge.toolbox import MergedSearchBackend, close_tools, default_tools
    from venus_edge.tools import Tool, ToolError, ToolResult
    from venus_edge.trajectory import (
        Journal,
        SkippedLine,
        Trajectory,
        TrajectoryWriter,
        read_journal,
        read_trajectories,
    )
    from venus_edge.turn import Turn
    from venus_edge.vocab import Vocabulary


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'venus_edge' has no attribute {name!r}")
    return getattr(_importlib.import_module(f"venus_edge.{module}"), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = sorted(_EXPORTS)
