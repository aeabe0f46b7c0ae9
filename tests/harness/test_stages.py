"""How the timing stage (harness/stages.py) sizes its handshakes: ``TimingConfig.handshake_us`` decides how much work
one handshake of the trusted clock holds (through a real environment on the CPU backend), and how many calls that is
for a call's time (with a stand-in clock)."""

from __future__ import annotations

import dataclasses
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
