"""The evaluation harness: run an agent over a task set, keep resumable results, report the metrics.

:func:`evaluate` plays one episode per task with an :class:`~cudagym.baselines.agents.Agent`:

* ``workers`` threads, each with its own environment and agent, take tasks from a shared queue; a
  worker keeps its environment across tasks (an environment is rebuilt only after an episode raised).
  The heavy work (compilers, the reference and candidate processes) happens in child processes, so
  threads run side by side. Parallel workers share the machine: on one GPU or a few CPU cores their
  timings disturb each other, so reported speedups want ``workers=1``.
* each finished episode becomes an :class:`~cudagym.metrics.EpisodeResult`, appended at once as a JSON
  line to ``out``; with ``resume`` the tasks already finished there are skipped (an episode that ended in
  an error is played again, and its new line supersedes the old).
* with ``trajectories``, every episode's actions and observations are appended as a JSON line too (the
  input of :mod:`cudagym.baselines.rft`).
* a progress bar (tqdm where installed, else one line per task on stderr).

:func:`write_report` writes the Markdown report (pass rate, faster-than rates, geometric means, fast_p,
one row per task; definitions in :mod:`cudagym.metrics`) and, with matplotlib, two plots: the speedup
distribution and the fast_p curve.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import gymnasium as gym

from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.metrics import (
    EpisodeResult,
    Metrics,
    compute_metrics,
    latest_by_task,
    read_results,
)
from cudagym.tasks.task import Task, TaskSet

logger = logging.getLogger(__name__)

QUICK_EVAL_CONFIG = EvalConfig(
    num_checks=3,
    timing=TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2),
    verify_timeout=60,
    profile_timeout=120,
)
"""Three checks and short timing, for smoke runs and tests (``--quick``); not for numbers you report."""


AgentFactory = Callable[[], Any]
EnvFactory = Callable[[TaskSet], gym.Env]


# -- one episode ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    """One turn of a recorded episode.

    Attributes:
        action: the action text the agent wrote.
        observation: what the environment answered.
        reward: the step's reward.
        tool: the tool that ran ("" when the action did not parse).
        status: the result's status (``"ok"``, ``"invalid_call"``, ``"compile_error"``, ...).
    """

    action: str
    observation: str
    reward: float
    tool: str = ""
    status: str = ""


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One recorded episode (a line of the trajectories JSONL).

    Attributes:
        task_id: the task.
        agent: the agent's name.
        backend: the backend's name.
        observation: the first observation (instructions and the reference ``model.py``).
        steps: the turns, in order.
        reward: the sum of the rewards.
        tier: the milestone tier at submit; -1 without a submit.
        stop_reason: how the episode ended (see ``cudagym.metrics.STOP_REASONS``).
    """

    task_id: str
    agent: str
    backend: str
    observation: str
    steps: tuple[Step, ...]
    reward: float
    tier: int
    stop_reason: str

    def to_json(self) -> dict[str, Any]:
        """The trajectory as a JSON object."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trajectory:
        """Reads :meth:`to_json`'s output."""
        steps = tuple(Step(**step) for step in data.get("steps", ()))
        return cls(
            task_id=data["task_id"],
            agent=data.get("agent", ""),
            backend=data.get("backend", ""),
            observation=data.get("observation", ""),
            steps=steps,
            reward=float(data.get("reward", 0.0)),
            tier=int(data.get("tier", -1)),
            stop_reason=data.get("stop_reason", ""),
        )


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """The trajectories of a JSONL file, in file order.

    Raises:
        ValueError: a line is not a trajectory (with its line number).
    """
    trajectories = []
    with Path(path).open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                trajectories.append(Trajectory.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{number}: not a trajectory line: {e!r}") from None
    return trajectories


def _describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:1000]}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def play_episode(
    env: gym.Env, agent: Any, task: Task, *, stop: threading.Event | None = None
) -> tuple[EpisodeResult, Trajectory]:
    """Plays ``task`` with ``agent`` to the end: a submit, the turn budget, or the agent stopping.

    Exceptions of the agent or the environment propagate (:func:`evaluate` records them as errors).
    ``stop`` (set from another thread) ends the episode early as an error.
    """
    start = time.monotonic()
    observation, _ = env.reset(options={"task_id": task.id})
    backend = env.unwrapped.backend.name
    first = observation
    agent.reset(task, backend, observation)
    steps: list[Step] = []
    info: dict[str, Any] = {}
    terminated = truncated = False
    stopped = False
    while not (terminated or truncated):
        if stop is not None and stop.is_set():
            stopped = True
            break
        action = agent.act(observation)
        if action is None:
            break
        observation, reward, terminated, truncated, info = env.step(action)
        steps.append(Step(action, observation, float(reward), info.get("tool", ""), info.get("status", "")))
    stats = dict(getattr(agent, "episode_stats", dict)() or {})
    tokens = stats.get("tokens")
    reward_sum = sum(s.reward for s in steps)
    common: dict[str, Any] = {
        "task_id": task.id,
        "reward": reward_sum,
        "turns": len(steps),
        "seconds": time.monotonic() - start,
        "agent": getattr(agent, "name", type(agent).__name__),
        "backend": backend,
        "tokens": int(tokens) if isinstance(tokens, int) else None,
    }
    if terminated:
        profile = (info.get("result") or {}).get("profile") or {}
        result = EpisodeResult(
            tier=int(info.get("tier", -1)),
            submitted=True,
            compiled=bool(info.get("compiled")),
            correct=bool(info.get("correct")),
            candidate_ms=_number(profile.get("candidate_ms")),
            eager_ms=_number(profile.get("eager_ms")),
            compile_ms=_number(profile.get("compile_ms")),
            speedup_eager=_number(info.get("speedup_eager")),
            speedup_compile=_number(info.get("speedup_compile")),
            stop_reason="submitted",
            submit_status=str(info.get("status", "")),
            **common,
        )
    elif stopped:
        result = EpisodeResult(stop_reason="error", error="interrupted", stop_detail="interrupted", **common)
    elif stats.get("error"):
        detail = str(stats.get("stop_reason") or "the agent failed")
        result = EpisodeResult(stop_reason="error", stop_detail=detail, error=str(stats["error"]), **common)
    elif truncated:
        result = EpisodeResult(stop_reason="truncated", stop_detail="the turn budget ran out", **common)
    else:
        detail = str(stats.get("stop_reason") or "the agent stopped")
        result = EpisodeResult(stop_reason="agent_stopped", stop_detail=detail, **common)
    trajectory = Trajectory(
        task_id=task.id,
        agent=result.agent,
        backend=backend,
        observation=first,
        steps=tuple(steps),
        reward=reward_sum,
        tier=result.tier,
        stop_reason=result.stop_reason,
    )
    return result, trajectory


