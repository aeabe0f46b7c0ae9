"""Where device slots are taken (``cudagym.gpu_lock.lock_folder``): one folder per machine, whatever cache a process
uses. Two test runs on the GPU machine, each with a cache of its own, once timed beside each other on the one device
(their locks lived in their caches): honest kernels read many times too fast or too slow."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from cudagym import gpu_lock
from cudagym.backends import resolve_backend
from cudagym.gpu_lock import (
    LOCK_DIR_ENV,
    TimingSlotTimeout,
    lock_folder,
    shared_slot,
    shared_slot_if_free,
    timing_slot,
)
from cudagym.memory_slots import memory_slot

CPU = resolve_backend("cpu")


def test_processes_with_caches_of_their_own_take_turns_on_one_device(tmp_path: Path) -> None:
    held, release = threading.Event(), threading.Event()

    def timing_of_another_run() -> None:
        with memory_slot(CPU, tmp_path / "cache-a", 1, timeout=5, enabled=True):
            with timing_slot(CPU, tmp_path / "cache-a", enabled=True):
                held.set()
                release.wait(10)

    other = threading.Thread(target=timing_of_another_run)
    other.start()
    try:
        assert held.wait(10)
        with pytest.raises(TimingSlotTimeout):
            with shared_slot(CPU, tmp_path / "cache-b", timeout=0.3, enabled=True):
                pass
        with pytest.raises(TimingSlotTimeout, match="memory slots"):  # memory slots are the machine's too
            with memory_slot(CPU, tmp_path / "cache-c", 1, timeout=0.3, enabled=True):
                pass
    finally:
        release.set()
        other.join()
    assert not (tmp_path / "cache-a" / "locks").exists()


def test_the_lock_files_serve_every_user_of_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "machine"
    monkeypatch.setenv(LOCK_DIR_ENV, str(folder))
    with timing_slot(CPU, tmp_path / "cache", enabled=True):
        pass
    assert lock_folder(tmp_path / "cache") == folder
    assert folder.stat().st_mode & 0o1777 == 0o1777
    files = list(folder.iterdir())
    assert files and all(f.stat().st_mode & 0o666 == 0o666 for f in files)
    for f in files:  # a file another user made, read-only to this one, is locked all the same
        f.chmod(0o444)
    with timing_slot(CPU, tmp_path / "cache", enabled=True):
        pass


def test_an_unusable_machine_folder_falls_back_to_the_cache_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be
    monkeypatch.setenv(LOCK_DIR_ENV, str(blocked / "locks"))
    gpu_lock._warn_fallback.cache_clear()
    with caplog.at_level(logging.WARNING, logger="cudagym.gpu_lock"):
        with timing_slot(CPU, tmp_path / "cache", enabled=True):
            pass
    assert (tmp_path / "cache" / "locks").is_dir()
    assert LOCK_DIR_ENV in caplog.text


def test_a_process_end_takes_the_shared_slot_when_free_and_goes_on_without_it_when_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference or candidate process ends in the shared slot (its CUDA teardown stays out of timed runs), but a
    timing that holds the device longer than the wait never keeps the process alive: the block runs without it."""
    monkeypatch.setenv(gpu_lock.LOCK_ENV, "on")
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    cache = tmp_path / "cache"
    with shared_slot_if_free(CPU, cache, 5.0, label="reference exit") as slot:
        assert slot is not None and slot.mode == "shared" and slot.path is not None
    held, release = threading.Event(), threading.Event()

    def timing() -> None:
        with timing_slot(CPU, cache):
            held.set()
            release.wait(10)

    other = threading.Thread(target=timing)
    other.start()
    ran = False
    try:
        assert held.wait(10)
        with shared_slot_if_free(CPU, cache, 0.3, label="candidate exit") as slot:
            ran = True
            assert slot is None
    finally:
        release.set()
        other.join()
    assert ran
    with pytest.raises(ValueError, match="inside"):  # an error of the block is the block's: never swallowed
        with shared_slot_if_free(CPU, cache, 5.0, label="reference exit"):
            raise ValueError("inside")
