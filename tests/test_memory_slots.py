"""Memory slots (cudagym/memory_slots.py): a bound on environments of one device inside a verify or profile."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.gpu_lock import TimingSlotTimeout
from cudagym.memory_slots import auto_slots, memory_slot

CPU = resolve_backend("cpu")


def test_no_more_holders_than_slots_across_threads(tmp_path: Path) -> None:
    inside = 0
    most = 0
    lock = threading.Lock()
    waited: list[float] = []

    def stage() -> None:
        nonlocal inside, most
        with memory_slot(CPU, tmp_path, 2, timeout=30, enabled=True) as wait:
            waited.append(wait)
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.2)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=stage) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 2
    assert len(waited) == 5 and max(waited) >= 0.15  # the later ones waited for a slot to come free


def test_a_full_device_times_out_and_a_released_slot_is_taken(tmp_path: Path) -> None:
    taken = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with memory_slot(CPU, tmp_path, 1, timeout=5, enabled=True):
            taken.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert taken.wait(10)
    with pytest.raises(TimingSlotTimeout, match="memory slots"):
        with memory_slot(CPU, tmp_path, 1, timeout=0.2, enabled=True):
            pass
    release.set()
    t.join()
    with memory_slot(CPU, tmp_path, 1, timeout=5, enabled=True) as wait:
        assert wait < 5


def test_nested_use_no_bound_and_locking_off_take_no_slot(tmp_path: Path) -> None:
    with memory_slot(CPU, tmp_path, 1, timeout=1, enabled=True):
        with memory_slot(CPU, tmp_path, 1, timeout=0.1, enabled=True) as inner:  # the same thread: no second slot
            assert inner == 0.0
    assert not (tmp_path / "none").exists()
    with memory_slot(CPU, tmp_path / "none", 0, timeout=1, enabled=True) as wait:
        assert wait == 0.0
    with memory_slot(CPU, tmp_path / "none", 3, timeout=1) as wait:  # cpu: locking is off unless asked for
        assert wait == 0.0
    assert not (tmp_path / "none").exists()


def test_auto_bounds_cuda_only_by_the_visible_gpus_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudagym import gpu_lock, memory_slots

    asked: list[tuple[str, str]] = []

    def query(selector: str, field: str) -> str | None:
        asked.append((selector, field))
        return "143771" if selector == "3" else None  # an H200's MiB

    monkeypatch.setattr(memory_slots, "query_gpu_field", query)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert auto_slots(CPU) == 0
    assert auto_slots(dataclasses.replace(CPU, name="cuda", device="cuda:1")) == 7  # the second visible GPU: 3
    assert asked == [("3", "memory.total")]
    assert auto_slots(dataclasses.replace(CPU, name="cuda", device="cuda:0")) == 4  # nvidia-smi cannot say
    assert gpu_lock.nvidia_smi_selector(dataclasses.replace(CPU, name="cuda", device="cuda:5")) == "5"
