"""CudaKernel-v0 as a verifiers v1 taskset and env, its tools served through a verifiers toolset.

verifiers 0.4 (``pip install 'cudagym[verifiers]'``) runs ``vf.Env`` over the tasks of a ``vf.Taskset``; the model
plays through a harness (a chat program) that reaches the task's tools over MCP. This module is the taskset
id ``cudagym-verifiers`` (verifiers imports the top-level module ``cudagym_verifiers``, which re-exports it):

```bash
vf-eval cudagym-verifiers -m MODEL --client.base-url URL --no-push \\
    --env.taskset.task-options '{"ids": ["builtin/relu"]}' --env.taskset.task.tools.backend cpu
```

* :class:`CudaKernelTaskset` yields one :class:`CudaKernelTask` per task of a cudagym task set
  (``task_set``, ``task_options``); its prompt is the environment's first observation (the instructions and the
  reference model.py).
* :class:`CudaKernelToolset`, started for each rollout (a ``python -m`` subprocess, verifiers' toolset life cycle),
  holds one ``CudaKernelEnv`` reset to the rollout's task and serves cudagym's eight tools under their own names
  and JSON schemas as native tool calls; every call is one ``step``. After each call it writes the episode's
  :class:`~cudagym.integrations.episode.EpisodeAccount` into the rollout's shared state (:class:`CudaKernelState`).
* :class:`CudaKernelTask` scores the trace from that state: the reward ``cudagym_return`` is the episode's return
  (the milestone tier after a submit, with the default reward), and each outcome and reward term is a metric
  (``tier``, ``compiled``, ``correct``, ``speedup_eager``, ``reward_tier``, ...). The rollout stops once the
  episode ended. A submit the harness could not evaluate fails the scoring (a ``TaskError`` on the trace), so the
  rollout is not trained on with a made-up reward.
* :class:`CudaKernelVerifiersEnv` is the single-seat env, its agent defaulting to verifiers' plain chat loop (the
  ``null`` harness: no shell, only cudagym's tools) in a local subprocess: nothing the model writes runs there
  (cudagym compiles and runs candidates in its own sandbox, where the toolset runs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Literal

import verifiers.v1 as vf
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool
from pydantic import Field

from cudagym.envs import CudaKernelEnv
from cudagym.evaluation import QUICK_EVAL_CONFIG
from cudagym.evaluator import EvalConfig
from cudagym.integrations.episode import EpisodeAccount, ToolEpisode
from cudagym.tools import tool_schemas

logger = logging.getLogger(__name__)

__all__ = [
    "CudaKernelEnvConfig",
    "CudaKernelState",
    "CudaKernelTask",
    "CudaKernelTaskConfig",
    "CudaKernelTaskData",
    "CudaKernelTaskset",
    "CudaKernelTasksetConfig",
    "CudaKernelToolset",
    "CudaKernelToolsetConfig",
    "CudaKernelVerifiersEnv",
]


class CudaKernelToolsetConfig(vf.ToolsetConfig):
    """How each rollout's ``CudaKernelEnv`` is made (``--env.taskset.task.tools.*``); plain values, since the
    toolset process receives them as JSON."""

    backend: Literal["auto", "cpu", "cuda"] = "auto"
    """Where candidates compile and run: ``cuda`` where a GPU is visible under ``auto``."""
    max_turns: int = Field(200, ge=1)
    """Tool calls per episode before it is truncated."""
    reward: str = "milestone"
    """A registered reward shaper's name (``cudagym.reward_shaping``)."""
    reward_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the named reward."""
    quick_eval: bool = False
    """Three checks and short timing (``cudagym eval --quick``): for smoke runs and tests, not for numbers."""
    compile_baseline: bool = True
    """Time ``torch.compile`` too (tier 3 needs it)."""
    service_socket: str | None = None
    """Evaluate through a ``cudagym serve`` service listening there, shared by every rollout's toolset."""
    cache_dir: str | None = None
    """Where compiled objects and baselines are cached (default: ``~/.cache/cudagym``)."""
    max_obs_chars: int = Field(32768, ge=256)
    """Tool results are cut (head and tail kept) to this many characters."""

    def env_kwargs(self) -> dict[str, Any]:
        """The ``CudaKernelEnv`` keyword arguments these settings stand for (without the task set)."""
        eval_config = QUICK_EVAL_CONFIG if self.quick_eval else None
        if not self.compile_baseline:
            eval_config = replace(eval_config or EvalConfig(), compile_baseline=False)
        return {
            "backend": self.backend,
            "max_turns": self.max_turns,
            "reward": self.reward,
            "reward_options": dict(self.reward_options),
            "eval_config": eval_config,
            "service_socket": self.service_socket,
            "cache_dir": self.cache_dir,
            "max_obs_chars": self.max_obs_chars,
        }


class CudaKernelState(vf.State):
    """The rollout's state shared by the toolset (which writes it after each call) and the task (which scores it)."""

    episode: EpisodeAccount | None = None
    """The episode's account; None until the toolset reset its environment."""


class CudaKernelTaskData(vf.TaskData):
    """One cudagym task as verifiers carries it (``id`` and ``name`` are the task's, ``prompt`` its first
    observation)."""

    task_id: str
    """The cudagym task id, e.g. ``builtin/relu``."""
    task_set: str = "builtin"
    """The registered task set it comes from."""
    task_options: dict[str, Any] = Field(default_factory=dict)
    """The task-set loader's options it was loaded with (``ids``, ``level``, ``path``, ...)."""


