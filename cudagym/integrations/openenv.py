"""CudaKernel-v0 as an OpenEnv environment: its action, observation and state types, a typed client, and the server.

OpenEnv (``pip install 'cudagym[openenv]'``) serves an ``Environment`` over HTTP and WebSocket; each WebSocket client
gets its own environment instance (``SUPPORTS_CONCURRENT_SESSIONS``: every episode has its own workspace and child
processes). ``cudagym serve-openenv`` starts the server; any OpenEnv client drives it:

```python
from cudagym.integrations.openenv import CudaKernelAction, CudaKernelClient

with CudaKernelClient(base_url="http://127.0.0.1:8000").sync() as env:
    result = env.reset(task_id="builtin/relu")        # or seed=, or split= and index= (task discovery)
    result = env.step(CudaKernelAction(name="read_file", arguments={"path": "model.py"}))
    print(result.observation.text, result.reward, result.done)
```

* **Action** (``CudaKernelAction``): one tool call, native (``name`` and ``arguments``) or as the model wrote it
  (``text``: JSON or ``<tool_call>`` tags, parsed by cudagym's text protocol). A call that does not parse or names
  no tool is an observation saying so, as in ``CudaKernel-v0``.
* **Observation** (``CudaKernelObservation``): ``text`` (what the environment said), ``reward``, ``done``
  (terminated by a submit or truncated at the turn budget; ``truncated`` tells which), ``tool``, ``status``,
  ``turn``, and ``metadata``: the environment's ``info`` (the tier, speedups and checks after a submit). At reset
  ``metadata["tools"]`` holds the tools' OpenAI function schemas.
* **State** (``CudaKernelState``): the episode id, the step count, the task, the backend and the episode's return.
* **Task discovery** (OpenEnv's task API, ``/cudagym/splits``, ``/cudagym/tasks``, ...): one split, named after the
  task set, listing each task's id, name, level, operators and precision; ``reset(split=..., index=...)`` plays one.

Evaluation settings (``eval_config``), the reward and the task set are fixed per server (``create_openenv_app``).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from cudagym import __version__
from cudagym.envs.kernel_env import CudaKernelEnv
from cudagym.tasks import Task, TaskSet
from cudagym.tasks import load as load_tasks
from cudagym.tools import tool_schemas

logger = logging.getLogger(__name__)

ENV_NAME = "cudagym"
RESET_OPTIONS = ("seed", "episode_id", "task_id", "split", "index")


class CudaKernelAction(Action):
    """One tool call: ``name`` with its ``arguments`` (a native call), or ``text`` holding the call as written."""

    name: str | None = Field(default=None, description="Tool name: write_file, edit_file, read_file, ..., submit")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments")
    text: str | None = Field(default=None, description="A call as a model wrote it (JSON or <tool_call> tags)")

    @model_validator(mode="after")
    def _one_form(self) -> CudaKernelAction:
        # a PydanticCustomError, not a ValueError: OpenEnv sends the validation errors to the client as JSON, and a
        # ValueError's entry holds the exception object itself, which JSON cannot carry (the session would end)
        if (self.name is None) == (self.text is None):
            raise PydanticCustomError(
                "tool_call_form", "give a tool call as name (and arguments) or as text, exactly one of the two"
            )
        if self.text is not None and self.arguments:
            raise PydanticCustomError("tool_call_form", "arguments go with name; a call given as text holds its own")
        return self

    def for_env(self) -> str | dict[str, Any]:
        """The action as ``CudaKernelEnv.step`` takes it."""
        if self.text is not None:
            return self.text
        return {"name": self.name, "arguments": self.arguments}


class CudaKernelObservation(Observation):
    """What the environment said after a reset or a tool call (see the module doc)."""

    text: str = Field(default="", description="The observation text (printable ASCII)")
    task_id: str = Field(default="", description="The episode's task")
    tool: str = Field(default="", description="The tool the call named ('' at reset or when it did not parse)")
    status: str = Field(default="", description="The tool's status: ok, invalid_call, compile_error, ...")
    turn: int = Field(default=0, ge=0, description="Tool calls made in the episode")
    max_turns: int = Field(default=0, ge=0, description="The turn budget")
    truncated: bool = Field(default=False, description="The turn budget ended the episode (no submit)")


class CudaKernelState(State):
    """The session's episode: which task, on which backend, how far, and its return so far."""

    task_id: str | None = Field(default=None, description="The episode's task (None before the first reset)")
    backend: str = Field(default="", description="cpu or cuda")
    max_turns: int = Field(default=0, ge=0, description="The turn budget")
    done: bool = Field(default=False, description="The episode ended (submit or turn budget)")
    episode_return: float = Field(default=0.0, description="The sum of the episode's rewards")


