"""Candidates forked from the fork server on the GPU: each initialises its own CUDA context after the fork,
inside its namespaces, and verifies, profiles and submits as a freshly started one does.

Its passing on the H200 (2026-11-30) is why ``Tuning.fork_server`` is on for cuda by default. Run there:
``python -m pytest -m gpu tests/gpu/test_fork_server.py``.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from test_cuda_backend import GPU_CONFIG, RELU, SMALL_RELU, relu_env_with_solution

from cudagym.backends import query_gpu
from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.harness.protocol import CandidateJob
from cudagym.sandbox import Child, sandbox_processes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

FORKED = dataclasses.replace(GPU_CONFIG, tuning=dataclasses.replace(GPU_CONFIG.tuning, fork_server=True))


def test_forked_cuda_candidates_verify_profile_and_submit(children: list[Child]) -> None:
    env = relu_env_with_solution(FORKED)
    try:
        obs, _, _, _, info = env.step(tool_call("profile"))
        assert info["status"] == "ok", obs
        assert info["result"]["kernels"], obs  # the per-kernel breakdown: CUDA tracing works after the fork
        obs, reward, terminated, _, info = env.step(tool_call("submit"))
        assert terminated and info["tier"] >= 1 and reward >= 1, obs
        assert all(finding["passed"] for finding in info["result"]["integrity"]), info["result"]["integrity"]
        pool = env.unwrapped.evaluator.pool
        assert not pool.fork_server_error
        candidates = [c for c in children if c.role == "candidate"]
        assert candidates and all(c.forked for c in candidates)
        assert all(c.isolation.network and c.isolation.processes for c in candidates if c.isolation.any)
    finally:
        env.close()
    deadline = time.monotonic() + 10
    while any(sandbox_processes(c.sandbox_id) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for child in children for pid in sandbox_processes(child.sandbox_id)]


def test_a_forked_spare_initialises_cuda_and_the_profiler_and_reports_warm(children: list[Child]) -> None:
    env = CudaKernelEnv(
        [SMALL_RELU],
        backend="cuda",
        eval_config=dataclasses.replace(FORKED, tuning=dataclasses.replace(FORKED.tuning, prestart=0)),
    )
    try:
        env.reset(options={"task_id": RELU})
        pool = env.unwrapped.evaluator.pool  # no spares: the candidate below is forked now
        pool.fill()
        pool._server.wait_ready()
        started = time.monotonic()
        child = pool.start(CandidateJob(mode="import", workspace=str(env.workspace.path)), refill=False)
        assert child.receive(started + 60) == {"stage": "warm"}
        assert child.forked
        print(f"FORKED_WARM_S {time.monotonic() - started:.2f}")  # for the record; benchmarks/warmup_parts.py measures
        pool.discard(child)
    finally:
        env.close()
