"""Entry point of every evaluation child: ``cudagym.harness.child {reference|candidate} FD SPEC``, run as
``__main__`` by the launch of ``cudagym.isolation.harness_module`` (like ``python -P -m``, without the cudagym
package's ``__init__``: before the sandbox below is entered the process must hold a single thread). The harness has
one module name, ``cudagym.harness.*``, in the children as in the library.

``SPEC`` (JSON, written by ``cudagym.sandbox.child_spec``) holds the rlimits, the number of tasks the
child may add (``processes``) and, for candidates, the ``sandbox`` to enter before anything else:

* ``user``: a new user namespace in which the child keeps its own uid and gid (every other namespace
  below is owned by it, so no privilege is needed);
* ``network``: a new network namespace with no interface up: no connection leaves the process tree;
* ``readonly``: a new mount namespace in which every file system is read-only except ``writable``
  (and /proc, /dev/pts and /dev/mqueue, left as they were; /dev and /sys are read-only too, their device
  nodes still open for writing);
* ``shm`` (with ``readonly``): /dev/shm is a fresh tmpfs, private to the child and gone with it; the paths of
  ``writable`` under the real /dev/shm are bound back in at the same place, read-write;
* ``pids``: a new PID namespace. The process started by the parent stays outside it and only
  waits; its child is the namespace's init (a reaper) and the candidate runs as the reaper's child.
  When the reaper dies (the candidate exited, or the parent killed the process group) the kernel kills
  every process left in the namespace, including those that left the session with ``setsid``;
* ``proc``: the reaper mounts a /proc of the new PID namespace, so the candidate sees no other process;
* ``pid_max``: the reaper sets the namespace's pid_max (Linux 6.14 and later), which bounds how many
  processes and threads can exist in it at once: RLIMIT_NPROC does not bind root (uid 0), even inside a
  user namespace, so this is the bound that holds for root. After the first pass PIDs are handed out
  from RESERVED_PIDS up, so ``pid_max`` is set to RESERVED_PIDS above the intended number.

A candidate without a PID namespace (``guard`` in SPEC) gets a *guard* instead: the process started by the
parent becomes a child subreaper and runs the candidate as its child. Whatever the candidate orphans (a double
fork after ``setsid``, with its environment cleared) is re-parented to the guard, which kills everything below
itself when the candidate ends; ``cudagym.sandbox.Child.kill`` kills what is below the guard before the guard.

``cudagym.harness.child probe - SPEC`` enters the same sandbox without being strict about it and prints
what worked, as JSON: ``{"user": "", "network": "", ...}`` with an empty string for each step that worked and
the error for each that did not.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD, AT_SYMLINK_NOFOLLOW, AT_NO_AUTOMOUNT = -100, 0x100, 0x800
MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}  # the syscall's number; libc has no wrapper before glibc 2.36
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is on its way out (it can start nothing more)
SHM_DIR = "/dev/shm"
KEPT_AS_THEY_ARE = ("/proc", "/dev/pts", "/dev/mqueue")  # process views, terminals, message queues: not remounted
SANDBOX_FAILED = 70  # exit status of a candidate whose requested sandbox could not be entered
STEPS = ("user", "network", "readonly", "pids", "proc", "pid_max")
RESERVED_PIDS = 300  # after wrapping around, a PID namespace hands out PIDs from 300 up to pid_max
GUARD_WAIT_S = 5.0  # how long a guard keeps killing what its candidate left before it gives up


class SandboxError(Exception):
    """A requested isolation step failed (the parent's probe said it would work)."""


class Libc:
    """The few libc calls the sandbox needs (Python 3.11 has no ``os.unshare``)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def unshare(self, flags: int, what: str) -> None:
        self._check(self.lib.unshare(ctypes.c_int(flags)), f"unshare({what})")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        encode = lambda s: s.encode() if s is not None else None  # noqa: E731
        result = self.lib.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
        self._check(result, f"mount {target}")

    def make_readonly(self, path: str) -> None:
        """Sets the read-only flag on the mount at ``path`` (that mount only), keeping its other flags."""
        number = MOUNT_SETATTR.get(os.uname().machine)
        if number is None:
            raise OSError(0, f"mount_setattr: unknown syscall number on {os.uname().machine}")
        attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # attr_set, attr_clr, propagation, userns_fd
        result = self.lib.syscall(
            ctypes.c_long(number),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(path.encode()),
            ctypes.c_uint(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
        self._check(result, f"mount_setattr {path}")

    def die_with_parent(self) -> None:
        self.lib.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def become_subreaper(self) -> None:
        """Orphans of this process's descendants are re-parented to it (not to init)."""
        self._check(self.lib.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")


def mounts() -> dict[str, bool]:
    """Visible mount points and whether each is mounted read-only (the topmost mount at each path)."""
    table: dict[str, bool] = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            table[point] = "ro" in fields[5].split(",")
    return table


def under(path: str, roots: list[str] | tuple[str, ...]) -> bool:
    """True when ``path`` is one of ``roots`` or inside one of them."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def private_shm(libc: Libc, keep: list[str]) -> None:
    """A fresh tmpfs on /dev/shm, with each of ``keep`` (real paths under the real /dev/shm) bound back in at the
    same place, read-write. The folders are opened before the tmpfs hides them and bound from those handles."""
    handles = []
    try:
        for path in keep:
            os.makedirs(path, exist_ok=True)
            handles.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)))
        libc.mount("tmpfs", SHM_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        for path, fd in handles:
            os.makedirs(path, exist_ok=True)
            libc.mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    finally:
        for _, fd in handles:
            os.close(fd)


def make_readonly(libc: Libc, writable: list[str], shm: bool = False) -> None:
    """Every mount read-only except ``writable`` (bind-mounted onto themselves first) and KEPT_AS_THEY_ARE;
    with ``shm``, /dev/shm becomes private first (``private_shm``: the writable paths under it are bound back)."""
    before = mounts()
    libc.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here propagates anywhere
    real = [os.path.realpath(p) for p in writable]
    shm_real = os.path.realpath(SHM_DIR)
    if shm:
        private_shm(libc, [p for p in real if under(p, [shm_real]) and p != shm_real])
        real = [p for p in real if not under(p, [shm_real])]
    keep = [p for p in real if not under(p, KEPT_AS_THEY_ARE)]
    for path in keep:
        os.makedirs(path, exist_ok=True)
        libc.mount(path, path, None, MS_BIND | MS_REC)
    for point, readonly in before.items():
        if readonly or under(point, KEPT_AS_THEY_ARE) or under(point, keep) or (shm and under(point, [shm_real])):
            continue
        try:
            libc.make_readonly(point)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES):  # hidden by another mount, or out of reach anyway
                raise


def enter_sandbox(spec: dict[str, Any], *, strict: bool) -> tuple[dict[str, str], int]:
    """Enters the namespaces ``spec`` asks for; returns in the process that goes on to run the role.

    Returns (the error of each step that failed, the number of tasks this sandbox holds so far). Strict:
    the first failure raises SandboxError; otherwise the later steps are still tried where they can be.
    """
    errors: dict[str, str] = {}
    libc = Libc()
    uid, gid = os.getuid(), os.getgid()

    def step(name: str, action: Callable[[], object]) -> bool:
        try:
            action()
            return True
        except OSError as exc:
            errors[name] = str(exc) or type(exc).__name__
            if strict:
                raise SandboxError(f"{name}: {errors[name]}") from exc
            return False

    def user() -> None:
        libc.unshare(CLONE_NEWUSER, "CLONE_NEWUSER")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            write_text(f"/proc/self/{name}", text)

    def readonly() -> None:
        libc.unshare(CLONE_NEWNS, "CLONE_NEWNS")
        make_readonly(libc, spec.get("writable", []), shm=bool(spec.get("shm")))

    if not step("user", user):
        errors.update({name: "needs a user namespace" for name in STEPS[1:] if spec.get(name)})
        return errors, 1
    if spec.get("network"):
        step("network", lambda: libc.unshare(CLONE_NEWNET, "CLONE_NEWNET"))
    if spec.get("readonly"):
        step("readonly", readonly)
    if not spec.get("pids") or not step("pids", lambda: libc.unshare(CLONE_NEWPID, "CLONE_NEWPID")):
        errors.update({name: "needs a PID namespace" for name in ("proc", "pid_max") if spec.get(name)})
        return errors, 1
    read_end, write_end = os.pipe()  # the reaper reports the candidate's wait status on it
    reaper = os.fork()
    if reaper:
        os.close(write_end)
        supervise(reaper, read_end)
    os.close(read_end)
    libc.die_with_parent()

    def private_proc() -> None:
        if not spec.get("readonly"):  # a mount namespace of its own, so that the new /proc is seen only here
            libc.unshare(CLONE_NEWNS, "CLONE_NEWNS")
            libc.mount(None, "/", None, MS_REC | MS_PRIVATE)
        libc.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)

    if spec.get("proc"):
        step("proc", private_proc)
    if spec.get("pid_max"):
        step("pid_max", lambda: write_text("/proc/sys/kernel/pid_max", str(int(spec["pid_max"]))))
    candidate = os.fork()
    if candidate:
        reap(candidate, write_end)
    os.close(write_end)
    libc.die_with_parent()
    return errors, 3  # the supervisor, the reaper and this process


def write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def detach_from_the_conversation() -> None:
    """For the supervisor and the reaper: no copy of stdin or of the private channel is held open."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if len(sys.argv) > 2 and sys.argv[2].isdigit():
        try:
            os.close(int(sys.argv[2]))
        except OSError:
            pass


def mirror(status: int) -> NoReturn:
    """Ends this process the way ``status`` (a wait status) says the candidate ended."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def supervise(reaper: int, status_pipe: int) -> NoReturn:
    """The process the parent started, outside the PID namespace: waits for the reaper, then ends the way
    the candidate ended (so the parent sees a SIGSEGV as a SIGSEGV)."""
    detach_from_the_conversation()
    _, status = os.waitpid(reaper, 0)
    reported = os.read(status_pipe, 32)
    mirror(int(reported) if reported.strip() else status)


def reap(candidate: int, status_pipe: int) -> NoReturn:
    """The PID namespace's init: reaps orphans until the candidate ends, reports how it ended and exits,
    upon which the kernel kills whatever is left in the namespace."""
    detach_from_the_conversation()
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == candidate:
            break
    os.write(status_pipe, str(status).encode())
    os._exit(0)


def stand_guard(libc: Libc) -> None:
    """Makes this process a candidate's guard (its child subreaper) and returns in the guard's child, which goes
    on as the candidate and dies with the guard. See the module docstring."""
    libc.become_subreaper()
    candidate = os.fork()
    if candidate:
        guard(candidate)
    libc.die_with_parent()


def guard(candidate: int) -> NoReturn:
    """The guard: reaps what ends until the candidate does, kills everything still below itself (what the
    candidate orphaned was re-parented here), then ends the way the candidate ended."""
    detach_from_the_conversation()
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == candidate:
            break
    kill_below(os.getpid(), GUARD_WAIT_S, reap=True)
    mirror(status)


def descendants(pid: int) -> list[int]:
    """Processes below ``pid`` in the process tree (read from /proc) that could still start others: zombies and
    processes on their way out (``PF_EXITING``: a GPU process may take a while to release the device) are
    left out of the list, though what they started is not."""
    children: dict[int, list[int]] = {}
    leaving: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            state, ppid, flags = fields[0], int(fields[1]), int(fields[6])
        except (OSError, IndexError, ValueError):
            continue
        if state in (b"Z", b"X"):
            continue  # a zombie's children were handed on when it ended
        if flags & PF_EXITING:
            leaving.add(int(entry))
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in leaving:
                found.append(child)
            todo.append(child)
    return found


def kill_below(pid: int, wait_s: float, *, reap: bool = False) -> bool:
    """SIGKILLs every process below ``pid`` until none is left: what is killed may have started others
    meanwhile, and where ``pid`` is their subreaper the orphans move up to it, so the tree cannot be left.
    ``reap``: ``pid`` is this process, which collects its ended children as it goes. True when nothing was
    left within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        while reap:
            try:
                ended, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if ended == 0:
                break
        left = descendants(pid)
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        for victim in left:
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def count_user_tasks(uid: int) -> int:
    """Processes and threads whose real uid is ``uid``, machine-wide (what RLIMIT_NPROC counts)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                status = f.read()
        except OSError:
            continue
        uids = re.search(r"^Uid:\s+(\d+)", status, re.M)
        threads = re.search(r"^Threads:\s+(\d+)", status, re.M)
        if uids and int(uids.group(1)) == uid:
            total += int(threads.group(1)) if threads else 1
    return total


def process_limit(allowance: int, in_user_namespace: bool, tasks_so_far: int) -> int:
    """RLIMIT_NPROC that lets this process tree add ``allowance`` tasks (processes or threads).

    Since Linux 5.14 the count is kept per user namespace, so inside our own it counts this tree only;
    elsewhere it counts every task of the user, so the limit is set above the current count.
    """
    release = re.match(r"(\d+)\.(\d+)", os.uname().release)
    per_namespace = release is not None and (int(release.group(1)), int(release.group(2))) >= (5, 14)
    if in_user_namespace and per_namespace:
        return tasks_so_far + allowance
    return count_user_tasks(os.getuid()) + allowance


def apply_limits(rlimits: dict[str, int]) -> None:
    """Sets the rlimits named in ``rlimits`` (``{"RLIMIT_CPU": n, ...}``) as soft and hard limits."""
    for name, value in rlimits.items():
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass  # a hard limit already below ours stays as it is


def prepare(spec: dict[str, Any]) -> None:
    """Enters the sandbox (candidates) and, without a PID namespace, puts a guard over the candidate, then
    applies the limits; exits with SANDBOX_FAILED on failure."""
    sandbox = spec.get("sandbox") or {}
    tasks = 1
    try:
        if sandbox:
            _, tasks = enter_sandbox(sandbox, strict=True)
        if spec.get("guard"):
            stand_guard(Libc())
            tasks += 1
    except (SandboxError, OSError) as exc:
        print(f"cudagym sandbox: could not isolate the candidate process: {exc}", file=sys.stderr, flush=True)
        os._exit(SANDBOX_FAILED)
    rlimits = dict(spec.get("rlimits", {}))
    if spec.get("processes") is not None:
        rlimits["RLIMIT_NPROC"] = process_limit(int(spec["processes"]), bool(sandbox), tasks)
    apply_limits(rlimits)


def probe(spec: dict[str, Any]) -> NoReturn:
    """Enters ``spec``'s sandbox leniently and prints what worked (see the module docstring)."""
    errors, _ = enter_sandbox(spec, strict=False)
    print(json.dumps({name: errors.get(name, "") for name in STEPS if spec.get(name)}), flush=True)
    os._exit(0)


def run_role(role: str, channel_fd: int, spec: dict[str, Any]) -> None:
    """Enters the sandbox and limits of ``spec``, then serves as ``role`` on the channel ``channel_fd``
    (the whole life of a child; also what a process forked by the fork server runs)."""
    if role == "probe":
        probe(spec)
    if role == "candidate":
        # a candidate forked from the fork server (which may write the bytecode cache) never writes bytecode
        sys.dont_write_bytecode = True
    prepare(spec)
    from .common import Channel

    channel = Channel(channel_fd)
    if role == "reference":
        from .reference import ReferenceServer

        channel.send(ready=True)
        ReferenceServer(channel).serve()
    elif role == "candidate":
        from . import candidate

        candidate.main(channel)
    else:
        raise SystemExit(f"unknown role {role!r}")


def main() -> None:
    spec = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    run_role(sys.argv[1], int(sys.argv[2]) if sys.argv[2].isdigit() else -1, spec)


if __name__ == "__main__":
    main()
