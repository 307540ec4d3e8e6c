"""Running untrusted Python in a child process with limits: the sandbox of the ``PythonInterpreter`` tool.

``run_sandboxed(code, limits)`` writes ``code`` to ``main.py`` in a fresh temporary directory and runs it with
``python -I -u`` (no ``PYTHON*`` variables, no user site, unbuffered so output and errors keep their order), in a
child set up by ``sandbox_child.py``:

- namespaces: a new user namespace (unless the parent is root), a network namespace (no address is reachable,
  127.0.0.1 included), a PID namespace (the code sees only its own processes; when the run ends, everything it
  started dies with it), an IPC namespace, and a mount namespace where every mount is read-only except the
  temporary directory;
- an unprivileged uid: ``nobody`` when the parent runs as root (root is exempt from the process limit), else the
  parent's own uid, with ``no_new_privs`` (setuid programs do not raise it);
- resource limits (``SandboxLimits``): CPU seconds, address space, processes, file size, open files, no core files;
- a wall-clock limit (the parent has the namespace torn down, then kills the whole process group) and an output
  limit (the parent stops reading and stops the run once it printed more);
- an environment of its own (``PATH``, ``HOME`` and ``TMPDIR`` in the temporary directory, ``LANG``, one thread for
  the numeric libraries): none of the parent's variables, so none of its secrets;
- the temporary directory is removed afterwards.

``probe_isolation()`` says whether this machine lets a process make those namespaces (Linux with user namespaces; not
macOS, not a container that forbids ``unshare``). Where it cannot, ``run_sandboxed(..., isolate=False)`` runs with
the limits, the uid and the clean environment only, without network or filesystem isolation: the tool allows that
only when the user says so (``--python-unsandboxed-network``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["SandboxLimits", "SandboxRun", "probe_isolation", "run_sandboxed"]

_CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")
# The uid the code runs as when the parent is root (root is exempt from RLIMIT_NPROC and may write anywhere).
_NOBODY = "nobody"
_READ_CHUNK_BYTES = 65_536


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one run of code.

    Attributes:
        wall_time_s: seconds from start to the kill of the whole run (sleeping counts).
        cpu_time_s: CPU seconds of each process (``RLIMIT_CPU``); the process gets ``SIGXCPU``, then ``SIGKILL``
            a second later.
        memory_bytes: address space of each process (``RLIMIT_AS``); a larger allocation raises ``MemoryError``.
        max_processes: processes and threads the code may have at once (``RLIMIT_NPROC``: counted in the
            sandbox's own user namespace; under root, ``nobody``'s other processes are added to it); a fork past it
            fails.
        max_output_bytes: bytes of standard output and errors shown; a run that prints more is stopped there.
        max_file_bytes: the largest file the code may write in its directory (``RLIMIT_FSIZE``).
        max_open_files: file descriptors per process (``RLIMIT_NOFILE``).
    """

    wall_time_s: float = 30.0
    cpu_time_s: int = 20
    memory_bytes: int = 2 * 1024**3
    max_processes: int = 32
    max_output_bytes: int = 10_000
    max_file_bytes: int = 64 * 1024**2
    max_open_files: int = 256

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


@dataclass(frozen=True)
class SandboxRun:
    """What one run of code did.

    Attributes:
        output: standard output and errors, interleaved as written, decoded as UTF-8, at most
            ``max_output_bytes`` of them.
        exit_code: the code's exit status (0: ran to its end), or None when it was stopped or killed.
        signal: the signal that ended it (``SIGXCPU``/``SIGKILL`` after the CPU limit), or None.
        stopped: why the sandbox stopped it: ``wall_time``, ``output``, or None.
        output_cut: more output was written than is kept.
        setup_error: why the sandbox could not be set up (the code did not run), or None.
        wall_s: seconds the run took.
    """

    output: str
    exit_code: int | None
    signal: int | None
    stopped: str | None
    output_cut: bool
    setup_error: str | None
    wall_s: float


def _sandbox_ids() -> tuple[int, int]:
    """(uid, gid) the code runs as: ``nobody``'s under root, the parent's own otherwise."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    entry = pwd.getpwnam(_NOBODY)
    return entry.pw_uid, entry.pw_gid


def _interpreter_paths(python: str | os.PathLike[str]) -> list[str]:
    """The folders the code's interpreter reads: its prefixes, its own folder and this process's import path."""
    found = [sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(python)), *sys.path]
    return list(dict.fromkeys(os.path.realpath(path) for path in found if path and os.path.isdir(path)))


def _hidden_folders(paths: list[str], uid: int, gid: int) -> dict[str, list[str]]:
    """For each folder that ``uid`` may not enter (root's home, pytest's 0700 temporary folders) on the way to one of
    ``paths``: the paths under it. The sandbox covers each such folder and exposes only these paths in it."""
    hidden: dict[str, list[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts)):
            folder = str(Path(*parts[:depth + 1]))
            if not _may_enter(folder, uid, gid):
                hidden.setdefault(folder, []).append(path)
                break
    return hidden


def _may_enter(folder: str, uid: int, gid: int) -> bool:
    info = os.stat(folder)
    if info.st_uid == uid:
        return bool(info.st_mode & 0o100)
    return bool(info.st_mode & (0o010 if info.st_gid == gid else 0o001))


def _environment(work_dir: str) -> dict[str, str]:
    """The code's whole environment: nothing of the parent's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work_dir, "TMPDIR": work_dir, "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


