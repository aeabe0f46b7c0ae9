"""``CudaKernelEnv``: GPU-kernel optimisation as a Gymnasium environment.

An episode is one task. ``reset`` picks it (deterministically from the seed, or by
``options={"task_id": ...}``), creates a fresh workspace and returns the instructions with the reference
model. Each ``step`` takes one tool call as text and returns what the tool said:

* observation: text (printable ASCII, at most ``max_obs_chars``), rendered from the stage's result;
* reward: from the reward shaper (default: CUDA Agent's milestone tier at ``submit``, 0 before);
* terminated: True after ``submit`` (the final evaluation ran);
* truncated: True when the turn budget ``max_turns`` is spent without a submit;
* info: the structured result (``info["result"]``), the tool, the turn, the reward's named terms
  (``info["reward_terms"]``) and, at submit, ``tier``, ``compiled``, ``correct``, ``speedup_eager``,
  ``speedup_compile``, ``timing_fair`` (the timing's conditions were quiet enough to trust), ``integrity``,
  ``input_kinds`` (the input kinds verification drew) and ``degenerate`` (a shortcut passes whatever inputs
  verification draws: the tier is capped at 1 and the speedups are None; see ``cudagym.tasks.input_verdict``).
  ``reset``'s info holds ``input_kinds`` and ``degenerate`` where the task's inputs were probed before (None until
  its first verify) and ``memory_warning`` when its tensors may not fit the backend's memory (``cudagym.footprint``);
  the first observation then starts with a note saying so.
  A submit the evaluation harness could not evaluate (the harness failed, not the agent's code) ends the episode
  with reward 0.0 and ``info["harness_error"]`` saying why, so that a trainer can drop the sample; it never raises.

A malformed action is an observation saying what was wrong; it never raises and never ends the
episode by itself. ``close()`` removes the workspace and stops every child process; a dropped env's workspace
goes with it (a finaliser), also when an exception skipped ``close()``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from cudagym.backends import Backend, resolve_backend
from cudagym.build import default_cache_dir
from cudagym.errors import ConfigError
from cudagym.evaluator import EvalConfig, Evaluator, LocalEvaluator
from cudagym.instructions import first_observation, render_instructions
from cudagym.render import render
from cudagym.results import FileResult, Stage, StageResult, Status, SubmitResult
from cudagym.reward_shaping import Reward, RewardSpec, Shaper, StepRecord, make_reward
from cudagym.task_notes import task_notes
from cudagym.tasks import Task, TaskSet
from cudagym.tasks import load as load_tasks
from cudagym.tasks.degeneracy import VerdictStore
from cudagym.text import clean
from cudagym.text_space import PrintableText
from cudagym.tools import (
    Compile,
    EditFile,
    ListFiles,
    ParseFailure,
    Profile,
    ReadFile,
    SchemaFormat,
    Submit,
    ToolCall,
    Verify,
    WriteFile,
    parse_action,
)
from cudagym.tuning import prepares_ahead
from cudagym.workspace import Workspace, WorkspaceError, WorkspaceLimits

logger = logging.getLogger(__name__)

EvaluatorFactory = Callable[[Task, Backend, EvalConfig], Evaluator]


class CudaKernelEnv(gym.Env[str, str]):
    """Write kernels that make a PyTorch model faster; rewarded in milestone tiers (see module doc).

    Args:
        task_set: a registered task-set name ("builtin", "kernelbench", "ops6k", ...), a TaskSet or a
            sequence of tasks.
        backend: "auto" (cuda where a GPU is visible), "cuda" or "cpu".
        max_turns: tool calls per episode before truncation (CUDA Agent evaluates with 200).
        reward: a reward name, a shaper, or a callable ``fn(step, history) -> float``.
        reward_options: keyword options for a named reward.
        render_mode: None or "ansi" (``render()`` returns the episode's transcript).
        eval_config: evaluation settings (checks, tolerances, timeouts, timing); see EvalConfig.
        max_obs_chars: observations are cut (head and tail kept) to this many characters.
        max_action_chars: the action space's declared length.
        cache_dir: where compiled objects and baselines are shared (default ~/.cache/cudagym).
        evaluator_factory: builds the evaluator for a task (default: a LocalEvaluator).
        service_socket: evaluate through the evaluation service listening there (``cudagym serve``)
            instead of in this process; shorthand for ``evaluator_factory=ServiceEvaluatorFactory(path)``.
        evaluator: where evaluations run: "local" (this process, the default), "service" (with ``service_socket``)
            or "ray" (the evaluation pool on a Ray cluster, ``pip install 'cudagym[ray]'``; shorthand for
            ``evaluator_factory=cudagym.ray_pool.RayEvaluatorFactory(ray_address, cache_dir=cache_dir)``).
        ray_address: the Ray cluster of ``evaluator="ray"`` (None: the one this process joined, else a local one).
        ray_pool: with ``evaluator="ray"``, the name of a pool the whole cluster shares (envs of every process that
            names it use its workers: ``cudagym.ray_pool.cluster_pool``); None: a pool of this process's own.
        workspace_limits: file size limits of the workspace.
        **task_options: passed to the task-set loader (``path=``, ``level=``, ``ids=``, ``names=``, ``ops=``,
            ``precision=``, ``sizes=``: see ``cudagym.tasks.load``); an unknown one raises TypeError naming the valid
            ones.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        task_set: str | TaskSet | Sequence[Task] = "builtin",
        *,
        backend: str = "auto",
        max_turns: int = 200,
        reward: RewardSpec = "milestone",
        reward_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        eval_config: EvalConfig | None = None,
        max_obs_chars: int = 32768,
        max_action_chars: int = 262144,
        cache_dir: str | None = None,
        evaluator_factory: EvaluatorFactory | None = None,
        service_socket: str | None = None,
        evaluator: str | None = None,
        ray_address: str | None = None,
        ray_pool: str | None = None,
        workspace_limits: WorkspaceLimits | None = None,
        **task_options: Any,
    ) -> None:
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if isinstance(task_set, str):
            self.tasks = load_tasks(task_set, **task_options)
        elif isinstance(task_set, TaskSet):
            self.tasks = task_set
        else:
            self.tasks = TaskSet("custom", task_set)
        if len(self.tasks) == 0:
            raise ValueError("the task set is empty (check the filters)")
        self.backend = resolve_backend(backend)
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.eval_config = eval_config or EvalConfig()
        self.max_obs_chars = max_obs_chars
        self.cache_dir = cache_dir
        self._cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
        self._verdicts = VerdictStore(self._cache_root)  # the input verdicts, read at reset (``task_notes``)
        self.workspace_limits = workspace_limits
        self.shaper: Shaper = make_reward(reward, **(reward_options or {}))
        evaluator_factory = self._factory_for(evaluator, evaluator_factory, service_socket, ray_address, ray_pool)
        self._evaluator_factory = evaluator_factory or self._local_evaluator
        # PrintableText: shared-memory vector envs read it live (the default async make_vec works)
        self.observation_space = PrintableText(max_obs_chars)
        self.action_space = PrintableText(max_action_chars)
        self.task: Task | None = None
        self.workspace: Workspace | None = None
        self.evaluator: Evaluator | None = None
        self._evaluator_task: str | None = None
        self._history: list[StepRecord] = []
        self._transcript: list[str] = []
        self._turn = 0
        self._done = False

    def _factory_for(
        self,
        evaluator: str | None,
        factory: EvaluatorFactory | None,
        service_socket: str | None,
        ray_address: str | None,
        ray_pool: str | None = None,
    ) -> EvaluatorFactory | None:
        """The evaluator factory that ``evaluator``, ``evaluator_factory``, ``service_socket``, ``ray_address`` and
        ``ray_pool`` name together (None: a local evaluator); ConfigError (a ValueError) where they disagree."""
        if evaluator not in (None, "local", "service", "ray"):
            raise ConfigError(f"evaluator must be 'local', 'service' or 'ray', got {evaluator!r}")
        if factory is not None and (service_socket is not None or evaluator is not None):
            raise ConfigError("give evaluator_factory alone, without evaluator or service_socket")
        if ray_address is not None and evaluator != "ray":
            raise ConfigError("ray_address goes with evaluator='ray'")
        if ray_pool is not None and (evaluator != "ray" or not ray_pool):
            raise ConfigError("ray_pool names a pool of the cluster (a non-empty name) and goes with evaluator='ray'")
        if evaluator == "service" and service_socket is None:
            raise ConfigError("evaluator='service' needs service_socket")
        if service_socket is not None and evaluator not in (None, "service"):
            raise ConfigError(f"service_socket goes with evaluator='service', not {evaluator!r}")
        if service_socket is not None:
            from cudagym.service import ServiceEvaluatorFactory

            return ServiceEvaluatorFactory(str(service_socket))
        if evaluator == "ray":
            from cudagym.ray_pool.client import RayEvaluatorFactory

            return RayEvaluatorFactory(ray_address, cache_dir=self.cache_dir, cluster_pool=ray_pool)
        return factory

    def _local_evaluator(self, task: Task, backend: Backend, config: EvalConfig) -> Evaluator:
        return LocalEvaluator(task, backend, config, cache_dir=self.cache_dir)

    # -- gymnasium API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            task = self.tasks.get(options["task_id"])
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if self.workspace is not None:
            self.workspace.remove()
        if self.evaluator is not None and self._evaluator_task != task.id:
            self.evaluator.retarget(task)  # keeps the warm processes for the next task
            self._evaluator_task = task.id
        self.task = task
        logger.debug("reset to %s on %s", task.id, self.backend.name)
        if self.evaluator is None and prepares_ahead(self.eval_config.tuning, self.backend):
            self._get_evaluator()  # it prepares the task while the agent reads the instructions
        instructions = render_instructions(task, self.backend, max_turns=self.max_turns)
        self.workspace = Workspace(task.source_for(self.backend.name), instructions, limits=self.workspace_limits)
        self.shaper.reset()
        self._history.clear()
        self._turn = 0
        self._done = False
        notes = task_notes(task, self.backend, self.eval_config, self._verdicts, self._cache_root)
        observation = self._clean(first_observation(task, self.backend, max_turns=self.max_turns, notes=notes.lines))
        self._transcript = [f"=== reset: {task.id} on {self.backend.name} ===", observation]
        info = {
            "task_id": task.id,
            "task_name": task.name,
            "backend": self.backend.name,
            "turn": 0,
            "max_turns": self.max_turns,
            **notes.info(),
        }
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.workspace is None or self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            result = StageResult(Stage.PARSE, Status.NOT_READY, "The episode has ended; call reset() to start another.")
            return self._clean(render(result)), 0.0, True, False, {"result": result.to_info(), "tool": ""}
        self._turn += 1
        parsed = parse_action(action)
        if isinstance(parsed, ParseFailure):
            tool = ""
            result = StageResult(Stage.PARSE, Status.INVALID_CALL, parsed.message)
        else:
            tool = parsed.tool_name()
            result = self._dispatch(parsed)
        terminated = isinstance(result, SubmitResult)
        truncated = not terminated and self._turn >= self.max_turns
        self._done = terminated or truncated
        record = StepRecord(turn=self._turn, tool=tool, result=result, terminated=terminated, truncated=truncated)
        harness_failed = isinstance(result, SubmitResult) and result.status is Status.HARNESS_ERROR
        # a submit the harness could not evaluate has no tier to reward: 0.0, and ``info["harness_error"]`` says why
        reward = Reward(0.0, {"harness_error": 0.0}) if harness_failed else self.shaper(record, tuple(self._history))
        self._history.append(record)
        text = render(result)
        if truncated:
            text += f"\nThe turn budget ({self.max_turns}) is spent; the episode is truncated."
        elif not terminated:
            text += f"\n[turn {self._turn}/{self.max_turns}]"
        observation = self._clean(text)
        info: dict[str, Any] = {
            "tool": tool,
            "turn": self._turn,
            "status": result.status.value,
            "result": result.to_info(),
            "reward_terms": dict(reward.terms),
            "task_id": self.task.id,
        }
        if harness_failed:
            info["harness_error"] = result.message
            logger.warning("%s on %s: the harness failed (reward 0.0): %s", result.stage, self.task.id, result.message)
        if isinstance(result, SubmitResult):
            info.update(
                timing_fair=result.timing_fair,
                tier=result.tier,
                compiled=result.compiled,
                correct=result.correct,
                speedup_eager=result.speedup_eager,
                speedup_compile=result.speedup_compile,
                integrity=[dataclasses.asdict(f) for f in result.integrity],
                input_kinds=list(result.input_kinds),
                degenerate=result.degenerate,
            )
        self._transcript += [
            f"--- turn {self._turn} action ---",
            clean(str(action), 4000),
            f"--- turn {self._turn} observation (reward {reward.value:g}) ---",
            observation,
        ]
        return observation, float(reward.value), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return "\n".join(self._transcript) + "\n"
        return None

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None
            self._evaluator_task = None
        if self.workspace is not None:
            self.workspace.remove()
            self.workspace = None
        super().close()

    # -- tools -------------------------------------------------------------------------------------

    def tool_schemas(self, format: SchemaFormat = "openai", *, strict: bool = False) -> list[dict[str, Any]]:
        """Function-calling schemas of the tools: ``format`` "openai", "openai-responses", "anthropic" or "json";
        ``strict`` for OpenAI's strict mode (``cudagym.tools.tool_schemas``)."""
        from cudagym.tools import tool_schemas

        return tool_schemas(format, strict=strict)

    def _get_evaluator(self) -> Evaluator:
        assert self.task is not None
        if self.evaluator is None:
            self.evaluator = self._evaluator_factory(self.task, self.backend, self.eval_config)
            self._evaluator_task = self.task.id
        return self.evaluator

    def _dispatch(self, call: ToolCall) -> StageResult:
        ws = self.workspace
        assert ws is not None
        try:
            if isinstance(call, WriteFile):
                path, size = ws.write(call.path, call.content)
                return FileResult(Stage.WRITE_FILE, Status.OK, f"Wrote {path} ({size} bytes).", path=path)
            if isinstance(call, EditFile):
                path, line = ws.edit(call.path, call.old_string, call.new_string)
                return FileResult(Stage.EDIT_FILE, Status.OK, f"Edited {path} at line {line}.", path=path)
            if isinstance(call, ReadFile):
                path, content = ws.read(call.path, call.offset, call.limit)
                return FileResult(Stage.READ_FILE, Status.OK, f"{path}:", path=path, content=content)
            if isinstance(call, ListFiles):
                return FileResult(Stage.LIST_FILES, Status.OK, "Workspace files:", content=ws.listing())
        except WorkspaceError as e:
            return FileResult(Stage(call.tool_name()), Status.FILE_ERROR, str(e), path=getattr(call, "path", ""))
        except OSError as e:  # the file system refused (name too long, disk full, ...): a file error too
            return FileResult(
                Stage(call.tool_name()),
                Status.FILE_ERROR,
                f"The file operation failed: {e.strerror}.",
                path=getattr(call, "path", ""),
            )
        evaluator = self._get_evaluator()
        if isinstance(call, Compile):
            return evaluator.compile(ws)
        if isinstance(call, Verify):
            return evaluator.verify(ws)
        if isinstance(call, Profile):
            return evaluator.profile(ws, ncu=call.ncu)
        if isinstance(call, Submit):
            return evaluator.submit(ws)
        raise AssertionError(f"unhandled tool {call!r}")

    def _clean(self, text: str) -> str:
        replace = {str(self.workspace.path): ""} if self.workspace is not None else None
        return clean(text, self.max_obs_chars, replace_paths=replace)