def task_spec(task: Task, index: int) -> dict[str, Any]:
    """One task as the task API lists it."""
    return {
        "id": task.id,
        "index": index,
        "name": task.name,
        "level": task.metadata.level,
        "ops": list(task.metadata.ops),
        "precision": task.metadata.precision,
        "source": task.metadata.source,
    }


class CudaKernelEnvironment(Environment[CudaKernelAction, CudaKernelObservation, CudaKernelState]):
    """``CudaKernelEnv`` behind OpenEnv's ``Environment`` interface, with task discovery (see the module doc).

    Args:
        **env_kwargs: ``CudaKernelEnv``'s arguments (``task_set``, ``backend``, ``max_turns``, ``eval_config``, task
            filters, ...). The task set is loaded here; pass a loaded ``TaskSet`` to share one between instances.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self._env = CudaKernelEnv(**env_kwargs)
        self._state = CudaKernelState(backend=self._env.backend.name, max_turns=self._env.max_turns)

    # -- the episode -------------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CudaKernelObservation:
        """Starts an episode on ``task_id``, on the task at ``index`` of ``split``, or on the task ``seed`` picks."""
        unknown = sorted(set(kwargs) - set(RESET_OPTIONS))
        if unknown:
            raise TypeError(f"unknown reset option(s) {unknown}; reset takes: {', '.join(RESET_OPTIONS)}")
        options = self._task_option(kwargs.get("task_id"), kwargs.get("split"), kwargs.get("index"))
        observation, info = self._env.reset(seed=seed, options=options)
        self._state = CudaKernelState(
            episode_id=episode_id or uuid.uuid4().hex,
            task_id=info["task_id"],
            backend=self._env.backend.name,
            max_turns=self._env.max_turns,
        )
        return CudaKernelObservation(
            text=observation,
            task_id=info["task_id"],
            max_turns=self._env.max_turns,
            metadata={**info, "tools": tool_schemas("openai")},
        )

    def _task_option(self, task_id: str | None, split: str | None, index: int | None) -> dict[str, str] | None:
        if index is None:
            if split is not None:
                raise ValueError("split goes with index: reset(split=..., index=...)")
            return {"task_id": task_id} if task_id else None
        if task_id is not None:
            raise ValueError("give task_id, or split and index, not both")
        return {"task_id": self._task_at(split or self._env.tasks.name, int(index)).id}

    def step(self, action: CudaKernelAction, timeout_s: float | None = None, **kwargs: Any) -> CudaKernelObservation:
        """One tool call. ``timeout_s`` is not used: every stage has its own timeout (``EvalConfig``)."""
        if timeout_s is not None:
            logger.debug("timeout_s=%s ignored: cudagym's stages keep their own timeouts", timeout_s)
        observation, reward, terminated, truncated, info = self._env.step(action.for_env())
        self._state.step_count += 1
        self._state.episode_return += reward
        self._state.done = terminated or truncated
        return CudaKernelObservation(
            text=observation,
            reward=reward,
            done=terminated or truncated,
            truncated=truncated,
            task_id=str(info.get("task_id", self._state.task_id or "")),
            tool=str(info.get("tool", "")),
            status=str(info.get("status", "")),
            turn=int(info.get("turn", self._state.step_count)),
            max_turns=self._env.max_turns,
            metadata=info,
        )

    @property
    def state(self) -> CudaKernelState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=ENV_NAME,
            description="GPU-kernel optimisation: make a PyTorch model faster with your own kernels, through tool "
            "calls (write, compile, verify, profile, submit); rewarded in milestone tiers.",
            version=__version__,
        )

    def close(self) -> None:
        self._env.close()

    # -- task discovery (OpenEnv's TaskProvider) ------------------------------------------------------------------

    def list_splits(self) -> list[str]:
        """One split: the task set's name."""
        return [self._env.tasks.name]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        tasks = self._split(split)
        return [task_spec(task, index) for index, task in enumerate(tasks)]

    def num_tasks(self, split: str) -> int:
        return len(self._split(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        return task_spec(self._task_at(split, index), index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        tasks = self._split(split)
        first, last, _ = slice(start, stop).indices(len(tasks))
        return [task_spec(tasks[index], index) for index in range(first, last)]

    def _split(self, split: str) -> TaskSet:
        if split != self._env.tasks.name:
            raise ValueError(f"unknown split {split!r}; this server's only split is {self._env.tasks.name!r}")
        return self._env.tasks

    def _task_at(self, split: str, index: int) -> Task:
        tasks = self._split(split)
        if not 0 <= index < len(tasks):
            raise IndexError(f"task index {index} is out of range: split {split!r} has {len(tasks)} tasks")
        return tasks[index]


class CudaKernelClient(EnvClient[CudaKernelAction, CudaKernelObservation, CudaKernelState]):
    """OpenEnv's WebSocket client with cudagym's types (``.sync()`` for synchronous use).

    ``message_timeout_s`` defaults to 15 minutes rather than OpenEnv's minute: a submit compiles, verifies and
    times the solution, and on the cuda backend builds the ``torch.compile`` baseline the first time.
    """

    def __init__(self, base_url: str | None = None, *, message_timeout_s: float = 900.0, **kwargs: Any) -> None:
        super().__init__(base_url=base_url, message_timeout_s=message_timeout_s, **kwargs)

    def _step_payload(self, action: CudaKernelAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CudaKernelObservation]:
        fields = {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
        observation = CudaKernelObservation.model_validate(fields)
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> CudaKernelState:
        return CudaKernelState.model_validate(payload)


def create_openenv_app(
    task_set: str | TaskSet = "builtin",
    *,
    task_options: Mapping[str, Any] | None = None,
    max_concurrent_envs: int = 4,
    **env_kwargs: Any,
) -> FastAPI:
    """The OpenEnv server's FastAPI application.

    Args:
        task_set: a task-set name or a loaded ``TaskSet``; loaded once and shared by every session.
        task_options: the loader's options for a named set (``level=``, ``ids=``, ``path=``, ...).
        max_concurrent_envs: WebSocket sessions (episodes) at once; each holds a workspace and child processes.
        **env_kwargs: the other ``CudaKernelEnv`` arguments (``backend``, ``max_turns``, ``eval_config``, ...).
    """
    if isinstance(task_set, TaskSet):
        if task_options:
            raise ValueError("task_options apply to a task-set name; this task set is loaded already")
        tasks = task_set
    else:
        tasks = load_tasks(task_set, **(task_options or {}))
    factory = functools.partial(CudaKernelEnvironment, task_set=tasks, **env_kwargs)
    return create_app(
        factory,
        CudaKernelAction,
        CudaKernelObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=max_concurrent_envs,
        state_cls=CudaKernelState,
    )


def serve_openenv(host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Serves ``create_openenv_app(**app_options)`` with uvicorn until interrupted."""
    import uvicorn

    app = create_openenv_app(**app_options)
    logger.info("serving cudagym over OpenEnv at http://%s:%d", host, port)
    uvicorn.run(app, host=host, port=port)


__all__ = [
    "ENV_NAME",
    "CudaKernelAction",
    "CudaKernelClient",
    "CudaKernelEnvironment",
    "CudaKernelObservation",
    "CudaKernelState",
    "create_openenv_app",
    "serve_openenv",
    "task_spec",
]
