"""One writer per session: an exclusive lock held while a session is written to its journal.

Two writers of one session (two ``venus-edge research --resume J`` at once, a resume while the server still runs
the session) would both append turns, and the journal would hold each turn twice. So whoever writes a session
first takes ``SessionLock``: ``fcntl.flock`` on a file of its own beside the journal,

    <journal>.locks/<session id>.lock      (a session id that is not a plain file name is hashed)

A second writer is refused at once with ``SessionLockedError``, which names the holder as the lock file records it
(pid, host, command, since when). Why these choices:

- ``flock``, not ``fcntl``/``lockf`` record locks: a ``flock`` belongs to the open file, so two threads of one
  process (the server's workers) exclude each other as two processes do, and closing some other descriptor of the
  file does not drop it. The kernel drops it when the process dies (SIGKILL included), so a killed run never
  leaves a session locked: the lock file may stay behind, unlocked, and the next writer takes it.
- One file per session, not one per journal: the server writes many sessions to one journal at once, and a
  ``research --out J`` may share the server's journal; only writers of the same session exclude each other.
- The file is removed on release. A writer that opened it just before has then locked a removed file, so after
  each ``flock`` the writer checks that the path still names the file it locked, and tries again if not.

``flock`` on a network file system may be a no-op (NFS before Linux 2.6.12, some FUSE file systems): there the
lock protects writers on one machine only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from venus_edge.errors import SessionLockedError

__all__ = ["SessionLock"]

_PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ATTEMPTS = 5  # a lock file removed between our open and our flock: open it again (another writer just ended)
_HOLDER_POLLS, _HOLDER_POLL_S = 20, 0.01  # waiting at most 0.2 s for a holder that locked but has not written yet


def lock_path(journal: Path, session_id: str) -> Path:
    """The lock file of ``session_id`` in ``journal``: ``<journal>.locks/<id>.lock`` (an id that is not a plain
    file name, or begins with a dot, is replaced by its SHA-256)."""
    name = session_id if _PLAIN_ID.fullmatch(session_id) and not session_id.startswith(".") else \
        hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return Path(f"{journal}.locks") / f"{name}.lock"


class SessionLock:
    """The exclusive right to write one session of a journal, held from ``acquire`` to ``release``.

    Usage:

        lock = SessionLock(journal, session_id)
        lock.acquire()        # SessionLockedError at once when another writer holds it
        try: ...              # write the session's records
        finally: lock.release()

    Also a context manager. Not reentrant: a second ``SessionLock`` of the same session in the same process is
    refused as another process's would be.
    """

    def __init__(self, journal: str | os.PathLike[str], session_id: str) -> None:
        self.journal = Path(journal)
        self.session_id = session_id
        self.path = lock_path(self.journal, session_id)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or fail at once.

        Raises:
            SessionLockedError: another writer (process or thread) holds it; the message names the holder.
            OSError: the lock file cannot be created (the journal's folder is not writable).
        """
        if self._fd is not None:
            raise RuntimeError(f"the lock of session {self.session_id} is held already by this object")
        for _ in range(_ATTEMPTS):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the folder was removed by a writer that just ended: make it again
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                for _ in range(_HOLDER_POLLS):  # the holder writes its name just after it locks
                    if holder:
                        break
                    time.sleep(_HOLDER_POLL_S)
                    holder = _read_holder(fd)
                os.close(fd)
                raise SessionLockedError(self.journal, self.session_id, holder, self.path) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                self._fd = fd
                _write_holder(fd)
                return
            os.close(fd)  # we locked a file its last holder had removed: lock the one now at the path
        raise SessionLockedError(self.journal, self.session_id, {}, self.path)

    def release(self) -> None:
        """Give the lock up and remove its file (and the lock folder, once empty). Does nothing when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):  # removed by hand: nothing to tidy
                self.path.unlink()
            with contextlib.suppress(OSError):  # not empty: other sessions are being written
                self.path.parent.rmdir()
        finally:
            os.close(fd)  # unlocks; removing the file first means no new writer locks a file about to vanish

    def __enter__(self) -> SessionLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _write_holder(fd: int) -> None:
    """Record who holds the lock in its file, for the message a refused writer gets (best effort: a full disk
    must not stop the session, the lock itself holds without it)."""
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "thread": threading.current_thread().name,
              "command": " ".join(sys.argv)[:500],
              "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder, ensure_ascii=False).encode("utf-8", "backslashreplace"), 0)


def _read_holder(fd: int) -> dict[str, Any]:
    """What the holder wrote in the lock file ({} when it has not written yet, or wrote something else)."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}
