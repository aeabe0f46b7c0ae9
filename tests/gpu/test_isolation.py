"""Candidate isolation with CUDA: each namespace switch, forced on, leaves a CUDA candidate working (the
driver, /dev/nvidia*, CUDA IPC with the reference process, nvcc-built extensions); a private /dev/shm and a
read-only /dev leave the driver working; nvcc works inside the compiler sandbox and cannot read the solutions.

By default (``"auto"``) every switch the machine allows is on, for GPU candidates too; these tests show
that each one, alone and all together, leaves a CUDA candidate working. Run on the device machine:
``python -m pytest -m gpu tests/gpu/test_isolation.py``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest
from cudagym_testing import relu_solution

from cudagym.backends import query_gpu, resolve_backend
from cudagym.baselines import tool_call
from cudagym.build import Builder
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.results import Status
from cudagym.sandbox import Child, ChildLimits, isolation_status, sandbox_processes
from cudagym.tasks import load
from cudagym.workspace import Workspace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

RELU = "builtin/relu"
BUILTIN = load("builtin")
SMALL_RELU = dataclasses.replace(
    BUILTIN.get(RELU),
    metadata=dataclasses.replace(BUILTIN.get(RELU).metadata, sizes={"cuda": {"N": 1 << 22}}),
)
CONFIG = EvalConfig(num_checks=2, verify_timeout=120, profile_timeout=300,
                    timing=TimingConfig(min_reps=10, max_reps=100, budget_seconds=0.5))  # fmt: skip
OFF = {"isolate_network": False, "isolate_processes": False, "readonly_filesystem": False}
SWITCHES = {
    "network": ({**OFF, "isolate_network": True}, ("network",)),
    "processes": ({**OFF, "isolate_processes": True}, ("pids",)),
    "readonly": ({**OFF, "readonly_filesystem": True}, ("readonly",)),
    "all": ({"isolate_network": True, "isolate_processes": True, "readonly_filesystem": True},
            ("network", "pids", "readonly")),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SWITCHES))
def test_a_cuda_candidate_runs_with_the_switch_on(name: str, children: list[Child]) -> None:
    switches, steps = SWITCHES[name]
    status = isolation_status()
    missing = [f"{step}: {getattr(status, step)}" for step in ("user", *steps) if not status.works(step)]
    if missing:
        pytest.skip(f"not available on this machine ({'; '.join(missing)})")
    config = dataclasses.replace(CONFIG, limits=ChildLimits(**switches))
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=config)
    try:
        env.reset(options={"task_id": RELU})
        for path, content in relu_solution("cuda").items():
            assert env.step(tool_call("write_file", path=path, content=content))[4]["status"] == "ok"
        obs, reward, terminated, _, info = env.step(tool_call("submit"))
        assert terminated and info["tier"] >= 1 and reward >= 1, obs
        candidates = [c for c in children if c.role == "candidate"]
        assert candidates
        for child in candidates:
            isolation = child.isolation
            assert isolation.network == switches["isolate_network"], isolation.summary()
            assert isolation.processes == switches["isolate_processes"], isolation.summary()
            assert isolation.readonly_filesystem == switches["readonly_filesystem"], isolation.summary()
    finally:
        env.close()
    assert not [pid for child in children for pid in sandbox_processes(child.sandbox_id)]


def test_by_default_gpu_candidates_get_every_namespace_the_machine_allows(children: list[Child]) -> None:
    status = isolation_status()
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=CONFIG)
    try:
        env.reset(options={"task_id": RELU})
        for path, content in relu_solution("cuda").items():
            env.step(tool_call("write_file", path=path, content=content))
        obs, _, _, _, info = env.step(tool_call("verify"))
        assert info["status"] == "ok", obs
        candidate = next(c for c in children if c.role == "candidate")
        user = status.works("user")
        assert candidate.isolation.network == (user and status.works("network")), candidate.isolation.summary()
        assert candidate.isolation.processes == (user and status.works("pids"))
        assert candidate.isolation.readonly_filesystem == (user and status.works("readonly"))
        assert candidate.memory_bytes is None  # the CUDA driver cannot run under RLIMIT_AS
    finally:
        env.close()


def test_nvcc_runs_in_the_compiler_sandbox_and_cannot_read_the_solutions(tmp_path: Path) -> None:
    """The cuda backend's builds (nvcc, its host compiler, the CUDA toolkit) work inside the compiler sandbox,
    and a .cu file cannot make nvcc read a reference solution."""
    builder = Builder(resolve_backend("cuda"), cache_dir=tmp_path / "cache")
    assert builder.isolation.sandboxed == isolation_status().works("user"), builder.isolation.summary()
    workspace = Workspace(BUILTIN.get(RELU).source_for("cuda"), "gpu isolation test", root_dir=tmp_path)
    for path, content in relu_solution("cuda").items():
        workspace.write(path, content)
    built = builder.build(workspace)
    assert built.status is Status.OK, built.diagnostics
    assert built.kernels  # ptxas's report came back from inside the sandbox
    if not builder.isolation.sandboxed:
        return
    solution = next(Path(BUILTIN.get(RELU).solutions["cuda"]).rglob("*.cu"))
    kernel = next(p for p in relu_solution("cuda") if p.endswith(".cu"))
    original = (workspace.path / kernel).read_text()
    for line in (f'#include "{solution}"', f'asm(".incbin \\"{solution}\\"");'):
        workspace.write(kernel, f"{line}\n{original}")
        result = builder.build(workspace)
        assert result.status is Status.COMPILE_ERROR, line
        assert "No such file or directory" in result.diagnostics or "file not found" in result.diagnostics, line


LEAVES_SHM = (
    "import os, torch\n"
    "x = torch.ones(1 << 20, device='cuda')\n"
    "torch.cuda.synchronize()\n"
    "open('/dev/shm/{token}', 'w').write('left in /dev/shm')\n"
    "open(os.path.join({exchange!r}, 'sum'), 'w').write(str(float(x.sum())))\n"
    "class ModelNew:\n    pass\n"
)


def test_a_cuda_candidate_with_a_private_dev_shm_and_a_read_only_dev(tmp_path: Path) -> None:
    """/dev and /sys read-only (device nodes still open for writing) and a /dev/shm of its own leave the CUDA
    driver working; what the candidate leaves in its /dev/shm never reaches the host's."""
    status = isolation_status()
    if not (status.works("user") and status.works("readonly")):
        pytest.skip(f"no read-only file system here: {status.readonly or status.user}")
    limits = ChildLimits(isolate_network=True, isolate_processes=True, readonly_filesystem=True)
    child = Child("candidate", limits=limits, threads=1)
    token = f"cudagym-gpu-shm-{os.getpid()}"
    try:
        assert child.isolation.private_shm and child.exchange is not None, child.isolation.summary()
        (tmp_path / "model_new.py").write_text(LEAVES_SHM.format(token=token, exchange=child.exchange))
        child.send({"mode": "import", "workspace": str(tmp_path)})
        assert child.receive_all(time.monotonic() + 300), child.output.text()
        assert {"stage": "done", "ok": True} in child.messages, child.output.text()
        assert Path(child.exchange, "sum").read_text() == str(float(1 << 20))
        assert not Path("/dev/shm", token).exists()
    finally:
        child.kill()
        Path("/dev/shm", token).unlink(missing_ok=True)
    assert not os.path.exists(child.exchange)
