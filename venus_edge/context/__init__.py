"""Long sessions on small machines: the memory planner (``plan``, with its GGUF header reader ``header`` and the
README's ``presets``) and the context policies (``policies``) that the agent loop applies when a session's prompt
passes its budget.

    header = read_model_header("model.gguf")
    plan = plan_memory(header, ram_bytes=parse_size("6G"))
    agent = Agent(engine, tools, context_policy=KeepLastK(keep_last=2))
"""

from venus_edge.context.header import ModelHeader, StringArray, TensorInfo, read_model_header
from venus_edge.context.plan import (
    DEFAULT_MAX_N_CTX,
    HEADROOM_FRACTION,
    KV_TYPES,
    MIN_N_CTX,
    MemoryPlan,
    available_ram_bytes,
    engine_plan,
    estimate_memory,
    format_bytes,
    header_from_dims,
    kv_bytes_per_token,
    llama_cpu_features,
    parse_size,
    plan_memory,
)
from venus_edge.context.policies import (
    POLICIES,
    Compaction,
    CompactionContext,
    ContextPolicy,
    ForceAnswer,
    KeepLastK,
    Summarize,
    make_policy,
)
from venus_edge.context.presets import PRESET_QUANTS, dr_venus_4b_header, presets_table

__all__ = [
    "Compaction",
    "CompactionContext",
    "ContextPolicy",
    "DEFAULT_MAX_N_CTX",
    "ForceAnswer",
    "HEADROOM_FRACTION",
    "KV_TYPES",
    "KeepLastK",
    "MIN_N_CTX",
    "MemoryPlan",
    "ModelHeader",
    "POLICIES",
    "PRESET_QUANTS",
    "StringArray",
    "Summarize",
    "TensorInfo",
    "available_ram_bytes",
    "dr_venus_4b_header",
    "engine_plan",
    "estimate_memory",
    "format_bytes",
    "header_from_dims",
    "kv_bytes_per_token",
    "llama_cpu_features",
    "make_policy",
    "parse_size",
    "plan_memory",
    "presets_table",
    "read_model_header",
]