def _processes_of(uid: int) -> int:
    """Processes whose real uid is ``uid`` now (the process limit outside a user namespace counts them all)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                for line in status:
                    if line.startswith("Uid:"):
                        count += int(line.split()[1]) == uid
                        break
        except (OSError, ValueError):
            continue
    return count


def run_sandboxed(code: str, limits: SandboxLimits | None = None, *, isolate: bool = True,
                  work_root: str | os.PathLike[str] | None = None,
                  python: str | os.PathLike[str] | None = None) -> SandboxRun:
    """Run ``code`` (Python source) in a fresh sandbox and return what it printed and how it ended.

    Never raises for anything the code does; a sandbox that cannot be set up comes back as ``setup_error`` (the code
    did not run).

    Args:
        code: the program, run as ``main.py`` in its own temporary directory.
        limits: the run's limits (default ``SandboxLimits()``).
        isolate: make the namespaces (network, PID, mount, user); False runs with the limits, the uid and the clean
            environment only (the user's ``--python-unsandboxed-network``).
        work_root: where the temporary directory is made (default: the system's temporary folder).
        python: the interpreter (default: this one, so the code sees the same installed packages).
    """
    limits = limits or SandboxLimits()
    started = time.monotonic()
    uid, gid = _sandbox_ids()
    work_dir = tempfile.mkdtemp(prefix="venus-python-", dir=work_root)
    try:
        Path(work_dir, "main.py").write_text(code, encoding="utf-8")
        if os.geteuid() == 0:  # the code runs as nobody: its directory must be its own
            os.chown(work_dir, uid, gid)
        max_processes = limits.max_processes
        if os.geteuid() == 0:  # nobody outside a user namespace: the limit counts its other processes too
            max_processes += _processes_of(uid)
        interpreter = str(python or sys.executable)
        reached = [*_interpreter_paths(interpreter), os.path.realpath(work_dir)]
        hidden = _hidden_folders(reached, uid, gid) if isolate and uid != os.geteuid() else {}
        status_read, status_write = os.pipe()
        config = {
            "status_fd": status_write, "isolate": isolate, "work_dir": work_dir, "uid": uid, "gid": gid,
            "python": interpreter, "hidden": hidden, "env": _environment(work_dir),
            "limits": {"cpu_time_s": limits.cpu_time_s, "memory_bytes": limits.memory_bytes,
                       "max_processes": max_processes, "max_file_bytes": limits.max_file_bytes,
                       "max_open_files": limits.max_open_files},
        }
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_CHILD_SCRIPT), json.dumps(config)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=_environment(work_dir), start_new_session=True, pass_fds=(status_write,), cwd=work_dir,
            )
        finally:
            os.close(status_write)
        with os.fdopen(status_read, "rb") as status_pipe:
            output, cut, stopped = _collect(child, limits, started)
            status = status_pipe.read().decode(errors="replace").split("\n")
        return _outcome(output, cut, stopped, status, limits, time.monotonic() - started)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _collect(child: subprocess.Popen[bytes], limits: SandboxLimits, started: float) -> tuple[bytes, bool, str | None]:
    """Read the child's output until it ends, the wall-clock limit passes or the output limit is passed; the last
    two kill its process group. Returns (output kept, whether more was written, why it was stopped or None)."""
    assert child.stdout is not None
    kept, cut, stopped = bytearray(), False, None
    stream = child.stdout.fileno()
    while True:
        left_s = started + limits.wall_time_s - time.monotonic()
        if left_s <= 0:
            stopped = "wall_time"
            break
        ready, _, _ = select.select([stream], [], [], left_s)
        if not ready:
            continue
        chunk = os.read(stream, _READ_CHUNK_BYTES)
        if not chunk:
            break
        kept += chunk
        if len(kept) > limits.max_output_bytes:
            cut, stopped = True, "output"
            break
    if stopped is None:  # the output ended; the code may still run (it closed its output and sleeps)
        try:
            child.wait(max(0.0, started + limits.wall_time_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = "wall_time"
    if stopped is not None:
        _kill_group(child)
    child.stdout.close()
    child.wait()
    return bytes(kept[: limits.max_output_bytes]), cut, stopped


#: Seconds the starter gets to tear the namespace down (kill PID 1 and wait for it) before its group is killed.
_TEARDOWN_S = 5.0


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Stop the run: SIGTERM to the starter, which kills PID 1 of the namespace and returns once every process there
    is gone; then SIGKILL to the process group (what is left without a PID namespace, or of a starter that hung)."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(_TEARDOWN_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)


def _outcome(output: bytes, cut: bool, stopped: str | None, status: list[str], limits: SandboxLimits,
             wall_s: float) -> SandboxRun:
    text = output.decode("utf-8", errors="replace")
    exit_code = ended_by = None
    for line in status:
        word, _, value = line.partition(" ")
        if word == "error":
            return SandboxRun(text, None, None, stopped, cut, value, wall_s)
        if word == "exit":
            exit_code = int(value)
        elif word == "signal":
            ended_by = int(value)
    if stopped is None and exit_code is None and ended_by is None:  # killed before its PID 1 could report
        ended_by = signal.SIGKILL
    return SandboxRun(text, exit_code if stopped is None else None, ended_by if stopped is None else None,
                      stopped, cut, None, wall_s)


def probe_isolation() -> str | None:
    """None when ``run_sandboxed`` can make its namespaces here, else why not (one sentence)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox's namespaces need Linux; this is {sys.platform}"
    if not hasattr(os, "setresuid"):
        return "this Python has no os.setresuid"
    run = run_sandboxed("pass", SandboxLimits(wall_time_s=20.0))
    if run.setup_error is not None:
        return f"this machine refused the sandbox's namespaces: {run.setup_error}"
    if run.exit_code != 0:
        return f"a trial run in the sandbox did not succeed (exit {run.exit_code}, signal {run.signal}): " \
               f"{run.output[-300:]}"
    return None
