"""What was run: one record (``RunRecord``) of a command's run that its reports carry, so a figure can be traced to
the model file, the settings, the software and the machine that made it. ``eval`` writes it into ``summary.md`` and
``summary.json``, ``bench`` into ``report.md`` and ``report.json``; it renders as a Markdown block
(``RunRecord.markdown``) and as a JSON object (``RunRecord.to_dict``).

    record = describe_run("eval", models=[Path("model.gguf")], settings=settings, flags={"k": 4},
                          command_line=["eval", "pydocs", "--k", "4"])
    Path("summary.md").write_text(figures + record.markdown())

The record holds: each model file (path, size, SHA-256, the GGUF's architecture, quant type and parameters), every
setting (a settings dataclass such as ``SessionSettings``, the command's own flags, and what the engine resolved at
load: n_ctx, threads, KV type), the venus-edge and llama-cpp-python versions, the machine (CPU, cores, RAM, OS,
Python), the date (UTC, ISO 8601) and the command line.

Secrets stay out: settings and flags named like a key (``api_key``) are recorded as ``"(set)"``, the value after a
``--...-key`` option on the command line as ``REDACTED``, and a URL's user and password are dropped.

A model file's SHA-256 is kept in ``$XDG_CACHE_HOME/venus-edge/model-hashes.json`` keyed by the resolved path, size
and modification time, so a 2.5 GB file is hashed once (about 2 s at 1.5 GB/s), not on every run; the record says
how long hashing took in this run (``hash_s``, 0 when the cache had it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from venus_edge.errors import ModelNotFoundError, VenusEdgeError
from venus_edge.memory.header import read_model_header
from venus_edge.memory.machine import cpu_name, physical_cores, total_ram_bytes
from venus_edge.memory.plan import format_bytes

__all__ = ["MachineInfo", "ModelFile", "RunRecord", "command_flags", "describe_run", "model_file_record"]

#: Hash a file in pieces of this many bytes (memory stays flat whatever the file's size).
HASH_CHUNK_BYTES = 1 << 20
#: Recorded in place of a secret's value.
REDACTED = "REDACTED"
SECRET_SET = "(set)"


def _is_secret(name: str) -> bool:
    """A setting or flag that holds a credential: ``api_key``, ``judge_api_key``, ``--engine-api-key``."""
    return name.lower().replace("-", "_").strip("_").endswith("key")


@dataclass(frozen=True)
class ModelFile:
    """One model file as it was on disk when the run started.

    Attributes:
        path: the resolved (absolute) path.
        size_bytes: the file's size.
        sha256: the SHA-256 of the whole file, hex.
        hash_s: seconds spent hashing in this run (0.0 when the hash came from the cache).
        hash_from_cache: the hash was read from the cache (the file's path, size and modification time matched).
        architecture: the GGUF's ``general.architecture`` (``qwen3``), or None when the header cannot be read.
        file_type: the quant type (``Q4_K_M``, from ``general.file_type``), or None when absent.
        n_params: parameters over all tensors, or None when the header cannot be read.
    """

    path: str
    size_bytes: int
    sha256: str
    hash_s: float = 0.0
    hash_from_cache: bool = False
    architecture: str | None = None
    file_type: str | None = None
    n_params: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class MachineInfo:
    """The machine a run ran on.

    Attributes:
        cpu: the CPU's model name.
        physical_cores: physical cores available to the process.
        logical_cpus: logical CPUs (hyper-threads counted).
        ram_bytes: total physical memory, or None when unknown.
        os: the operating system and its release (``platform.platform()``).
        python: the Python version.
    """

    cpu: str
    physical_cores: int
    logical_cpus: int
    ram_bytes: int | None
    os: str
    python: str

    @classmethod
    def here(cls) -> MachineInfo:
        """This machine, now."""
        return cls(cpu=cpu_name(), physical_cores=physical_cores(), logical_cpus=os.cpu_count() or 1,
                   ram_bytes=total_ram_bytes(), os=platform.platform(), python=platform.python_version())

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunRecord:
    """What was run: the command, its model files, settings, software, machine and date.

    Attributes:
        command: the subcommand (``eval``, ``bench``).
        command_line: the arguments after the program name, secrets redacted.
        date_utc: when the run started, ISO 8601 in UTC (``2026-12-01T09:30:00Z``).
        venus_edge_version: the installed venus-edge distribution's version.
        llama_cpp_python_version: the installed llama-cpp-python's version, or None when it is not installed.
        machine: the machine.
        models: the model files the run loaded (none with a model server).
        settings: the settings record's fields (``SessionSettings``), JSON-ready, secrets redacted.
        flags: the command's own flags (those not in ``settings``), JSON-ready, secrets redacted.
        engine: what the engine resolved when it loaded (``Engine.model_info``: n_ctx, threads, KV type, ...),
            JSON-ready; empty when not known.
    """

    command: str
    command_line: tuple[str, ...]
    date_utc: str
    venus_edge_version: str
    llama_cpp_python_version: str | None
    machine: MachineInfo
    models: tuple[ModelFile, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    flags: Mapping[str, Any] = field(default_factory=dict)
    engine: Mapping[str, Any] = field(default_factory=dict)

    def with_engine(self, model_info: Mapping[str, Any]) -> RunRecord:
        """This record with the loaded engine's ``model_info`` (its memory plan left out: the resolved n_ctx,
        threads and KV type are in it already)."""
        resolved = {key: value for key, value in model_info.items() if key != "memory_plan"}
        return dataclasses.replace(self, engine=_json_ready(resolved))

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON object (the ``run`` key of ``summary.json`` and ``report.json``)."""
        return {
            "command": self.command, "command_line": list(self.command_line), "date_utc": self.date_utc,
            "venus_edge_version": self.venus_edge_version, "llama_cpp_python_version": self.llama_cpp_python_version,
            "machine": self.machine.to_dict(), "models": [model.to_dict() for model in self.models],
            "settings": dict(self.settings), "flags": dict(self.flags), "engine": dict(self.engine),
        }

    def markdown(self) -> str:
        """The record as a Markdown section ("## What was run"): command line, date, versions, machine, the model
        files, then one table of every setting and flag."""
        machine = self.machine
        ram = format_bytes(machine.ram_bytes) if machine.ram_bytes else "unknown"
        lines = [
            "## What was run", "",
            f"- command: `venus-edge {shlex.join(self.command_line)}`",
            f"- date (UTC): {self.date_utc}",
            f"- venus-edge {self.venus_edge_version}, "
            f"llama-cpp-python {self.llama_cpp_python_version or 'not installed'}",
            f"- machine: {machine.cpu}, {machine.physical_cores} physical cores ({machine.logical_cpus} logical), "
            f"{ram} RAM, {machine.os}, Python {machine.python}",
        ]
        for model in self.models:
            hashed = "hash from the cache" if model.hash_from_cache else f"hashed in {model.hash_s:.1f} s"
            lines.append(f"- model: `{model.path}`, {model.size_bytes:,} bytes, {model.architecture or '?'} "
                         f"{model.file_type or '?'}, sha256 `{model.sha256}` ({hashed})")
        rows = [(f"settings.{key}", value) for key, value in self.settings.items()]
        rows += [(f"flags.{key}", value) for key, value in self.flags.items()]
        rows += [(f"engine.{key}", value) for key, value in self.engine.items()]
        if rows:
            lines += ["", "| setting | value |", "|---|---|"]
            lines += [f"| {key} | {_cell(value)} |" for key, value in rows]
        return "\n".join(lines) + "\n"


