"""What an evaluation child gets beyond a plain process: its limits, the namespaces this machine allows, and
the spec that ``harness/child.py`` enters before anything else runs in the child.

``ChildLimits`` holds the switches; ``isolation_status()`` says which namespaces work here (found once per
process by a probe child); ``resolve_isolation`` turns the switches into what one child gets (``Isolation``,
with the reason for every switch that could not be honoured), and ``child_spec`` writes it down for the child.
Launching the child and cleaning up after it is ``cudagym.sandbox``'s business (which re-exports these names).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from cudagym.harness.common import launch_arguments

logger = logging.getLogger(__name__)
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
HARNESS_PACKAGE = "cudagym.harness"
AUTO = "auto"
CHILD_PREFIX = "cudagym-child-"
RESERVED_PIDS = 300  # a PID namespace's pid_max is set this far above the candidate's task allowance
SHM_DIR = "/dev/shm"  # RAM-backed shared memory: private to a candidate with a read-only file system


def harness_module(name: str) -> list[str]:
    """The interpreter arguments that run the harness module ``cudagym.harness.<name>`` in a child (see
    ``cudagym.harness.common.launch_arguments``)."""
    return launch_arguments(f"{HARNESS_PACKAGE}.{name}")


@dataclasses.dataclass(frozen=True)
class ChildLimits:
    """Limits and isolation of the evaluation children (None: not limited).

    ``memory_bytes`` caps the address space (RLIMIT_AS). ``"auto"``: half the machine's memory for
    candidate processes that see no NVIDIA device (the CUDA driver reserves far more address space than
    it uses, so it cannot run under RLIMIT_AS), none for the reference and for GPU candidates.

    ``processes`` is how many tasks (processes and threads) a candidate may add to what it starts with:
    RLIMIT_NPROC is set that far above the current count (see ``harness/child.py``). RLIMIT_NPROC does
    not bind root (uid 0), so in a PID namespace its pid_max is set too (Linux 6.14 and later), which
    bounds the tasks in it at ``processes`` + RESERVED_PIDS whatever the uid. The reference process is
    not limited so (``torch.compile`` starts a pool of compiler workers there).

    The three isolation switches apply to candidate processes only (the reference process is trusted),
    and only where the machine allows them (``isolation_status()``; an unavailable one is recorded in
    ``Child.isolation.notes``, never an error). ``True`` or ``"auto"`` (the default): on; ``False``: off.
    They hold for GPU candidates too (the CUDA driver, CUDA IPC with the reference process and nvcc-built
    extensions work inside them: ``tests/gpu/test_isolation.py``):

    * ``isolate_network``: a user and a network namespace with no interface up, so no connection can
      be made (not even to this machine's loopback);
    * ``isolate_processes``: a PID namespace (with its own /proc where the machine allows it): when the
      candidate ends or is killed, every process it started dies with it, even one that called setsid.
      Without one, a guard process (the candidate's child subreaper) adopts what the candidate orphans and
      kills it when the candidate ends or is killed;
    * ``readonly_filesystem``: a mount namespace in which everything is read-only except the candidate's
      private scratch folder (its HOME and TMPDIR), the folders evaluation files travel through and the
      cache folders named in ``cudagym.sandbox.WRITABLE_ENV``; /dev/shm is a fresh tmpfs of its own (its
      writable folders under the real /dev/shm bound back in), and /dev and /sys are read-only too (device
      nodes still open for writing); /proc is left as it is.
    """

    cpu_seconds: int | None = 600
    memory_bytes: int | Literal["auto"] | None = AUTO
    file_bytes: int | None = 8 * 1024**3
    open_files: int | None = 1024
    processes: int | None = 1024
    isolate_network: bool | Literal["auto"] = AUTO
    isolate_processes: bool | Literal["auto"] = AUTO
    readonly_filesystem: bool | Literal["auto"] = AUTO


@dataclasses.dataclass(frozen=True)
class IsolationStatus:
    """What this machine allows an unprivileged process: per step, "" when it works, else why not."""

    user: str
    network: str
    readonly: str
    pids: str
    proc: str
    pid_max: str

    def works(self, step: str) -> bool:
        return getattr(self, step) == ""


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What one child process got beyond its rlimits."""

    network: bool = False  # in its own network namespace: no connection leaves it
    processes: bool = False  # in its own PID namespace: everything it starts dies with it
    private_proc: bool = False  # sees only its own processes in /proc
    readonly_filesystem: bool = False  # can write only to ``writable``
    writable: tuple[str, ...] = ()
    pid_max: int | None = None  # bounds the processes and threads in its PID namespace (whatever the uid)
    # /dev/shm is a fresh tmpfs of its own, gone with it (the paths of ``writable`` under the real one are bound
    # back in); False with a read-only file system where /dev/shm itself is in ``writable`` (it keeps the real one)
    private_shm: bool = False
    notes: tuple[str, ...] = ()  # why a switch that was on (or "auto") was not applied

    @property
    def any(self) -> bool:
        return self.network or self.processes or self.readonly_filesystem

    def summary(self) -> str:
        """One line for a report: what is on, then what is missing and why."""
        names = [("network namespace", self.network), ("PID namespace", self.processes)]
        names += [(f"pid_max {self.pid_max}", self.pid_max is not None)]
        names += [("private /proc", self.private_proc), ("read-only file system", self.readonly_filesystem)]
        names += [("private /dev/shm", self.private_shm)]
        text = ", ".join(n for n, on in names if on) or "no namespaces"
        return text + ("; " + "; ".join(self.notes) if self.notes else "")


def under(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    """True when ``path`` is one of ``roots`` or inside one of them (paths as given, not resolved)."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def shm_shared(writable: tuple[str, ...]) -> bool:
    """Whether a candidate that may write ``writable`` keeps the real /dev/shm: /dev/shm itself (or a folder
    above it) is one of them."""
    shm = os.path.realpath(SHM_DIR)
    return any(under(shm, [os.path.realpath(path)]) for path in writable)


@functools.lru_cache(maxsize=1)
def isolation_status() -> IsolationStatus:
    """Which namespaces a child can enter here, found once per process by a probe child that tries them
    all (a fraction of a second). Containers often forbid user namespaces: then every step says why."""
    from cudagym.sandbox import scrubbed_env  # the launching side's environment rules

    steps = ("user", "network", "readonly", "pids", "proc", "pid_max")
    scratch = tempfile.mkdtemp(prefix=CHILD_PREFIX + "probe-")
    spec = {step: True for step in steps} | {"writable": [scratch], "pid_max": RESERVED_PIDS + 1024}
    spec["shm"] = os.path.isdir(SHM_DIR)  # the read-only step includes the private /dev/shm
    command = [sys.executable, "-B", *harness_module("child"), "probe", "-", json.dumps(spec)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=30, env=scrubbed_env(0), start_new_session=True
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
        reasons = {step: str(found.get(step, "not reported by the probe")) for step in steps}
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        reasons = {step: f"the probe failed: {exc}" for step in steps}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    missing = {step: why for step, why in reasons.items() if why}
    if missing:  # a weaker sandbox: say so once per process
        logger.warning(
            "candidate isolation without %s: %s", ", ".join(missing), "; ".join(f"{k}: {v}" for k, v in missing.items())
        )
    else:
        logger.debug("every isolation step works here")
    return IsolationStatus(**reasons)


def network_isolation_available() -> tuple[bool, str]:
    """(whether candidate processes can run without network access here, and in words why or why not)."""
    status = isolation_status()
    if status.works("network"):
        return True, "candidate processes can run in their own network namespace (no interface up)"
    return False, f"no network namespace for candidate processes: {status.network}"


def resolve_isolation(
    limits: ChildLimits, *, role: str, env: dict[str, str], prefix: tuple[str, ...], writable: tuple[str, ...]
) -> Isolation:
    """The isolation a child gets: the switches in ``limits``, resolved against this machine."""
    switches = {
        "network": limits.isolate_network,
        "processes": limits.isolate_processes,
        "readonly_filesystem": limits.readonly_filesystem,
    }
    if role != "candidate" or not any(on is not False for on in switches.values()):
        return Isolation()
    wanted = {name: on is not False for name, on in switches.items()}
    notes: list[str] = []
    if prefix:
        notes.append(f"no namespaces for a run wrapped by {Path(prefix[0]).name} (it needs the host's)")
        return Isolation(notes=tuple(notes))
    status = isolation_status()
    step_of = {"network": "network", "processes": "pids", "readonly_filesystem": "readonly"}
    granted = {}
    for name, want in wanted.items():
        works = status.works("user") and status.works(step_of[name])
        granted[name] = want and works
        if want and not works:
            notes.append(f"no {name.replace('_', ' ')}: {getattr(status, step_of[name]) or status.user}")
    pid_max = None  # PIDs 1 and 2 are the reaper and the candidate; then the allowance, and RESERVED_PIDS
    if granted["processes"] and limits.processes is not None and status.works("pid_max"):
        pid_max = RESERVED_PIDS + 3 + limits.processes
    readonly = granted["readonly_filesystem"]
    return Isolation(
        network=granted["network"],
        processes=granted["processes"],
        pid_max=pid_max,
        private_proc=granted["processes"] and status.works("proc"),
        readonly_filesystem=readonly,
        writable=writable if readonly else (),
        private_shm=readonly and os.path.isdir(SHM_DIR) and not shm_shared(writable),
        notes=tuple(notes),
    )


def child_spec(limits: ChildLimits, *, role: str, memory_bytes: int | None, isolation: Isolation) -> str:
    """The child's third argument (JSON): its rlimits, its task allowance, the sandbox to enter and, for a
    candidate without a PID namespace, ``guard`` (a child subreaper that kills what it leaves behind).

    The child applies them to itself before importing anything (``harness/child.py``), instead of a
    ``preexec_fn``, which is unsafe to run between fork and exec in a multi-threaded parent.
    """
    pairs = {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_AS": memory_bytes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    sandbox: dict[str, Any] = {}
    if isolation.any:
        sandbox = {
            "user": True,
            "network": isolation.network,
            "readonly": isolation.readonly_filesystem,
            "writable": list(isolation.writable),
            "shm": isolation.private_shm,
            "pids": isolation.processes,
            "proc": isolation.private_proc,
            "pid_max": isolation.pid_max,
        }
    return json.dumps(
        {
            "rlimits": {k: v for k, v in pairs.items() if v is not None},
            "processes": limits.processes if role == "candidate" else None,
            "sandbox": sandbox,
            "guard": role == "candidate" and not isolation.processes,
        }
    )
