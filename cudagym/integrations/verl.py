"""cudagym's eight tools as verl tools, the tool config verl reads, dataset rows and the reward function.

verl (``pip install 'cudagym[verl]'``) runs multi-turn rollouts in its ``tool_agent`` loop: the model's tool calls are
parsed by verl (``multi_turn.format``, e.g. ``hermes``) and each is run by the ``BaseTool`` declared for that name in
the tool config. ``CudaKernelTool`` is that class for all eight tools (``write_file`` ... ``submit``); the eight
instances share one ``CudaKernelEnv`` episode per trajectory, so the files one tool writes are the files the next one
compiles. Three pieces go into a verl run:

```python
from cudagym.integrations.verl import make_rows, write_tool_config
import datasets

write_tool_config("cudagym_tools.yaml", backend="cuda", max_turns=50)   # the same env options for both
datasets.Dataset.from_list(make_rows("builtin", backend="cuda", max_turns=50)).to_parquet("train.parquet")
# then verl's trainer with:
#   data.train_files=train.parquet data.return_raw_chat=True
#   actor_rollout_ref.rollout.multi_turn.enable=True actor_rollout_ref.rollout.multi_turn.format=hermes
#   actor_rollout_ref.rollout.multi_turn.tool_config_path=cudagym_tools.yaml
#   reward.custom_reward_function.path=<this file> reward.custom_reward_function.name=compute_score
```

* **Tool config** (``tool_config``/``write_tool_config``): one entry per tool, ``class_name`` this module's
  ``CudaKernelTool``, ``config: {type: native, env: {...}}`` (``CudaKernelEnv``'s options as plain values;
  ``eval_config`` as a nested mapping, see ``cudagym.integrations.settings``) and the tool's OpenAI function schema.
* **Rows** (``make_rows``): one per task, ``prompt`` the environment's first observation (the instructions and the
  reference ``model.py``), ``agent_name`` ``tool_agent``, ``reward_model.ground_truth`` the task id and
  ``extra_info.tools_kwargs`` naming the task for every tool (``create_kwargs: {task_id: ...}``).
* **Episodes**: verl's loop calls ``create``, ``execute`` and ``release`` around every single call and passes its
  trajectory's ``agent_data``; the episode is keyed by that ``agent_data`` object, opened at the trajectory's first call
  on the task its ``create_kwargs`` name, closed when it ends (a submit, or the turn budget) and otherwise when verl
  drops the trajectory's ``agent_data``. Called without ``agent_data`` (the ``BaseTool`` lifecycle itself: ``create``,
  ``execute``..., ``calc_reward``, ``release``), the episode is keyed by the instance id: give every tool of one
  trajectory the same ``instance_id``; ``release`` ends the episode. A call after the end is answered so, reward 0.
* **Rewards**: each call's reward is the environment's (with the default milestone reward: the tier at ``submit``,
  0 before); verl keeps them in the trajectory's ``tool_rewards``, and ``compute_score`` (verl's custom reward
  function) returns their sum, the episode's return. ``calc_reward`` returns the same for an instance.
* **Tool responses** are the environment's observations; verl cuts them to ``max_tool_response_length``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from cudagym.envs.kernel_env import CudaKernelEnv
from cudagym.integrations.settings import env_kwargs, episode_metrics
from cudagym.tools import TOOLS_BY_NAME, tool_schemas

logger = logging.getLogger(__name__)

TOOL_CLASS = "cudagym.integrations.verl.CudaKernelTool"
AGENT_NAME = "tool_agent"
DATA_SOURCE = "cudagym"
ENDED = "The episode has ended; no more tool calls are run. Its return was {episode_return:g}."


@dataclasses.dataclass
class Episode:
    """One trajectory's environment and what it has earned. ``env`` is None before the first call and after the end."""

    key: str
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    env: CudaKernelEnv | None = None
    turns: int = 0
    episode_return: float = 0.0
    last_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    ended: bool = False

    def step(
        self, config: Mapping[str, Any], options: Mapping[str, Any], call: dict[str, Any]
    ) -> tuple[str, float, dict[str, Any]]:
        """Runs one tool call (opening the episode at the first): the observation, the reward and the episode's
        figures with the call's status."""
        with self.lock:
            if self.ended:
                return ENDED.format(episode_return=self.episode_return), 0.0, self.metrics("ended")
            if self.env is None:
                self.env = _open(config, options)
                logger.debug("cudagym episode %s opened on %s", self.key, self.env.task.id if self.env.task else None)
            observation, reward, terminated, truncated, info = self.env.step(call)
            self.turns += 1
            self.episode_return += reward
            self.last_info = info
            if terminated or truncated:
                self.close()
            return observation, reward, self.metrics(str(info.get("status", "")))

    def metrics(self, status: str) -> dict[str, Any]:
        return {**episode_metrics(self.last_info, self.turns), "status": status, "episode_return": self.episode_return}

    def close(self) -> None:
        """Ends the episode: its workspace and processes go, its figures stay."""
        self.ended = True
        if self.env is not None:
            self.env.close()
            self.env = None
            logger.debug("cudagym episode %s ended: %d calls, return %g", self.key, self.turns, self.episode_return)


