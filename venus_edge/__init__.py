"""venus-edge: run the DR-Venus deep-research agent in-process on llama.cpp.

    from venus_edge import Agent, LlamaCppEngine, default_tools
    engine = LlamaCppEngine("DR-Venus-4B-RL-Q4_K_M.gguf")
    result = Agent(engine, default_tools(["docs/"], completer=engine)).run("When was tomllib added?")
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

# Names load on first use, so that `venus-edge --help` and tools that only need the protocol stay light.
_EXPORTS = {
    "Agent": "agent", "AgentConfig": "agent", "Result": "agent",
    "Completion": "engine", "Engine": "engine", "GenerationStats": "engine", "LlamaCppEngine": "engine",
    "SamplingParams": "engine",
    "ContextOverflowError": "errors", "EngineStateError": "errors", "ModelLoadError": "errors",
    "ModelNotFoundError": "errors", "TrajectoryError": "errors", "VenusEdgeError": "errors",
    "resolve_model": "models", "default_tools": "toolbox", "Trajectory": "trajectory",
    "read_trajectories": "trajectory",
}

if _TYPE_CHECKING:
    from venus_edge.agent import Agent, AgentConfig, Result
    from venus_edge.engine import Completion, Engine, GenerationStats, LlamaCppEngine, SamplingParams
    from venus_edge.errors import (
        ContextOverflowError,
        EngineStateError,
        ModelLoadError,
        ModelNotFoundError,
        TrajectoryError,
        VenusEdgeError,
    )
    from venus_edge.models import resolve_model
    from venus_edge.toolbox import default_tools
    from venus_edge.trajectory import Trajectory, read_trajectories


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'venus_edge' has no attribute {name!r}")
    return getattr(_importlib.import_module(f"venus_edge.{module}"), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = [
    "Agent",
    "AgentConfig",
    "Completion",
    "ContextOverflowError",
    "Engine",
    "EngineStateError",
    "GenerationStats",
    "LlamaCppEngine",
    "ModelLoadError",
    "ModelNotFoundError",
    "Result",
    "SamplingParams",
    "Trajectory",
    "TrajectoryError",
    "VenusEdgeError",
    "default_tools",
    "read_trajectories",
    "resolve_model",
]