class CudaKernelToolset(vf.Toolset[CudaKernelToolsetConfig, CudaKernelState]):
    """cudagym's tools for one rollout (see the module doc): bare tool names, cudagym's own JSON schemas."""

    TOOL_PREFIX = None

    def __init__(self, config: CudaKernelToolsetConfig) -> None:
        super().__init__(config)
        self._episode: ToolEpisode | None = None
        self._lock = asyncio.Lock()

    async def setup_task(self, task: CudaKernelTaskData) -> None:
        """Creates the rollout's environment and resets it to the rollout's task."""
        episode = ToolEpisode(task_set=task.task_set, **task.task_options, **self.config.env_kwargs())
        self._exit_stack.callback(episode.close)
        await asyncio.to_thread(episode.reset, task.task_id)
        self._episode = episode
        logger.info("toolset ready for %s", task.task_id)

    def register(self, mcp: MCPServer) -> None:
        # the catalogue and the calls are answered here (not through decorated methods): the tools keep the names,
        # descriptions and schemas of cudagym.tools, and one dispatcher steps the environment
        server: Any = mcp
        server.list_tools = self._with_state(self.list_tools)
        server.call_tool = self._with_state(self.call_tool)

    async def list_tools(self) -> list[Tool]:
        """cudagym's tools as MCP tools."""
        return [
            Tool(name=schema["name"], description=schema["description"], input_schema=schema["parameters"])
            for schema in tool_schemas("json")
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> CallToolResult:
        """One step of the rollout's environment; the observation is the tool's result."""
        if self._episode is None:
            raise RuntimeError("the toolset has no task: verifiers did not hand it the rollout's task")
        async with self._lock:  # one step at a time: a rollout's calls are one episode's turns
            observation = await asyncio.to_thread(self._episode.call, name, arguments or {})
        self.state.episode = self._episode.account
        return CallToolResult(content=[TextContent(type="text", text=observation)], is_error=False)


class CudaKernelTaskConfig(vf.TaskConfig):
    """Run-time knobs of the tasks (``--env.taskset.task.*``)."""

    tools: CudaKernelToolsetConfig = CudaKernelToolsetConfig()
    """The environment each rollout's toolset makes."""


class CudaKernelTask(vf.Task[CudaKernelTaskData, CudaKernelState, CudaKernelTaskConfig]):
    """One cudagym task: its toolset, the stop once the episode ended, its reward and metrics."""

    @classmethod
    def toolsets(cls, config: CudaKernelTaskConfig) -> list[vf.Toolset]:
        return [CudaKernelToolset(config.tools)]

    @vf.stop
    async def episode_ended(self, trace: vf.Trace) -> bool:
        """The episode was submitted or ran out of turns: no further model call."""
        episode = trace.state.episode
        return episode is not None and episode.ended

    @vf.reward
    async def cudagym_return(self, trace: vf.Trace) -> float:
        """The episode's return (the milestone tier after a submit); 0.0 when no tool was called.

        Raises:
            RuntimeError: the harness could not evaluate the submit: the episode has no honest reward.
        """
        episode = trace.state.episode
        if episode is None:
            return 0.0
        if episode.harness_error is not None:
            raise RuntimeError(f"{episode.task_id}: the harness could not evaluate the submit: {episode.harness_error}")
        return episode.episode_return

    @vf.metric
    async def cudagym_outcome(self, trace: vf.Trace) -> dict[str, float]:
        """Turns, the submit's outcome and each reward term (``EpisodeAccount.metrics``)."""
        episode = trace.state.episode
        return {"turns": 0.0, "submitted": 0.0} if episode is None else episode.metrics()


class CudaKernelTasksetConfig(vf.TasksetConfig):
    """Which tasks load (``--env.taskset.*``)."""

    task: CudaKernelTaskConfig = CudaKernelTaskConfig()
    task_set: str = "builtin"
    """A registered task set: ``builtin``, ``kernelbench``, ``ops6k``, ..."""
    task_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the task-set loader (``ids``, ``level``, ``path``, ...: ``cudagym.tasks.load``)."""


class CudaKernelTaskset(vf.Taskset[CudaKernelTask, CudaKernelTasksetConfig]):
    """One task per task of the cudagym task set, prompted with the environment's first observation."""

    def load(self) -> Iterator[CudaKernelTask]:
        settings = self.config.task.tools.env_kwargs()
        # the prompts need workspaces only: nothing is evaluated here, so nothing is prepared ahead
        config = settings["eval_config"] or EvalConfig()
        settings["eval_config"] = replace(config, tuning=replace(config.tuning, prepare_ahead=False))
        env = CudaKernelEnv(self.config.task_set, **self.config.task_options, **settings)
        try:
            for task in env.tasks:
                prompt, _ = env.reset(options={"task_id": task.id})
                data = CudaKernelTaskData(
                    id=task.id,
                    name=task.name,
                    prompt=prompt,
                    task_id=task.id,
                    task_set=self.config.task_set,
                    task_options=dict(self.config.task_options),
                )
                yield CudaKernelTask(data, self.config.task)
        finally:
            env.close()


class CudaKernelEnvConfig(vf.EnvConfig):
    """The env's one seat, ``agent`` (``--env.agent.*``): verifiers' plain chat loop in a local subprocess unless
    set otherwise."""

    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())


class CudaKernelVerifiersEnv(vf.Env[CudaKernelEnvConfig]):
    """The single-seat env over :class:`CudaKernelTaskset`: the agent plays each task through the toolset."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


if __name__ == "__main__":  # verifiers starts each rollout's toolset as ``python -m cudagym.integrations.verifiers``
    from cudagym.integrations.verifiers import CudaKernelToolset as _Toolset

    _Toolset.run()
