"""The scripted agent: plays a task's reference solution through tool-call text.

It writes each file of ``task.solutions[backend]`` with ``write_file``, then calls ``compile``,
``verify``, ``profile`` and ``submit``. It checks a setup end to end (every tool, the evaluator, the
reward) and reproduces each reference solution's tier.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym

from cudagym.tasks.task import Task


def tool_call(name: str, **arguments: Any) -> str:
    """A tool call in the tagged text form an LLM would write."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def solution_files(task: Task, backend: str) -> dict[str, str]:
    """The reference solution's files by workspace path; KeyError when the task has none for ``backend``."""
    if backend not in task.solutions:
        raise KeyError(f"task {task.id} has no reference solution for the {backend} backend")
    root = Path(task.solutions[backend])
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[str(path.relative_to(root))] = path.read_text()
    return files


def code_edit(tag: str) -> str:
    """A line to append to a kernel source that changes its code but not what it computes (``tag``: letters,
    digits and underscores). Benchmarks edit kernels between cycles with it: a comment would not do, since
    ccache serves an edit that leaves the preprocessed source unchanged, and an agent's real edit never does."""
    return f"\nstatic const int cudagym_edit_{tag} = 1;\n"


class ScriptedAgent:
    """Yields the actions of one episode for ``task`` on ``backend`` (see the module doc)."""

    def __init__(self, *, profile: bool = True, verify: bool = True) -> None:
        self.profile = profile
        self.verify = verify

    def actions(self, task: Task, backend: str) -> Iterator[str]:
        yield tool_call("read_file", path="model.py")
        for path, content in solution_files(task, backend).items():
            yield tool_call("write_file", path=path, content=content)
        yield tool_call("compile")
        if self.verify:
            yield tool_call("verify")
        if self.profile:
            yield tool_call("profile")
        yield tool_call("submit")


@dataclasses.dataclass
class EpisodeLog:
    """What one played episode did: per-step rewards and the final info."""

    task_id: str
    rewards: list[float]
    final_info: dict[str, Any]
    terminated: bool
    truncated: bool

    @property
    def total_reward(self) -> float:
        return sum(self.rewards)


def play(
    env: gym.Env, agent: ScriptedAgent, *, task_id: str | None = None, seed: int | None = None, echo: Any = None
) -> EpisodeLog:
    """Runs one episode; ``echo(text)`` receives each observation and action as it happens."""
    options = {"task_id": task_id} if task_id else None
    obs, info = env.reset(seed=seed, options=options)
    base = env.unwrapped
    if echo:
        echo(obs)
    rewards: list[float] = []
    terminated = truncated = False
    for action in agent.actions(base.task, base.backend.name):
        if echo:
            echo(f">>> {action if len(action) < 400 else action[:400] + ' ...'}")
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        if echo:
            echo(f"{obs}\n(reward {reward:g})")
        if terminated or truncated:
            break
    return EpisodeLog(base.task.id, rewards, info, terminated, truncated)
