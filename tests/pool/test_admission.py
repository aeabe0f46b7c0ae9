"""Admission of evaluators by device memory, with a stand-in device (a fake memory probe) and stand-in evaluators.

Each stand-in evaluator "holds" device memory from when it is made until it is closed, under a process id of its own,
so that the probe's free memory drops as evaluators start and comes back when they close.
"""

from __future__ import annotations

import itertools
import threading
import time
import types
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.device_memory import DeviceReading
from cudagym.eval_config import EvalConfig
from cudagym.pool import EvaluationPool, JobStage, PoolJob, PoolLimits
from cudagym.pool.admission import GIB, Member, MemoryAdmission
from cudagym.pool.jobs import task_key
from cudagym.pool.pool import RETRIES
from cudagym.results import Stage, Status, VerifyResult
from cudagym.tasks.task import Task, TaskMetadata
from cudagym.workspace import Workspace

CPU = resolve_backend("cpu")
CONFIG = EvalConfig()
SOURCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * {k}\n"
HELD = 20 * GIB  # what each stand-in evaluator holds on the device (the default footprint: no measurement needed)
_PIDS = itertools.count(10_000)


def task(k: int) -> Task:
    return Task(id=f"stub/{k}", name=f"times {k}", source=SOURCE.format(k=k), metadata=TaskMetadata())


class FakeDevice:
    """A device of ``total`` bytes; ``other`` bytes held by a process outside the pool."""

    def __init__(self, total: int, other: int = 0) -> None:
        self.total, self.other = total, other
        self.held: dict[int, int] = {}  # pid -> bytes of the stand-in evaluators alive
        self.lock = threading.Lock()

    def read(self) -> DeviceReading:
        with self.lock:
            used = dict(self.held)
        return DeviceReading(self.total - self.other - sum(used.values()), self.total, used)


class DeviceEvaluator:
    """Holds ``HELD`` bytes of the fake device while alive; verify waits for ``release`` of its job's session."""

    def __init__(self, t: Task, device: FakeDevice, gates: dict[str, threading.Event]) -> None:
        self.task, self.device, self.gates = t, device, gates
        self.pid = next(_PIDS)
        self.closed = threading.Event()
        with device.lock:
            device.held[self.pid] = HELD

    def verify(self, workspace: Workspace) -> VerifyResult:
        gate = self.gates.get(workspace.path.name)
        if gate is not None:
            gate.wait(30)
        return VerifyResult(Stage.VERIFY, Status.OK, f"{self.task.id} ok")

    def process_ids(self) -> list[int]:
        return [] if self.closed.is_set() else [self.pid]

    def device_peak_bytes(self) -> int | None:
        return None  # the footprint stays the default

    def close(self) -> None:
        with self.device.lock:
            self.device.held.pop(self.pid, None)
        self.closed.set()


@pytest.fixture(autouse=True)
def quick_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cudagym.pool.admission.READ_EVERY_S", 0.05)


def make_pool(device: FakeDevice, made: list[DeviceEvaluator], gates: dict[str, threading.Event]) -> EvaluationPool:
    def make(t: Task, config: EvalConfig) -> DeviceEvaluator:
        made.append(DeviceEvaluator(t, device, gates))
        return made[-1]

    limits = PoolLimits(max_evaluators=8, max_per_task=1, compile_workers=1)
    return EvaluationPool(CPU, limits=limits, make_evaluator=make, memory_probe=device.read)  # type: ignore[arg-type]


def job(t: Task, session: str, **kw: object) -> PoolJob:
    workspace = types.SimpleNamespace(path=Path(session))
    return PoolJob(JobStage.VERIFY, t, "cpu", CONFIG, workspace, session=session, **kw)  # type: ignore[arg-type]


