"""Atomic output files: write under a temporary name in the target folder, rename when complete."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import socket
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
    """A temp file next to `out_path`, renamed onto it on success and removed on any failure. Temp files of
    `out_path` that a killed run left (their process is gone) are removed first: each is as large as the output."""
    check_output_path(out_path)
    remove_stale_partials(out_path)
    temp_path = out_path.with_name(f".{out_path.name}.{_HOST}-{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:  # O_EXCL: never clobber; mode 0o666 less the umask, like any new file
        os.close(os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as error:
        raise OutputNotWritableError(out_path, f"{type(error).__name__}: {error}") from error
    try:
        yield temp_path
        os.replace(temp_path, out_path)
    finally:
        temp_path.unlink(missing_ok=True)


#: This machine's name in temp file names: a PID means a process only on the machine that wrote it (a shared folder).
_HOST = "".join(char if char.isalnum() or char == "-" else "_" for char in socket.gethostname()) or "host"


def remove_stale_partials(out_path: Path) -> list[Path]:
    """Remove the temp files of `out_path` (``.NAME.HOST-PID.HEX.partial``) that this machine wrote and whose
    process no longer runs; returns them. One this user may not remove (another user's, in a shared folder) stays."""
    removed = []
    for partial in out_path.parent.glob(f".{glob.escape(out_path.name)}.{glob.escape(_HOST)}-*.partial"):
        pid = partial.name[len(out_path.name) + len(_HOST) + 3:].split(".")[0]
        if pid.isdigit() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
                removed.append(partial)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
