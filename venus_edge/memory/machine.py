"""What this machine offers a model: physical CPU cores, the RAM available now, and the CPU features llama.cpp
found; and what describes it in a report: the CPU's name, its total RAM, the load average, and the CPU other
processes use (``cpu_times``, ``others_cores``: what ``venus-edge bench`` records per stage). The memory planner
(``venus_edge.memory.plan``) and the engines read these; nothing here loads a model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

from venus_edge.memory.sysfs import performance_cores

__all__ = ["MAX_THREADS", "MIN_SPAN_S", "CpuTimes", "available_ram_bytes", "busy_cores", "check_threads",
           "check_threads_fit", "cpu_name", "cpu_times", "default_threads", "llama_cpu_features", "llama_features_of",
           "llama_system_info", "load_average",
           "others_cores", "physical_cores", "threads_that_fit", "total_ram_bytes"]
logger = logging.getLogger(__name__)

#: The most threads llama.cpp uses (``GGML_MAX_N_THREADS`` in ggml/include/ggml.h); far more crashed it (100,000
#: threads: a segmentation fault in llama-cpp-python 0.3.36).
MAX_THREADS = 512


def physical_cores() -> int:
    """The CPU cores llama.cpp's threads should use, at least 1: the physical cores available to this process
    (hyper-threads counted once), and on a device with efficiency cores (a big.LITTLE phone, a hybrid x86) only the
    performance cores (``sysfs.core_groups``), since a thread on a slow core holds the others at every step. Read
    from /sys/devices/system/cpu, else from /proc/cpuinfo's core ids."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    available = len(affinity) if affinity is not None else (os.cpu_count() or 1)
    performance = performance_cores(Path("/"), affinity)
    if performance:
        return max(1, min(available, performance))
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


def llama_system_info() -> str:
    """llama.cpp's own description of its build (``llama_print_system_info``): each backend compiled in and its
    features, e.g. ``CPU : SSE3 = 1 | AVX2 = 1 | ... |``. Loads no model.

    Raises:
        ImportError: llama-cpp-python is not installed.
    """
    import llama_cpp

    return str(llama_cpp.llama_print_system_info().decode("utf-8", "replace"))


def llama_features_of(info: str) -> frozenset[str]:
    """The features a ``llama_system_info`` string turns on (``AVX2 = 1`` ...; ``= 0`` left out)."""
    return frozenset(name.strip() for name, value in re.findall(r"([A-Z0-9_]+) = (\d+)", info) if value != "0")


def llama_cpu_features() -> frozenset[str]:
    """The CPU features llama.cpp was built with and found (``llama_print_system_info``: ``AVX2 = 1`` ...)."""
    return llama_features_of(llama_system_info())


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


def busy_cores(sample_s: float = 0.2) -> float | None:
    """Cores' worth of CPU time that running work used over the last ``sample_s`` seconds (this process idles
    meanwhile), from two reads of ``/proc/stat``: what holds the cores now, where the load average would still count
    a run that ended a minute ago. None where ``/proc/stat`` cannot be read (not Linux)."""

    def times() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values[:8]), idle

    try:
        total_before, idle_before = times()
        time.sleep(sample_s)
        total_after, idle_after = times()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total_after - total_before
    if elapsed <= 0:
        return None
    return (os.cpu_count() or 1) * (1 - (idle_after - idle_before) / elapsed)


#: The shortest span ``others_cores`` measures, seconds (ten kernel ticks).
MIN_SPAN_S = 0.1


@dataclass(frozen=True)
class CpuTimes:
    """CPU time spent up to one instant, seconds (``cpu_times``); two of them make ``others_cores``.

    Attributes:
        wall_s: ``time.monotonic()`` when read.
        busy_s: all CPUs' busy time since boot (``/proc/stat``: user, nice, system, irq, softirq and steal, which
            another virtual machine took from ours), summed over the CPUs.
        own_s: this process's CPU time, its threads' and that of the children it has waited for (``os.times``).
        cpus: the CPUs ``/proc/stat`` lists.
    """

    wall_s: float
    busy_s: float
    own_s: float
    cpus: int


def cpu_times() -> CpuTimes | None:
    """The CPU times now (``CpuTimes``), or None where ``/proc/stat`` cannot be read (not Linux)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        with open("/proc/stat") as stat:
            lines = stat.read().splitlines()
        values = [int(v) for v in lines[0].split()[1:]]
        busy = sum(values[:3]) + sum(values[5:8])  # user nice system, then irq softirq steal (idle, iowait out)
    except (OSError, ValueError, IndexError):
        return None
    own = os.times()
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return CpuTimes(time.monotonic(), busy / ticks,
                    own.user + own.system + own.children_user + own.children_system, max(1, cpus))


def others_cores(before: CpuTimes, after: CpuTimes) -> float | None:
    """Cores' worth of CPU that other processes used between two ``cpu_times`` reads: the busy time of every CPU
    minus this process's (and its waited-for children's), over the wall time; 0.5 is half a core kept busy
    throughout. Where ``busy_cores`` needs this process to idle, this holds while it computes: a measurement's own
    threads are not counted, so what remains is the load that slowed it. A child still running at ``after`` counts
    as another process (its time is ours once waited for).

    The kernel counts in ticks (``SC_CLK_TCK``, 10 ms), so over a span of wall time the figure is uncertain by a few
    ticks / span; None for a span under ``MIN_SPAN_S``, too short to tell.
    """
    wall = after.wall_s - before.wall_s
    if wall < MIN_SPAN_S:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return min(float(after.cpus), max(0.0, others / wall))


def threads_that_fit(cores: int, busy: float) -> int:
    """Decode threads that do not share a core with other work: the idle cores of ``cores`` while ``busy`` cores'
    worth are in use, rounded, at least 1. llama.cpp's threads wait for each other at every step, so a thread
    that shares a core holds all the others: with the load at 4-5 on 2 cores, 2 threads decoded ~2 tok/s where 1
    thread decoded 15-31 (TEST_MODELS.md, "Machines differ")."""
    return max(1, min(cores, int(cores - busy + 0.5)))


def check_threads_fit(threads: int, cores: int, busy: float | None) -> str | None:
    """The one-line warning for ``threads`` decode threads on ``cores`` cores of which ``busy`` are in use by other
    work (``busy_cores``), naming the fix; None when they fit or the load is unknown."""
    if busy is None:
        return None
    fit = threads_that_fit(cores, busy)
    if fit >= threads:
        return None
    return (f"the CPU is busy ({busy:.1f} of {cores} cores in use by other work): {threads} llama.cpp threads would "
            f"wait for each other and decode slowly; use --threads {fit} (n_threads={fit})")


def default_threads() -> int:
    """The decode threads of an engine given none: the physical cores. When other work holds some of them now
    (``busy_cores``), one warning says so with the thread count that fits (``check_threads_fit``); the count is not
    lowered behind the caller's back, as another thread count samples other text for the same seed."""
    cores = physical_cores()
    warning = check_threads_fit(cores, cores, busy_cores())
    if warning:
        logger.warning(warning)
    return cores
