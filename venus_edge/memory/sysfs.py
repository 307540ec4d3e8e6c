"""Facts read from /proc and /sys (Linux and Android) under a root folder, and the CPU's clusters of cores.

A file that is missing, unreadable or not what it should be raises ``UnknownFact`` with the path and why, so a
caller can report that one fact as unknown and go on. ``core_groups`` sorts the CPUs of
/sys/devices/system/cpu into clusters by speed: ``cpufreq/cpuinfo_max_freq`` (kHz), else ``cpu_capacity``; SMT
siblings (``topology/thread_siblings_list``) are one core. The slowest cluster is the efficiency cores when it runs
below ``EFFICIENCY_BELOW`` of the fastest: a big.LITTLE phone's little cores (0.6-0.8 of the prime cores' clock, a
third of their capacity) and a hybrid x86's E-cores (0.74-0.79 of the P-cores' clock), but not the few percent by
which a desktop's favoured cores (Intel Turbo Boost Max 3.0, AMD preferred cores under amd-pstate) outrun the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from venus_edge.errors import VenusEdgeError

__all__ = ["EFFICIENCY_BELOW", "CoreGroup", "UnknownFact", "core_groups", "performance_cores", "read_fact",
           "read_int_fact"]

#: The slowest cluster is the efficiency cores when its speed is below this share of the fastest's.
EFFICIENCY_BELOW = 0.85


class UnknownFact(VenusEdgeError):
    """A fact that cannot be read; the message says which file and why. The readers here raise it; their callers
    report the fact as unknown and go on."""


def read_fact(path: Path) -> str:
    """The text of one /proc or /sys file.

    Raises:
        UnknownFact: the file is missing, a directory, unreadable or not text (the message names the path).
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UnknownFact(f"{path} is missing") from None
    except IsADirectoryError:
        raise UnknownFact(f"{path} is a directory, not a file") from None
    except PermissionError:
        raise UnknownFact(f"{path} cannot be read (permission denied)") from None
    except UnicodeDecodeError:
        raise UnknownFact(f"{path} is not text") from None
    except OSError as exc:
        raise UnknownFact(f"{path} cannot be read ({exc.strerror or exc})") from None


def read_int_fact(path: Path) -> int:
    """The whole number one /proc or /sys file holds.

    Raises:
        UnknownFact: as ``read_fact``, or the text is not a whole number.
    """
    text = read_fact(path).strip()
    try:
        return int(text)
    except ValueError:
        raise UnknownFact(f"{path} holds {text[:40]!r}, not a whole number") from None


@dataclass(frozen=True)
class CoreGroup:
    """CPUs of one speed.

    Attributes:
        kind: ``performance``, or ``efficiency`` for the slowest cluster when it is clearly slower
            (``EFFICIENCY_BELOW``).
        cpus: the logical CPU numbers.
        cores: physical cores among them (SMT siblings counted once).
        max_freq_khz: ``cpuinfo_max_freq``, or None when unknown.
        capacity: ``cpu_capacity`` (1024 for the fastest), read when the frequency is unknown; else None.
    """

    kind: Literal["performance", "efficiency"]
    cpus: tuple[int, ...]
    cores: int
    max_freq_khz: int | None = None
    capacity: int | None = None

    def describe(self) -> str:
        speed = (f" at {self.max_freq_khz / 1e6:.2f} GHz" if self.max_freq_khz else
                 f" of capacity {self.capacity}" if self.capacity else "")
        return f"{self.cores}{speed}"


def core_groups(root: Path, unknown: list[str]) -> tuple[CoreGroup, ...]:
    """The CPUs under ``root``/sys/devices/system/cpu, grouped by speed, fastest first (module docstring).

    Args:
        root: the folder that holds ``sys`` ("/" for this machine).
        unknown: what could not be read is appended here, a sentence each (path and why).

    Returns:
        The groups; empty when no CPU folder can be listed.
    """
    return _clusters(root, unknown)[0]


