"""CudaKernel-v0 as a SkyRL-gym text environment, registered as ``"cudagym"``.

Importing this module registers the environment with ``skyrl_gym`` (``pip install 'cudagym[skyrl]'``), so that
``skyrl_gym.make("cudagym", env_config=..., extras=...)`` builds one episode's environment, as SkyRL's generator
does for every trajectory (import the module where the generator runs, e.g. in SkyRL's entrypoint):

```python
import skyrl_gym
import cudagym.integrations.skyrl  # registers "cudagym"

env = skyrl_gym.make("cudagym", env_config={"backend": "cuda", "max_turns": 50}, extras={"task_id": "builtin/relu"})
prompt, info = env.init([{"role": "user", "content": "Make this model faster."}])
output = env.step(model_text)  # output["observations"], output["reward"], output["done"], output["metadata"]
```

* ``env_config``: ``CudaKernelEnv``'s arguments (``task_set``, ``backend``, ``max_turns``, ``reward``, task filters,
  ``eval_config`` as a nested mapping, ...: see ``cudagym.integrations.settings``).
* ``extras`` (the dataset row's other columns): ``task_id`` (also read from ``extra_info``) picks the task, else
  ``seed`` does; without either the environment's generator picks one.
* ``init(prompt)`` starts the episode and returns the prompt with the task (the instructions and the reference
  ``model.py``) appended to its last user message (a user message is added when the prompt does not end with one).
* ``step(text)``: the model's whole turn. The environment parses the one tool call in it as ``CudaKernel-v0`` does
  (a JSON object, ``<tool_call>`` tags, an OpenAI ``tool_calls`` entry; reasoning around the tags is fine) and
  answers with a ``user`` message; a turn without a well-formed call is answered with what was wrong. The reward is
  the environment's (with the default milestone reward: the tier at ``submit``, 0 before); ``done`` after a submit or
  when ``max_turns`` is spent, with no observation then (as SkyRL's environments do) and the last observation text
  in ``metadata["observation"]``. ``metadata`` is the environment's ``info``.
* ``get_metrics()``: the turns taken, whether the episode submitted, and the submit's tier, compile and correctness
  flags and speedups; SkyRL averages them over episodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from cudagym.envs.kernel_env import CudaKernelEnv
from cudagym.integrations.settings import env_kwargs, episode_metrics, task_id_from

SKYRL_ENV_ID = "cudagym"
ENTRY_POINT = "cudagym.integrations.skyrl:CudaKernelTextEnv"


class CudaKernelTextEnv(BaseTextEnv):
    """One CudaKernel-v0 episode as a SkyRL-gym ``BaseTextEnv`` (see the module doc).

    Args:
        env_config: ``CudaKernelEnv``'s arguments (a mapping; SkyRL passes an OmegaConf ``DictConfig``).
        extras: the dataset row's other columns; ``task_id`` or ``seed`` pick the task.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._env = CudaKernelEnv(**env_kwargs(env_config))
        self.max_turns = self._env.max_turns
        extras = extras or {}
        self.task_id = task_id_from(extras)
        self.seed = None if extras.get("seed") is None else int(extras["seed"])
        self._last_info: dict[str, Any] = {}
        self.episode_return = 0.0

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Starts the episode: ``prompt`` with the task appended (see the module doc), and the reset's info."""
        options = {"task_id": self.task_id} if self.task_id else None
        observation, info = self._env.reset(seed=self.seed, options=options)
        self.turns = 0
        self.episode_return = 0.0
        self._last_info = info
        return with_task(prompt, observation), info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn: the tool call written in ``action`` is run (see the module doc)."""
        self.turns += 1
        observation, reward, terminated, truncated, info = self._env.step(action)
        self.episode_return += reward
        self._last_info = info
        done = terminated or truncated
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": observation}],
            reward=reward,
            done=done,
            metadata={**info, "observation": observation},
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        return episode_metrics(self._last_info, self.turns)

    def close(self) -> None:
        self._env.close()


def with_task(prompt: Sequence[Mapping[str, Any]], task_text: str) -> ConversationType:
    """``prompt`` (chat messages, left as they are) with ``task_text`` appended to its last message when that is the
    user's, else as a new user message."""
    messages = [dict(message) for message in prompt]
    if messages and messages[-1].get("role") == "user":
        head = str(messages[-1].get("content") or "")
        messages[-1]["content"] = f"{head}\n\n{task_text}" if head else task_text
    else:
        messages.append({"role": "user", "content": task_text})
    return messages


def register_skyrl() -> None:
    """Registers ``"cudagym"`` with ``skyrl_gym`` (idempotent)."""
    if SKYRL_ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(id=SKYRL_ENV_ID, entry_point=ENTRY_POINT)


register_skyrl()

__all__ = ["ENTRY_POINT", "SKYRL_ENV_ID", "CudaKernelTextEnv", "register_skyrl", "with_task"]
