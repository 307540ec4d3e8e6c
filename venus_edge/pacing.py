"""Pacing a session on a device that heats and drains: between turns, read the thermal zones and the battery
(``venus_edge.memory.sensors``) and lower the decode threads, pause to cool down, or stop on a low battery.

Off unless asked for (``Agent(..., pace=PaceConfig())``, ``venus-edge research --pace``): a desktop has no battery
and its fans keep it cool. Each check happens before a turn is generated, never during one; what it does is a
``Paced`` event, a journal record (``pace``) and, in the CLI, a progress line.

What a check does, hottest zone first:
1. A battery that is discharging below ``battery_floor_pct``: the session stops with termination ``battery_low``
   and no end record, so its journal resumes it (``venus-edge research --resume FILE``) once the device charges.
2. At or above ``pause_temp_c``, or at or above ``max_temp_c`` with no threads left to take away (already
   ``min_threads``, or an engine that cannot change them, ``ThreadControl``): pause, reading again every ``poll_s``
   seconds, until the hottest zone is at or below ``resume_temp_c`` or ``max_pause_s`` have passed (then go on,
   saying it is still hot). A cancelled session stops pausing at once.
3. At or above ``max_temp_c``: halve the threads (not below ``min_threads``).
4. At or below ``resume_temp_c`` with threads taken away: double them again (not above what the session began with).

A file that cannot be read (missing, a folder, garbage) is said once, in a ``Paced`` event with action
``sensor_problem``, and that reading is left out; a device without any thermal zone is paced by its battery alone.

Defaults: the pause and slow-down points sit below the 80-100 C at which phone and laptop SoCs throttle themselves,
so that the session backs off first; the battery floor leaves the phone some charge for everything else.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from venus_edge.engines.base import Engine, ThreadControl
from venus_edge.events import PaceAction, Paced
from venus_edge.memory.sensors import SensorReadings, ThermalZone, read_sensors

__all__ = ["PaceConfig", "Pacer"]

#: Each engine's decode threads when a ``Pacer`` first saw it: the count threads come back up to, for every session
#: that shares the engine (a server's slots, ``--samples``), so that threads one session took away are given back
#: by the next one when the device has cooled, not kept low for good.
#: Keyed by ``id`` with a weak reference (engines need not be hashable: dataclasses are not).
_FULL_THREADS: dict[int, tuple[weakref.ref[Any], int]] = {}
_FULL_THREADS_LOCK = threading.Lock()


@dataclass(frozen=True)
class PaceConfig:
    """When pacing slows down, pauses or stops a session.

    Attributes:
        max_temp_c: at or above this (degrees Celsius, the hottest thermal zone), halve the decode threads.
        pause_temp_c: at or above this, pause until the device cools to ``resume_temp_c``.
        resume_temp_c: a pause ends at or below this; threads taken away come back at or below it.
        battery_floor_pct: a discharging battery below this charge (percent) stops the session, resumable.
        min_threads: threads are never lowered below this.
        root: the folder that holds ``sys/`` (``/``: this device; a test gives a fake tree).
        poll_s: seconds between readings while paused.
        max_pause_s: seconds a pause lasts at most; then the session goes on, still hot.

    Raises:
        ValueError: temperatures out of order (``resume_temp_c < max_temp_c <= pause_temp_c``), a floor outside
            0-100, fewer than one thread, or a time that is negative or not finite (``poll_s`` must be above 0); the
            message names the settings and values.
    """

    max_temp_c: float = 75.0
    pause_temp_c: float = 85.0
    resume_temp_c: float = 65.0
    battery_floor_pct: int = 15
    min_threads: int = 1
    root: Path = Path("/")
    poll_s: float = 5.0
    max_pause_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.resume_temp_c < self.max_temp_c <= self.pause_temp_c:
            raise ValueError(f"resume_temp_c ({self.resume_temp_c:g} C) must be below max_temp_c "
                             f"({self.max_temp_c:g} C), and max_temp_c at most pause_temp_c ({self.pause_temp_c:g} C)")
        if not 0 <= self.battery_floor_pct <= 100:
            raise ValueError(f"battery_floor_pct is a percent from 0 to 100, got {self.battery_floor_pct}")
        if self.min_threads < 1:
            raise ValueError(f"min_threads must be at least 1, got {self.min_threads}")
        if not (math.isfinite(self.poll_s) and self.poll_s > 0):
            raise ValueError(f"poll_s must be a finite number of seconds above 0, got {self.poll_s!r}")
        if not (math.isfinite(self.max_pause_s) and self.max_pause_s >= 0):
            raise ValueError(f"max_pause_s must be a finite number of seconds, at least 0, got {self.max_pause_s!r}")


class Pacer:
    """The pacing of one session: its settings, the engine whose threads it may change, and what it has said.

    Args:
        config: the thresholds.
        engine: the session's engine; its threads are changed when it has ``ThreadControl``. Sessions that share
            an engine share its full thread count: the count it had when pacing first saw it.
        cancel: the session's cancel event; a pause waits on it and ends when it is set.
    """

    def __init__(self, config: PaceConfig, engine: Engine, *, cancel: threading.Event | None = None) -> None:
        self.config = config
        self.threads = engine if isinstance(engine, ThreadControl) else None
        self.full_threads = _full_threads(self.threads) if self.threads is not None else None
        self.cancel = cancel
        self._said: set[str] = set()

    def check(self, turn: int) -> Generator[Paced, None, bool]:
        """Read the sensors before turn ``turn`` and act (the module docstring's steps), yielding what was done.
        Returns True when the session must stop (a low battery), else False."""
        readings = yield from self._read(turn)
        if (stop := self._battery_stop(turn, readings)) is not None:
            yield stop
            return True
        hottest = readings.hottest
        if hottest is None:
            return False
        config, threads = self.config, self._threads()
        if hottest.celsius >= config.pause_temp_c or (hottest.celsius >= config.max_temp_c
                                                      and (threads is None or threads <= config.min_threads)):
            return (yield from self._pause(turn, hottest))
        if hottest.celsius >= config.max_temp_c and threads is not None:
            lowered = max(config.min_threads, threads // 2)
            yield self._set_threads(turn, lowered, hottest, f"{_zone(hottest)}, at or above {config.max_temp_c:g} C: "
                                                            f"threads {threads} -> {lowered}", "threads_lowered")
        elif hottest.celsius <= config.resume_temp_c and threads is not None and self.full_threads is not None \
                and threads < self.full_threads:
            raised = min(self.full_threads, threads * 2)
            yield self._set_threads(turn, raised, hottest, f"{_zone(hottest)}, at or below {config.resume_temp_c:g} "
                                                           f"C: threads {threads} -> {raised}", "threads_raised")
        return False

    # ------------------------------------------------------------------------------------------- steps
    def _read(self, turn: int) -> Generator[Paced, None, SensorReadings]:
        """The sensors now; each problem not said before becomes a ``sensor_problem`` event."""
        readings = read_sensors(self.config.root)
        for problem in readings.problems:
            if problem not in self._said:
                self._said.add(problem)
                yield Paced(turn, "sensor_problem", f"{problem}; pacing goes on without that reading",
                            n_threads=self._threads())
        return readings

    def _battery_stop(self, turn: int, readings: SensorReadings) -> Paced | None:
        """The stop event when a battery discharges below the floor, else None."""
        battery = readings.battery
        floor = self.config.battery_floor_pct
        if battery is None or not battery.discharging or battery.capacity_pct is None or \
                battery.capacity_pct >= floor:
            return None
        return Paced(turn, "battery_stop", f"battery {battery.name} at {battery.capacity_pct}% and discharging, below "
                                           f"the {floor}% floor: the session stops here; resume it from its journal "
                                           "once the device charges", battery_pct=battery.capacity_pct,
                     n_threads=self._threads())

    def _pause(self, turn: int, hottest: ThermalZone) -> Generator[Paced, None, bool]:
        """Wait for the device to cool to ``resume_temp_c`` (at most ``max_pause_s``); True if the battery ran low
        meanwhile (the session stops)."""
        config = self.config
        yield Paced(turn, "paused", f"{_zone(hottest)}, too hot to go on: pausing until {config.resume_temp_c:g} C "
                                    f"(at most {config.max_pause_s:g} s)",
                    celsius=hottest.celsius, zone=hottest.name, n_threads=self._threads())
        started = time.monotonic()
        while True:
            readings = yield from self._read(turn)
            if (stop := self._battery_stop(turn, readings)) is not None:
                yield stop
                return True
            waited = time.monotonic() - started
            now = readings.hottest
            cooled = now is None or now.celsius <= config.resume_temp_c
            if cooled or waited >= config.max_pause_s or self._cancelled():
                break
            self._wait(min(config.poll_s, config.max_pause_s - waited))
        how = ("no thermal zone can be read now" if now is None else f"{_zone(now)}, cooled" if cooled else
               f"{_zone(now)}; the session was cancelled" if self._cancelled() else
               f"{_zone(now)}, still hot after the longest pause; going on")
        yield Paced(turn, "resumed", f"{how} (paused {waited:.1f} s)", celsius=now.celsius if now else None,
                    zone=now.name if now else None, n_threads=self._threads(), waited_s=round(waited, 3))
        return False

    def _set_threads(self, turn: int, count: int, hottest: ThermalZone, detail: str,
                     action: PaceAction) -> Paced:
        assert self.threads is not None
        self.threads.set_threads(count)
        return Paced(turn, action, detail, celsius=hottest.celsius, zone=hottest.name, n_threads=count)

    def _threads(self) -> int | None:
        return self.threads.n_threads if self.threads is not None else None

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _wait(self, seconds: float) -> None:
        wait: Callable[[float], Any] = self.cancel.wait if self.cancel is not None else time.sleep
        wait(seconds)


def _full_threads(engine: ThreadControl) -> int:
    """``engine``'s threads when pacing first saw it (``_FULL_THREADS``)."""
    key = id(engine)
    with _FULL_THREADS_LOCK:
        known = _FULL_THREADS.get(key)
        if known is not None and known[0]() is engine:
            return known[1]

        def forget(ref: weakref.ref[Any]) -> None:  # the engine is gone: its id may be reused
            if _FULL_THREADS.get(key, (None, 0))[0] is ref:
                del _FULL_THREADS[key]

        with contextlib.suppress(TypeError):  # an engine that cannot be weakly referenced: its threads now
            _FULL_THREADS[key] = (weakref.ref(engine, forget), engine.n_threads)
        return engine.n_threads


def _zone(zone: ThermalZone) -> str:
    return f"{zone.name} at {zone.celsius:.1f} C"