def _clusters(root: Path, unknown: list[str]) -> tuple[tuple[CoreGroup, ...], dict[int, str]]:
    """``core_groups``, and each CPU's physical core (its ``thread_siblings_list``, else its own number)."""
    base = root / "sys" / "devices" / "system" / "cpu"
    try:
        numbers = sorted(int(entry.name[3:]) for entry in base.iterdir() if re.fullmatch(r"cpu\d+", entry.name))
    except OSError as exc:
        unknown.append(f"cores: {base} cannot be listed ({exc.strerror or exc})")
        return (), {}
    if not numbers:
        unknown.append(f"cores: no cpu0, cpu1 ... folders in {base}")
        return (), {}
    speeds: dict[int, tuple[int | None, int | None]] = {}
    core_of: dict[int, str] = {}
    freq_missing: list[str] = []
    for cpu in numbers:
        folder = base / f"cpu{cpu}"
        try:
            speeds[cpu] = (read_int_fact(folder / "cpufreq" / "cpuinfo_max_freq"), None)
        except UnknownFact as exc:
            freq_missing.append(str(exc))
            try:
                speeds[cpu] = (None, read_int_fact(folder / "cpu_capacity"))
            except UnknownFact:
                speeds[cpu] = (None, None)
        try:
            core_of[cpu] = read_fact(folder / "topology" / "thread_siblings_list").strip()
        except UnknownFact:
            core_of[cpu] = str(cpu)  # without topology each CPU counts as a core
    if freq_missing:
        more = f" (and {len(freq_missing) - 1} more)" if len(freq_missing) > 1 else ""
        fallback = ("sorted by cpu_capacity" if any(capacity for _, capacity in speeds.values()) else
                    "all counted as performance cores")
        unknown.append(f"core speeds: {freq_missing[0]}{more}; cores {fallback}")
    levels = sorted({speed for speed in speeds.values() if speed != (None, None)},
                    key=lambda s: (s[0] or 0, s[1] or 0), reverse=True)
    # a CPU with a frequency ranks above one with only a capacity; the efficiency test compares like with like
    slowest_is_efficiency = len(levels) > 1 and _clearly_slower(levels[-1], levels[0])
    groups = []
    for level in levels or [(None, None)]:
        cpus = tuple(cpu for cpu in numbers if speeds[cpu] == level or (not levels))
        kind: Literal["performance", "efficiency"] = \
            "efficiency" if slowest_is_efficiency and level == levels[-1] else "performance"
        groups.append(CoreGroup(kind, cpus, len({core_of[cpu] for cpu in cpus}), level[0], level[1]))
    unsorted = tuple(cpu for cpu in numbers if levels and speeds[cpu] == (None, None))
    if unsorted:
        groups.append(CoreGroup("performance", unsorted, len({core_of[cpu] for cpu in unsorted})))
    return tuple(groups), core_of


def _clearly_slower(slow: tuple[int | None, int | None], fast: tuple[int | None, int | None]) -> bool:
    """Whether speed ``slow`` (frequency, capacity) is below ``EFFICIENCY_BELOW`` of ``fast``; speeds of different
    kinds (one known by frequency, one by capacity only) cannot be compared and count as clearly slower, as before
    this threshold existed."""
    for index in (0, 1):
        if slow[index] is not None and fast[index] is not None:
            return slow[index] < EFFICIENCY_BELOW * fast[index]  # type: ignore[operator]
    return True


def performance_cores(root: Path = Path("/"), allowed: set[int] | None = None) -> int | None:
    """Physical cores of the performance clusters (``core_groups``) among the logical CPUs in ``allowed`` (all when
    None), SMT siblings counted once; None when /sys/devices/system/cpu cannot be read or no allowed CPU is a
    performance CPU."""
    groups, core_of = _clusters(root, [])
    return len({core_of[cpu] for group in groups if group.kind == "performance" for cpu in group.cpus
                if allowed is None or cpu in allowed}) or None
