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
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import gymnasium as gym

from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.metrics import (
    FAST_P_THRESHOLDS,
    EpisodeResult,
    Metrics,
    compute_metrics,
    latest_by_task,
    read_results,
)
from cudagym.tasks.task import Task, TaskSet

QUICK_EVAL_CONFIG = EvalConfig(
    num_checks=3,
    timing=TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2),
    verify_timeout=60,
    profile_timeout=120,
)
"""Three checks and short timing, for smoke runs and tests (``--quick``); not for numbers you report."""

REPORT_NAME = "report.md"
METRICS_NAME = "metrics.json"
SPEEDUP_PLOT = "speedup_hist.png"
FAST_P_PLOT = "fast_p.png"

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


# -- the report ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Report:
    """The files :func:`write_report` wrote.

    Attributes:
        markdown: the Markdown report.
        metrics: the metrics as JSON.
        plots: the PNG plots (empty without matplotlib).
        note: why plots are missing, when they are.
    """

    markdown: Path
    metrics: Path
    plots: tuple[Path, ...] = ()
    note: str = ""


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}x"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def format_summary(metrics: Metrics) -> str:
    """The summary table (Markdown): rates, geometric means, tiers, and fast_p vs both baselines."""
    m = metrics
    n = m.n
    tiers = " / ".join(str(m.tier_counts.get(t, 0)) for t in (-1, 1, 2, 3))
    rows = [
        ("problems", f"{n} ({m.evaluated} evaluated, {m.missing} missing)"),
        ("pass rate (correct)", f"{_pct(m.pass_rate)} ({m.correct}/{n})"),
        ("compiled", f"{_pct(m.compile_rate)} ({m.compiled}/{n})"),
        (f"faster than eager (>{m.margin:.0%})", f"{_pct(m.faster_than_eager_rate)} ({m.faster_than_eager}/{n})"),
        (
            f"faster than torch.compile (>{m.margin:.0%})",
            f"{_pct(m.faster_than_compile_rate)} ({m.faster_than_compile}/{n})",
        ),
        ("geomean speedup vs eager (correct)", f"{_x(m.geomean_speedup_eager)} (over {m.timed_correct})"),
        ("geomean speedup vs torch.compile (correct)", _x(m.geomean_speedup_compile)),
        ("tiers -1 / 1 / 2 / 3", tiers),
        ("mean tier (missing as -1)", f"{m.mean_tier:.3g}"),
        ("submitted", f"{m.submitted}/{n}"),
        ("episodes ended in an error", str(m.errors)),
        ("mean turns", f"{m.mean_turns:.3g}"),
        ("episode time (sum)", f"{m.total_seconds:.1f} s"),
    ]
    if m.total_tokens is not None:
        rows.append(("tokens", str(m.total_tokens)))
    lines = ["| metric | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    lines += [
        "",
        f"fast_p (KernelBench): correct and speedup > p (strict), over all {n} problems.",
        "",
        "| p | vs eager | vs torch.compile |",
        "| --- | --- | --- |",
    ]
    for p in m.fast_p_eager:
        lines.append(f"| {p:g} | {_pct(m.fast_p_eager[p])} | {_pct(m.fast_p_compile.get(p, 0.0))} |")
    return "\n".join(lines)


