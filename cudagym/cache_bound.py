"""Bounding the build cache: the least recently used builds, objects and precompiled headers are removed first.

The build cache (``cudagym.build``) keeps three kinds of entries under its folder, each named by a content hash:
``builds/<key>/`` (a linked ``cuda_extension``), ``objects/<key>.o`` (with ``<key>.log`` beside it on cuda) and
``pch/<key>/`` (a precompiled header of the torch binding headers, about half a gigabyte), and the small folders
single-file builds compile from: ``inline/<key>/`` (a request's sources) and ``workspace-headers/<key>/`` (a copy of a
workspace's headers, ``cudagym.workspace_headers``). An entry's last use is its
modification time: the builder touches every entry it serves from the cache, so an old time means an entry nobody
asked for since. :func:`sweep` removes

* every precompiled header past the ``max_headers`` most recently used ones (a header of a toolchain or flags no
  longer used is stale: a torch upgrade, another compiler), and then
* the least recently used entries of any kind while the entries together exceed ``max_bytes``,

never an entry used in the last ``in_use_seconds`` (an evaluation loads the build a compile just served, and a
stage runs for minutes at most), nor a header another process holds the lock of (it is being built). What ccache
keeps in ``<cache>/ccache`` is bounded by ccache itself (``ccache_max_size``). :func:`maybe_sweep` is what builders
call after adding to the cache: at most one sweep per ``sweep_seconds`` across the processes sharing the folder.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

MAX_BYTES_ENV = "CUDAGYM_CACHE_MAX_BYTES"  # overrides CacheLimits.max_bytes' default, e.g. 8e9
DEFAULT_MAX_BYTES = 4 * 2**30
_STAMP = ".last-sweep"


def _default_max_bytes() -> int:
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return int(float(text))
    except ValueError:
        log.warning("%s=%r is not a number of bytes; using %d", MAX_BYTES_ENV, text, DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES


@dataclasses.dataclass(frozen=True)
class CacheLimits:
    """How large the build cache may grow.

    Attributes:
        max_bytes: the builds, objects and precompiled headers together (default 4 GiB, or
            ``$CUDAGYM_CACHE_MAX_BYTES``).
        max_headers: precompiled headers kept (one per toolchain and flags in use: the cpu and the cuda backend's).
        in_use_seconds: an entry used this recently is never removed.
        sweep_seconds: the least time between two sweeps of one cache folder.
    """

    max_bytes: int = dataclasses.field(default_factory=_default_max_bytes)
    max_headers: int = 2
    in_use_seconds: float = 1800.0
    sweep_seconds: float = 60.0

    @property
    def ccache_max_size(self) -> str:
        """ccache's own bound for ``<cache>/ccache`` (``CCACHE_MAXSIZE``): a quarter of ``max_bytes``."""
        return f"{max(self.max_bytes // 4, 2**20) // 2**20}Mi"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One cache entry: its files, their size, its kind (``build``, ``object``, ``header`` or ``sources``) and its
    last use."""

    paths: tuple[Path, ...]
    kind: str
    size: int
    last_use: float


def touch(path: Path) -> None:
    """Marks an entry as used now (its file or folder's modification time)."""
    try:
        os.utime(path)
    except OSError:  # removed meanwhile: the caller finds out when it opens it
        pass


def _tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _folders(parent: Path, kind: str) -> Iterator[Entry]:
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        if child.is_dir() and not child.name.startswith(("link-", ".")):
            try:
                yield Entry((child,), kind, _tree_size(child), child.stat().st_mtime)
            except OSError:
                continue


def _objects(parent: Path) -> Iterator[Entry]:
    if not parent.is_dir():
        return
    for obj in parent.glob("*.o"):
        log_file = obj.with_suffix(".log")
        paths = (obj, log_file) if log_file.exists() else (obj,)
        try:
            yield Entry(paths, "object", sum(p.stat().st_size for p in paths), obj.stat().st_mtime)
        except OSError:
            continue


def entries(cache_dir: Path) -> list[Entry]:
    """The cache's builds, objects, precompiled headers and single-file builds' sources, least recently used first."""
    found = [
        *_folders(cache_dir / "builds", "build"),
        *_objects(cache_dir / "objects"),
        *_folders(cache_dir / "pch", "header"),
        *_folders(cache_dir / "inline", "sources"),
        *_folders(cache_dir / "workspace-headers", "sources"),
    ]
    return sorted(found, key=lambda e: e.last_use)


def _remove(entry: Entry) -> bool:
    """Removes an entry; a header is removed only under its lock (not while a process builds it)."""
    if entry.kind == "header":
        folder = entry.paths[0]
        try:
            with open(folder / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # held by a builder, or gone
            return False
        return True
    for path in entry.paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return True


def sweep(cache_dir: Path, limits: CacheLimits, *, now: float | None = None) -> list[Entry]:
    """Removes stale precompiled headers, then least recently used entries while the cache exceeds
    ``limits.max_bytes``; never one used within ``limits.in_use_seconds``. Returns what it removed."""
    now = time.time() if now is None else now
    found = entries(cache_dir)
    idle = [e for e in found if now - e.last_use >= limits.in_use_seconds]
    headers = [e for e in found if e.kind == "header"]
    keep = set(map(id, headers[len(headers) - limits.max_headers :] if limits.max_headers > 0 else []))
    removed = [e for e in idle if e.kind == "header" and id(e) not in keep and _remove(e)]
    total = sum(e.size for e in found) - sum(e.size for e in removed)
    for entry in idle:
        if total <= limits.max_bytes:
            break
        if any(entry is r for r in removed) or not _remove(entry):
            continue
        removed.append(entry)
        total -= entry.size
    if removed:
        freed = sum(e.size for e in removed)
        log.info("build cache %s: removed %d entries (%.1f MiB)", cache_dir, len(removed), freed / 2**20)
    return removed


def maybe_sweep(cache_dir: Path, limits: CacheLimits) -> list[Entry]:
    """:func:`sweep`, unless a process sharing the folder swept less than ``limits.sweep_seconds`` ago or is
    sweeping now. Never raises: a cache that cannot be swept is logged and left as it is."""
    stamp = cache_dir / _STAMP
    try:
        if time.time() - stamp.stat().st_mtime < limits.sweep_seconds:
            return []
    except FileNotFoundError:
        pass
    try:
        with open(cache_dir / f"{_STAMP}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return []  # another process sweeps
            stamp.touch()
            return sweep(cache_dir, limits)
    except OSError as exc:
        log.warning("build cache %s: could not sweep it: %s", cache_dir, exc)
        return []
