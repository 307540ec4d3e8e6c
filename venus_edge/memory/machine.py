"""What this machine offers a model: physical CPU cores, the RAM available now, and the CPU features llama.cpp
found; and what describes it in a report: the CPU's name, its total RAM, the load average. The memory planner
(``venus_edge.memory.plan``) and the engines read these; nothing here loads a model.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from pathlib import Path

__all__ = ["MAX_THREADS", "available_ram_bytes", "check_threads", "cpu_name", "llama_cpu_features", "load_average",
           "physical_cores", "total_ram_bytes"]

#: The most threads llama.cpp uses (``GGML_MAX_N_THREADS`` in ggml/include/ggml.h); far more crashed it (100,000
#: threads: a segmentation fault in llama-cpp-python 0.3.36).
MAX_THREADS = 512


def physical_cores() -> int:
    """Physical CPU cores available to this process (hyper-threads counted once), at least 1."""
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores: set[tuple[str, str]] = set()
    with contextlib.suppress(OSError):
        physical = core = ""
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "physical id":
                physical = value.strip()
            elif key.strip() == "core id":
                core = value.strip()
                cores.add((physical, core))
    return max(1, min(available, len(cores) or available))


def check_threads(n_threads: int) -> None:
    """Refuse a thread count llama.cpp cannot take, before it is handed one.

    Raises:
        ValueError: ``n_threads`` below 1 or above ``MAX_THREADS``.
    """
    if not 1 <= n_threads <= MAX_THREADS:
        raise ValueError(f"n_threads must be from 1 to {MAX_THREADS} (llama.cpp's limit), got {n_threads}; this "
                         f"machine has {physical_cores()} physical cores")


def total_ram_bytes() -> int | None:
    """This machine's RAM in bytes, lowered to a cgroup v2 memory limit (a container) when there is one; None
    when it cannot be read. No setting can use more, whatever is free now."""
    try:
        total = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            total = min(total, int(limit))
    return total


def available_ram_bytes() -> int:
    """RAM this process can use now, in bytes: ``MemAvailable`` from /proc/meminfo, lowered to the room left
    under a cgroup v2 memory limit (a container) when there is one; without /proc/meminfo (not Linux), the
    physical memory.

    Raises:
        OSError: neither can be read; pass a budget instead.
    """
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable":
                available = int(value.split()[0]) * 1024
    except OSError:
        pass
    if available is None:  # not Linux: the physical memory, the most that could be available
        try:
            return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError) as exc:
            raise OSError("cannot tell how much RAM is available; pass a RAM budget (--ram 6G)") from exc
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return available
    return available if limit == "max" else max(0, min(available, int(limit) - used))


def llama_cpu_features() -> frozenset[str]:
    """The CPU features llama.cpp was built with and found (``llama_print_system_info``: ``AVX2 = 1`` ...)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return frozenset(name.strip() for name, value in re.findall(r"([A-Z0-9_]+) = (\d+)", info) if value != "0")


def cpu_name() -> str:
    """The CPU's model name (``model name`` in /proc/cpuinfo), else what ``platform`` knows (``x86_64``)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> float | None:
    """The one-minute load average (runnable threads, this process's own included), or None where the system does
    not keep one. Above the cores, threads wait for a CPU, and speed figures measured then are low and noisy."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
