"""Run configurations read from YAML or JSON files: typed settings, paths relative to the file, clear errors.

``SFTConfig`` and ``IGPOConfig`` are frozen dataclasses that mix in ``ConfigFile``; each names its converters (a
YAML value such as ``1e-5`` arrives as a string and is converted), its required settings, and which settings are
paths.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Mapping, TypeVar

__all__ = ["ConfigFile"]

C = TypeVar("C", bound="ConfigFile")


class ConfigFile:
    """``from_file`` / ``from_dict`` / ``to_dict`` for a frozen dataclass of settings with a ``check()`` method."""

    converters: ClassVar[dict[str, Any]] = {}
    required_settings: ClassVar[tuple[str, ...]] = ()
    path_settings: ClassVar[tuple[str, ...]] = ()  # a relative path is the config folder's (output_dir always)
    path_list_settings: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_file(cls: type[C], path: str | os.PathLike[str], **overrides: Any) -> C:
        """Read a YAML/JSON config; ``overrides`` replace its keys.

        Raises:
            ValueError: an unknown key, a missing required key, or a value of the wrong kind.
        """
        import yaml

        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not YAML or JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: a config is a mapping of settings, got {type(raw).__name__}")
        base = path.parent
        for key in cls.path_settings:
            value = raw.get(key)
            # a relative path is the config folder's; a hub id (owner/name) that is no file there stays as it is
            if isinstance(value, str) and not Path(value).is_absolute() and (key == "output_dir" or (base / value).exists()):
                raw[key] = str(base / value)
        for key in cls.path_list_settings:
            items = raw.get(key)
            if isinstance(items, (str, list)):
                raw[key] = [str(p if Path(str(p)).is_absolute() else base / str(p))
                            for p in ([items] if isinstance(items, str) else items)]
        raw.update({k: v for k, v in overrides.items() if v is not None})  # command-line values: as given
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls: type[C], raw: Mapping[str, Any], *, source: str = "config") -> C:
        """A config from a mapping of settings, each converted to its field's type.

        Raises:
            ValueError: an unknown or missing setting, or a value that is not of its setting's kind.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        missing = [n for n in cls.required_settings if not raw.get(n)]
        if missing:
            raise ValueError(f"{source}: missing required setting(s) {', '.join(missing)}")
        values: dict[str, Any] = {}
        for name, value in raw.items():
            try:
                values[name] = cls.converters.get(name, text)(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{source}: {name}: {exc}") from None
        config = cls(**values)
        try:
            config.check()  # type: ignore[attr-defined]
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        return config

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # type: ignore[call-overload]


def text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def number(kind: type) -> Any:
    def convert(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"expected a number, got {value!r}")
        number = float(value)  # YAML reads 1e-5 (no dot) as a string
        if kind is int and number != int(number):
            raise ValueError(f"expected a whole number, got {value!r}")
        return kind(number)
    return convert


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def optional(convert: Any) -> Any:
    return lambda value: None if value is None else convert(value)


def paths(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or not all(isinstance(p, str) and p for p in items):
        raise ValueError(f"expected a file or a list of files, got {value!r}")
    return tuple(items)


def betas(value: Any) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"expected two numbers [beta1, beta2], got {value!r}")
    beta1, beta2 = (number(float)(b) for b in value)
    if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
        raise ValueError(f"betas must lie in [0, 1), got {value!r}")
    return beta1, beta2