def command_flags(values: Mapping[str, Any], *, leave_out: Iterable[str] = ()) -> dict[str, Any]:
    """The flags a command was given, from its parsed namespace (``vars(args)``): less the names in ``leave_out``,
    the subcommand's name, the recorded command line (``argv``) and the parser's own bookkeeping (names starting
    with ``_``, such as the command's parser)."""
    dropped = {"command", "argv", *leave_out}
    return {key: value for key, value in values.items() if key not in dropped and not key.startswith("_")}


def describe_run(
    command: str,
    *,
    models: Iterable[str | os.PathLike[str]] = (),
    settings: Any = None,
    flags: Mapping[str, Any] | None = None,
    command_line: Sequence[str] | None = None,
    hash_cache: Path | None = None,
) -> RunRecord:
    """The record of a run starting now.

    Args:
        command: the subcommand (``eval``).
        models: the model files the run loads (each hashed, or its hash read from the cache).
        settings: a settings dataclass (``SessionSettings``) or a mapping; None for none.
        flags: the command's own flags (``vars(args)`` less the settings' flags).
        command_line: the arguments after the program name (default ``sys.argv[1:]``).
        hash_cache: the hash cache file (default ``$XDG_CACHE_HOME/venus-edge/model-hashes.json``).

    Raises:
        ModelNotFoundError: a model file does not exist.
    """
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        settings = {item.name: getattr(settings, item.name) for item in dataclasses.fields(settings)}
    cache = hash_cache or default_hash_cache_path()
    return RunRecord(
        command=command,
        command_line=redact_command_line(sys.argv[1:] if command_line is None else command_line),
        date_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        venus_edge_version=_version("venus-edge") or "unknown",
        llama_cpp_python_version=_version("llama_cpp_python"),
        machine=MachineInfo.here(),
        models=tuple(model_file_record(Path(model), hash_cache=cache) for model in models),
        settings=_redacted(settings or {}),
        flags=_redacted(flags or {}),
    )


