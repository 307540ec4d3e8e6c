"""``venus-edge bench``: load time, memory, prefill and decode speed, a replayed agent session and quality of
GGUF files, beside raw llama-cpp-python, llama.cpp's ``llama-bench`` and the machine's memory-bandwidth limit.

Names load on first use (``venus-edge --help`` stays light).
"""

from __future__ import annotations

from typing import Any

from venus_edge.lazy import LazyExports

_EXPORTS = LazyExports(__name__, {
    "measure": ("BUSY_OTHERS_CORES", "BenchConfig", "ConfigResult", "bandwidth_limit", "kv_per_token",
                "llama_bench_arguments", "llama_bench_path", "load_session", "measure_config", "memory_bandwidth",
                "replay_session", "shipped_session_path"),
    "report": ("BenchReport", "format_duration"),
    "run": ("estimate_seconds", "load_results", "measurement_key", "pick_reference", "reusable_results",
            "run_bench"),
})


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
