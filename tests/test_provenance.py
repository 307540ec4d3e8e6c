"""The record of what was run (``venus_edge.provenance``): a model file's hash (and its cache), the GGUF's facts,
every setting, secrets kept out, and the Markdown and JSON forms agreeing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import pytest

from venus_edge.errors import ModelNotFoundError
from venus_edge.memory.header import read_model_header
from venus_edge.memory.machine import physical_cores
from venus_edge.provenance import describe_run, model_file_record, redact_command_line
from venus_edge.session import SessionSettings


@pytest.fixture
def model_copy(tiny_qwen3_gguf: Path, tmp_path: Path) -> Path:
    """A copy of the tiny GGUF this test may change."""
    return Path(shutil.copy(tiny_qwen3_gguf, tmp_path / "model.gguf"))


def test_a_model_file_is_hashed_once_then_read_from_the_cache(model_copy: Path, tmp_path: Path) -> None:
    """The SHA-256 is the file's; the second record reads it from the cache; a changed file is hashed again."""
    cache = tmp_path / "hashes.json"
    first = model_file_record(model_copy, hash_cache=cache)
    header = read_model_header(model_copy)
    assert first.sha256 == hashlib.sha256(model_copy.read_bytes()).hexdigest()
    assert (first.path, first.size_bytes) == (str(model_copy.resolve()), model_copy.stat().st_size)
    assert (first.architecture, first.file_type, first.n_params) == ("qwen3", header.file_type, header.n_params)
    assert not first.hash_from_cache
    again = model_file_record(model_copy, hash_cache=cache)
    assert again.hash_from_cache and again.hash_s == 0.0 and again.sha256 == first.sha256
    with model_copy.open("ab") as handle:  # the file changes: size and modification time
        handle.write(b"\0" * 64)
    changed = model_file_record(model_copy, hash_cache=cache)
    assert not changed.hash_from_cache
    assert changed.sha256 == hashlib.sha256(model_copy.read_bytes()).hexdigest() != first.sha256


def test_a_same_size_file_rewritten_later_is_hashed_again(model_copy: Path, tmp_path: Path) -> None:
    """The cache is keyed by modification time too: same size, other bytes, later mtime -> hashed again."""
    cache = tmp_path / "hashes.json"
    first = model_file_record(model_copy, hash_cache=cache)
    data = bytearray(model_copy.read_bytes())
    data[-1] ^= 0xFF
    model_copy.write_bytes(bytes(data))
    stat = model_copy.stat()
    os.utime(model_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = model_file_record(model_copy, hash_cache=cache)
    assert not second.hash_from_cache and second.sha256 != first.sha256


def test_a_damaged_cache_is_rebuilt_and_a_file_that_is_not_gguf_is_still_recorded(tmp_path: Path) -> None:
    cache = tmp_path / "hashes.json"
    cache.write_text("{ torn")
    other = tmp_path / "notes.bin"
    other.write_bytes(b"not a model")
    record = model_file_record(other, hash_cache=cache)
    assert record.sha256 == hashlib.sha256(b"not a model").hexdigest()
    assert (record.architecture, record.file_type, record.n_params) == (None, None, None)
    assert json.loads(cache.read_text())[str(other.resolve())]["sha256"] == record.sha256
    with pytest.raises(ModelNotFoundError, match=r"missing\.gguf"):
        model_file_record(tmp_path / "missing.gguf", hash_cache=cache)


def test_the_record_holds_every_setting_and_no_secret(model_copy: Path, tmp_path: Path) -> None:
    """Every ``SessionSettings`` field is in the record with its value; the API key, a URL's password and the
    value after ``--api-key`` are not, in the JSON or the Markdown."""
    settings = SessionSettings(model=str(model_copy), engine="openai", base_url="http://user:hunter2@127.0.0.1:8080",
                               api_key="s3cret", corpus=(tmp_path,), max_turns=7, n_ctx=2048, temperature=0.5)
    command_line = ["eval", "pydocs", "--api-key", "s3cret", "--judge-api-key=s3cret", "--max-turns", "7"]
    record = describe_run("eval", models=[model_copy], settings=settings, flags={"k": 4, "out": tmp_path / "out"},
                          command_line=command_line, hash_cache=tmp_path / "hashes.json")
    record = record.with_engine({"path": str(model_copy), "n_ctx": 2048, "n_threads": 2, "memory_plan": {"x": 1}})
    data = record.to_dict()
    assert set(data["settings"]) == {field.name for field in dataclasses.fields(SessionSettings)}
    assert data["settings"]["max_turns"] == 7 and data["settings"]["n_ctx"] == 2048
    assert data["settings"]["temperature"] == 0.5 and data["settings"]["corpus"] == [str(tmp_path)]
    assert data["settings"]["api_key"] == "(set)" and data["settings"]["base_url"] == "http://127.0.0.1:8080"
    assert data["flags"] == {"k": 4, "out": str(tmp_path / "out")}
    assert data["engine"] == {"path": str(model_copy), "n_ctx": 2048, "n_threads": 2}
    assert data["command_line"] == ["eval", "pydocs", "--api-key", "REDACTED", "--judge-api-key=REDACTED",
                                    "--max-turns", "7"]
    markdown = record.markdown()
    for text in (json.dumps(data), markdown):
        assert "s3cret" not in text and "hunter2" not in text
    for name, value in data["settings"].items():
        shown = value if isinstance(value, str) else json.dumps(value)
        assert f"| settings.{name} | {shown} |" in markdown, name
    assert "| flags.k | 4 |" in markdown and "| engine.n_ctx | 2048 |" in markdown
    assert "`venus-edge eval pydocs --api-key REDACTED --judge-api-key=REDACTED --max-turns 7`" in markdown
    assert f"sha256 `{data['models'][0]['sha256']}`" in markdown


def test_the_record_names_the_software_the_machine_and_the_date(tmp_path: Path) -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    record = describe_run("bench", command_line=["bench", "m.gguf"], hash_cache=tmp_path / "hashes.json")
    date = datetime.strptime(record.date_utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert date >= before
    assert record.venus_edge_version == version("venus-edge")
    assert record.llama_cpp_python_version == version("llama_cpp_python")
    machine = record.machine
    assert machine.physical_cores == physical_cores() and machine.logical_cpus == os.cpu_count()
    assert machine.python == platform.python_version() and machine.os == platform.platform()
    assert machine.ram_bytes and machine.ram_bytes > 2**20 and machine.cpu
    markdown = record.markdown()
    assert f"- date (UTC): {record.date_utc}" in markdown and f"venus-edge {record.venus_edge_version}," in markdown
    assert f"{machine.physical_cores} physical cores" in markdown and f"Python {machine.python}" in markdown


def test_command_line_redaction_keeps_everything_else() -> None:
    arguments = ["serve", "--api-key", "k", "--base-url", "https://a:b@example.org/v1", "--model", "x.gguf",
                 "--keep-last", "3", "question with --api-key in it"]
    assert redact_command_line(arguments) == ("serve", "--api-key", "REDACTED", "--base-url",
                                              "https://example.org/v1", "--model", "x.gguf", "--keep-last", "3",
                                              "question with --api-key in it")
