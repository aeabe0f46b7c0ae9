"""Cross-process device slots: one timing job at a time per GPU, shared use by everything else.

Many environments (threads of the evaluation service, or separate processes) share one GPU. A timed
run is only meaningful when nothing else runs on that device meanwhile, so timing takes the device's
**exclusive** slot; other GPU work that may overlap with other work, but never with a timing (a
correctness check, say), takes a **shared** slot. Compiles need no slot at all.

A slot is an ``flock`` on a lock file in the machine's lock folder (``lock_folder``: ``$CUDAGYM_LOCK_DIR``, else
``/tmp/cudagym-locks``, whatever cache folder a process uses, so that two runs with caches of their own still take
turns on one GPU) named after the device's identity (the GPU's UUID, so one lock per physical GPU whatever
``CUDA_VISIBLE_DEVICES`` says). Processes that see different lock folders (containers without a shared /tmp, say)
do not exclude each other: give them one through ``$CUDAGYM_LOCK_DIR``. Locks belong to open file descriptions,
so two threads of one process exclude each other like two processes do, and a process that dies releases its slots.
Writers have priority: a waiting timing job blocks new shared holders (a turnstile lock), so a stream
of correctness checks cannot starve it.

Whether slots lock at all: ``enabled`` when given, else ``$CUDAGYM_TIMING_LOCK``: ``auto`` (default:
on for cuda, off for cpu), ``1``/``on`` or ``0``/``off``. On the cpu backend the slots are no-ops
unless asked for, since compiles and checks share the same cores anyway.

Candidate processes take a shared slot themselves while they create their CUDA context (the lock files are
named to them in ``$CUDAGYM_WARMUP_SLOT``; ``warmup_slot_env``).

Every slot held can be appended to a journal (JSON lines at ``$CUDAGYM_TIMING_JOURNAL``), which is how
benchmarks and tests see when timing happened and how long it waited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.errors import HarnessError
from cudagym.harness.common import WARMUP_SLOT_ENV, take_slot

logger = logging.getLogger(__name__)

LOCK_ENV = "CUDAGYM_TIMING_LOCK"
LOCK_DIR_ENV = "CUDAGYM_LOCK_DIR"
MACHINE_LOCK_DIR = "/tmp/cudagym-locks"
JOURNAL_ENV = "CUDAGYM_TIMING_JOURNAL"
EXCLUSIVE = "exclusive"
SHARED = "shared"
_held = threading.local()  # per thread: {device key: mode} of the slots it holds (nested use is a no-op)


class TimingSlotTimeout(HarnessError):
    """A device slot was not free within the timeout (a RuntimeError, so evaluators report it as a
    harness error)."""


@dataclasses.dataclass
class Slot:
    """One use of a device slot and what it cost.

    Attributes:
        key: the device's identity (e.g. ``GPU-8c1f...``, or ``cpu-<hostname>``).
        mode: ``"exclusive"`` (timing) or ``"shared"``.
        path: the lock file, or None when the slot did not lock (locking off, or nested in one held).
        label: what the holder did (written to the journal), e.g. ``"candidate"``.
        waited_s: seconds spent waiting for the slot.
        acquired_at, released_at: wall-clock times (``time.time()``) of taking and giving back the slot.
    """

    key: str
    mode: str
    path: Path | None
    label: str = ""
    waited_s: float = 0.0
    acquired_at: float = 0.0
    released_at: float | None = None

    @property
    def locked(self) -> bool:
        return self.path is not None

    @property
    def held_s(self) -> float | None:
        return None if self.released_at is None else self.released_at - self.acquired_at


def locking_enabled(backend: Backend, enabled: bool | None = None) -> bool:
    """Whether slots lock for ``backend`` (see the module docstring for ``$CUDAGYM_TIMING_LOCK``)."""
    if enabled is not None:
        return enabled
    value = os.environ.get(LOCK_ENV, "auto").strip().lower()
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    if value != "auto":
        raise ValueError(f"{LOCK_ENV} must be auto, on or off, got {value!r}")
    return backend.is_cuda


def device_identity(backend: Backend) -> str:
    """A name for the physical device ``backend`` times on, safe as a file name.

    cuda: the GPU's UUID (from ``CUDA_VISIBLE_DEVICES`` when it lists UUIDs, else from ``nvidia-smi``
    for the visible index; nvidia-smi counts in PCI bus order, as CUDA does on machines of one GPU
    model), or ``cuda<index>`` when nvidia-smi cannot say. cpu: ``cpu-<hostname>``.
    """
    if not backend.is_cuda:
        return _safe(f"cpu-{socket.gethostname()}")
    entry = nvidia_smi_selector(backend)
    if entry.startswith(("GPU-", "MIG-")):
        return _safe(entry)
    return _safe(_gpu_uuid(entry) or f"cuda{entry}")


def nvidia_smi_selector(backend: Backend) -> str:
    """How nvidia-smi's ``-i`` names the GPU ``backend`` runs on: its ``CUDA_VISIBLE_DEVICES`` entry (an index or
    a UUID) when that lists GPUs, else the device index."""
    index = int(backend.device.split(":", 1)[1]) if ":" in backend.device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def _gpu_uuid(selector: str) -> str | None:
    return query_gpu_field(selector, "uuid")


@functools.lru_cache(maxsize=32)
def query_gpu_field(selector: str, field: str) -> str | None:
    """nvidia-smi's ``--query-gpu`` ``field`` (no header, no units) of GPU ``selector``, read once per process (for
    what does not change: a name, a UUID, the total memory); None when it cannot say."""
    rows = nvidia_smi_rows(selector, f"--query-gpu={field}")
    return ", ".join(rows[0]) if rows else None


def nvidia_smi_rows(selector: str, query: str, timeout: float = 20.0) -> list[list[str]] | None:
    """The rows nvidia-smi answers now to ``query`` (``--query-gpu=...`` or ``--query-compute-apps=...``) about GPU
    ``selector``, without header or units, each split into its comma-separated fields; None when it cannot say (no
    nvidia-smi, an error, no answer within ``timeout`` seconds). Needs no CUDA context in the asking process."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "-i", selector, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _journal(slot: Slot) -> None:
    path = os.environ.get(JOURNAL_ENV)
    if not path:
        return
    entry = {
        "key": slot.key,
        "mode": slot.mode,
        "label": slot.label,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "waited_s": slot.waited_s,
        "acquired_at": slot.acquired_at,
        "released_at": slot.released_at,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())  # one short O_APPEND write: lines never interleave
    finally:
        os.close(fd)


