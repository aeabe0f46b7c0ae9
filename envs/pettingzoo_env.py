"""``CudaKernelGroupEnv``: k agents solve the same task, each in its own workspace (PettingZoo ``ParallelEnv``).

This is the shape of a GRPO-style group rollout: one task, k independent attempts, rewards compared within
the group. Each agent ``coder_<i>`` drives its own :class:`~cudagym.envs.CudaKernelEnv` (own workspace,
own evaluation processes); ``reset`` puts all of them on the same task (chosen from the seed, or
``options={"task_id": ...}``).

* observation (per agent): ``{"text": <what its tool said>, "turn": <its turns so far>}``. A ``Dict``
  without an ``"observation"`` key, so that PettingZoo's AEC ``api_test`` accepts the Text inside.
* action (per agent): one tool call as text, exactly as for ``CudaKernel-v0``.
* rewards, terminations, truncations, infos: those of each agent's own environment.

Without ``group_reward`` agents finish independently and leave ``agents`` when their episode ends (after
``submit``, or when their turn budget is spent), as PettingZoo expects.

With ``group_reward`` (e.g. :class:`cudagym.wrappers.GroupRelativeReward`) the rewards are compared when
*all* agents are done: an agent whose episode has ended waits (``info["waiting"]`` is True, its actions
are ignored, its per-step reward is 0 and the raw one is in ``info["raw_reward"]``) until the last agent
is done; at that step every agent gets ``group_reward(returns)[agent]`` (its return, the sum of its raw
rewards, made group-relative) and its own termination or truncation. The sum of an agent's rewards over
the episode is then its group-relative reward; ``info["episode_return"]``, ``info["group_mean"]`` and
``info["group_std"]`` hold the raw figures.

Turn-based (AEC) form: ``cudagym.envs.pettingzoo_env.env(...)`` is
``pettingzoo.utils.parallel_to_aec(CudaKernelGroupEnv(...))``: agents act one after the other and their
actions are applied together once every live agent has acted.

Agents are stepped one after the other in the calling thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import parallel_to_aec

from cudagym.envs.kernel_env import CudaKernelEnv
from cudagym.tasks import Task, TaskSet
from cudagym.tasks import load as load_tasks
from cudagym.wrappers.group import GroupRelativeReward

GroupReward = Callable[[Mapping[str, float]], Mapping[str, float]]
WAITING = "Your episode has ended; the group has not. Your actions are ignored until every agent is done."


class CudaKernelGroupEnv(ParallelEnv):
    """k agents, one task, separate workspaces (see the module doc).

    Args:
        group_size: the number of agents (``coder_0`` ... ``coder_<k-1>``).
        task_set: a registered task-set name, a TaskSet or a sequence of tasks (loaded once, shared).
        group_reward: None (each agent's own rewards) or a function from the group's returns to the rewards
            given when all agents are done, such as ``GroupRelativeReward(normalize=True)``.
        render_mode: None or "ansi" (``render()`` returns every agent's transcript).
        task_options: options of the task-set loader when ``task_set`` is a name (``level=``, ``ids=``, ...).
        **env_kwargs: passed to every agent's ``CudaKernelEnv`` (``backend``, ``max_turns``, ``reward``,
            ``eval_config``, ``max_obs_chars``, ...).
    """

    metadata = {"name": "cudagym_group_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        group_size: int = 4,
        task_set: str | TaskSet | Sequence[Task] = "builtin",
        *,
        group_reward: GroupReward | None = None,
        render_mode: str | None = None,
        task_options: Mapping[str, Any] | None = None,
        **env_kwargs: Any,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if isinstance(task_set, str):
            task_set = load_tasks(task_set, **dict(task_options or {}))
        elif not isinstance(task_set, TaskSet):
            task_set = TaskSet("custom", task_set)
        self.tasks = task_set
        self.group_reward = group_reward
        self.render_mode = render_mode
        self.possible_agents = [f"coder_{i}" for i in range(group_size)]
        self.agents: list[str] = []
        self.envs: dict[str, CudaKernelEnv] = {
            agent: CudaKernelEnv(task_set, render_mode=render_mode, **env_kwargs) for agent in self.possible_agents
        }
        first = self.envs[self.possible_agents[0]]
        self.max_turns = first.max_turns
        text = first.observation_space
        self._observation_space = spaces.Dict({"text": text, "turn": spaces.Discrete(self.max_turns + 1)})
        self._action_space = first.action_space
        self._observation_spaces = {a: self._observation_space for a in self.possible_agents}
        self._action_spaces = {a: self._action_space for a in self.possible_agents}
        self._np_random, _ = seeding.np_random()
        self.task: Task | None = None
        self._returns: dict[str, float] = {}
        self._ended: dict[str, tuple[bool, bool]] = {}
        self._turns: dict[str, int] = {}
        self._last_text: dict[str, str] = {}

    # -- spaces --------------------------------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent]

    # -- API -----------------------------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        options = options or {}
        if "task_id" in options:
            task = self.tasks.get(options["task_id"])
        else:
            task = self.tasks[int(self._np_random.integers(len(self.tasks)))]
        self.task = task
        self.agents = list(self.possible_agents)
        self._returns = dict.fromkeys(self.agents, 0.0)
        self._ended = {}
        self._turns = dict.fromkeys(self.agents, 0)
        observations, infos = {}, {}
        for i, agent in enumerate(self.agents):
            agent_seed = None if seed is None else seed + i
            text, info = self.envs[agent].reset(seed=agent_seed, options={"task_id": task.id})
            self._last_text[agent] = text
            observations[agent] = self._observation(agent, text)
            infos[agent] = dict(info, agent=agent)
        return observations, infos

    def step(
        self, actions: Mapping[str, Any]
    ) -> tuple[
        dict[str, dict[str, Any]],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        live = list(self.agents)
        missing = [a for a in live if a not in self._ended and a not in actions]
        if missing:
            raise ValueError(f"no action for live agent(s) {missing}")
        observations: dict[str, dict[str, Any]] = {}
        rewards: dict[str, float] = {}
        terminations: dict[str, bool] = {}
        truncations: dict[str, bool] = {}
        infos: dict[str, dict[str, Any]] = {}
        for agent in live:
            if agent in self._ended:  # waiting for the group (group_reward only)
                observations[agent] = self._observation(agent, WAITING)
                rewards[agent] = 0.0
                terminations[agent] = truncations[agent] = False
                infos[agent] = {"agent": agent, "waiting": True, "raw_reward": 0.0}
                continue
            text, reward, terminated, truncated, info = self.envs[agent].step(actions[agent])
            self._returns[agent] += float(reward)
            self._turns[agent] = int(info.get("turn", self._turns[agent]))
            self._last_text[agent] = text
            observations[agent] = self._observation(agent, text)
            infos[agent] = dict(info, agent=agent)
            if self.group_reward is None:
                rewards[agent] = float(reward)
                terminations[agent], truncations[agent] = bool(terminated), bool(truncated)
            else:
                rewards[agent] = 0.0
                infos[agent].update(waiting=bool(terminated or truncated), raw_reward=float(reward))
                terminations[agent] = truncations[agent] = False
                if terminated or truncated:
                    self._ended[agent] = (bool(terminated), bool(truncated))
        if self.group_reward is not None and len(self._ended) == len(self.possible_agents):
            shaped = self.group_reward(dict(self._returns))
            mean, std = GroupRelativeReward.stats(self._returns)
            for agent in live:
                rewards[agent] = float(shaped[agent])
                terminations[agent], truncations[agent] = self._ended[agent]
                infos[agent].update(
                    waiting=False,
                    episode_return=self._returns[agent],
                    group_reward=float(shaped[agent]),
                    group_mean=mean,
                    group_std=std,
                )
        elif self.group_reward is None:
            for agent in live:
                if terminations[agent] or truncations[agent]:
                    infos[agent]["episode_return"] = self._returns[agent]
        self.agents = [a for a in live if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        parts = []
        for agent in self.possible_agents:
            parts.append(f"##### {agent} #####\n{self.envs[agent].render() or ''}")
        return "\n".join(parts)

    def close(self) -> None:
        for env in self.envs.values():
            env.close()

    # -- helpers -------------------------------------------------------------------------------------

    def _observation(self, agent: str, text: str) -> dict[str, Any]:
        return {"text": text, "turn": np.int64(min(self._turns.get(agent, 0), self.max_turns))}


def parallel_env(**kwargs: Any) -> CudaKernelGroupEnv:
    """The parallel form (PettingZoo's module-level convention): ``CudaKernelGroupEnv(**kwargs)``."""
    return CudaKernelGroupEnv(**kwargs)


def env(**kwargs: Any) -> AECEnv:
    """The turn-based form: ``parallel_to_aec(CudaKernelGroupEnv(**kwargs))`` (see the module doc)."""
    return parallel_to_aec(CudaKernelGroupEnv(**kwargs))


__all__ = ["WAITING", "CudaKernelGroupEnv", "GroupReward", "env", "parallel_env"]
