"""The harness's side of the device slots: a candidate creating its CUDA context waits for a timing on its
device, and times nothing itself."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.gpu_lock import LOCK_ENV, WARMUP_SLOT_ENV, timing_slot, warmup_slot_env, warmup_slot_spec
from cudagym.harness.common import warmup_slot


def test_a_warming_candidate_waits_while_its_device_is_timed(tmp_path: Path) -> None:
    backend = resolve_backend("cpu")
    paths = warmup_slot_env(backend, tmp_path, enabled=True)[WARMUP_SLOT_ENV]
    entered = threading.Event()

    def warm_up() -> None:
        with warmup_slot(paths):
            entered.set()

    with timing_slot(backend, tmp_path, enabled=True):
        thread = threading.Thread(target=warm_up)
        thread.start()
        assert not entered.wait(0.5)  # the timing holds the device
    assert entered.wait(10)  # and the warm-up goes on once it is over
    thread.join(10)


def test_warm_ups_share_the_device_and_no_slot_means_no_lock(tmp_path: Path) -> None:
    backend = resolve_backend("cpu")
    paths = warmup_slot_env(backend, tmp_path, enabled=True)[WARMUP_SLOT_ENV]
    with warmup_slot(paths), warmup_slot(paths):  # two candidates warming at once
        pass
    assert warmup_slot_env(backend, tmp_path, enabled=False) == {}
    with warmup_slot(""):
        pass


def test_the_slot_spec_is_the_path_a_child_process_is_given_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = resolve_backend("cpu")
    monkeypatch.setenv(LOCK_ENV, "on")
    assert warmup_slot_spec(backend, tmp_path) == warmup_slot_env(backend, tmp_path)[WARMUP_SLOT_ENV] != ""
    monkeypatch.setenv(LOCK_ENV, "off")
    assert warmup_slot_spec(backend, tmp_path) == ""