@contextlib.contextmanager
def device_slot(
    backend: Backend,
    cache_dir: str | Path,
    *,
    mode: str = EXCLUSIVE,
    timeout: float = 600.0,
    label: str = "",
    enabled: bool | None = None,
) -> Iterator[Slot]:
    """Holds the device's slot in ``mode`` for the ``with`` block; yields the :class:`Slot`.

    Raises TimingSlotTimeout when the slot is not free within ``timeout`` seconds. Nested use in one
    thread does not lock again (a shared slot cannot be upgraded to an exclusive one in place).
    """
    if mode not in (EXCLUSIVE, SHARED):
        raise ValueError(f"mode must be {EXCLUSIVE!r} or {SHARED!r}, got {mode!r}")
    key = device_identity(backend)
    held: dict[str, str] = _held.__dict__.setdefault("slots", {})
    if not locking_enabled(backend, enabled) or key in held:
        if held.get(key) == SHARED and mode == EXCLUSIVE:
            raise RuntimeError("a thread holding a shared device slot cannot take the exclusive one")
        slot = Slot(key, mode, None, label, acquired_at=time.time())
        try:
            yield slot
        finally:
            slot.released_at = time.time()
        return
    main_path, gate_path = _paths(cache_dir, key)
    start = time.monotonic()
    deadline = start + timeout
    what = f"{mode} slot of {key}"
    with open(main_path, "rb") as main, open(gate_path, "rb") as gate:
        if not take_slot(main.fileno(), gate.fileno(), exclusive=mode == EXCLUSIVE, deadline=deadline):
            raise TimingSlotTimeout(f"the {what} was not free in time")
        slot = Slot(key, mode, main_path, label, waited_s=time.monotonic() - start, acquired_at=time.time())
        held[key] = mode
        try:
            yield slot
        finally:
            slot.released_at = time.time()
            del held[key]
            fcntl.flock(main.fileno(), fcntl.LOCK_UN)
            _journal(slot)


def lock_folder(cache_dir: str | Path) -> Path:
    """The folder of the machine's device locks (see the module docstring), made open to every user of the machine
    (sticky, like /tmp). Where it cannot be used, ``<cache_dir>/locks``, which excludes only the processes that
    share that cache, with a warning."""
    folder = Path(os.environ.get(LOCK_DIR_ENV) or MACHINE_LOCK_DIR)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # only its owner may; others find it as its owner left it
            os.chmod(folder, 0o1777)
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
    except OSError:
        pass
    fallback = Path(cache_dir) / "locks"
    _warn_fallback(str(folder), str(fallback))
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


