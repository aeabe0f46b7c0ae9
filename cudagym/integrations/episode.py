"""One CudaKernel-v0 episode driven by named tool calls: what the trainer plugs share.

Trainer frameworks call a tool by its name with keyword arguments (TRL's environment methods, verifiers' MCP
toolset) and score the episode once it is over. :class:`ToolEpisode` turns each such call into one ``step`` of a
``CudaKernelEnv`` and keeps the episode's :class:`EpisodeAccount`: the return (the sum of the step rewards), each
reward term summed over the steps, whether the episode ended and the final evaluation's outcome. A submit the
harness could not evaluate is kept as ``harness_error``, never as a reward of 0: the plugs report it so that the
sample can be dropped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from cudagym.envs import CudaKernelEnv

logger = logging.getLogger(__name__)


class EpisodeAccount(BaseModel):
    """What a trainer reads off an episode.

    Attributes:
        task_id: the task the episode plays.
        turns: tool calls made so far.
        episode_return: the sum of the environment's rewards (with the milestone reward: the tier after a submit).
        reward_terms: each named term of the reward shaper, summed over the steps (``{"tier": 3.0}``).
        ended: the episode is over (submitted, or the turn budget ran out).
        submitted: a submit was evaluated.
        tier, compiled, correct, speedup_eager, speedup_compile, timing_fair: the submit's outcome (None before it;
            a speedup stays None where it was not measured).
        harness_error: why the harness could not evaluate the submit (the episode has no honest reward), else None.
    """

    task_id: str
    turns: int = 0
    episode_return: float = 0.0
    reward_terms: dict[str, float] = Field(default_factory=dict)
    ended: bool = False
    submitted: bool = False
    tier: int | None = None
    compiled: bool | None = None
    correct: bool | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    timing_fair: bool | None = None
    harness_error: str | None = None

    def metrics(self) -> dict[str, float]:
        """The account as numbers to log: the outcome, and each reward term as ``reward_<term>``."""
        values: dict[str, float] = {"turns": float(self.turns), "submitted": float(self.submitted)}
        outcome = {
            "compiled": self.compiled,
            "correct": self.correct,
            "tier": self.tier,
            "speedup_eager": self.speedup_eager,
            "speedup_compile": self.speedup_compile,
        }
        values.update({name: float(value) for name, value in outcome.items() if value is not None})
        values.update({f"reward_{name}": value for name, value in self.reward_terms.items()})
        return values


class ToolEpisode:
    """A ``CudaKernelEnv`` played one named tool call at a time, with its :class:`EpisodeAccount`.

    Args:
        **env_kwargs: passed to ``CudaKernelEnv`` (``task_set``, ``backend``, ``max_turns``, ``reward``,
            ``eval_config``, ``service_socket``, task-set options...). The environment is created at the first
            :meth:`reset` and kept for the episodes after it.
    """

    def __init__(self, **env_kwargs: Any) -> None:
        self._env_kwargs = env_kwargs
        self.env: CudaKernelEnv | None = None
        self.account: EpisodeAccount | None = None

    def reset(self, task_id: str | None = None, seed: int | None = None) -> str:
        """Starts an episode on ``task_id`` (else the task ``seed`` picks); returns the first observation."""
        if self.env is None:
            self.env = CudaKernelEnv(**self._env_kwargs)
        options = {"task_id": task_id} if task_id else None
        observation, info = self.env.reset(seed=seed, options=options)
        self.account = EpisodeAccount(task_id=info["task_id"])
        return observation

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Runs the tool ``name`` with ``arguments`` as one step; returns what the tool said.

        A malformed call (an unknown tool, a missing or extra argument) is answered by the environment with an
        observation that says what was wrong, like any other step. After the episode ended, a call is answered
        that it has ended and changes nothing.

        Raises:
            RuntimeError: no episode was started (call :meth:`reset` first).
        """
        if self.env is None or self.account is None:
            raise RuntimeError("call reset() before the tools")
        action = json.dumps({"name": name, "arguments": dict(arguments)})
        observation, reward, terminated, truncated, info = self.env.step(action)
        if not self.account.ended:
            self._record(float(reward), bool(terminated or truncated), info)
        return observation

    def close(self) -> None:
        """Removes the workspace and stops the environment's processes (idempotent)."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def _record(self, reward: float, ended: bool, info: Mapping[str, Any]) -> None:
        account = self.account
        assert account is not None
        account.turns += 1
        account.episode_return += reward
        for name, value in info.get("reward_terms", {}).items():
            account.reward_terms[name] = account.reward_terms.get(name, 0.0) + float(value)
        account.ended = ended
        if info.get("harness_error"):
            account.harness_error = str(info["harness_error"])
            logger.warning("%s: the harness could not evaluate the submit: %s", account.task_id, account.harness_error)
        if "tier" in info:
            account.submitted = True
            account.tier = int(info["tier"])
            account.compiled = bool(info["compiled"])
            account.correct = bool(info["correct"])
            account.speedup_eager = info["speedup_eager"]
            account.speedup_compile = info["speedup_compile"]
            account.timing_fair = bool(info["timing_fair"])
