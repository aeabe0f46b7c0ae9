"""The reference PPO agent: CudaKernelEnv as a discrete choice over kernel-template knobs.

``KernelTemplateEnv`` is a Gymnasium env whose episode is one task of the set it was given: the agent picks
the knobs of that task's template (``kernel_templates``) as a ``MultiDiscrete`` action, the wrapper renders the
solution, plays it through the real ``CudaKernelEnv`` (``write_file`` for each file, then ``submit``: compile,
verify, profile) and returns the env's reward (the milestone tier by default; any shaper by name). With
``attempts > 1`` the agent gets several tries per episode and sees its previous choice and result.

Observation (``float32``, in [-1, 1]): the task family and op one-hot, log2 of the element count and of the
last dimension, whether the backend is cuda, the attempt's position, then the previous attempt's knob
one-hots, tier / 3 and log(speedup vs eager) / 4 (zeros before the first attempt).

Evaluating a solution costs seconds, so outcomes are cached (``ResultCache``) per (backend, reward, task id,
hash of the rendered files) within a process: the first visit of a configuration is a real evaluation and
later visits replay its outcome, timing noise included. Pass ``cache=False`` to evaluate every step.

``train_ppo`` trains stable-baselines3's PPO on vectorised copies (``DummyVecEnv`` sharing one runner and
cache; ``SubprocVecEnv`` with one each), logs to TensorBoard when it is installed, saves checkpoints, writes
the learning curve (CSV, JSON, PNG) and compares the untrained and trained policies.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cudagym.baselines.kernel_templates import (
    FAMILIES,
    KNOB_NAMES,
    TEMPLATE_TASKS,
    Knobs,
    KnobSpace,
    Solution,
    render,
    spec_for,
    supports,
)
from cudagym.baselines.scripted import tool_call
from cudagym.evaluator import EvalConfig
from cudagym.tasks import Task, TaskSet
from cudagym.tasks import load as load_tasks


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one evaluated solution earned: the episode's reward and the submit result's fields."""

    reward: float
    tier: int
    compiled: bool
    correct: bool
    speedup_eager: float | None
    speedup_compile: float | None
    seconds: float  # wall time of the real evaluation
    message: str


