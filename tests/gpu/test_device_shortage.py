"""A candidate's out-of-memory error on the GPU, judged by the device and not by the candidate's word
(``cudagym.device_memory.shortage``): with another process holding nearly all the device, a candidate that asks for a
modest 4 GiB gets a harness error (evaluate again), and the same files pass once that process has gone; a candidate
that asks for more than the whole device ran out on its own (a runtime error); and one whose device was filled during
its run and freed before the reading (the reading's blind spot) is run once more and passes. Run on the device machine:
``python -m pytest -m gpu tests/gpu/test_device_shortage.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cudagym_testing import relu_solution, write_all
from test_cuda_backend import RELU, SMALL_RELU

from cudagym.backends import query_gpu
from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.stages import faults

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

CONFIG = EvalConfig(num_checks=2, verify_timeout=120, profile_timeout=300)
LEFT_FREE_MIB = 600  # what the co-tenant leaves: less than any candidate's allowance (a context and its data)

# holds all of the device but LEFT_FREE_MIB until its stdin closes
CO_TENANT = f"""
import sys, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - {LEFT_FREE_MIB} * 2**20, dtype=torch.uint8, device="cuda")
print("holding", flush=True)
sys.stdin.read()
"""

# the same, but it gives the device back when told (a line on stdin) and says so, then waits for its stdin to close
RELEASING_CO_TENANT = f"""
import sys, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - {LEFT_FREE_MIB} * 2**20, dtype=torch.uint8, device="cuda")
print("holding", flush=True)
sys.stdin.readline()
del hold
torch.cuda.empty_cache()
print("freed", flush=True)
sys.stdin.read()
"""


def asking(nbytes: int) -> dict[str, str]:
    """The ReLU solution whose forward first allocates ``nbytes`` of device memory."""
    files = relu_solution("cuda")
    files["model_new.py"] = (
        files["model_new.py"]
        .replace(
            "        return cuda_extension.relu_forward(x.contiguous())",
            f"        scratch = torch.empty({nbytes}, dtype=torch.uint8, device=x.device)\n"
            "        return cuda_extension.relu_forward(x.contiguous())",
        )
        .replace("import torch.nn as nn", "import torch\nimport torch.nn as nn")
    )
    return files


@pytest.fixture
def env() -> Iterator[CudaKernelEnv]:
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=CONFIG)
    env.reset(options={"task_id": RELU})
    try:
        yield env
    finally:
        env.close()


def verify(env: CudaKernelEnv) -> dict:
    return env.step(tool_call("verify"))[4]


def test_a_modest_candidate_on_a_device_other_processes_filled_gets_a_harness_error(env: CudaKernelEnv) -> None:
    write_all(env, asking(4 << 30))
    assert verify(env)["status"] == "ok"  # the reference process is up and holds what it needs
    co_tenant = subprocess.Popen([sys.executable, "-c", CO_TENANT], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert co_tenant.stdout is not None and co_tenant.stdout.readline().strip() == b"holding"
        info = verify(env)
        assert info["status"] == "harness_error", info
        assert "outside the candidate" in info["result"]["message"], info
    finally:
        co_tenant.communicate(timeout=60)
    assert verify(env)["status"] == "ok"  # the same files, the device free again: not remembered as a failure


def test_a_candidate_that_asks_for_more_than_the_device_ran_out_on_its_own(env: CudaKernelEnv) -> None:
    write_all(env, asking(4 << 40))
    info = verify(env)
    assert info["status"] == "runtime_error", info
    assert "out of memory" in info["result"]["message"], info


def test_a_device_freed_between_the_failure_and_the_reading_runs_the_candidate_again(
    env: CudaKernelEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The blind spot: the device is read once the candidate has gone, and by then the co-tenant that filled it has
    # given its memory back, so the reading makes the shortage the candidate's. The co-tenant frees exactly there
    # (just before the first reading); the stage is run once more, the device now free, and the honest files pass.
    write_all(env, asking(4 << 30))
    assert verify(env)["status"] == "ok"
    co_tenant = subprocess.Popen(
        [sys.executable, "-c", RELEASING_CO_TENANT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert co_tenant.stdin is not None and co_tenant.stdout is not None
    readings: list[str] = []
    judge = faults.machine_shortage

    def freed_before_the_reading(*args: Any) -> str | None:
        if not readings:  # the first failure's reading: the co-tenant gives the device back first
            co_tenant.stdin.write(b"free\n")
            co_tenant.stdin.flush()
            assert co_tenant.stdout.readline().strip() == b"freed"
        why = judge(*args)
        readings.append(why or "not the machine's")
        return why

    monkeypatch.setattr(faults, "machine_shortage", freed_before_the_reading)
    try:
        assert co_tenant.stdout.readline().strip() == b"holding"
        info = verify(env)
    finally:
        co_tenant.communicate(timeout=60)
    assert readings[0] == "not the machine's", readings  # the reading alone: the candidate's own (the blind spot)
    assert len(readings) == 2, readings  # and so the stage ran once more
    assert info["status"] == "ok", info