def test_a_task_waits_for_memory_and_gets_it_when_an_idle_evaluator_is_closed() -> None:
    device = FakeDevice(total=50 * GIB)  # room for two evaluators of 20 GiB and the margin, not three
    made: list[DeviceEvaluator] = []
    gates = {"a": threading.Event(), "b": threading.Event()}
    pool = make_pool(device, made, gates)
    try:
        first = pool.submit(job(task(1), "a"))
        second = pool.submit(job(task(2), "b"))
        third = pool.submit(job(task(3), "c"))
        assert not third.done()
        assert not first.done() and not second.done()
        with pytest.raises(TimeoutError):
            third.result(timeout=1.5)  # both evaluators are leased: nothing to close, so it waits
        assert len(made) == 2, "a third evaluator started beyond the device's memory"
        gates["a"].set()  # task 1's evaluator goes idle: closed for task 3's
        assert first.result(timeout=30).ok
        assert third.result(timeout=30).ok
        assert made[0].closed.wait(10) and not made[1].closed.is_set()  # closed on a thread of the pool's
        assert [e.task.id for e in made] == ["stub/1", "stub/2", "stub/3"]
        gates["b"].set()
        assert second.result(timeout=30).ok
    finally:
        for gate in gates.values():
            gate.set()
        pool.close()
    assert pool.stats().evaluators.evicted >= 1


def test_free_memory_drops_as_evaluators_start_and_comes_back_when_they_close() -> None:
    device = FakeDevice(total=70 * GIB)  # three evaluators fit
    made: list[DeviceEvaluator] = []
    pool = make_pool(device, made, {})
    try:
        for k in (1, 2, 3):
            assert pool.run(job(task(k), "a")).ok
        assert device.read().free_bytes == 10 * GIB
        assert len(made) == 3 and not any(e.closed.is_set() for e in made)
        assert pool.run(job(task(4), "a")).ok  # the least recently used idle one is closed for it
        assert made[0].closed.wait(10) and device.read().free_bytes == 10 * GIB
    finally:
        pool.close()
    assert device.read().free_bytes == 70 * GIB


def test_a_job_that_waits_for_memory_past_its_deadline_comes_back_as_a_harness_error() -> None:
    device = FakeDevice(total=64 * GIB, other=40 * GIB)  # another process holds most of the device
    made: list[DeviceEvaluator] = []
    gates = {"a": threading.Event()}
    pool = make_pool(device, made, gates)
    try:
        busy = pool.submit(job(task(1), "a"))  # fits (24 GiB free)
        late = pool.run(job(task(2), "b", deadline_s=1.0))  # does not: its evaluator would be past the free memory
        assert late.status is Status.HARNESS_ERROR
        assert "deadline" in late.message and "device's free memory" in late.message
        gates["a"].set()
        assert busy.result(timeout=30).ok
    finally:
        gates["a"].set()
        pool.close()
    assert len(made) == 1


def test_admission_counts_each_evaluator_at_its_footprint_and_closing_ones_as_free() -> None:
    admission = MemoryAdmission(lambda: None, default_bytes=11 * GIB)
    key = ("cuda", "t", "c", "s")
    other = ("cuda", "u", "c", "s")
    # 36 GiB free; one evaluator of ``key`` holds 4 GiB now (pid 1) of its measured 32 GiB, another process 22 GiB
    admission.observe(DeviceReading(36 * GIB, 80 * GIB, {1: 4 * GIB, 2: 22 * GIB}), [Member(key, (1,))])
    admission.record_peak(key, 12 * GIB)  # its reference's peak: plus a candidate's allowance and two contexts
    assert admission.footprint(key) == 12 * GIB + 18 * GIB + 2 * GIB
    assert admission.footprint(other) == 80 * GIB // 3  # not measured: a third of the device (above the default)
    room = admission.headroom([Member(key, (1,))])
    assert room == 36 * GIB - (32 - 4) * GIB
    assert admission.fits(other, [Member(key, (1,))]) is False  # 8 GiB free for it
    admission.closing([2])  # an evaluator being closed holds 22 GiB: they come back
    assert admission.fits(other, [Member(key, (1,))]) is True
    assert MemoryAdmission(lambda: None).fits(other, []) is None  # no reading: nothing is decided


