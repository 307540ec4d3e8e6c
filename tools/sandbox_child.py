"""The child side of the Python sandbox (``venus_edge.tools.sandbox``): run as a script, never imported by the tool.

``python -I -S sandbox_child.py CONFIG_JSON`` is started by ``run_sandboxed`` in a new session with a clean
environment, its standard output and errors on one pipe and a status pipe on the file descriptor the config names.
It sets the sandbox up in three processes:

1. the starter (this process) leaves the parent's namespaces: a new user namespace unless it runs as root (its
   own uid is the only one mapped), mount, network (only a loopback that is down: no address is reachable), PID
   and IPC namespaces; it makes every mount read-only, recursively, except the work directory, bind-mounted onto
   itself writable;
2. the first child is PID 1 of the new PID namespace: it mounts a fresh ``/proc`` (the parent's processes are not
   visible) and reaps; when it ends, the kernel kills every process left in the namespace (a fork bomb, a daemon);
3. its child becomes the sandbox uid (``nobody`` when the parent is root, since root is exempt from the process
   limit; the parent's own uid otherwise), sets ``no_new_privs`` and the resource limits, enters the work
   directory and executes ``python -I -u main.py`` with the environment the config gives.

The parent stops a run with ``SIGTERM`` to the starter, which kills PID 1 and waits for it (the namespace is empty
when it returns), then ``SIGKILL`` to the process group. Each step reports to the status pipe: ``ok`` once set up,
``error <reason>`` when a step fails (the code then never runs), and ``exit N`` or ``signal N`` when the code ends.
With ``isolate`` false (the user's ``--python-unsandboxed-network``), steps 1 and 2 are skipped: only the limits,
the uid and the clean environment hold.

Only the standard library is imported here (``-S`` leaves site-packages out): this file runs before any sandbox
exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
from typing import Any

__all__: list[str] = []  # a script, not an API

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the new syscall table)
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


class _SetupFailed(Exception):
    """A sandbox step failed; the code does not run."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise _SetupFailed(f"{what}: {os.strerror(errno)} (errno {errno})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, what: str) -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(_libc.mount(encode(source), target.encode(), encode(fstype), ctypes.c_ulong(flags), None), what)


def _mount_setattr(path: str, flags: int, *, set_attr: int = 0, clear_attr: int = 0) -> None:
    attr = _MountAttr(set_attr, clear_attr, 0, 0)
    result = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr),
                           ctypes.sizeof(attr))
    _check(result, f"mount_setattr({path})")


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def leave_namespaces(work_dir: str, hidden: dict[str, list[str]]) -> None:
    """Step 1: new mount, network, PID and IPC namespaces (and a user namespace unless this process is root);
    every mount read-only but ``work_dir``; each folder of ``hidden`` covered by an empty one that holds only the
    listed paths under it (see ``expose_only``).

    Root needs no user namespace and cannot use one here: a process may map only its own uid into the user
    namespace it made, and root's code must run as another uid (root is exempt from the process limit).
    """
    outer_uid, outer_gid = os.geteuid(), os.getegid()
    user_namespace = CLONE_NEWUSER if outer_uid != 0 else 0
    _check(_libc.unshare(user_namespace | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC), "unshare")
    if user_namespace:
        try:  # the one mapping allowed: this uid onto itself (setgroups denied first, as the kernel requires)
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{outer_uid} {outer_uid} 1\n")
            _write("/proc/self/gid_map", f"{outer_gid} {outer_gid} 1\n")
        except OSError as exc:
            raise _SetupFailed(f"writing the user namespace's id maps: {exc}") from None
    _mount(None, "/", None, MS_REC | MS_PRIVATE, "making the mounts private")
    _mount(work_dir, work_dir, None, MS_BIND, "binding the work directory")
    for folder, keep in hidden.items():
        expose_only(folder, keep)
    _mount_setattr("/", AT_RECURSIVE, set_attr=MOUNT_ATTR_RDONLY)
    _mount_setattr(work_dir, 0, clear_attr=MOUNT_ATTR_RDONLY)


def expose_only(folder: str, keep: list[str]) -> None:
    """Cover ``folder`` with an empty, world-readable tmpfs that holds only the paths ``keep`` (bound from the real
    ones): the sandbox uid reaches the interpreter that root installed in its home, and nothing else there."""
    handles = [os.open(path, os.O_PATH) for path in keep]  # the real paths, before the tmpfs covers them
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"covering {folder}")
    os.chmod(folder, 0o755)
    for path, handle in zip(keep, handles):
        target = os.path.join(folder, os.path.relpath(path, folder))
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", target, None, MS_BIND | MS_REC, f"exposing {path}")
        os.close(handle)


def become_sandbox_user(uid: int, gid: int) -> None:
    """Step 3's first part: the sandbox uid and gid, no supplementary groups (where allowed), no new privileges."""
    # An unprivileged user namespace denies setgroups; its groups are then unmapped (nogroup) anyway.
    with contextlib.suppress(OSError):
        os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def set_limits(limits: dict[str, int]) -> None:
    """Step 3's second part: CPU seconds, address space, processes, file size, open files; no core files."""
    cpu_s = limits["cpu_time_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU at the soft limit, SIGKILL a second later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"], limits["max_file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"], limits["max_open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_code(config: dict[str, Any], status: int) -> None:
    """Step 3: never returns; the code replaces this process, or it exits 127 after reporting why it could not."""
    try:
        become_sandbox_user(config["uid"], config["gid"])
        set_limits(config["limits"])
        os.chdir(config["work_dir"])
        os.set_inheritable(status, False)  # closed by the exec below: the code cannot write a status
        python = config["python"]
        os.execve(python, [python, "-I", "-u", "main.py"], config["env"])
    except (OSError, _SetupFailed) as exc:
        os.write(status, f"error {exc}\n".encode())
        os._exit(127)


def reap_until(child: int) -> int:
    """Wait for ``child``, reaping every other process of the namespace meanwhile; its wait status."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == child:
            return wait_status


def main() -> None:
    config = json.loads(sys.argv[1])
    status = int(config["status_fd"])
    try:
        if config["isolate"]:
            leave_namespaces(config["work_dir"], config["hidden"])
    except _SetupFailed as exc:
        os.write(status, f"error {exc}\n".encode())
        os._exit(71)
    init = os.fork()  # with isolation, PID 1 of the new PID namespace
    if init:
        os.close(status)
        # The parent stops a run with SIGTERM to this process: kill PID 1 and wait, so that when this process ends,
        # the namespace's teardown (every process in it killed and reaped) is over.
        signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGKILL))
        _, wait_status = os.waitpid(init, 0)
        os._exit(os.waitstatus_to_exitcode(wait_status) % 256)
    if config["isolate"]:
        # The new PID namespace's own /proc: the parent's processes (and their environment) are not there. A /proc
        # over-mounted by a container may refuse it; the parent's processes then stay out of reach by uid.
        with contextlib.suppress(_SetupFailed):
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "mounting /proc")
    os.write(status, b"ok\n")
    code = os.fork()
    if code == 0:
        run_code(config, status)
    wait_status = reap_until(code)
    if os.WIFSIGNALED(wait_status):
        os.write(status, f"signal {os.WTERMSIG(wait_status)}\n".encode())
    else:
        os.write(status, f"exit {os.waitstatus_to_exitcode(wait_status)}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
