"""The trusted clock's calibration (``Clock.calibrate`` in cudagym/harness/clock.py): what another process's work on the
device during a calibration round can do to the figure taken off every handshake, and how a timing shows that its
calibration was taken on a busier device than the one it ran on (``Clock.clock_quickened``)."""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

QUIET = [40.0, 15.0, 296.0, 12.0]  # cuda phases of an empty handshake, us: copy, flush, candidate (go to done), seal


class _Clock:
    """The parts of a clock ``calibrate`` uses, with handshakes whose phases come from ``phases(number)``."""

    def __init__(self, clock: ModuleType, phases: Callable[[int], list[float]], cuda: bool = True) -> None:
        self.module, self.phases, self.cuda = clock, phases, cuda
        self.words = (ctypes.c_uint64 * 32)()
        self.calibration = clock.Calibration()
        self.number = 0
        self.calls_asked: list[int] = []
        self.freezer = types.SimpleNamespace(thaw=lambda: None)  # cpu: the candidate thawed after the calibration

    def _wake_candidate(self) -> None:
        pass

    def call_counts(self) -> list[int]:
        return [1, 4]

    def handshake(self, sets: list[int], deadline: float) -> object:
        self.number += 1
        self.calls_asked.append(len(sets))
        phases = self.phases(self.number)
        return self.module.Handshake(self.number, sets, sum(phases), phases, {})

    def __getattr__(self, name: str) -> object:  # the clock's own methods, bound to this stand-in
        return getattr(self.module.Clock, name).__get__(self)


@pytest.fixture
def clock(harness: Callable[[str], ModuleType]) -> Iterator[ModuleType]:
    yield harness("clock")


def _per_round(clock: ModuleType) -> int:
    return clock.CALIBRATION_WARMUP[True] + clock.CALIBRATION_HANDSHAKES[True]


def test_a_round_beside_other_work_is_not_the_one_taken_off(clock: ModuleType) -> None:
    """Another context's kernel during the first round lengthens every handshake of it evenly (a steady round): the
    clock keeps the round that takes off least, so the candidate can only read slower, never faster."""
    busy = _per_round(clock)  # the first round of the first call count

    def phases(number: int) -> list[float]:
        if number <= busy:
            return [q * 1.5 if i != 2 else q + 400.0 for i, q in enumerate(QUIET)]
        return list(QUIET)

    fake = _Clock(clock, phases)
    fake.calibrate(deadline=0.0)
    assert fake.calibration.phases_us[1][clock.CANDIDATE_PHASE] == pytest.approx(296.0)
    assert fake.calibration.disturbed == []
    assert fake.words[clock.STATE] == clock.SERVING


def test_a_calibration_with_no_steady_round_says_so_and_keeps_the_least(clock: ModuleType) -> None:
    def phases(number: int) -> list[float]:  # every other handshake waits for another context's time slice
        extra = 900.0 if number % 2 else 0.0
        return [40.0, 15.0, 296.0 + extra + number, 12.0]

    fake = _Clock(clock, phases)
    fake.calibrate(deadline=0.0)
    assert fake.calibration.disturbed == [1, 4]
    per_round = _per_round(clock)
    first_round_median = fake.calibration.phases_us[1][clock.CANDIDATE_PHASE]
    assert first_round_median < 296.0 + 900.0 + per_round  # the round kept is the first, which took off least


def test_the_number_of_calibration_handshakes_never_depends_on_the_device(clock: ModuleType) -> None:
    """Every stage calibrates with the same count of handshakes, quiet or busy: the number of the first handshake after
    the calibration tells the candidate nothing."""
    quiet = _Clock(clock, lambda number: list(QUIET))
    busy = _Clock(clock, lambda number: [40.0, 15.0, 296.0 + (900.0 if number % 2 == 0 else 0.0), 12.0])
    quiet.calibrate(deadline=0.0)
    busy.calibrate(deadline=0.0)
    assert busy.calibration.disturbed and not quiet.calibration.disturbed
    assert quiet.calls_asked == busy.calls_asked
    assert len(quiet.calls_asked) == clock.CALIBRATION_ROUNDS[True] * _per_round(clock) * 2


def test_a_cpu_calibration_keeps_the_shortest_steady_round(clock: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(clock.CALIBRATION_ROUNDS, False, 3)  # one round by default: a cpu round is costly
    rounds = iter([900.0, 300.0, 310.0] * 2)
    current: dict[str, float] = {}

    def phases(number: int) -> list[float]:
        if (number - 1) % (clock.CALIBRATION_WARMUP[False] + clock.CALIBRATION_HANDSHAKES[False]) == 0:
            current["level"] = next(rounds)
        return [10.0, current["level"] - 20.0, 10.0]

    fake = _Clock(clock, phases, cuda=False)
    fake.calibrate(deadline=0.0)
    assert fake.calibration.total_us[1] == pytest.approx(300.0)
    assert fake.calibration.disturbed == []


def test_clock_phases_faster_than_calibrated_show_a_busy_calibration(clock: ModuleType) -> None:
    fake = _Clock(clock, lambda number: list(QUIET))
    fake.calibration.total_us[1] = sum(QUIET) * 2
    fake.calibration.phases_us[1] = [q * 2 for q in QUIET]  # calibrated while another context ran
    quick = clock.Handshake(1, [0], sum(QUIET) + 500.0, [40.0, 15.0, 796.0, 12.0], {})
    assert fake.clock_quickened(quick)
    fake.calibration.phases_us[1] = list(QUIET)
    assert not fake.clock_quickened(quick)
    slow = clock.Handshake(2, [0], 0.0, [80.0, 30.0, 796.0, 24.0], {})
    assert not fake.clock_quickened(slow)  # slower than calibrated is ``clock_slowed``'s business
    fake.cuda = False
    fake.calibration.phases_us[1] = [q * 2 for q in QUIET]
    assert not fake.clock_quickened(quick)