def test_an_evaluator_counts_at_least_a_third_of_the_device_until_a_job_of_its_key_ends() -> None:
    # an H100 let three 29 GiB evaluators in at once: at the default (20 GiB) they seemed to fit
    admission = MemoryAdmission(lambda: None, default_bytes=20 * GIB)
    key, other = ("cuda", "t", "c", "s"), ("cuda", "u", "c", "s")
    admission.observe(DeviceReading(64 * GIB, 80 * GIB, {1: 8 * GIB, 2: 8 * GIB}), [Member(key, (1,))])
    unknown = 80 * GIB // 3  # a third of the device, more than the default
    assert admission.footprint(key) == unknown  # not its 8 GiB
    assert admission.fits(other, [Member(key, (1,))]) is True  # a second task of unknown size fits beside it
    third = ("cuda", "w", "c", "s")  # a third does not: 64 - 2 * (26.7 - 8) = 26.7 GiB left, it needs 28.7
    assert admission.fits(third, [Member(key, (1,)), Member(other, (2,))]) is False
    admission.observe(DeviceReading(40 * GIB, 80 * GIB, {1: 28 * GIB}), [Member(key, (1,))])
    assert admission.footprint(key) == 28 * GIB  # a reading above the default counts
    admission.record_peak(key, 4 * GIB)  # its first job ended: what was measured stands, small or large
    assert admission.footprint(key) == 28 * GIB
    small = ("cuda", "v", "c", "s")
    admission.observe(DeviceReading(70 * GIB, 80 * GIB, {2: 2 * GIB}), [Member(small, (2,))])
    admission.record_peak(small, 2 * GIB)
    assert admission.footprint(small) == 2 * GIB + 3 * GIB + 2 * GIB  # measured below the default: that


def test_no_idle_evaluator_is_closed_when_closing_every_idle_one_would_not_make_room() -> None:
    device = FakeDevice(total=60 * GIB)
    made: list[DeviceEvaluator] = []
    gates = {"a": threading.Event()}
    pool = make_pool(device, made, gates)
    try:
        busy = pool.submit(job(task(1), "a"))
        assert pool.run(job(task(2), "b")).ok  # its evaluator stays idle
        with device.lock:
            device.held[made[0].pid] = 40 * GIB  # task 1's job grows: with task 2's closed, 20 GiB would be free
        time.sleep(1.0)  # read by the pool: task 1's footprint is 40 GiB now
        late = pool.run(job(task(3), "c", deadline_s=1.5))
        assert late.status is Status.HARNESS_ERROR
        assert not made[1].closed.is_set(), "an idle evaluator was closed for room it could not make"
        gates["a"].set()
        assert busy.result(timeout=30).ok
    finally:
        gates["a"].set()
        pool.close()


def test_a_device_that_cannot_be_read_leaves_the_count_bound_alone() -> None:
    made: list[DeviceEvaluator] = []
    device = FakeDevice(total=1)

    def make(t: Task, config: EvalConfig) -> DeviceEvaluator:
        made.append(DeviceEvaluator(t, device, {}))
        return made[-1]

    limits = PoolLimits(max_evaluators=2, max_per_task=1, compile_workers=1)
    pool = EvaluationPool(CPU, limits=limits, make_evaluator=make, memory_probe=lambda: None)  # type: ignore[arg-type]
    try:
        assert all(pool.run(job(task(k), "a")).ok for k in (1, 2, 3))
    finally:
        pool.close()
    assert len(made) == 3 and made[0].closed.wait(10)


