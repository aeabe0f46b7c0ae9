"""How the timing stage (harness/stages.py) sizes its handshakes: ``TimingConfig.handshake_us`` decides how much work
one handshake of the trusted clock holds (through a real environment on the CPU backend), and how many calls that is
for a call's time (with a stand-in clock)."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

import pytest
from cudagym_testing import RELU, relu_solution, write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig


def _calls_per_handshake(config: EvalConfig, handshake_us: float | None) -> tuple[int, str]:
    config = dataclasses.replace(config, timing=dataclasses.replace(config.timing, handshake_us=handshake_us))
    env = CudaKernelEnv(backend="cpu", eval_config=config)
    try:
        env.reset(options={"task_id": RELU})
        write_all(env, relu_solution())
        obs, _, _, _, info = env.step(tool_call("profile"))
        assert info["status"] == "ok", obs
        return info["result"]["calls_per_handshake"], info["result"]["method"]
    finally:
        env.close()


def test_the_handshake_target_reaches_the_reference_process(fast_config: EvalConfig) -> None:
    # the default target holds several calls of this short task per handshake (see the trial's tests below); a target
    # below one call's time, set in the env's EvalConfig, gives one call per handshake
    calls, method = _calls_per_handshake(fast_config, 1.0)
    assert calls == 1 and "1 call(s) per handshake" in method, method


class _Clock:
    """What ``Timing._calls_per_handshake`` reads of a clock: the call counts it calibrated and the backend."""

    cuda = True

    def call_counts(self) -> list[int]:
        return [1, 2, 4, 8, 16]


def _timing(harness: Any, handshake_us: float | None) -> Any:
    """A ``Timing`` on a stand-in clock, from the harness's modules as the reference process loads them."""
    stages = harness("stages")
    TimingConfig = harness("timing").TimingConfig

    return stages.Timing(_Clock(), TimingConfig(handshake_us=handshake_us), None, 0.0, 0.0, 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("handshake_us", "one_call_ms", "expected"),
    [
        (None, 0.1, 16),  # 2 ms of 100 us calls: twenty wanted, sixteen (the most the clock calibrated)
        (None, 0.3, 4),  # 2 ms of 300 us calls: six wanted, four (a power of two)
        (None, 3.0, 1),  # a call longer than the target: one
        (None, 0.03, 16),  # short calls too: their host paths are queued before the go, out of the interval
        (1.0, 0.1, 1),  # a target below one call: one
        (600.0, 0.1, 4),  # a user's target: six wanted, four
    ],
)
def test_calls_per_handshake_reach_the_target(
    harness: Any, handshake_us: float | None, one_call_ms: float, expected: int
) -> None:
    assert _timing(harness, handshake_us)._calls_per_handshake(one_call_ms) == expected


class _ScriptedCandidate:
    """A stand-in clock whose candidate answers every call at a fixed time per call, right except on the calls of
    ``wrong`` (counted over the whole timing, warm-up included); what the timing reads of a real clock, no more."""

    cuda = False
    cpu_method = "scripted"

    def __init__(self, harness: Any, wrong: set[int], calls: int):
        self.calibration = harness("clock").Calibration()
        self.protocol = harness("protocol")
        self.wrong, self.calls = wrong, calls
        self.answered = 0  # calls answered so far
        self.checked: list[int] = []  # the calls compared, by their number

    def call_counts(self) -> list[int]:
        return [1 << i for i in range(self.calls.bit_length())]

    def stage_inputs(self, call: int, seed: int, kind: str) -> None:
        pass

    def handshake(self, sets: list[int], deadline: float) -> Any:
        first, self.answered = self.answered, self.answered + len(sets)
        return _Record(first, len(sets))

    def check(self, record: Any, call: int, atol: float, rtol: float, index: int, precision: str) -> Any:
        number = record.first + call
        self.checked.append(number)
        return self.protocol.Check(index, passed=number not in self.wrong, inputs_unchanged=True)

    def per_call_us(self, record: Any) -> float:
        return 100.0

    def clock_slowed(self, record: Any) -> bool:
        return False

    clock_quickened = clock_slowed

    def poison(self, record: Any) -> None:
        pass

    def sampled(self) -> Any:
        return self.protocol.Samples(observed=False, why="scripted")


