"""Run configurations: frozen dataclasses whose fields carry their help and whose ``__post_init__`` checks every
rule, whether the config is built in Python or read from a YAML or JSON file.

    config = SFTConfig(model="Qwen/Qwen3-4B-Thinking-2507", data="data/sft.jsonl", output_dir="runs/sft")
    config = SFTConfig.from_file("configs/sft/dr-venus-4b.yaml", max_steps=10)

A field's metadata holds its ``help`` (meaning, unit, where the default comes from) and, for a path, ``path``
(a relative path in a file is relative to the file's folder). Its type says how a value is read (``convert``):
PyYAML reads ``1e-5`` as a string and ``16`` may come quoted, so numbers are converted; one path where a list is
expected is a list of one; a nested settings dataclass (``lora``) is true (its defaults), false or a mapping. A
broken rule raises ``ConfigError`` (a ``ValueError``) with the rule, the values and the fix, as trl's configs do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from venus_edge.train.errors import ConfigError

__all__ = ["DTYPES", "ConfigFile"]

C = TypeVar("C", bound="ConfigFile")

#: The weights' dtypes a run may train in (torch's names).
DTYPES = ("float32", "bfloat16", "float16")
_COUNTS = {2: "two", 3: "three"}


class ConfigFile:
    """The base of a settings dataclass: ``from_file`` / ``from_dict`` / ``to_dict``, ``help_text``, and the
    conversion of every field to its type in ``__post_init__`` (a subclass's ``__post_init__`` calls this one,
    then checks its rules)."""

    def __post_init__(self) -> None:
        """Convert each field to its type.

        Raises:
            ConfigError: a value that is not of its field's kind, or a nested setting that breaks a rule.
        """
        hints = _type_hints(type(self))
        for spec in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, spec.name)
            try:
                converted = convert(value, hints[spec.name], name=spec.name, path=spec.metadata.get("path", False))
            except (TypeError, ValueError) as exc:  # also a nested setting's ConfigError: name the outer setting
                raise ConfigError(f"{spec.name}: {exc}", setting=spec.name, value=value) from None
            object.__setattr__(self, spec.name, converted)

    @classmethod
    def required_settings(cls) -> tuple[str, ...]:
        """The settings without a default."""
        return tuple(spec.name for spec in dataclasses.fields(cls)  # type: ignore[arg-type]
                     if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING)

    @classmethod
    def help_text(cls) -> str:
        """One line per setting: its name, default and help."""
        lines = []
        for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
            default = "required" if spec.name in cls.required_settings() else f"default {spec.default!r}"
            lines.append(f"{spec.name} ({default}): {spec.metadata.get('help', '')}")
        return "\n".join(lines)

    @classmethod
    def from_file(cls: type[C], path: str | os.PathLike[str], **overrides: Any) -> C:
        """Read a YAML/JSON config; ``overrides`` (command-line values, taken as given) replace its keys; None
        leaves a key as the file has it.

        Raises:
            ConfigError: a file that is not a mapping of settings, an unknown key, a missing required key, a
                value of the wrong kind, or a broken rule.
        """
        import yaml

        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML or JSON ({exc})", setting="", value=None) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the config as UTF-8", setting="",
                              value=None) from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a config is a mapping of settings, got {type(raw).__name__}",
                              setting="", value=raw)
        hints = _type_hints(cls)
        for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
            if spec.metadata.get("path") and spec.name in raw:
                many = typing.get_origin(hints[spec.name]) is tuple
                raw[spec.name] = _next_to(path.parent, spec.name, raw[spec.name], many=many)
        raw.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls: type[C], raw: Mapping[str, Any], *, source: str = "config") -> C:
        """A config from a mapping of settings, each converted to its field's type and checked.

        Raises:
            ConfigError: an unknown or missing setting, a value that is not of its setting's kind, or a broken
                rule; the message starts with ``source``.
        """
        names = [spec.name for spec in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}",
                              setting=unknown[0], value=raw[unknown[0]])
        missing = [name for name in cls.required_settings() if not raw.get(name)]
        if missing:
            raise ConfigError(f"{source}: missing required setting(s) {', '.join(missing)}",
                              setting=missing[0], value=raw.get(missing[0]))
        try:
            return cls(**raw)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}", setting=exc.setting, value=exc.value) from None

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values (tuples as lists, a nested dataclass as a mapping)."""
        settings: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))  # type: ignore[call-overload]
        return settings


def require(rule_holds: bool, message: str, *, setting: str, value: Any) -> None:
    """Raise ``ConfigError(message)`` unless ``rule_holds``; the message gives the rule, the values and the fix."""
    if not rule_holds:
        raise ConfigError(message, setting=setting, value=value)


def check_model_source(model: str) -> None:
    """Refuse a model given as a local path that does not exist (transformers took it for a hub id and answered
    "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"). A hub id is left to transformers.

    Raises:
        FileNotFoundError: naming the path and what to give.
    """
    path = Path(model).expanduser()
    if not path.exists() and (path.is_absolute() or model.startswith((".", "~"))):
        raise FileNotFoundError(f"model {model}: no such folder or file; give a Hugging Face checkpoint folder (such "
                                "as a run's final/), a .gguf file, or a hub id owner/name")


