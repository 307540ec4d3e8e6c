"""``venus-edge bench``: load time, memory, prefill and decode speed, a replayed agent session and quality of
GGUF files, beside raw llama-cpp-python, llama.cpp's ``llama-bench`` and the machine's memory-bandwidth limit.

Names load on first use (``venus-edge --help`` stays light).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["BenchConfig", "BenchReport", "ConfigResult", "bandwidth_limit", "kv_per_token", "llama_bench_path",
           "load_session", "measure_config", "memory_bandwidth", "pick_reference", "replay_session", "run_bench",
           "shipped_session_path"]

_HOMES = {"BenchConfig": "measure", "ConfigResult": "measure", "bandwidth_limit": "measure",
          "measure_config": "measure", "memory_bandwidth": "measure", "replay_session": "measure",
          "shipped_session_path": "measure", "kv_per_token": "measure", "llama_bench_path": "measure",
          "load_session": "measure", "BenchReport": "report", "pick_reference": "run", "run_bench": "run"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"venus_edge.bench.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'venus_edge.bench' has no attribute {name!r}")
