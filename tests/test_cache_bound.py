"""The build cache stays bounded: one precompiled header per toolchain and flags, stale headers and the least
recently used entries removed beyond the limits, never an entry in use; the builder marks what it serves as used."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import time
from pathlib import Path

import pytest
from cudagym_testing import RELU, relu_solution

from cudagym import cache_bound
from cudagym.backends import find_toolchain, resolve_backend
from cudagym.build import Builder, BuildOptions, ccache_env
from cudagym.cache_bound import CacheLimits
from cudagym.tasks import load
from cudagym.workspace import Workspace

DAY = 86400.0


def _entry(path: Path, size: int, age: float, now: float) -> Path:
    """A cache file or folder of ``size`` bytes last used ``age`` seconds before ``now``."""
    if path.suffix:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    else:
        path.mkdir(parents=True)
        (path / "data").write_bytes(b"x" * size)
    os.utime(path, (now - age, now - age))
    return path


def test_equal_toolchains_spelled_differently_share_one_header(tmp_path: Path) -> None:
    toolchain = find_toolchain()
    real = os.path.realpath(shutil.which(toolchain.cxx) or toolchain.cxx)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "g++").symlink_to(real)
    folders = {
        Builder(
            resolve_backend("cpu"), cache_dir=tmp_path, toolchain=dataclasses.replace(toolchain, cxx=cxx)
        ).pch_folder()
        for cxx in (toolchain.cxx, real, str(tmp_path / "bin" / "g++"))
    }
    assert len(folders) == 1
    options = dataclasses.replace(BuildOptions(), binding_flags=("-O1",))
    other = Builder(resolve_backend("cpu"), cache_dir=tmp_path, toolchain=toolchain, options=options)
    assert other.pch_folder() not in folders  # other flags, another header


def test_sweep_removes_stale_headers_and_the_least_recently_used_entries(tmp_path: Path) -> None:
    now = time.time()
    old_build = _entry(tmp_path / "builds" / "b-old", 400, 3 * DAY, now)
    new_build = _entry(tmp_path / "builds" / "b-new", 400, 2 * DAY, now)
    old_object = _entry(tmp_path / "objects" / "o-old.o", 300, 4 * DAY, now)
    log = _entry(tmp_path / "objects" / "o-old.log", 10, 4 * DAY, now)
    in_use = _entry(tmp_path / "objects" / "o-used.o", 5000, 60, now)  # over the bound by itself, but in use
    headers = [_entry(tmp_path / "pch" / f"h{age}", 100, age * DAY, now) for age in (1, 5, 6)]
    removed = cache_bound.sweep(tmp_path, CacheLimits(max_bytes=5500, max_headers=1, in_use_seconds=600), now=now)
    assert {p for e in removed for p in e.paths} == {headers[2], headers[1], old_object, log, old_build}
    assert in_use.exists() and new_build.exists() and headers[0].exists()
    assert not old_object.exists() and not log.exists() and not old_build.exists()


def test_sweep_removes_single_file_builds_sources_least_recently_used_first(tmp_path: Path) -> None:
    now = time.time()
    old_sources = _entry(tmp_path / "inline" / "s-old", 300, 3 * DAY, now)
    old_headers = _entry(tmp_path / "workspace-headers" / "w-old", 300, 2 * DAY, now)
    recent = [_entry(tmp_path / folder / "new", 300, DAY, now) for folder in ("inline", "workspace-headers")]
    removed = cache_bound.sweep(tmp_path, CacheLimits(max_bytes=700, in_use_seconds=600), now=now)
    assert [(e.paths, e.kind) for e in removed] == [((old_sources,), "sources"), ((old_headers,), "sources")]
    assert all(folder.exists() for folder in recent)


def test_sweep_never_removes_an_entry_in_use_or_a_header_being_built(tmp_path: Path) -> None:
    now = time.time()
    recent = _entry(tmp_path / "builds" / "b", 1000, 100, now)
    header = _entry(tmp_path / "pch" / "h", 1000, DAY, now)
    other = _entry(tmp_path / "pch" / "h2", 1000, 2 * DAY, now)
    with open(header / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed = cache_bound.sweep(tmp_path, CacheLimits(max_bytes=0, max_headers=0, in_use_seconds=600), now=now)
    assert [e.paths for e in removed] == [(other,)]
    assert recent.exists() and header.exists()


def test_sweeps_are_throttled_across_processes(tmp_path: Path) -> None:
    now = time.time()
    _entry(tmp_path / "builds" / "b", 1000, DAY, now)
    limits = CacheLimits(max_bytes=0, in_use_seconds=0, sweep_seconds=3600)
    (tmp_path / ".last-sweep").touch()
    assert cache_bound.maybe_sweep(tmp_path, limits) == []  # another process swept a moment ago
    os.utime(tmp_path / ".last-sweep", (now - 7200, now - 7200))
    assert len(cache_bound.maybe_sweep(tmp_path, limits)) == 1


def test_the_default_bound_and_ccache_follow_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cache_bound.MAX_BYTES_ENV, "8e9")
    monkeypatch.delenv("CCACHE_MAXSIZE", raising=False)
    assert CacheLimits().max_bytes == 8 * 10**9
    assert ccache_env(tmp_path, tmp_path, CacheLimits(max_bytes=4 * 2**30))["CCACHE_MAXSIZE"] == "1024Mi"


def test_the_builder_marks_what_it_serves_as_used(cache_dir: Path, tmp_path: Path) -> None:
    builder = Builder(resolve_backend("cpu"), cache_dir=cache_dir)
    workspace = Workspace(load("builtin").get(RELU).source_for("cpu"), "cache test", root_dir=tmp_path)
    for path, content in relu_solution().items():
        workspace.write(path, content)
    first = builder.build(workspace)
    assert first.ok, first.diagnostics
    folder = Path(first.artifact).parent
    old = time.time() - DAY
    os.utime(folder, (old, old))
    assert builder.build(workspace).cached
    assert time.time() - folder.stat().st_mtime < 600  # a cached build is marked when served
    objects = list(builder.objects_dir.glob("*.o"))
    for obj in objects:
        os.utime(obj, (old, old))
    kernel = workspace.path / "kernels" / "relu.cpp"
    workspace.write("kernels/relu.cpp", kernel.read_text() + f"\n// edited at {time.time_ns()}\n")
    edited = builder.build(workspace)
    assert edited.ok and edited.objects_reused == 2
    assert sum(time.time() - o.stat().st_mtime < 600 for o in objects) >= 2  # the reused objects are marked too
