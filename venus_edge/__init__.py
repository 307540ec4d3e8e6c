"""venus-edge: run the DR-Venus deep-research agent in-process on llama.cpp.

    from venus_edge import Agent, LlamaCppEngine, default_tools
    engine = LlamaCppEngine("DR-Venus-4B-RL-Q4_K_M.gguf")
    result = Agent(engine, default_tools(["docs/"], completer=engine)).run("When was tomllib added?")

Every name a runtime module (``venus_edge/*.py`` and the engines in ``venus_edge/engines/``) lists in its
``__all__`` is exported here, with the tool layer's ``Tool``, ``ToolResult`` and ``ToolError``; ``protocol``,
``memory``, ``eval``, ``server`` and ``bench`` are used as packages (``from venus_edge.memory import plan_memory``).
This module is the top of the import graph: it only exports lazily, and no module of the package imports it
(``tests/test_layers.py``).

The layers, lowest first (README, What is inside; an import may only point down or sideways):

0. ``tools``, ``protocol``, ``errors``, ``text`` (valid Unicode), the leaf formats ``grammar`` and ``jsonl``, and
   ``lazy`` (these exports)
1. ``memory``: the GGUF header reader, the memory planner, what the machine offers
2. ``engines`` (and ``testing``, whose scripted engine needs only ``engines.base``)
3. the agent: ``agent``, ``policies``, ``events``, ``result``, ``turn``, ``trajectory``, ``session_lock``,
   ``toolbox``; and ``quantize``
4. ``session`` (``SessionSettings``, ``open_session``), ``flags`` (the command line's session flags) and
   ``provenance`` (the record of what a run ran, for the reports)
5. ``eval``, ``server``, ``bench``
6. ``cli``, ``train``
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from venus_edge.lazy import LazyExports as _LazyExports

# Names load on first use, so that `venus-edge --help` and tools that only need the protocol stay light.
# Keys are module paths under venus_edge; the engines' names come from their modules in venus_edge.engines.
_MODULE_EXPORTS = {
    "agent": ("Agent", "AgentConfig", "default_answer_reserve", "resumable_session"),
    "result": ("NO_SOURCES", "TERMINATIONS", "Result", "SessionTotals", "Termination", "termination_of"),
    "engines.base": ("Completion", "Engine", "GenerationStats", "SamplingParams", "StopStream", "TextCompleter",
                     "ThreadControl", "stream_generation"),
    "engines.batched": ("BatchedLlamaCppEngine", "SequenceEngine"),
    "engines.decode": ("KVContext", "decode_loop", "sampler_chain"),
    "engines.llama_cpp": ("LlamaCppEngine",),
    "engines.models": ("resolve_model",),
    "engines.openai": ("OpenAIEngine",),
    "engines.speculative": ("DraftLength", "DraftModel", "Drafter", "ModelDrafter", "PromptLookup",
                             "check_same_vocabulary", "expected_tokens"),
    "engines.prompt_cache": ("PromptCache", "PromptCacheCounts", "default_prompt_cache_dir", "stable_prefix_length"),
    "engines.vocab": ("Vocabulary",),
    "errors": ("ContextOverflowError", "ContextSettingsError", "EngineConnectionError", "EngineStateError",
               "GenerationCancelled", "MemoryPlanError", "ModelLoadError", "ModelNotFoundError", "SessionLockedError",
               "TrajectoryError", "VenusEdgeError"),
    "events": ("PACE_ACTIONS", "ContextCompacted", "ErrorRaised", "Event", "LimitReached", "Paced", "SessionFinished",
               "SessionStarted", "TextDelta", "ToolAttempted", "ToolCalled", "ToolReturned", "TurnCompleted",
               "TurnRetried", "TurnStarted"),
    "grammar": ("GrammarLimits",),
    "pacing": ("PaceConfig", "Pacer"),
    "policies": ("POLICIES", "Compaction", "CompactionContext", "ContextPolicy", "ForceAnswer", "KeepLastK",
                 "Summarize", "fit_result", "make_policy"),
    "provenance": ("MachineInfo", "ModelFile", "RunRecord", "command_flags", "describe_run", "model_file_record"),
    "session_lock": ("SessionLock",),
    "toolbox": ("MergedSearchBackend", "close_tools", "default_tools"),
    "trajectory": ("Journal", "JournalReader", "SkippedLine", "Trajectory", "TrajectoryWriter", "read_journal",
                   "read_trajectories"),
    "turn": ("Turn",),
    "tools": ("Tool", "ToolError", "ToolResult"),
}
_EXPORTS = _LazyExports(__name__, _MODULE_EXPORTS)

if _TYPE_CHECKING:
    from venus_edge.agent import Agent, AgentConfig, default_answer_reserve, resumable_session
    from venus_edge.engines.base import (
        Completion,
        Engine,
        GenerationStats,
        SamplingParams,
        StopStream,
        TextCompleter,
        ThreadControl,
        stream_generation,
    )
    from venus_edge.engines.batched import BatchedLlamaCppEngine, SequenceEngine
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.engines.models import resolve_model
    from venus_edge.engines.openai import OpenAIEngine
    from venus_edge.engines.prompt_cache import (
        PromptCache,
        PromptCacheCounts,
        default_prompt_cache_dir,
        stable_prefix_length,
    )
    from venus_edge.engines.vocab import Vocabulary
    from venus_edge.errors import (
        ContextOverflowError,
        ContextSettingsError,
        EngineConnectionError,
        EngineStateError,
        GenerationCancelled,
        MemoryPlanError,
        ModelLoadError,
        ModelNotFoundError,
        SessionLockedError,
        TrajectoryError,
        VenusEdgeError,
    )
    from venus_edge.events import (
        PACE_ACTIONS,
        ContextCompacted,
        ErrorRaised,
        Event,
        LimitReached,
        Paced,
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
    from venus_edge.pacing import PaceConfig, Pacer
    from venus_edge.policies import (
        POLICIES,
        Compaction,
        CompactionContext,
        ContextPolicy,
        ForceAnswer,
        KeepLastK,
        Summarize,
        fit_result,
        make_policy,
    )
    from venus_edge.provenance import MachineInfo, ModelFile, RunRecord, command_flags, describe_run, model_file_record
    from venus_edge.result import Result, SessionTotals
    from venus_edge.session_lock import SessionLock
    from venus_edge.toolbox import MergedSearchBackend, close_tools, default_tools
    from venus_edge.tools import Tool, ToolError, ToolResult
    from venus_edge.trajectory import (
        Journal,
        JournalReader,
        SkippedLine,
        Trajectory,
        TrajectoryWriter,
        read_journal,
        read_trajectories,
    )
    from venus_edge.turn import Turn


def __getattr__(name: str) -> _Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
