"""The device's temperatures and batteries, read from /sys (Linux and Android) under a root: what ``venus-edge
doctor`` reports and what pacing (``venus_edge.pacing``) reads between turns.

    readings = read_sensors("/")
    readings.hottest            # the hottest thermal zone, or None
    readings.battery            # the first battery, or None (a desktop)

Sources (the kernel's sysfs ABI, Documentation/ABI/testing/sysfs-class-thermal and sysfs-class-power):
- /sys/class/thermal/thermal_zone*/``temp``: millidegrees Celsius; ``type``: the zone's name (``cpu-thermal``,
  ``x86_pkg_temp``, ``battery``).
- /sys/class/power_supply/*/``type``: ``Battery``, ``Mains``, ``USB`` ...; ``status``: ``Charging``,
  ``Discharging``, ``Full``, ``Not charging``, ``Unknown``; ``capacity``: percent, 0 to 100.

A file that is missing, unreadable or not what it should be never raises out of ``read_sensors``: that one reading
is left out and ``SensorReadings.problems`` says which file and why, so a caller can say it and go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from venus_edge.memory.sysfs import UnknownFact, read_fact, read_int_fact

__all__ = ["BATTERY", "DISCHARGING", "PowerSupply", "SensorReadings", "ThermalZone", "read_power_supplies",
           "read_sensors", "read_thermal_zones"]

#: ``power_supply/*/type`` of a battery, and its ``status`` while it powers the device.
BATTERY, DISCHARGING = "Battery", "Discharging"


@dataclass(frozen=True)
class ThermalZone:
    """One thermal zone's reading.

    Attributes:
        name: its ``type`` (``cpu-thermal``), else its folder (``thermal_zone0``); a repeated type gets the folder
            added (``cpu-thermal (thermal_zone3)``).
        celsius: degrees Celsius (``temp`` / 1000).
    """

    name: str
    celsius: float


@dataclass(frozen=True)
class PowerSupply:
    """One power supply.

    Attributes:
        name: its folder (``battery``, ``BAT0``, ``AC``).
        kind: its ``type`` (``Battery``, ``Mains``, ``USB`` ...).
        status: ``Charging``, ``Discharging``, ``Full``, ... ; None when unreadable or absent (a mains supply).
        capacity_pct: charge in percent, 0 to 100; None when unreadable or absent.
    """

    name: str
    kind: str
    status: str | None = None
    capacity_pct: int | None = None

    @property
    def discharging(self) -> bool:
        """A battery that powers the device now (status ``Discharging``)."""
        return self.kind == BATTERY and self.status == DISCHARGING


@dataclass(frozen=True)
class SensorReadings:
    """What ``read_sensors`` found.

    Attributes:
        root: the folder /sys was read under.
        zones: the thermal zones that could be read, in folder order.
        supplies: the power supplies whose type could be read, in folder order.
        problems: what could not be read, each naming the file or folder and why.
    """

    root: Path
    zones: tuple[ThermalZone, ...]
    supplies: tuple[PowerSupply, ...]
    problems: tuple[str, ...]

    @property
    def hottest(self) -> ThermalZone | None:
        """The hottest zone, or None when no zone could be read."""
        return max(self.zones, key=lambda zone: zone.celsius, default=None)

    @property
    def battery(self) -> PowerSupply | None:
        """The first battery (a phone has one; a laptop one or two), or None (a desktop)."""
        return next((supply for supply in self.supplies if supply.kind == BATTERY), None)


def read_thermal_zones(root: Path, problems: list[str]) -> list[ThermalZone]:
    """The readable thermal zones under ``root``/sys/class/thermal; what cannot be read is appended to
    ``problems`` (no thermal folder, no zone, a zone's ``temp`` missing or not a number)."""
    base = root / "sys" / "class" / "thermal"
    try:
        folders = sorted(entry for entry in base.iterdir() if entry.name.startswith("thermal_zone"))
    except OSError:
        problems.append(f"temperatures: no thermal zones ({base} is missing)")
        return []
    if not folders:
        problems.append(f"temperatures: no thermal_zone* folders in {base}")
    zones: list[ThermalZone] = []
    names: set[str] = set()
    for folder in folders:
        try:
            name = read_fact(folder / "type").strip() or folder.name
        except UnknownFact:
            name = folder.name
        try:
            celsius = read_int_fact(folder / "temp") / 1000
        except UnknownFact as exc:
            problems.append(f"temperature of {name}: {exc}")
            continue
        name = name if name not in names else f"{name} ({folder.name})"
        names.add(name)
        zones.append(ThermalZone(name, celsius))
    return zones


def read_power_supplies(root: Path, problems: list[str]) -> list[PowerSupply]:
    """The power supplies under ``root``/sys/class/power_supply whose ``type`` can be read; a battery's unreadable
    ``status`` or ``capacity`` is appended to ``problems`` (and left None). No folder, or an empty one, is no
    supply and no problem: a desktop has none."""
    base = root / "sys" / "class" / "power_supply"
    try:
        folders = sorted(base.iterdir())
    except OSError:
        return []
    supplies: list[PowerSupply] = []
    for folder in folders:
        try:
            kind = read_fact(folder / "type").strip()
        except UnknownFact as exc:
            problems.append(f"power supply {folder.name}: {exc}")
            continue
        status: str | None = None
        capacity: int | None = None
        if kind == BATTERY:
            try:
                status = read_fact(folder / "status").strip()
            except UnknownFact as exc:
                problems.append(f"battery {folder.name}: {exc}")
            try:
                capacity = read_int_fact(folder / "capacity")
            except UnknownFact as exc:
                problems.append(f"battery {folder.name}: {exc}")
            if capacity is not None and not 0 <= capacity <= 100:
                problems.append(f"battery {folder.name}: {folder / 'capacity'} holds {capacity}, not a percent")
                capacity = None
        supplies.append(PowerSupply(folder.name, kind, status, capacity))
    return supplies


def read_sensors(root: str | Path = "/") -> SensorReadings:
    """The thermal zones and power supplies under ``root`` (default this machine); never raises for a file."""
    root = Path(root)
    problems: list[str] = []
    zones = read_thermal_zones(root, problems)
    supplies = read_power_supplies(root, problems)
    return SensorReadings(root, tuple(zones), tuple(supplies), tuple(problems))