class ResultCache:
    """Outcomes by (backend, reward, task id, solution hash), for this process (see the module doc)."""

    def __init__(self) -> None:
        self._outcomes: dict[tuple[str, str, str, str], Outcome] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str, str, str]) -> Outcome | None:
        outcome = self._outcomes.get(key)
        if outcome is None:
            self.misses += 1
        else:
            self.hits += 1
        return outcome

    def put(self, key: tuple[str, str, str, str], outcome: Outcome) -> None:
        self._outcomes[key] = outcome

    def __len__(self) -> int:
        return len(self._outcomes)

    def stats(self) -> dict[str, Any]:
        """Hits, misses, distinct solutions and the seconds spent in real evaluations."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "distinct": len(self),
            "evaluation_seconds": round(sum(o.seconds for o in self._outcomes.values()), 2),
        }


def template_tasks(
    task_set: str | TaskSet | Sequence[Task] = "builtin", ids: Sequence[str] | None = None, **options: Any
) -> TaskSet:
    """The tasks of a set that a kernel template covers (optionally only ``ids``, short or full)."""
    tasks = load_tasks(task_set, **options) if isinstance(task_set, str) else task_set
    chosen = [t for t in tasks if supports(t)]
    if ids:
        wanted = {i if "/" in i else f"builtin/{i}" for i in ids}
        missing = sorted(wanted - {t.id for t in chosen})
        if missing:
            raise KeyError(f"no template task {missing}; template tasks: {', '.join(TEMPLATE_TASKS)}")
        chosen = [t for t in chosen if t.id in wanted]
    if not chosen:
        raise ValueError(f"no task of the set has a kernel template; templates cover: {', '.join(TEMPLATE_TASKS)}")
    return TaskSet("templates", chosen)


class SolutionRunner:
    """Plays rendered solutions through one ``CudaKernelEnv`` and caches their outcomes.

    Args:
        tasks: the tasks solutions may be for.
        backend: "cpu" or "cuda".
        reward, reward_options: the env's reward (a shaper name such as "milestone" or "speedup").
        eval_config: evaluation settings of the env.
        cache: a ``ResultCache`` to share, True for a new one, False to evaluate every call.
    """

    def __init__(
        self,
        tasks: TaskSet,
        backend: str,
        *,
        reward: str = "milestone",
        reward_options: dict[str, Any] | None = None,
        eval_config: EvalConfig | None = None,
        cache: ResultCache | bool = True,
    ) -> None:
        self.tasks = tasks
        self.backend = backend
        self.reward = reward
        self.reward_options = reward_options
        self.eval_config = eval_config
        self.cache = cache if isinstance(cache, ResultCache) else (ResultCache() if cache else None)
        self.evaluations = 0
        self._env: Any = None

    def _ensure_env(self) -> Any:
        if self._env is None:
            from cudagym.envs import CudaKernelEnv

            self._env = CudaKernelEnv(
                self.tasks,
                backend=self.backend,
                max_turns=16,
                reward=self.reward,
                reward_options=self.reward_options,
                eval_config=self.eval_config,
            )
        return self._env

    def evaluate(self, task: Task, solution: Solution) -> tuple[Outcome, bool]:
        """(outcome, whether it came from the cache); a miss runs a real episode of CudaKernelEnv."""
        key = (self.backend, self.reward, task.id, solution.digest)
        if self.cache is not None:
            cached = self.cache.get(key)
            if cached is not None:
                return cached, True
        env = self._ensure_env()
        start = time.monotonic()
        env.reset(options={"task_id": task.id})
        total = 0.0
        for path, content in solution.files.items():
            _, reward, _, _, info = env.step(tool_call("write_file", path=path, content=content))
            total += reward
            if info.get("status") != "ok":
                raise RuntimeError(f"the workspace refused {path}: {info['result'].get('message')}")
        _, reward, terminated, _, info = env.step(tool_call("submit"))
        if not terminated:
            raise RuntimeError(f"submit did not end the episode: {info['result'].get('message')}")
        outcome = Outcome(
            reward=total + float(reward),
            tier=int(info["tier"]),
            compiled=bool(info["compiled"]),
            correct=bool(info["correct"]),
            speedup_eager=info.get("speedup_eager"),
            speedup_compile=info.get("speedup_compile"),
            seconds=time.monotonic() - start,
            message=str(info["result"].get("message", ""))[:500],
        )
        self.evaluations += 1
        if self.cache is not None:
            self.cache.put(key, outcome)
        return outcome, False

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def _sizes(task: Task, backend: str) -> tuple[int, int]:
    """(elements, last dimension) of the task's input on ``backend``, from its size profile."""
    values = [int(v) for v in task.metadata.sizes.get(backend, {}).values() if isinstance(v, int)]
    if not values:
        return 1, 1
    return math.prod(values), values[-1]


