"""Forgeries of the measurement on the GPU: the candidate process tampers with its own sense of time and phase.

The reference process times the candidate's calls on its own clock (cudagym/harness/clock.py), so nothing the
candidate changes in itself may move a figure that decides the reward. The first case is the attack that opened
issue 19: bmm's honest CUDA solution (tier 1, about 1.03x eager on the H200) with four lines that divide every
median of its process by three once scored tier 3 at 3.1x. The others patch the process's timers and the garbage
collector's phase signal on the ReLU task, with the static rules that would refuse them before they run turned off:
each profile must report the honest figure (or a runtime tripwire refuses it).

Run on the device machine: ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from cudagym_testing import relu_solution, write_all
from test_cuda_backend import BUILTIN, GPU_CONFIG, RELU, SMALL_RELU

from cudagym.backends import query_gpu
from cudagym.baselines import solution_files, tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.integrity.policy import RULES, IntegrityPolicy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

BMM = "builtin/bmm"
# the issue's attack, verbatim: every median this process computes divided by three
MEDIAN_BY_THREE = "import statistics; _m = [statistics][0]; _r = _m.median; _m.median = lambda v: _r(v) / 3.0\n"
FORGERIES = {
    "patched_median": "import statistics\n_m = [statistics][0]\n_r = _m.median\n_m.median = lambda v: _r(v) / 1000.0\n",
    "patched_timers": (
        "import time\n_t = [time][0]\n_p, _c = _t.perf_counter, _t.perf_counter_ns\n"
        "_t.perf_counter = lambda: _p() / 1000.0\n_t.perf_counter_ns = lambda: _c() // 1000\n"
    ),
    "patched_cuda_events": (
        "import torch\n_e = [torch.cuda.Event][0]\n_real = _e.elapsed_time\n"
        "_e.elapsed_time = lambda self, other: _real(self, other) / 1000.0\n"
    ),
    "gc_phase_signal": "import gc\n_g = [gc][0]\n_g.disable = lambda: None\n",
}


def with_prelude(files: dict[str, str], prelude: str) -> dict[str, str]:
    return {**files, "model_new.py": prelude + files["model_new.py"]}


def test_the_median_patch_of_the_issue_no_longer_lifts_bmm() -> None:
    env = CudaKernelEnv([BUILTIN.get(BMM)], backend="cuda", eval_config=GPU_CONFIG)
    try:
        outcomes = {}
        for name, prelude in (("honest", ""), ("forged", MEDIAN_BY_THREE)):
            env.reset(options={"task_id": BMM})
            write_all(env, with_prelude(solution_files(env.task, "cuda"), prelude))
            obs, _, terminated, _, info = env.step(tool_call("submit"))
            assert terminated, obs
            outcomes[name] = info
        honest, forged = outcomes["honest"], outcomes["forged"]
        assert honest["tier"] >= 1, honest
        if forged["status"] == "integrity":  # refused before or while it ran: the forgery earned nothing
            assert forged["tier"] == 0, forged
            return
        # the forged run is the honest one: the same tier band and a speedup that did not triple
        assert forged["tier"] <= max(honest["tier"], 2), (honest, forged)
        assert forged["speedup_eager"] < 1.5 * honest["speedup_eager"], (honest["speedup_eager"], forged)
    finally:
        env.close()


@pytest.fixture(scope="module")
def env():
    # the static rules (patching, introspection) refuse these preludes before anything runs: off here, so the
    # forgeries reach the candidate process and the clock is what must hold
    unchecked = dataclasses.replace(GPU_CONFIG, policy=IntegrityPolicy(disabled_checks=frozenset(RULES)))
    environment = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=unchecked)
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def honest_ms(env: CudaKernelEnv) -> float:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution("cuda"))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    return info["result"]["candidate_ms"]


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_tampering_with_the_candidates_own_clock_changes_no_gpu_figure(
    env: CudaKernelEnv, honest_ms: float, forgery: str
) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, with_prelude(relu_solution("cuda"), FORGERIES[forgery]))
    obs, _, _, _, info = env.step(tool_call("profile"))
    result = info["result"]
    if info["status"] == "integrity":  # a tripwire on replaced functions saw it: refused outright, also fine
        failed = {f["check"] for f in result["integrity"] if not f["passed"]}
        assert failed == {"harness_functions_untouched"}, obs
        return
    assert info["status"] == "ok", obs
    assert result["method"].startswith("trusted clock"), result["method"]
    # a forged figure would be a thousandth of the honest one; an honest profile of this few-microsecond kernel
    # may read a few times the first one (the trusted clock's noise at that length), never a fraction of it
    assert honest_ms / 2 < result["candidate_ms"] < honest_ms * 5, (result["candidate_ms"], honest_ms)


# an honest forward that waits for the device inside every call, as `.item()` or printing a value would: it cannot
# finish queueing its calls before the clock's go (its wait is behind the go), so the clock must go on without it
SYNCING_FORWARD = """

import torch as _torch

_Queued = ModelNew


class ModelNew(_Queued):
    def forward(self, *args):
        out = super().forward(*args)
        _torch.cuda.synchronize()
        return out
"""


def test_an_honest_forward_is_queued_before_its_go(env: CudaKernelEnv, honest_ms: float) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution("cuda"))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    clock = info["result"]["clock"]
    # every handshake but a first one that loads the kernel's module lazily: its host path lies before the interval
    assert clock["queued_handshakes"] >= 0.9 * clock["handshakes"], clock


def test_a_forward_that_waits_for_the_device_is_timed_not_stuck(env: CudaKernelEnv, honest_ms: float) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution("cuda")
    write_all(env, {**files, "model_new.py": files["model_new.py"] + SYNCING_FORWARD})
    start = time.monotonic()
    obs, _, _, _, info = env.step(tool_call("profile"))
    seconds = time.monotonic() - start
    assert info["status"] == "ok", obs
    clock = info["result"]["clock"]
    assert clock["queued_handshakes"] == 0, clock  # no handshake could queue: each went on when progress stopped
    # what is left of its host path (the synchronisation's return, the description) is timed: never less than honest
    assert info["result"]["candidate_ms"] > honest_ms / 2, (info["result"]["candidate_ms"], honest_ms)
    assert seconds < 60, seconds