class PeakingEvaluator(DeviceEvaluator):
    """Holds ``IDLE`` bytes between jobs and ``PEAK`` while its verify runs (as a reference process does during a
    stage); the device records the most its evaluators held at once."""

    IDLE, PEAK = 4 * GIB, 36 * GIB

    def __init__(self, t: Task, device: FakeDevice, gates: dict[str, threading.Event]) -> None:
        super().__init__(t, device, gates)
        with device.lock:
            device.held[self.pid] = self.IDLE

    def verify(self, workspace: Workspace) -> VerifyResult:
        with self.device.lock:
            self.device.held[self.pid] = self.PEAK
            self.device.most = max(getattr(self.device, "most", 0), sum(self.device.held.values()))
        time.sleep(0.4)
        with self.device.lock:
            self.device.held[self.pid] = self.IDLE
        return VerifyResult(Stage.VERIFY, Status.OK, f"{self.task.id} ok")

    def device_peak_bytes(self) -> int | None:
        return self.PEAK


def peaking_pool(device: FakeDevice, made: list[DeviceEvaluator], per_task: int = 1) -> EvaluationPool:
    def make(t: Task, config: EvalConfig) -> DeviceEvaluator:
        made.append(PeakingEvaluator(t, device, {}))
        return made[-1]

    limits = PoolLimits(max_evaluators=8, max_per_task=per_task, compile_workers=1)
    return EvaluationPool(CPU, limits=limits, make_evaluator=make, memory_probe=device.read)  # type: ignore[arg-type]


def test_jobs_on_kept_evaluators_wait_while_their_peaks_would_not_fit_together() -> None:
    """Two evaluators admitted together under the default guess (20 GiB each) turned out to peak at 36 GiB: both fit
    the device idle, not both in a stage at once. Their later jobs take turns instead of running it out of memory."""
    device = FakeDevice(total=64 * GIB)
    made: list[DeviceEvaluator] = []
    pool = peaking_pool(device, made)
    try:
        first = [pool.submit(job(task(k), s)) for k, s in ((1, "a"), (2, "b"))]  # nothing measured yet: both start
        assert all(f.result(timeout=30).ok for f in first)
        assert len(made) == 2
        for _ in range(3):
            device.most = 0
            futures = [pool.submit(job(task(k), s)) for k, s in ((1, "a"), (2, "b"))]
            assert all(f.result(timeout=30).ok for f in futures)
            assert device.most <= device.total, f"{device.most / GIB:.0f} GiB held at once on a 64 GiB device"
        assert len(made) == 2 and not any(e.closed.is_set() for e in made)
    finally:
        pool.close()


def test_a_task_gets_a_second_evaluator_only_once_its_first_was_measured() -> None:
    device = FakeDevice(total=200 * GIB)
    made: list[DeviceEvaluator] = []
    pool = peaking_pool(device, made, per_task=2)
    try:
        futures = [pool.submit(job(task(1), s)) for s in ("a", "b")]
        assert all(f.result(timeout=30).ok for f in futures)
        assert len(made) == 1  # the second job waited for the first evaluator's measurement, then took it
        futures = [pool.submit(job(task(1), s)) for s in ("a", "b")]
        assert all(f.result(timeout=30).ok for f in futures)
        assert len(made) == 2  # measured: a second evaluator fits (2 x 47 GiB of 200)
    finally:
        pool.close()


def test_a_busy_task_waits_for_its_evaluator_rather_than_close_another_tasks() -> None:
    """Two tasks' evaluators fill the device; more jobs of the first queue for its evaluator instead of closing the
    second's idle one for a second evaluator of the first (which the second's next job would close in turn)."""
    device = FakeDevice(total=100 * GIB)
    made: list[DeviceEvaluator] = []
    pool = peaking_pool(device, made, per_task=4)
    try:
        first = [pool.submit(job(task(k), s)) for k, s in ((1, "a"), (2, "b"))]
        assert all(f.result(timeout=30).ok for f in first)
        futures = [pool.submit(job(task(1), s)) for s in ("a", "c", "d")]
        assert all(f.result(timeout=30).ok for f in futures)
        assert len(made) == 2 and not any(e.closed.is_set() for e in made)
        assert pool.stats().evaluators.evicted == 0
    finally:
        pool.close()