class KernelTemplateEnv(gym.Env[np.ndarray, np.ndarray]):
    """Kernel optimisation as a choice of template knobs (see the module doc).

    Args:
        tasks: a task-set name, a TaskSet or tasks; only tasks a template covers are kept.
        backend: "cpu", "cuda" or "auto".
        knob_space: which knob indices the agent chooses from (default: all).
        attempts: evaluated choices per episode.
        runner: a ``SolutionRunner`` to share between envs (default: a new one with the options below).
        reward, reward_options, eval_config, cache: for the new runner (see ``SolutionRunner``).
        ids: keep only these task ids (short names such as "relu" work too).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        tasks: str | TaskSet | Sequence[Task] = "builtin",
        *,
        backend: str = "cpu",
        knob_space: KnobSpace | None = None,
        attempts: int = 1,
        runner: SolutionRunner | None = None,
        reward: str = "milestone",
        reward_options: dict[str, Any] | None = None,
        eval_config: EvalConfig | None = None,
        cache: ResultCache | bool = True,
        ids: Sequence[str] | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        from cudagym.backends import resolve_backend

        self.backend = resolve_backend(backend).name if backend == "auto" else backend
        self.tasks = template_tasks(tasks, ids)
        self.knob_space = knob_space or KnobSpace()
        self.attempts = attempts
        self.runner = runner or SolutionRunner(
            self.tasks, self.backend, reward=reward, reward_options=reward_options, eval_config=eval_config, cache=cache
        )
        self._owns_runner = runner is None
        self._offsets = np.cumsum((0, *self.knob_space.nvec))
        size = len(FAMILIES) + len(TEMPLATE_TASKS) + 4 + int(self._offsets[-1]) + 2
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(size,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete(np.array(self.knob_space.nvec, dtype=np.int64))
        self.task: Task | None = None
        self._attempt = 0
        self._previous: tuple[np.ndarray, Outcome] | None = None

    def _observation(self) -> np.ndarray:
        assert self.task is not None
        spec = spec_for(self.task)
        numel, last = _sizes(self.task, self.backend)
        head = np.zeros(len(FAMILIES) + len(TEMPLATE_TASKS), dtype=np.float32)
        head[FAMILIES.index(spec.family)] = 1.0
        head[len(FAMILIES) + spec.op_index] = 1.0
        scalars = [
            math.log2(max(numel, 1)) / 40.0,
            math.log2(max(last, 1)) / 40.0,
            1.0 if self.backend == "cuda" else 0.0,
            self._attempt / self.attempts,
        ]
        previous = np.zeros(int(self._offsets[-1]) + 2, dtype=np.float32)
        if self._previous is not None:
            action, outcome = self._previous
            previous[self._offsets[:-1] + action] = 1.0
            previous[-2] = outcome.tier / 3.0
            speedup = outcome.speedup_eager or 0.0
            previous[-1] = float(np.clip(math.log(speedup) / 4.0, -1.0, 1.0)) if speedup > 0 else -1.0
        return np.concatenate([head, np.asarray(scalars, dtype=np.float32), previous]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            self.task = self.tasks.get(options["task_id"])
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._attempt = 0
        self._previous = None
        return self._observation(), {"task_id": self.task.id}

    def knobs_for(self, action: Any) -> Knobs:
        """The concrete knobs a (valid) action stands for on this env's backend."""
        return Knobs.from_indices(self.knob_space.indices(action), self.backend)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action.tolist()} is outside {self.action_space}")
        knobs = self.knobs_for(action)
        solution = render(self.task, knobs, self.backend)
        outcome, cached = self.runner.evaluate(self.task, solution)
        self._attempt += 1
        self._previous = (action, outcome)
        terminated = self._attempt >= self.attempts
        info = {
            "task_id": self.task.id,
            "knobs": knobs.as_dict(),
            "digest": solution.digest,
            "cached": cached,
            **{k: v for k, v in dataclasses.asdict(outcome).items() if k != "reward"},
        }
        return self._observation(), float(outcome.reward), terminated, False, info

    def close(self) -> None:
        if self._owns_runner:
            self.runner.close()
        super().close()


# -- training ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PolicyScore:
    """Mean episode reward of a policy over the tasks (each task weighted alike), and per task."""

    mean: float
    per_task: dict[str, float]
    choices: dict[str, dict[str, Any]]  # task id -> knobs of the last episode (the policy's pick when deterministic)


def score_policy(model: Any, env: KernelTemplateEnv, *, deterministic: bool, episodes_per_task: int = 1) -> PolicyScore:
    """``evaluate_policy`` over every task of ``env`` in turn: ``episodes_per_task`` episodes each."""
    per_task: dict[str, float] = {}
    choices: dict[str, dict[str, Any]] = {}
    for task in env.tasks:
        totals = []
        for _ in range(episodes_per_task):
            obs, _ = env.reset(options={"task_id": task.id})
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=deterministic)
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                done = terminated or truncated
                choices[task.id] = {**info["knobs"], "tier": info["tier"], "speedup_eager": info["speedup_eager"]}
            totals.append(total)
        per_task[task.id] = float(np.mean(totals))
    return PolicyScore(float(np.mean(list(per_task.values()))), per_task, choices)


@dataclasses.dataclass(frozen=True)
class PPOReport:
    """What ``train_ppo`` measured and wrote (all paths under ``out_dir``)."""

    untrained: PolicyScore  # actions sampled from the initial policy (an untrained agent's behaviour)
    untrained_deterministic: PolicyScore  # the initial policy's mode
    trained: PolicyScore  # the trained policy's mode (deterministic)
    timesteps: int
    seconds: float
    cache: dict[str, Any]
    files: dict[str, str]

    @property
    def margin(self) -> float:
        """Trained (deterministic) minus untrained (sampled) mean reward."""
        return self.trained.mean - self.untrained.mean


DEFAULT_PPO_KWARGS: dict[str, Any] = {
    "n_steps": 64,  # per env; with 4 envs 256 transitions per update
    "batch_size": 64,
    "n_epochs": 10,
    "learning_rate": 5e-4,
    "target_kl": 0.05,  # stops an update's epochs early rather than let one batch swing the policy
    "gamma": 0.99,
    "ent_coef": 0.0,
}


