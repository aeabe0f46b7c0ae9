"""The agent protocol shared by the bundled agents, the scripted agent behind it, and agents by name.

An :class:`Agent` plays one episode at a time through text:

1. ``reset(task, backend, observation)`` starts an episode: ``observation`` is what ``env.reset`` returned
   (the instructions followed by the reference ``model.py``);
2. ``act(observation)`` is called once per turn with the latest observation (at the first turn the reset
   observation again, afterwards what the previous action produced) and returns the next action text
   (one tool call), or ``None`` when the agent stops on its own (its script is finished, its token
   budget is spent, its API failed).

An agent may also have ``episode_stats() -> Mapping[str, Any]`` with what it knows about the episode it
is playing: ``"tokens"`` (tokens used), ``"stop_reason"`` (why ``act`` returned ``None``) and ``"error"``
(the agent itself failed, e.g. its API was unreachable: the evaluation runner then records the episode
as an error, which ``--resume`` plays again), and ``close()`` to release what it holds. The evaluation
runner (:mod:`cudagym.evaluation`) calls both when present.

Agents by name (:func:`make_agent`): ``scripted`` (:class:`ScriptedPlayer`), ``random``
(:class:`cudagym.baselines.random_agent.RandomAgent`) and ``llm``
(:class:`cudagym.baselines.llm_agent.LLMAgent`); :func:`register_agent` adds more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from cudagym.baselines.scripted import ScriptedAgent, tool_call
from cudagym.tasks.task import Task

TASK_HEADING = "\n## model.py\n"
"""Where the first observation's task part (the reference source) starts (see ``cudagym.instructions``)."""


@runtime_checkable
class Agent(Protocol):
    """Plays episodes through text tool calls (see the module doc).

    Attributes:
        name: a short name recorded with every result (``"scripted"``, ``"random"``, ``"llm"``, ...).
    """

    name: str

    def reset(self, task: Task, backend: str, observation: str) -> None:
        """Starts an episode on ``task`` with the ``backend`` name ("cpu", "cuda"); ``observation`` is the
        environment's first observation."""
        ...

    def act(self, observation: str) -> str | None:
        """The next action text for the latest ``observation``, or None when the agent stops."""
        ...


def split_first_observation(observation: str) -> tuple[str, str]:
    """Splits a first observation into (instructions, task): the task part is the reference ``model.py``.

    The environment's first observation is the instructions followed by ``## model.py`` and the source
    (``cudagym.instructions.first_observation``). Without that heading the whole text is the task and the
    instructions are empty.
    """
    head, sep, tail = observation.partition(TASK_HEADING)
    if not sep:
        return "", observation
    return head.rstrip("\n"), TASK_HEADING.lstrip("\n") + tail


class ScriptedPlayer:
    """The :class:`~cudagym.baselines.scripted.ScriptedAgent` as an :class:`Agent`: plays the task's reference
    solution for the backend.

    Args:
        profile: call ``profile`` before ``submit`` (the full sequence of ``cudagym run``).
        checks: call ``compile`` and ``verify`` (and ``profile`` when asked) before ``submit``; without them
            the player writes the solution's files and submits at once (``submit`` compiles, verifies and
            profiles anyway, so the tier is the same and the episode is shorter).
    """

    name = "scripted"

    def __init__(self, *, profile: bool = True, checks: bool = True) -> None:
        self.profile = profile
        self.checks = checks
        self._actions: Iterator[str] = iter(())
        self._stop_reason = ""

    def reset(self, task: Task, backend: str, observation: str) -> None:
        self._stop_reason = ""
        if backend not in task.solutions:
            self._actions = iter(())
            self._stop_reason = f"task {task.id} has no reference solution for the {backend} backend"
            return
        actions = ScriptedAgent(profile=self.profile and self.checks).actions(task, backend)
        if not self.checks:
            skipped = {tool_call("compile"), tool_call("verify"), tool_call("profile")}
            actions = (a for a in actions if a not in skipped)
        self._actions = iter(actions)

    def act(self, observation: str) -> str | None:
        action = next(self._actions, None)
        if action is None and not self._stop_reason:
            self._stop_reason = "the script is finished"
        return action

    def episode_stats(self) -> Mapping[str, Any]:
        """``stop_reason`` when the script ended (or never started) without a submit."""
        return {"stop_reason": self._stop_reason} if self._stop_reason else {}


AgentFactory = Callable[..., Agent]


def _scripted(**options: Any) -> Agent:
    return ScriptedPlayer(**options)


def _random(**options: Any) -> Agent:
    from cudagym.baselines.random_agent import RandomAgent

    return RandomAgent(**options)


def _llm(**options: Any) -> Agent:
    from cudagym.baselines.llm_agent import LLMAgent, LLMConfig

    return LLMAgent(LLMConfig(**options))


_AGENTS: dict[str, AgentFactory] = {"scripted": _scripted, "random": _random, "llm": _llm}


def register_agent(name: str, factory: AgentFactory, *, overwrite: bool = False) -> None:
    """Adds an agent by name: ``factory(**options)`` returns a fresh :class:`Agent`."""
    if name in _AGENTS and not overwrite:
        raise ValueError(f"an agent named {name!r} is already registered (pass overwrite=True to replace it)")
    _AGENTS[name] = factory


def agent_names() -> list[str]:
    """The registered agent names."""
    return sorted(_AGENTS)


def make_agent(name: str, **options: Any) -> Agent:
    """A fresh agent by name with its options (e.g. ``make_agent("llm", model="gpt-4o")``).

    Raises:
        KeyError: no agent of that name is registered.
    """
    try:
        factory = _AGENTS[name]
    except KeyError:
        raise KeyError(f"no agent named {name!r}; registered: {', '.join(agent_names())}") from None
    return factory(**options)
