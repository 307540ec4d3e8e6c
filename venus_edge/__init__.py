"""venus-edge: run the DR-Venus deep-research agent in-process on llama.cpp.

    from venus_edge import Agent, LlamaCppEngine, default_tools
    engine = LlamaCppEngine("DR-Venus-4B-RL-Q4_K_M.gguf")
    result = Agent(engine, default_tools(["docs/"], completer=engine)).run("When was tomllib added?")
"""

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