def _open(config: Mapping[str, Any], options: Mapping[str, Any]) -> CudaKernelEnv:
    """A new environment reset on the task ``options`` names (a trajectory plays the task its prompt shows)."""
    task_id = options.get("task_id")
    if not task_id:
        raise ValueError(
            "a cudagym episode needs its task: give create_kwargs={'task_id': ...} to every tool "
            "(dataset rows from cudagym.integrations.verl.make_rows carry them in extra_info.tools_kwargs)"
        )
    env = CudaKernelEnv(**env_kwargs(config.get("env")))
    try:
        env.reset(options={"task_id": str(task_id)})
    except BaseException:
        env.close()
        raise
    return env


class EpisodeTable:
    """The open episodes of this process, by trajectory key, shared by the eight tools (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._episodes: dict[str, Episode] = {}

    def get(self, key: str) -> tuple[Episode, bool]:
        """The episode ``key``, and whether this call added it."""
        with self._lock:
            episode = self._episodes.get(key)
            if episode is not None:
                return episode, False
            episode = self._episodes[key] = Episode(key)
            return episode, True

    def find(self, key: str) -> Episode | None:
        with self._lock:
            return self._episodes.get(key)

    def discard(self, key: str) -> None:
        """Ends and forgets the episode ``key`` (nothing when there is none)."""
        with self._lock:
            episode = self._episodes.pop(key, None)
        if episode is not None:
            with episode.lock:
                episode.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._episodes)


EPISODES = EpisodeTable()


class CudaKernelTool(BaseTool):
    """One of cudagym's tools for verl; the tool is named by its schema (see the module doc).

    Args:
        config: verl's tool config: ``type`` (``native``) and ``env``, ``CudaKernelEnv``'s options.
        tool_schema: the tool's OpenAI function schema; None takes cudagym's for ``config["tool"]``.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        super().__init__(config, tool_schema)
        if self.name not in TOOLS_BY_NAME:
            raise ValueError(f"no cudagym tool {self.name!r}; the tools are: {', '.join(TOOLS_BY_NAME)}")
        self._options: dict[str, dict[str, Any]] = {}  # instance id -> its create_kwargs

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        if getattr(self, "tool_schema", None) is not None:
            return self.tool_schema
        return openai_tool_schema(str(self.config.get("tool", "")))

    async def create(
        self, instance_id: str | None = None, create_kwargs: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """Registers an instance with its options (``create_kwargs``, or the keyword arguments): ``task_id``."""
        instance_id = instance_id or uuid.uuid4().hex
        self._options[instance_id] = dict(create_kwargs if create_kwargs is not None else kwargs)
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Runs the call in the trajectory's episode (in a worker thread); the observation, its reward and figures."""
        episode = self._episode(instance_id, kwargs.get("agent_data"))
        options = self._options.get(instance_id, {})
        call = {"name": self.name, "arguments": parameters}
        observation, reward, metrics = await asyncio.to_thread(episode.step, self.config, options, call)
        return ToolResponse(text=observation), reward, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The return of the instance's episode so far (0.0 before its first call)."""
        episode = EPISODES.find(self._key(instance_id, kwargs.get("agent_data")))
        return episode.episode_return if episode is not None else 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forgets the instance; an episode keyed by it (no ``agent_data``) ends here."""
        self._options.pop(instance_id, None)
        if kwargs.get("agent_data") is None:
            await asyncio.to_thread(EPISODES.discard, _instance_key(instance_id))

    def _episode(self, instance_id: str, agent_data: Any) -> Episode:
        key = self._key(instance_id, agent_data)
        episode, added = EPISODES.get(key)
        if added and agent_data is not None:
            weakref.finalize(agent_data, EPISODES.discard, key)  # verl dropped the trajectory
        return episode

    @staticmethod
    def _key(instance_id: str, agent_data: Any) -> str:
        # the trajectory's own object, not its request id: with full determinism verl reuses request ids across
        # steps, and an object's id is free again only after its finaliser ended the episode
        if agent_data is not None:
            return f"trajectory:{id(agent_data)}"
        return _instance_key(instance_id)


def _instance_key(instance_id: str) -> str:
    return f"instance:{instance_id}"


def openai_tool_schema(name: str) -> OpenAIFunctionToolSchema:
    """The cudagym tool ``name``'s schema as verl's model; ValueError names the tools when there is none."""
    for schema in tool_schemas("openai"):
        if schema["function"]["name"] == name:
            return OpenAIFunctionToolSchema.model_validate(schema)
    raise ValueError(f"no cudagym tool {name!r}; the tools are: {', '.join(TOOLS_BY_NAME)}")


def tool_config(**env_options: Any) -> dict[str, Any]:
    """verl's tool config (the content of ``tool_config_path``) for the eight tools, every episode made with
    ``CudaKernelEnv(**env_options)`` (plain values, as YAML holds them)."""
    return {
        "tools": [
            {"class_name": TOOL_CLASS, "config": {"type": "native", "env": dict(env_options)}, "tool_schema": schema}
            for schema in tool_schemas("openai")
        ]
    }


def write_tool_config(path: str | Path, **env_options: Any) -> Path:
    """Writes ``tool_config(**env_options)`` to ``path`` as YAML; the path."""
    import yaml

    path = Path(path)
    path.write_text(yaml.safe_dump(tool_config(**env_options), sort_keys=False))
    return path


def tools_kwargs(task_id: str) -> dict[str, dict[str, Any]]:
    """A row's ``extra_info.tools_kwargs``: every tool's ``create_kwargs`` name the task."""
    return {name: {"create_kwargs": {"task_id": task_id}} for name in TOOLS_BY_NAME}


def make_rows(task_set: str = "builtin", **env_options: Any) -> list[dict[str, Any]]:
    """One verl dataset row per task of ``task_set`` (see the module doc). ``env_options`` are ``CudaKernelEnv``'s
    (``backend``, ``max_turns``, task filters such as ``ids=``): give the tool config the same, since the prompt is
    the first observation of an environment made with them."""
    env = CudaKernelEnv(task_set, **env_kwargs(env_options))
    rows = []
    try:
        for index, task in enumerate(env.tasks):
            observation, _ = env.reset(options={"task_id": task.id})
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "agent_name": AGENT_NAME,
                    "prompt": [{"role": "user", "content": observation}],
                    "reward_model": {"style": "rule", "ground_truth": task.id},
                    "extra_info": {"index": index, "task_id": task.id, "tools_kwargs": tools_kwargs(task.id)},
                }
            )
    finally:
        env.close()
    return rows


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> float:
    """verl's custom reward function: the episode's return, the sum of the rewards of its tool calls
    (``extra_info["tool_rewards"]``, which verl's tool agent loop records). A trajectory without a tool call earns 0."""
    rewards = (extra_info or {}).get("tool_rewards")
    if rewards is None:
        raise KeyError(
            "extra_info has no tool_rewards: compute_score reads the rewards verl's tool_agent loop records "
            "(rows need agent_name 'tool_agent')"
        )
    return float(sum(rewards))


__all__ = [
    "AGENT_NAME",
    "EPISODES",
    "TOOL_CLASS",
    "CudaKernelTool",
    "Episode",
    "EpisodeTable",
    "compute_score",
    "make_rows",
    "openai_tool_schema",
    "tool_config",
    "tools_kwargs",
    "write_tool_config",
]