def train_ppo(
    *,
    tasks: str | TaskSet | Sequence[Task] = "builtin",
    ids: Sequence[str] | None = None,
    backend: str = "cpu",
    timesteps: int = 4096,
    n_envs: int = 4,
    seed: int = 0,
    out_dir: str = "ppo_out",
    knob_space: KnobSpace | None = None,
    attempts: int = 1,
    reward: str = "milestone",
    reward_options: dict[str, Any] | None = None,
    eval_config: EvalConfig | None = None,
    cache: ResultCache | bool = True,
    subproc: bool = False,
    eval_every: int | None = None,
    untrained_episodes_per_task: int = 8,
    checkpoint_every: int | None = None,
    ppo_kwargs: dict[str, Any] | None = None,
    torch_threads: int | None = 1,
    verbose: int = 0,
) -> PPOReport:
    """Trains PPO on ``KernelTemplateEnv`` and compares the untrained and trained policies.

    The untrained policy is scored by sampling its actions (``untrained_episodes_per_task`` episodes per
    task), which is how an untrained agent behaves, and by its mode; the trained one by its mode
    (deterministic). Every ``eval_every`` timesteps (default: a tenth of the run) the current mode is scored
    too, for the learning curve. Writes under ``out_dir``: ``model.zip``, ``checkpoints/``, ``tb/`` (when
    tensorboard is installed), ``learning_curve.csv``, ``learning_curve.json``, ``learning_curve.png`` (when
    matplotlib is installed) and ``summary.json``. ``torch_threads`` caps torch's threads while training (a
    small MLP trains faster on one thread, and the evaluation children keep the other cores); None leaves it.
    """
    import importlib.util
    import json
    from pathlib import Path

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor

    start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if backend == "auto":
        from cudagym.backends import resolve_backend

        backend = resolve_backend("auto").name
    task_set = template_tasks(tasks, ids)
    space = knob_space or KnobSpace()
    runner = SolutionRunner(
        task_set, backend, reward=reward, reward_options=reward_options, eval_config=eval_config, cache=cache
    )
    env_kwargs: dict[str, Any] = {"backend": backend, "knob_space": space, "attempts": attempts}
    runner_kwargs = {"reward": reward, "reward_options": reward_options, "eval_config": eval_config, "cache": cache}

    def make(rank: int) -> Any:
        if subproc:  # each worker process builds its own runner and cache
            return lambda: KernelTemplateEnv(task_set, **env_kwargs, **runner_kwargs)
        return lambda: KernelTemplateEnv(task_set, runner=runner, **env_kwargs)

    vec_cls = SubprocVecEnv if subproc else DummyVecEnv
    venv = VecMonitor(vec_cls([make(i) for i in range(n_envs)]))
    venv.seed(seed)
    eval_env = KernelTemplateEnv(task_set, runner=runner, **env_kwargs)
    kwargs = {**DEFAULT_PPO_KWARGS, **(ppo_kwargs or {})}
    tb_dir = str(out / "tb") if importlib.util.find_spec("tensorboard") else None
    threads = torch.get_num_threads()
    if torch_threads:
        torch.set_num_threads(torch_threads)
    try:
        model = PPO("MlpPolicy", venv, seed=seed, verbose=verbose, tensorboard_log=tb_dir, **kwargs)
        untrained = score_policy(model, eval_env, deterministic=False, episodes_per_task=untrained_episodes_per_task)
        untrained_det = score_policy(model, eval_env, deterministic=True)
        curve = _curve_recorder(eval_env, every=eval_every or max(timesteps // 10, 1), initial=untrained_det.mean)
        checkpoints = CheckpointCallback(
            save_freq=max((checkpoint_every or max(timesteps // 4, 1)) // n_envs, 1),
            save_path=str(out / "checkpoints"),
            name_prefix="ppo",
        )
        model.learn(total_timesteps=timesteps, callback=CallbackList([curve, checkpoints]), tb_log_name="ppo")
        model.save(str(out / "model.zip"))
        trained = score_policy(model, eval_env, deterministic=True)
    finally:
        torch.set_num_threads(threads)
        venv.close()
        eval_env.close()
        runner.close()
    cache_stats = runner.cache.stats() if runner.cache is not None else {"evaluations": runner.evaluations}
    files = {"model": str(out / "model.zip"), "checkpoints": str(out / "checkpoints")}
    if tb_dir:
        files["tensorboard"] = tb_dir
    summary = {
        "backend": backend,
        "tasks": list(task_set.ids),
        "knob_space": {k: list(v) for k, v in space.choices.items()},
        "reward": reward,
        "timesteps": model.num_timesteps,
        "n_envs": n_envs,
        "seed": seed,
        "untrained_sampled": dataclasses.asdict(untrained),
        "untrained_deterministic": dataclasses.asdict(untrained_det),
        "trained_deterministic": dataclasses.asdict(trained),
        "cache": cache_stats,
    }
    files.update(_write_curve(out, curve, summary, untrained.mean, trained.mean))
    seconds = time.monotonic() - start
    summary["seconds"] = round(seconds, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    files["summary"] = str(out / "summary.json")
    return PPOReport(untrained, untrained_det, trained, model.num_timesteps, seconds, cache_stats, files)


def _curve_recorder(eval_env: KernelTemplateEnv, *, every: int, initial: float) -> Any:
    """A stable-baselines3 callback that records every finished training episode and, every ``every`` steps,
    the deterministic policy's score (``episodes``, ``evaluations``). Built here so that importing this module
    does not need stable-baselines3."""
    from stable_baselines3.common.callbacks import BaseCallback

    class CurveRecorder(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.episodes: list[tuple[int, str, float]] = []
            self.evaluations: list[tuple[int, float]] = [(0, initial)]
            self._next = every

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
                if done and "episode" in info:
                    self.episodes.append((self.num_timesteps, info.get("task_id", ""), float(info["episode"]["r"])))
            if self.num_timesteps >= self._next:
                self._next += every
                score = score_policy(self.model, eval_env, deterministic=True)
                self.evaluations.append((self.num_timesteps, score.mean))
                self.logger.record("eval/deterministic_mean_reward", score.mean)
            return True

    return CurveRecorder()


def _rolling(values: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _write_curve(out: Any, curve: Any, summary: dict[str, Any], untrained: float, trained: float) -> dict[str, str]:
    """learning_curve.csv / .json and, with matplotlib, learning_curve.png; returns their paths."""
    import csv
    import json

    window = max(min(len(curve.episodes) // 10, 100), 1)
    rolling = _rolling([r for _, _, r in curve.episodes], window)
    with open(out / "learning_curve.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timestep", "task_id", "reward", f"rolling_mean_{window}"])
        for (step, task_id, reward), mean in zip(curve.episodes, rolling, strict=True):
            writer.writerow([step, task_id, reward, round(mean, 4)])
    data = {**summary, "episodes": curve.episodes, "deterministic_evaluations": curve.evaluations}
    (out / "learning_curve.json").write_text(json.dumps(data, default=str) + "\n")
    files = {"curve_csv": str(out / "learning_curve.csv"), "curve_json": str(out / "learning_curve.json")}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return files
    fig, ax = plt.subplots(figsize=(8, 4.5))
    steps = [s for s, _, _ in curve.episodes]
    ax.scatter(steps, [r for _, _, r in curve.episodes], s=4, alpha=0.15, color="tab:blue", label="training episodes")
    ax.plot(steps, rolling, color="tab:blue", label=f"training reward, rolling mean of {window}")
    ax.plot(*zip(*curve.evaluations, strict=True), "o-", color="tab:green", label="deterministic policy, all tasks")
    ax.axhline(untrained, ls="--", color="gray", label=f"untrained (sampled) {untrained:.2f}")
    ax.axhline(trained, ls=":", color="tab:green", label=f"trained (deterministic) {trained:.2f}")
    ax.set_xlabel("timesteps")
    ax.set_ylabel(f"episode reward ({summary['reward']})")
    ax.set_title(f"PPO over kernel templates: {len(summary['tasks'])} tasks, {summary['backend']} backend")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png", dpi=120)
    plt.close(fig)
    files["curve_png"] = str(out / "learning_curve.png")
    return files


__all__ = [
    "DEFAULT_PPO_KWARGS",
    "KNOB_NAMES",
    "KernelTemplateEnv",
    "Outcome",
    "PPOReport",
    "PolicyScore",
    "ResultCache",
    "SolutionRunner",
    "score_policy",
    "template_tasks",
    "train_ppo",
]
