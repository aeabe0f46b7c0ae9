"""CudaKernelGroupEnv: PettingZoo's API and seed tests (parallel and AEC), one task for the whole group in
separate workspaces, waiting agents under a group reward, and one real group with a group-relative reward."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pytest
from cudagym_testing import RELU, relu_solution

pettingzoo = pytest.importorskip("pettingzoo")

from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test  # noqa: E402

from cudagym.baselines import tool_call  # noqa: E402
from cudagym.envs import CudaKernelGroupEnv  # noqa: E402
from cudagym.envs.pettingzoo_env import WAITING, env, parallel_env  # noqa: E402
from cudagym.evaluator import EvalConfig  # noqa: E402
from cudagym.wrappers import GroupRelativeReward  # noqa: E402

LIST = tool_call("list_files")


@pytest.fixture
def group(fast_config: EvalConfig) -> Iterator[CudaKernelGroupEnv]:
    environment = CudaKernelGroupEnv(2, backend="cpu", eval_config=fast_config, max_turns=3)
    yield environment
    environment.close()


@pytest.mark.parametrize("group_reward", [None, GroupRelativeReward()], ids=["own", "group"])
def test_parallel_api_test(fast_config: EvalConfig, group_reward: GroupRelativeReward | None) -> None:
    environment = CudaKernelGroupEnv(3, backend="cpu", eval_config=fast_config, max_turns=4, group_reward=group_reward)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PettingZoo reports key-set problems as warnings
        parallel_api_test(environment, num_cycles=20)
    environment.close()


@pytest.mark.parametrize("group_reward", [None, GroupRelativeReward(normalize=True)], ids=["own", "group"])
def test_seed_tests(fast_config: EvalConfig, group_reward: GroupRelativeReward | None) -> None:
    def make() -> CudaKernelGroupEnv:
        return parallel_env(
            group_size=2, backend="cpu", eval_config=fast_config, max_turns=4, group_reward=group_reward
        )

    parallel_seed_test(make)
    seed_test(lambda: env(group_size=2, backend="cpu", eval_config=fast_config, max_turns=4), num_cycles=10)


# Text inside a Dict is legal but not what api_test expects of a numeric env; it says so in these warnings.
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array", "ignore:.*probably should be gymnasium")
def test_api_test_on_the_aec_form(fast_config: EvalConfig) -> None:
    aec = env(group_size=2, backend="cpu", eval_config=fast_config, max_turns=3, group_reward=GroupRelativeReward())
    api_test(aec, num_cycles=10)
    aec.close()


def test_the_group_shares_the_task_not_the_workspace(group: CudaKernelGroupEnv) -> None:
    observations, infos = group.reset(seed=7)
    assert group.agents == ["coder_0", "coder_1"]
    task = infos["coder_0"]["task_id"]
    assert infos["coder_1"]["task_id"] == task == group.task.id
    assert observations["coder_0"]["text"] == observations["coder_1"]["text"]
    assert observations["coder_0"]["turn"] == 0
    assert all(group.observation_space(a).contains(observations[a]) for a in group.agents)
    assert "observation" not in group.observation_space("coder_0").spaces
    again, _ = group.reset(seed=7)
    assert again["coder_0"]["text"] == observations["coder_0"]["text"]

    write = tool_call("write_file", path="kernels/mine.cpp", content="// coder_0's kernel\n")
    observations, rewards, *_, infos = group.step({"coder_0": write, "coder_1": LIST})
    assert infos["coder_0"]["status"] == "ok" and "mine.cpp" not in observations["coder_1"]["text"]
    assert observations["coder_1"]["turn"] == 1 and rewards == {"coder_0": 0.0, "coder_1": 0.0}
    paths = {a: group.envs[a].workspace.path for a in group.agents}
    assert paths["coder_0"] != paths["coder_1"]
    assert (paths["coder_0"] / "kernels/mine.cpp").exists() and not (paths["coder_1"] / "kernels/mine.cpp").exists()

    _, infos = group.reset(options={"task_id": RELU})
    assert {i["task_id"] for i in infos.values()} == {RELU}
    with pytest.raises(ValueError, match="no action for live agent"):
        group.step({"coder_0": LIST})


def test_without_group_reward_agents_leave_when_done(group: CudaKernelGroupEnv) -> None:
    group.reset(options={"task_id": RELU})
    _, rewards, terminations, _, infos = group.step({"coder_0": tool_call("submit"), "coder_1": LIST})
    assert terminations == {"coder_0": True, "coder_1": False} and rewards["coder_0"] == -1
    assert group.agents == ["coder_1"] and infos["coder_0"]["episode_return"] == -1
    group.step({"coder_1": LIST})
    _, rewards, _, truncations, _ = group.step({"coder_1": LIST})
    assert truncations == {"coder_1": True} and rewards == {"coder_1": 0.0} and group.agents == []


def test_with_group_reward_finished_agents_wait_for_the_group(fast_config: EvalConfig) -> None:
    group = CudaKernelGroupEnv(
        2, backend="cpu", eval_config=fast_config, max_turns=3, group_reward=GroupRelativeReward(), render_mode="ansi"
    )
    group.reset(options={"task_id": RELU})
    observations, rewards, terminations, truncations, infos = group.step(
        {"coder_0": tool_call("submit"), "coder_1": LIST}
    )  # an empty workspace: nothing to compile, tier -1 at once
    assert rewards == {"coder_0": 0.0, "coder_1": 0.0} and not any(terminations.values())
    assert infos["coder_0"]["waiting"] and infos["coder_0"]["raw_reward"] == -1 and infos["coder_0"]["tier"] == -1
    assert group.agents == ["coder_0", "coder_1"]
    observations, rewards, *_, infos = group.step({"coder_0": "ignored", "coder_1": LIST})
    assert observations["coder_0"]["text"] == WAITING and infos["coder_0"]["waiting"] and rewards["coder_0"] == 0
    observations, rewards, terminations, truncations, infos = group.step({"coder_1": LIST})
    assert terminations == {"coder_0": True, "coder_1": False}
    assert truncations == {"coder_0": False, "coder_1": True}
    assert rewards == {"coder_0": -0.5, "coder_1": 0.5}  # returns -1 and 0, mean -0.5
    assert infos["coder_1"]["episode_return"] == 0 and infos["coder_1"]["group_mean"] == -0.5
    assert group.agents == []
    text = group.render()
    assert "##### coder_0 #####" in text and "##### coder_1 #####" in text
    group.close()


def test_a_real_group_gets_group_relative_rewards(fast_config: EvalConfig) -> None:
    """One real evaluation: coder_0 submits the reference solution, coder_1 submits nothing."""
    group = CudaKernelGroupEnv(
        2, backend="cpu", eval_config=fast_config, max_turns=10, group_reward=GroupRelativeReward(normalize=True)
    )
    group.reset(options={"task_id": RELU})
    files = list(relu_solution().items())
    for path, content in files:
        _, _, _, _, infos = group.step(
            {"coder_0": tool_call("write_file", path=path, content=content), "coder_1": LIST}
        )
        assert infos["coder_0"]["status"] == "ok"
    _, rewards, terminations, _, infos = group.step({"coder_0": tool_call("submit"), "coder_1": tool_call("submit")})
    assert terminations == {"coder_0": True, "coder_1": True} and group.agents == []
    assert infos["coder_0"]["tier"] >= 1 and infos["coder_1"]["tier"] == -1
    assert infos["coder_0"]["episode_return"] == infos["coder_0"]["tier"]
    assert rewards["coder_0"] == pytest.approx(1.0, abs=1e-5) and rewards["coder_1"] == pytest.approx(-1.0, abs=1e-5)
    reference = group.envs["coder_0"].evaluator._reference.child.proc.pid
    group.close()
    assert not os.path.exists(f"/proc/{reference}") or "zombie" in open(f"/proc/{reference}/status").read()