def format_report(
    results: Sequence[EpisodeResult],
    *,
    task_ids: Sequence[str] | None = None,
    title: str = "",
    plots: Sequence[str] = (),
) -> str:
    """The whole Markdown report: the summary (:func:`format_summary`), the plots, then one row per problem."""
    metrics = compute_metrics(results, task_ids=task_ids)
    latest = latest_by_task(results)
    ids = list(task_ids) if task_ids is not None else list(latest)
    agents = sorted({r.agent for r in latest.values() if r.agent})
    backends = sorted({r.backend for r in latest.values() if r.backend})
    heading = title or f"cudagym evaluation: {', '.join(agents) or 'agent'} on {metrics.n} tasks"
    lines = [f"# {heading}", ""]
    if backends:
        lines += [f"Backend: {', '.join(backends)}. Definitions: `cudagym.metrics`.", ""]
    lines += [format_summary(metrics), ""]
    for plot in plots:
        lines += [f"![{Path(plot).stem}]({Path(plot).name})", ""]
    lines += [
        "## Per task",
        "",
        "| task | tier | correct | vs eager | vs torch.compile | candidate ms | eager ms | compile ms | turns | s "
        "| end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task_id in ids:
        r = latest.get(task_id)
        if r is None:
            lines.append(f"| {_cell(task_id)} | | | | | | | | | | missing |")
            continue
        end = r.stop_reason if not (r.error or r.stop_detail) else f"{r.stop_reason}: {r.error or r.stop_detail}"
        lines.append(
            f"| {_cell(task_id)} | {r.tier} | {'yes' if r.correct else 'no'} | {_x(r.speedup('eager'))} | "
            f"{_x(r.speedup('compile'))} | {_ms(r.candidate_ms)} | {_ms(r.eager_ms)} | {_ms(r.compile_ms)} | "
            f"{r.turns} | {r.seconds:.1f} | {_cell(end[:200])} |"
        )
    return "\n".join(lines) + "\n"


def plot_speedups(results: Iterable[EpisodeResult], path: str | Path) -> Path:
    """A histogram of the correct results' speedups vs eager and vs torch.compile (log scale) as a PNG."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    correct = [r for r in results if r.correct]
    series = {
        "vs eager": [s for r in correct if (s := r.speedup("eager")) is not None],
        "vs torch.compile": [s for r in correct if (s := r.speedup("compile")) is not None],
    }
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    values = [v for vs in series.values() for v in vs]
    if values:
        low, high = min(min(values), 0.9), max(max(values), 1.1)
        edges = [low * (high / low) ** (i / 24) for i in range(25)]
        for label, vs in series.items():
            if vs:
                ax.hist(vs, bins=edges, alpha=0.6, label=f"{label} (n={len(vs)})")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if v < 10 else ""))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(1.0, color="black", linewidth=1)
        ax.axvline(1 / 0.95, color="grey", linewidth=1, linestyle="--", label="5% faster")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no correct, timed results", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("speedup (baseline time / candidate time)")
    ax.set_ylabel("problems")
    ax.set_title("Speedups of correct solutions")
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def plot_fast_p(results: Iterable[EpisodeResult], n: int, path: str | Path) -> Path:
    """The fast_p curve (fraction of all n problems correct with speedup > p) vs both baselines as a PNG."""
    from matplotlib.figure import Figure

    from cudagym.metrics import fast_p

    results = list(results)
    speedups = [s for r in results if r.correct for b in ("eager", "compile") if (s := r.speedup(b)) is not None]  # type: ignore[arg-type]
    top = max([2.5, *[1.1 * s for s in speedups]])
    grid = [top * i / 400 for i in range(401)]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for baseline, label in (("eager", "vs eager"), ("compile", "vs torch.compile")):
        curve = [fast_p(results, n, p, baseline) for p in grid]  # type: ignore[arg-type]
        ax.plot(grid, curve, label=label, drawstyle="steps-post")
        marks = list(FAST_P_THRESHOLDS)
        ax.scatter(marks, [fast_p(results, n, p, baseline) for p in marks], s=18)  # type: ignore[arg-type]
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel(f"fast_p (fraction of {n} problems)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("fast_p: correct and speedup > p")
    ax.legend()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def write_report(
    results: Sequence[EpisodeResult],
    report_dir: str | Path,
    *,
    task_ids: Sequence[str] | None = None,
    title: str = "",
    plots: bool = True,
) -> Report:
    """Writes ``report.md``, ``metrics.json`` and (with matplotlib) the two plots into ``report_dir``.

    Without matplotlib the report is written without plots and ``Report.note`` says so.
    """
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = compute_metrics(results, task_ids=task_ids)
    written: list[Path] = []
    note = ""
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            note = "matplotlib is not installed; plots skipped (pip install matplotlib)"
        else:
            latest = list(latest_by_task(results).values())
            if task_ids is not None:
                wanted = set(task_ids)
                latest = [r for r in latest if r.task_id in wanted]
            written.append(plot_speedups(latest, folder / SPEEDUP_PLOT))
            written.append(plot_fast_p(latest, metrics.n, folder / FAST_P_PLOT))
    markdown = folder / REPORT_NAME
    markdown.write_text(format_report(results, task_ids=task_ids, title=title, plots=[p.name for p in written]))
    metrics_path = folder / METRICS_NAME
    metrics_path.write_text(json.dumps(metrics.to_json(), indent=2) + "\n")
    return Report(markdown=markdown, metrics=metrics_path, plots=tuple(written), note=note)