def check_run_settings(config: Any) -> None:
    """The rules every trainer's config shares: the optimizer (AdamW), the dtype and the checkpoints.

    Raises:
        ConfigError: the first rule broken.
    """
    require(config.learning_rate > 0, f"learning_rate must be > 0, got {config.learning_rate}; the recipe's is "
            "1e-5 for SFT and 1e-6 for IGPO", setting="learning_rate", value=config.learning_rate)
    beta1, beta2 = config.adam_betas
    require(0 <= beta1 < 1 and 0 <= beta2 < 1, f"adam_betas must lie in [0, 1), got {config.adam_betas}; "
            "DR-Venus's SFT uses (0.9, 0.95)", setting="adam_betas", value=config.adam_betas)
    require(config.weight_decay >= 0, f"weight_decay must be >= 0, got {config.weight_decay}; 0 turns it off",
            setting="weight_decay", value=config.weight_decay)
    require(config.max_grad_norm > 0, f"max_grad_norm must be > 0, got {config.max_grad_norm}; the recipe clips "
            "at 1.0", setting="max_grad_norm", value=config.max_grad_norm)
    require(config.dtype in DTYPES, f"dtype {config.dtype!r}: use {', '.join(DTYPES[:-1])} or {DTYPES[-1]} "
            "(float32 on a CPU, bfloat16 on GPUs)", setting="dtype", value=config.dtype)
    for name in ("save_every", "keep_checkpoints"):
        value = getattr(config, name)
        require(value >= 1, f"{name} must be >= 1, got {value}; save_every counts optimizer steps between "
                "checkpoints, keep_checkpoints how many stay on disk", setting=name, value=value)


def convert(value: Any, kind: Any, *, name: str, path: bool = False) -> Any:
    """``value`` as ``kind`` (a field's type): str, int, float, bool, ``X | None``, ``tuple[str, ...]`` (one
    string is a tuple of one), a fixed tuple of numbers, or a settings dataclass (true: its defaults; a mapping:
    its settings). ``path``: a str field also takes an ``os.PathLike``.

    Raises:
        ValueError: a value that is not of the kind; the message says what was expected and what came.
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        if value is None or (value is False and dataclasses.is_dataclass(inner)):
            return None
        return convert(value, inner, name=name, path=path)
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if kind in (int, float):
        return _number(value, kind)
    if kind is str:
        return _text(value, path=path)
    if origin is tuple and args[-1] is Ellipsis:
        items = [value] if isinstance(value, (str, os.PathLike)) else value
        what = "a file or a list of files" if path else "a name or a list of names"
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError(f"expected {what}, got {value!r}")
        try:
            return tuple(_text(item, path=path) for item in items)
        except ValueError:
            raise ValueError(f"expected {what}, got {value!r}") from None
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ValueError(f"expected {_COUNTS.get(len(args), len(args))} numbers, got {value!r}")
        return tuple(_number(item, arg) for item, arg in zip(value, args))
    if dataclasses.is_dataclass(kind):
        return _settings(value, kind, name=name)
    raise TypeError(f"no conversion to {kind!r}")


_TYPE_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    # A dict, not functools.cache: typeshed's cache wants Hashable arguments and mypy does not count a class as one.
    if cls not in _TYPE_HINTS:
        _TYPE_HINTS[cls] = typing.get_type_hints(cls)
    return _TYPE_HINTS[cls]


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    if kind is int and isinstance(value, int):  # exact: float() rounds past 2**53 and overflows past 1e308
        return value
    try:
        number = float(value)  # YAML reads 1e-5 (no dot) as a string
    except (ValueError, OverflowError):
        raise ValueError(f"expected a finite number, got {str(value)[:40]}") from None
    if not math.isfinite(number):  # .inf, .nan, 1e400: no setting means them, and int() of one raises
        raise ValueError(f"expected a finite number, got {value!r}")
    if kind is int and number != int(number):
        raise ValueError(f"expected a whole number, got {value!r}")
    return kind(number)


def _text(value: Any, *, path: bool) -> str:
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _settings(value: Any, kind: Any, *, name: str) -> Any:
    """A nested settings dataclass from true (its defaults), a mapping of its settings, or an instance."""
    if isinstance(value, kind):
        return value
    if value is True:
        return kind()
    names = [spec.name for spec in dataclasses.fields(kind)]
    if not isinstance(value, Mapping):
        raise ValueError(f"expected true, false or a mapping of {', '.join(names)}, got {value!r}")
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"unknown {name} setting(s) {', '.join(unknown)}; known: {', '.join(names)}")
    return kind(**value)


def _next_to(folder: Path, name: str, value: Any, *, many: bool) -> Any:
    """A path setting of a file, relative to the file's folder: each path of a list setting (``many``); a single
    path only when it exists there (a hub id such as owner/name stays as it is), except ``output_dir``, which is
    always the folder's."""
    if many and isinstance(value, (str, list)):
        items = [value] if isinstance(value, str) else value
        return [str(item if Path(str(item)).is_absolute() else folder / str(item)) for item in items]
    if isinstance(value, str) and not Path(value).is_absolute() and (name == "output_dir" or (folder / value).exists()):
        return str(folder / value)
    return value
