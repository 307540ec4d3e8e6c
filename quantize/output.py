"""Atomic output files: write under a temporary name in the target folder, rename when complete."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputNotWritableError

__all__ = ["check_output_path", "temporary_output"]


def check_output_path(out_path: Path) -> None:
    """Raise OutputNotWritableError early when `out_path` is a folder or its folder is missing."""
    if out_path.is_dir():
        raise OutputNotWritableError(out_path, "the path is a folder; expected a file name ending in .gguf")
    if not out_path.parent.is_dir():
        raise OutputNotWritableError(out_path, f"folder {out_path.parent} does not exist")


@contextlib.contextmanager
def temporary_output(out_path: Path) -> Iterator[Path]:
    """A temp file next to `out_path`, renamed onto it on success and removed on any failure."""
    check_output_path(out_path)
    temp_path = out_path.with_name(f".{out_path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:  # O_EXCL: never clobber; mode 0o666 less the umask, like any new file
        os.close(os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as error:
        raise OutputNotWritableError(out_path, f"{type(error).__name__}: {error}") from error
    try:
        yield temp_path
        os.replace(temp_path, out_path)
    finally:
        temp_path.unlink(missing_ok=True)

