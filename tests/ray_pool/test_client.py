"""Envs with ``evaluator="ray"``: the same outcomes as a local evaluator, and a clear error without Ray."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.ray_pool import MISSING_RAY, RayEvaluatorFactory, RayPool
from cudagym.tasks import load

RELU = "builtin/relu"
TOOLS = ("compile", "verify", "profile", "submit")


def write_solution(env: gym.Env[str, str]) -> None:
    env.reset(options={"task_id": RELU})
    root = Path(load("builtin").get(RELU).solutions["cpu"])
    for path in (p for p in root.rglob("*") if p.is_file()):
        _, _, _, _, info = env.step(tool_call("write_file", path=str(path.relative_to(root)), content=path.read_text()))
        assert info["status"] == "ok", info


def test_an_env_on_ray_matches_a_local_env(
    pool: RayPool, ray_factory: RayEvaluatorFactory, cache_dir: Path, fast_config: EvalConfig
) -> None:
    remote = gym.make(
        "CudaKernel-v0", backend="cpu", eval_config=fast_config, evaluator="ray", cache_dir=str(cache_dir)
    )
    local = CudaKernelEnv(backend="cpu", eval_config=fast_config, cache_dir=str(cache_dir))
    try:
        assert remote.unwrapped._evaluator_factory == ray_factory  # the same pool as the other tests'
        write_solution(remote)
        on_ray: dict[str, dict[str, Any]] = {tool: remote.step(tool_call(tool))[4] for tool in TOOLS}
        write_solution(local)
        here = local.step(tool_call("submit"))[4]
    finally:
        remote.close()
        local.close()
    assert [on_ray[t]["status"] for t in TOOLS] == ["ok"] * 4, [on_ray[t]["result"]["message"] for t in TOOLS]
    assert on_ray["submit"]["tier"] == here["tier"] >= 1
    assert on_ray["submit"]["correct"] and on_ray["submit"]["compiled"] and here["correct"]
    assert on_ray["profile"]["result"]["speedup_eager"] > 0
    assert pool.stats().done >= 4


def test_changed_fixed_files_are_caught_and_restored_through_ray(pool: RayPool, fast_config: EvalConfig) -> None:
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config, evaluator="ray", cache_dir=str(pool_cache(pool)))
    try:
        write_solution(env)
        model = env.unwrapped.workspace.path / "model.py"
        model.chmod(0o644)
        model.write_text("class Model: pass\n")
        _, _, _, _, info = env.step(tool_call("compile"))
        assert info["status"] == "integrity" and "model.py" in info["result"]["message"]
        assert "def get_inputs" in model.read_text()  # restored here, where the agent's files are
    finally:
        env.close()


def pool_cache(pool: RayPool) -> str:
    return str(pool.workers.handles[0].spec.cache_dir)


def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray sees
    with pytest.raises(ImportError, match=r"pip install 'cudagym\[ray\]'") as caught:
        gym.make("CudaKernel-v0", backend="cpu", evaluator="ray")
    assert str(caught.value) == MISSING_RAY


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"evaluator": "remote"}, "evaluator must be"),
        ({"ray_address": "auto"}, "ray_address goes with"),
        ({"evaluator": "service"}, "needs service_socket"),
        ({"evaluator": "ray", "service_socket": "/tmp/x.sock"}, "service_socket goes with"),
        ({"ray_pool": "train"}, "ray_pool names a pool"),
        ({"evaluator": "ray", "ray_pool": ""}, "ray_pool names a pool"),
    ],
)
def test_evaluator_options_that_disagree_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CudaKernelEnv(backend="cpu", **options)