# -- the run -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EvalRun:
    """What :func:`evaluate` did.

    Attributes:
        task_ids: the run's problems, in order.
        results: one result per problem that has one (played now or earlier), in task order.
        played: episodes played by this call.
        skipped: problems skipped because ``out`` already held a finished result (``resume``).
        interrupted: the run was stopped (Ctrl-C) before every task was played.
    """

    task_ids: tuple[str, ...]
    results: tuple[EpisodeResult, ...]
    played: int
    skipped: int
    interrupted: bool = False

    @property
    def metrics(self) -> Metrics:
        """The run's metrics over all its problems (missing ones count as incorrect)."""
        return compute_metrics(self.results, task_ids=self.task_ids)


class _Progress:
    """tqdm when installed, else one line per finished task; nothing when disabled."""

    def __init__(self, total: int, enabled: bool, stream: TextIO) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.enabled = enabled and total > 0
        self.bar: Any = None
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                self.bar = None
            else:
                self.bar = tqdm(total=total, desc="eval", unit="task", file=stream, dynamic_ncols=True)

    def update(self, result: EpisodeResult) -> None:
        self.done += 1
        if not self.enabled:
            return
        outcome = f"tier {result.tier}" if result.submitted else result.stop_reason
        if self.bar is not None:
            self.bar.set_postfix_str(f"{result.task_id}: {outcome}", refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {result.task_id}: {outcome} ({result.seconds:.1f} s)", file=self.stream)
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _default_env_factory(
    backend: str, max_turns: int, eval_config: EvalConfig | None, cache_dir: str | None, env_options: Mapping[str, Any]
) -> EnvFactory:
    def make(tasks: TaskSet) -> gym.Env:
        from cudagym.envs import CudaKernelEnv

        return CudaKernelEnv(
            tasks, backend=backend, max_turns=max_turns, eval_config=eval_config, cache_dir=cache_dir, **env_options
        )

    return make


def _close(thing: Any) -> None:
    close = getattr(thing, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass


def evaluate(
    tasks: Sequence[Task],
    agent_factory: AgentFactory,
    *,
    backend: str = "auto",
    workers: int = 1,
    out: str | Path | None = None,
    resume: bool = False,
    trajectories: str | Path | None = None,
    max_turns: int = 200,
    eval_config: EvalConfig | None = None,
    cache_dir: str | None = None,
    env_factory: EnvFactory | None = None,
    env_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    progress_stream: TextIO | None = None,
) -> EvalRun:
    """Runs ``agent_factory()``'s agents over ``tasks`` (see the module doc).

    Args:
        tasks: the problems (a TaskSet or a sequence of tasks with distinct ids).
        agent_factory: makes one fresh agent per worker (``lambda: make_agent("scripted")``).
        backend: "auto", "cpu" or "cuda".
        workers: threads, each with its own environment and agent.
        out: the results JSONL; without ``resume`` it is overwritten.
        resume: skip the tasks ``out`` already holds a finished result for, and append.
        trajectories: where to append each episode's actions and observations (JSONL); overwritten
            unless ``resume``.
        max_turns: the environment's turn budget per episode.
        eval_config: evaluation settings (``QUICK_EVAL_CONFIG`` for smoke runs); None: the defaults.
        cache_dir: the compile and baseline cache; None: ``$CUDAGYM_CACHE_DIR`` or the default.
        env_factory: builds a worker's environment from the task set; None: a ``CudaKernelEnv``.
        env_options: further keyword arguments of the default ``CudaKernelEnv`` (e.g. ``reward=``).
        progress: show progress on ``progress_stream`` (default stderr).
        progress_stream: where progress goes.

    Returns:
        The run: every problem's latest result, and how many were played and skipped.

    Raises:
        ValueError: ``workers < 1``, or ``out`` holds results of another agent or backend (with ``resume``).
        BackendUnavailable: the backend cannot run here (checked before anything is played).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    task_set = tasks if isinstance(tasks, TaskSet) else TaskSet("eval", tasks)
    if env_factory is None:
        from cudagym.backends import resolve_backend

        backend_name = resolve_backend(backend).name
        env_factory = _default_env_factory(backend, max_turns, eval_config, cache_dir, env_options or {})
    else:
        backend_name = ""
    agents = [agent_factory() for _ in range(min(workers, max(len(task_set), 1)))]
    agent_name = getattr(agents[0], "name", type(agents[0]).__name__)

    previous: dict[str, EpisodeResult] = {}
    if out is not None and resume:
        previous = {k: v for k, v in latest_by_task(read_results(out)).items() if k in set(task_set.ids)}
        for result in previous.values():
            if result.agent and result.agent != agent_name:
                raise ValueError(
                    f"{out} holds results of agent {result.agent!r}, not {agent_name!r}; use another --out"
                )
            if backend_name and result.backend and result.backend != backend_name:
                raise ValueError(f"{out} holds results on backend {result.backend!r}, not {backend_name!r}")
    done = {task_id for task_id, result in previous.items() if result.finished}
    todo = [task for task in task_set if task.id not in done]

    mode = "a" if resume else "w"
    out_file = None
    traj_file = None
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        out_file = Path(out).open(mode)
    if trajectories is not None:
        Path(trajectories).parent.mkdir(parents=True, exist_ok=True)
        traj_file = Path(trajectories).open(mode)

    work: queue.Queue[Task] = queue.Queue()
    for task in todo:
        work.put(task)
    lock = threading.Lock()
    stop = threading.Event()
    new_results: dict[str, EpisodeResult] = {}
    bar = _Progress(len(todo), progress, progress_stream or sys.stderr)

    def record(result: EpisodeResult, trajectory: Trajectory | None) -> None:
        with lock:
            new_results[result.task_id] = result
            if out_file is not None:
                out_file.write(json.dumps(result.to_json()) + "\n")
                out_file.flush()
            if traj_file is not None and trajectory is not None:
                traj_file.write(json.dumps(trajectory.to_json()) + "\n")
                traj_file.flush()
            bar.update(result)

    def worker(agent: Any) -> None:
        env: gym.Env | None = None
        try:
            while not stop.is_set():
                try:
                    task = work.get_nowait()
                except queue.Empty:
                    return
                start = time.monotonic()
                try:
                    if env is None:
                        env = env_factory(task_set)
                    result, trajectory = play_episode(env, agent, task, stop=stop)
                except Exception as error:
                    logger.warning("the episode of %s ended in an exception", task.id, exc_info=error)
                    _close(env)
                    env = None
                    result = EpisodeResult(
                        task_id=task.id,
                        stop_reason="error",
                        stop_detail="an exception ended the episode",
                        error=_describe_error(error),
                        agent=agent_name,
                        backend=backend_name,
                        seconds=time.monotonic() - start,
                    )
                    trajectory = None
                if result.error == "interrupted":
                    return
                logger.info(
                    "%s: %s in %.1f s",
                    task.id,
                    f"tier {result.tier}" if result.submitted else result.stop_reason,
                    result.seconds,
                )
                record(result, trajectory)
        finally:
            _close(env)
            _close(agent)

    threads = [
        threading.Thread(target=worker, args=(agent,), name=f"cudagym-eval-{i}") for i, agent in enumerate(agents)
    ]
    interrupted = False
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        bar.close()
        for handle in (out_file, traj_file):
            if handle is not None:
                handle.close()
    merged = {**previous, **new_results}
    ordered = tuple(merged[t] for t in task_set.ids if t in merged)
    return EvalRun(
        task_ids=tuple(task_set.ids),
        results=ordered,
        played=len(new_results),
        skipped=len(task_set) - len(todo),
        interrupted=interrupted or len(new_results) < len(todo),
    )


# The report lives in cudagym.report; its names stay importable from here.
from cudagym.report import FAST_P_PLOT as FAST_P_PLOT  # noqa: E402
from cudagym.report import METRICS_NAME as METRICS_NAME  # noqa: E402
from cudagym.report import REPORT_NAME as REPORT_NAME  # noqa: E402
from cudagym.report import SPEEDUP_PLOT as SPEEDUP_PLOT  # noqa: E402
from cudagym.report import Report as Report  # noqa: E402
from cudagym.report import format_report as format_report  # noqa: E402
from cudagym.report import format_summary as format_summary  # noqa: E402
from cudagym.report import plot_fast_p as plot_fast_p  # noqa: E402
from cudagym.report import plot_speedups as plot_speedups  # noqa: E402
from cudagym.report import write_report as write_report  # noqa: E402