class UnderstatingEvaluator(PeakingEvaluator):
    """Peaks at ``PEAK`` in a stage but says a third of it (as a reference process does whose stages overlap, or whose
    candidate holds more than its allowance); its verify fails as a reference process does where the device has run
    out of memory, and gives its memory back."""

    def verify(self, workspace: Workspace) -> VerifyResult:
        with self.device.lock:
            self.device.held[self.pid] = self.PEAK
            over = sum(self.device.held.values()) + self.device.other > self.device.total
            if over:
                self.device.held[self.pid] = self.IDLE
                self.device.ran_out = getattr(self.device, "ran_out", 0) + 1
        if over:
            return VerifyResult(
                Stage.VERIFY,
                Status.HARNESS_ERROR,
                "The evaluation harness failed: reference verify_candidate failed: OutOfMemoryError: CUDA out of "
                "memory. Tried to allocate 1024.00 MiB.",
            )
        time.sleep(0.3)
        with self.device.lock:
            self.device.held[self.pid] = self.IDLE
        return VerifyResult(Stage.VERIFY, Status.OK, f"{self.task.id} ok")

    def device_peak_bytes(self) -> int | None:
        return self.PEAK // 3


def understating_pool(device: FakeDevice, made: list[DeviceEvaluator]) -> EvaluationPool:
    def make(t: Task, config: EvalConfig) -> DeviceEvaluator:
        made.append(UnderstatingEvaluator(t, device, {}))
        return made[-1]

    limits = PoolLimits(max_evaluators=8, max_per_task=1, compile_workers=1)
    return EvaluationPool(CPU, limits=limits, make_evaluator=make, memory_probe=device.read)  # type: ignore[arg-type]


def test_a_job_whose_reference_ran_out_of_device_memory_is_retried_with_a_larger_footprint() -> None:
    """Three tasks whose evaluators peak at 36 GiB but are measured at 12 GiB: admission lets them run together on a
    64 GiB device, one runs out of memory. That job goes back to the queue (its evaluator retired), the task's
    footprint grows, and every job ends ok instead of with a harness error."""
    device = FakeDevice(total=64 * GIB)
    made: list[DeviceEvaluator] = []
    pool = understating_pool(device, made)
    try:
        for _ in range(3):
            futures = [pool.submit(job(task(k), s)) for k, s in ((1, "a"), (2, "b"), (3, "c"))]
            results = [f.result(timeout=60) for f in futures]
            assert all(r.ok for r in results), [r.message for r in results]
        assert getattr(device, "ran_out", 0) >= 1, "the device never ran out: the test did not test the retry"
        assert pool.stats().failed == 0
        assert any(e.closed.is_set() for e in made), "the evaluator that ran out of memory was kept"
        grown = pool.admission.footprint(task_key(task(1), "cpu", CONFIG)) if pool.admission else 0
        assert grown >= 12 * GIB
    finally:
        pool.close()


def test_a_job_that_keeps_running_out_of_device_memory_ends_as_a_harness_error() -> None:
    """A job whose reference runs out of memory every time (the device is full of another process's memory) is
    retried while its grown footprint fits, then answered with a harness error by its deadline: never a hang, never
    an exception."""
    device = FakeDevice(total=64 * GIB, other=40 * GIB)
    made: list[DeviceEvaluator] = []
    pool = understating_pool(device, made)
    try:
        result = pool.submit(job(task(1), "a", deadline_s=4.0)).result(timeout=60)
        assert result.status is Status.HARNESS_ERROR
        assert "out of memory" in result.message or "did not fit in the device's free memory" in result.message
        assert getattr(device, "ran_out", 0) >= 1
        assert 1 <= len(made) <= 1 + RETRIES
    finally:
        pool.close()