@dataclasses.dataclass
class _Record:
    first: int  # the number of the handshake's first call
    calls: int
    error: Any = None
    description: dict[str, Any] = dataclasses.field(default_factory=dict)
    phases_us: list[float] = dataclasses.field(default_factory=lambda: [1.0])
    cpu: Any = None
    queued: int = 0


def _time(harness: Any, clock: _ScriptedCandidate) -> Any:
    TimingConfig = harness("timing").TimingConfig
    # four warm-up calls, then twelve timed handshakes of four calls (400 us of 100 us calls)
    config = TimingConfig(warmup=4, warmup_seconds=0.0, min_reps=12, max_reps=12, budget_seconds=0.0)
    config = dataclasses.replace(config, handshake_us=400.0)
    return harness("stages").Timing(clock, config, None, 0.0, 0.0, 60.0).run()  # type: ignore[arg-type]


def test_every_timed_call_is_compared_so_the_median_takes_no_unchecked_handshake(harness: Any) -> None:
    clock = _ScriptedCandidate(harness, set(), calls=4)
    reply = _time(harness, clock)
    assert reply.failure is None and reply.median_ms == 0.1, reply
    timed = range(4, 4 + 12 * reply.calls_per_handshake)  # after the four warm-up calls
    assert reply.calls_per_handshake == 4 and set(timed) <= set(clock.checked), clock.checked
    assert reply.checked_calls == len(clock.checked)


@pytest.mark.parametrize("trial", range(8))
def test_one_wrong_timed_call_anywhere_fails_the_timing(harness: Any, trial: int) -> None:
    # the attack a random share of checks lets through most of the time: a candidate wrong on a single call of the
    # timed ones (here one drawn at random; a real one skips a random share), the one call whose work it saved
    wrong = 4 + secrets.randbelow(12 * 4)
    clock = _ScriptedCandidate(harness, {wrong}, calls=4)
    reply = _time(harness, clock)
    assert reply.failure is not None and not reply.failure.passed, (wrong, reply)
    assert reply.median_ms is None and clock.checked[-1] == wrong, (wrong, clock.checked)


class _PacedCandidate(_ScriptedCandidate):
    """The scripted candidate, each handshake's time per call drawn from ``per_call`` (microseconds)."""

    def __init__(self, harness: Any, per_call: Any):
        super().__init__(harness, set(), calls=1)
        self.per_call = per_call

    def per_call_us(self, record: Any) -> float:
        return float(self.per_call())


def _time_within(harness: Any, clock: _ScriptedCandidate, median_within: float) -> Any:
    TimingConfig = harness("timing").TimingConfig
    config = TimingConfig(
        warmup=2, warmup_seconds=0.0, min_reps=10, max_reps=60, budget_seconds=60.0, median_within=median_within
    )
    return harness("stages").Timing(clock, config, None, 0.0, 0.0, 120.0).run()  # type: ignore[arg-type]


def test_a_steady_candidate_is_timed_until_its_median_is_known_not_for_the_whole_budget(harness: Any) -> None:
    steady = _PacedCandidate(harness, lambda: 100.0 + secrets.randbelow(100) / 1000)  # within 0.1%
    reply = _time_within(harness, steady, 0.005)
    assert reply.failure is None and reply.reps == 10, reply  # min_reps, not the 60 s budget or max_reps
    # a spread of 100% never narrows to 0.5% (a 20% spread of whole microseconds could, by chance, on a loaded machine)
    noisy = _PacedCandidate(harness, lambda: 100.0 + secrets.randbelow(100))
    assert _time_within(harness, noisy, 0.005).reps == 60
    assert _time_within(harness, _PacedCandidate(harness, lambda: 100.0), 0.0).reps == 60  # 0: the whole budget