def model_file_record(path: Path, *, hash_cache: Path | None = None) -> ModelFile:
    """The record of one model file: size, SHA-256 (from ``hash_cache`` when the path, size and modification time
    match, else hashed now and stored there), and what its GGUF header says (None where it says nothing).

    Raises:
        ModelNotFoundError: no such file.
    """
    path = path.expanduser().resolve()
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelNotFoundError(str(path), "no such file") from exc
    if not path.is_file():
        raise ModelNotFoundError(str(path), "not a file")
    cache = hash_cache or default_hash_cache_path()
    key = {"size_bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    entries = _read_hash_cache(cache)
    cached = entries.get(str(path))
    hash_s = 0.0
    digest = cached.get("sha256") if isinstance(cached, dict) and {k: cached.get(k) for k in key} == key else None
    from_cache = isinstance(digest, str)
    if not isinstance(digest, str):
        start = time.perf_counter()
        digest = _sha256(path)
        hash_s = round(time.perf_counter() - start, 3)
        entries[str(path)] = {**key, "sha256": digest}
        _write_hash_cache(cache, entries)
    architecture = file_type = n_params = None
    with contextlib.suppress(VenusEdgeError):  # not GGUF, or a header without a model's dimensions
        header = read_model_header(path)
        architecture, file_type, n_params = header.architecture, header.file_type, header.n_params
    return ModelFile(str(path), stat.st_size, digest, hash_s, from_cache, architecture, file_type, n_params)


def default_hash_cache_path() -> Path:
    """``$XDG_CACHE_HOME/venus-edge/model-hashes.json`` (``~/.cache`` without it), beside the prompt cache."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "venus-edge" / "model-hashes.json"


def redact_command_line(arguments: Sequence[str]) -> tuple[str, ...]:
    """``arguments`` with the value of every ``--...-key`` option (``--api-key K``, ``--api-key=K``) replaced by
    ``REDACTED`` and the user and password dropped from URLs."""
    redacted: list[str] = []
    hide_next = False
    for argument in arguments:
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
        elif argument.startswith("--") and _is_secret(argument.partition("=")[0]):
            name, equals, _ = argument.partition("=")
            redacted.append(f"{name}={REDACTED}" if equals else argument)
            hide_next = not equals
        else:
            redacted.append(_without_userinfo(argument))
    return tuple(redacted)


# ---------------------------------------------------------------------------------------------- helpers
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _read_hash_cache(cache: Path) -> dict[str, Any]:
    """The cache's entries; none when it is missing or unreadable (it is only a cache: hashing again is correct)."""
    try:
        entries = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _write_hash_cache(cache: Path, entries: Mapping[str, Any]) -> None:
    """Replace the cache file in one step (a reader never sees half of it); a cache that cannot be written is
    skipped: the next run hashes again."""
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=cache.name, suffix=".tmp", dir=cache.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entries, out, indent=1, sort_keys=True)
            os.replace(temporary, cache)
        except OSError:
            os.unlink(temporary)
            raise


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _without_userinfo(text: str) -> str:
    """A URL without ``user:password@``; any other text as it is."""
    if "://" not in text or "@" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.username and not parts.password:
        return text
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def _json_ready(value: Any) -> Any:
    """``value`` with paths as strings and tuples as lists, as ``json`` writes them."""
    return json.loads(json.dumps(value, default=str))


def _redacted(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-ready ``values``: a credential recorded as ``(set)`` (or None when unset), URLs without their user."""
    plain: dict[str, Any] = _json_ready(dict(values))
    for key, value in plain.items():
        if _is_secret(key):
            plain[key] = SECRET_SET if value else None
        elif isinstance(value, str):
            plain[key] = _without_userinfo(value)
    return plain


def _cell(value: Any) -> str:
    """A value in a Markdown table cell (``|`` escaped)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("|", "\\|").replace("\n", " ")
