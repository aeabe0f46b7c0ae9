"""``CudaKernelTAEnv``: the kernel tasks as a single-player TextArena game.

Importing this module registers, with TextArena (idempotently):

* ``CudaKernel-v0``: the game behind TextArena's ``LLMObservationWrapper`` (the observation is the whole
  transcript as one string, ``[GAME] ...`` / ``[Player] ...``), the form TextArena agents expect;
* ``CudaKernel-v0-raw``: no wrapper (``get_observation()`` gives TextArena's raw message tuples).

```python
import textarena as ta
import cudagym.envs.textarena_env  # registers CudaKernel-v0 with TextArena

env = ta.make("CudaKernel-v0", backend="cpu", max_turns=50)
env.reset(num_players=1, seed=0)
done = False
while not done:
    player_id, observation = env.get_observation()
    done, step_info = env.step(action=agent(observation))
rewards, game_info = env.close()  # rewards == {0: the episode's return (the tier after a submit)}
```

The game delegates to :class:`~cudagym.envs.CudaKernelEnv`: ``reset(num_players=1, seed)`` picks the task
from ``seed`` (or the fixed ``task_id``), the prompt is the environment's first observation, each
``step(action)`` is one tool call and what the tool said becomes a game message. ``step_info`` carries the
environment's info for the step and its ``reward``. TextArena has no per-step reward: when the episode ends
(after ``submit``, or when the turn budget is spent) the game's outcome is set with the episode's return,
the sum of the environment's rewards (with the default milestone reward: the tier after a submit, 0 after
truncation). ``close()`` returns TextArena's ``(rewards, game_info)`` and also releases the workspace and
evaluation processes; a later ``reset`` starts new ones.

A malformed tool call is an ordinary observation that says what was wrong (as in ``CudaKernel-v0``). With
``error_allowance=N`` it is a TextArena invalid move instead: after more than N in a row the game ends with
``invalid_move_reward``.

TextArena's ``LLMObservationWrapper`` keeps its transcript across resets: make (or deep-copy) one game per
episode, as TextArena and verifiers do.

Deep copies: the environment, workspace and processes are opened lazily at the first ``reset``, and a deep
copy is always a fresh, not yet reset game with the same settings (verifiers deep-copies a template game
for every rollout). ``reset`` does not pass the seed to TextArena's ``State``, which would reseed Python's
global ``random``; the task choice is seeded by the environment's own generator.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import textarena as ta
from textarena.envs.registration import ENV_REGISTRY, register_with_versions

from cudagym.envs.kernel_env import CudaKernelEnv
from cudagym.tasks import Task, TaskSet

TA_ENV_ID = "CudaKernel-v0"
ENTRY_POINT = "cudagym.envs.textarena_env:CudaKernelTAEnv"


class CudaKernelTAEnv(ta.Env):
    """The kernel tasks as a single-player TextArena game (see the module doc).

    Args:
        task_set: a registered task-set name, a TaskSet or a sequence of tasks.
        task_id: play this task at every reset instead of choosing one from the seed.
        error_allowance: None (malformed calls are ordinary observations) or the number of malformed calls
            in a row that TextArena forgives before the game ends.
        invalid_move_reward: the outcome when malformed calls end the game.
        **env_kwargs: passed to ``CudaKernelEnv`` (``backend``, ``max_turns``, ``reward``, ``eval_config``,
            task-set filters, ...).
    """

    def __init__(
        self,
        task_set: str | TaskSet | Sequence[Task] = "builtin",
        *,
        task_id: str | None = None,
        error_allowance: int | None = None,
        invalid_move_reward: float = -1.0,
        **env_kwargs: Any,
    ) -> None:
        super().__init__()
        self.task_set = task_set
        self.task_id = task_id
        self.error_allowance = error_allowance
        self.invalid_move_reward = invalid_move_reward
        self.env_kwargs = env_kwargs
        self.gym_env: CudaKernelEnv | None = None
        self.episode_return = 0.0

    def __deepcopy__(self, memo: dict[int, Any]) -> CudaKernelTAEnv:
        fresh = type(self)(
            copy.deepcopy(self.task_set, memo),
            task_id=self.task_id,
            error_allowance=self.error_allowance,
            invalid_move_reward=self.invalid_move_reward,
            **copy.deepcopy(self.env_kwargs, memo),
        )
        for name in ("env_id", "entry_point"):  # set by ta.make
            if name in self.__dict__:
                setattr(fresh, name, self.__dict__[name])
        return fresh

    def reset(self, num_players: int = 1, seed: int | None = None) -> None:
        if self.gym_env is None:
            self.gym_env = CudaKernelEnv(self.task_set, **self.env_kwargs)
        options = {"task_id": self.task_id} if self.task_id else None
        prompt, info = self.gym_env.reset(seed=seed, options=options)
        allowance = self.error_allowance if self.error_allowance is not None else 0
        self.state = ta.SinglePlayerState(
            num_players=num_players, max_turns=self.gym_env.max_turns, error_allowance=allowance
        )
        self.episode_return = 0.0
        game_state = {"prompt": prompt, "task_id": info["task_id"], "backend": info["backend"]}
        self.state.reset(game_state=game_state, player_prompt_function=_prompt)

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        if self.gym_env is None or self.gym_env.task is None:
            raise RuntimeError("call reset() before step()")
        if self.state.done:  # the outcome is set; a late action changes nothing
            return True, {"reason": "The game is over; call reset() to play again."}
        self.state.add_observation(
            message=action, observation_type=ta.ObservationType.PLAYER_ACTION, from_id=self.state.current_player_id
        )
        text, reward, terminated, truncated, info = self.gym_env.step(action)
        self.episode_return += float(reward)
        invalid = info.get("status") == "invalid_call" and not info.get("tool")
        if invalid and self.error_allowance is not None and not (terminated or truncated):
            self.state.set_invalid_move(reason=text, reward=self.invalid_move_reward)
        else:
            self.state.add_observation(message=text, observation_type=ta.ObservationType.GAME_MESSAGE)
        self.state.step_info.update(info)
        self.state.step_info["reward"] = float(reward)
        if terminated or truncated:
            if "tier" in info:
                reason = f"Submitted: tier {info['tier']}, return {self.episode_return:g}."
            else:
                reason = f"The turn budget is spent; return {self.episode_return:g}."
            self.state.set_outcome(reward=self.episode_return, reason=reason)
        return self.state.step()

    def close(self) -> tuple[dict[int, float] | None, dict[int, dict[str, Any]]]:
        outcome = self.state.close() if getattr(self, "state", None) is not None else (None, {})
        if self.gym_env is not None:
            self.gym_env.close()
            self.gym_env = None
        return outcome


def _prompt(player_id: int, game_state: dict[str, Any]) -> str:
    return str(game_state["prompt"])


def register_textarena() -> None:
    """Registers ``CudaKernel-v0`` and ``CudaKernel-v0-raw`` with TextArena (idempotent)."""
    if TA_ENV_ID not in ENV_REGISTRY:
        register_with_versions(
            id=TA_ENV_ID, entry_point=ENTRY_POINT, wrappers={"default": [ta.wrappers.LLMObservationWrapper]}
        )


register_textarena()

__all__ = ["TA_ENV_ID", "CudaKernelTAEnv", "register_textarena"]