@functools.cache
def _warn_fallback(folder: str, fallback: str) -> None:
    logger.warning(
        "the machine's lock folder %s cannot be used: device slots are taken in %s, which excludes only the "
        "processes that share this cache (set $%s to a folder every process can write)",
        folder,
        fallback,
        LOCK_DIR_ENV,
    )


def lock_file(folder: Path, name: str) -> Path:
    """``folder/name``, created when missing and left readable and writable by every user (a lock is taken on a
    read-only handle, so a file another user made serves as well)."""
    path = folder / name
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666)
            os.close(fd)
    return path


def _paths(cache_dir: str | Path, key: str) -> tuple[Path, Path]:
    """The lock file and the turnstile file of device ``key`` (created when missing)."""
    folder = lock_folder(cache_dir)
    return lock_file(folder, f"device-{key}.lock"), lock_file(folder, f"device-{key}.gate")


def warmup_slot_spec(backend: Backend, cache_dir: str | Path) -> str:
    """The device's shared slot as a child process takes it (``"LOCK:GATE"``, ``harness/common.warmup_slot``), or
    ``""`` when slots do not lock."""
    return warmup_slot_env(backend, cache_dir).get(WARMUP_SLOT_ENV, "")


def warmup_slot_env(backend: Backend, cache_dir: str | Path, enabled: bool | None = None) -> dict[str, str]:
    """``{WARMUP_SLOT_ENV: "LOCK:GATE"}`` for candidate processes, or ``{}`` when slots do not lock.

    A candidate creates its CUDA context in a shared slot of its device (``harness/candidate.py`` takes it
    with the same turnstile protocol), so that no context is set up on a GPU while a timed run is on it,
    whichever environment the candidate belongs to."""
    if not locking_enabled(backend, enabled):
        return {}
    main_path, gate_path = _paths(cache_dir, device_identity(backend))
    return {WARMUP_SLOT_ENV: f"{main_path}:{gate_path}"}


def timing_slot(
    backend: Backend, cache_dir: str | Path, timeout: float = 600.0, *, label: str = "", enabled: bool | None = None
) -> contextlib.AbstractContextManager[Slot]:
    """The device's exclusive slot, for timed runs: ``with timing_slot(backend, cache_dir) as slot: ...``;
    ``slot.waited_s`` says how long it waited."""
    return device_slot(backend, cache_dir, mode=EXCLUSIVE, timeout=timeout, label=label, enabled=enabled)


def shared_slot(
    backend: Backend, cache_dir: str | Path, timeout: float = 600.0, *, label: str = "", enabled: bool | None = None
) -> contextlib.AbstractContextManager[Slot]:
    """The device's shared slot, for GPU work that must not overlap a timing (e.g. a correctness check)."""
    return device_slot(backend, cache_dir, mode=SHARED, timeout=timeout, label=label, enabled=enabled)


@contextlib.contextmanager
def shared_slot_if_free(
    backend: Backend, cache_dir: str | Path, timeout: float, *, label: str = ""
) -> Iterator[Slot | None]:
    """The device's shared slot where it comes within ``timeout`` seconds, else None and the block runs all the same:
    for work that should stay out of timed runs but must never hang on the slots, such as a process's end (its CUDA
    context's teardown and the return of its memory)."""
    with contextlib.ExitStack() as stack:
        try:
            slot: Slot | None = stack.enter_context(shared_slot(backend, cache_dir, timeout=timeout, label=label))
        except TimingSlotTimeout:
            logger.info("%s without the device's shared slot (not free in %.0f s)", label, timeout)
            slot = None
        yield slot


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """The slots recorded in a journal file (see JOURNAL_ENV), oldest release first."""
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def exclusive_overlap_s(entries: list[dict[str, Any]]) -> float:
    """Seconds during which an exclusive slot overlapped any other slot of the same device (0 when the
    lock did its job)."""
    total = 0.0
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            if a["key"] != b["key"] or EXCLUSIVE not in (a["mode"], b["mode"]):
                continue
            total += max(0.0, min(a["released_at"], b["released_at"]) - max(a["acquired_at"], b["acquired_at"]))
    return total
