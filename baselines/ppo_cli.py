"""``cudagym baselines ppo``: trains the reference PPO agent over kernel templates and compares it.

``cudagym baselines ppo --timesteps N [--task-set builtin] [--task ID ...] [--backend cpu|cuda|auto]
[--out DIR] [--n-envs K] [--seed S] [--knob NAME=V1,V2 ...] [--reward NAME] [--checks N] [--fast-timing]
[--no-compile-baseline] [--subproc] [--no-cache]`` prints the untrained and trained mean episode rewards
and writes the model, checkpoints, TensorBoard logs, the learning curve (CSV, JSON, PNG) and a summary under
``--out``. The main CLI calls :func:`add_baselines_commands` on its subparsers.
"""

from __future__ import annotations

import argparse
from typing import Any

from cudagym.baselines.kernel_templates import KNOB_NAMES, KNOBS, TEMPLATE_TASKS, KnobSpace


def parse_knob_space(specs: list[str] | None, backend: str) -> KnobSpace:
    """``["precision=fast,approx", "vector=1,4"]`` -> a KnobSpace; values are the backend's own (see
    ``kernel_templates.KNOBS``). Only the named knobs vary, the others stay at their default choice; with no
    spec every knob varies over all its values."""
    choices: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, values = spec.partition("=")
        if not sep or name not in KNOB_NAMES or not values:
            raise ValueError(f"--knob takes NAME=V1,V2 with NAME one of {', '.join(KNOB_NAMES)}; got {spec!r}")
        knob = KNOBS[KNOB_NAMES.index(name)]
        allowed = [str(v) for v in knob.values(backend)]
        indices = []
        for value in values.split(","):
            if value not in allowed:
                raise ValueError(f"--knob {name}: {value!r} is not a {backend} value; choose from {allowed}")
            indices.append(allowed.index(value))
        choices[name] = tuple(indices)
    return KnobSpace.fixed_except(**choices) if choices else KnobSpace()


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timesteps", type=int, required=True, help="PPO environment steps (one step: one choice)")
    parser.add_argument("--task-set", default="builtin", help="task set (only tasks with a template are used)")
    parser.add_argument(
        "--task", action="append", metavar="ID", help=f"keep this task (repeatable; default: all {len(TEMPLATE_TASKS)})"
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--out", default="ppo_out", metavar="DIR", help="output folder (default ppo_out)")
    parser.add_argument("--n-envs", type=int, default=4, help="vectorised envs (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--knob",
        action="append",
        metavar="NAME=V1,V2",
        help="let this knob vary over these backend values (repeatable; unnamed knobs stay at their default; "
        "none given: every knob varies over all its values)",
    )
    parser.add_argument("--reward", default="milestone", help="reward shaper of the env (default milestone)")
    parser.add_argument("--attempts", type=int, default=1, help="choices per episode (default 1)")
    parser.add_argument("--checks", type=int, default=5, help="input sets verification compares (default 5)")
    parser.add_argument("--fast-timing", action="store_true", help="short timing: 5-50 repetitions, 0.2 s budget")
    parser.add_argument("--no-compile-baseline", action="store_true", help="skip torch.compile (tiers stop at 2)")
    parser.add_argument("--untrained-episodes", type=int, default=8, help="sampled episodes per task, untrained")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between deterministic scorings")
    parser.add_argument("--subproc", action="store_true", help="SubprocVecEnv (a runner and cache per worker)")
    parser.add_argument("--no-cache", action="store_true", help="evaluate every step, even a configuration seen before")
    parser.add_argument("--verbose", type=int, default=0, help="stable-baselines3 verbosity")


def _eval_config(args: argparse.Namespace) -> Any:
    from cudagym.evaluator import EvalConfig
    from cudagym.harness.timing import TimingConfig

    timing = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)
    return EvalConfig(
        num_checks=args.checks,
        timing=timing if args.fast_timing else TimingConfig(),
        compile_baseline=not args.no_compile_baseline,
    )


def _run_ppo(args: argparse.Namespace) -> int:
    from cudagym.backends import resolve_backend
    from cudagym.baselines.ppo import template_tasks, train_ppo

    backend = resolve_backend(args.backend).name
    space = parse_knob_space(args.knob, backend)
    tasks = template_tasks(args.task_set, args.task)
    print(f"PPO over kernel templates: {len(tasks)} task(s) on {backend}, {len(space)} knob combinations per task")
    print("tasks: " + ", ".join(tasks.ids), flush=True)
    report = train_ppo(
        tasks=tasks,
        backend=backend,
        timesteps=args.timesteps,
        n_envs=args.n_envs,
        seed=args.seed,
        out_dir=args.out,
        knob_space=space,
        attempts=args.attempts,
        reward=args.reward,
        eval_config=_eval_config(args),
        cache=not args.no_cache,
        subproc=args.subproc,
        eval_every=args.eval_every,
        untrained_episodes_per_task=args.untrained_episodes,
        verbose=args.verbose,
    )
    print(f"\n{'task':<28} {'trained choice':<66} tier  speedup")
    for task_id, choice in report.trained.choices.items():
        knobs = ", ".join(f"{k}={choice[k]}" for k in KNOB_NAMES)
        speedup = choice["speedup_eager"]
        print(f"{task_id:<28} {knobs:<66} {choice['tier']:>4}  {f'{speedup:.3g}x' if speedup else 'n/a'}")
    untrained, mode = report.untrained.mean, report.untrained_deterministic.mean
    print(
        f"\nmean episode reward: untrained {untrained:.3f} (sampled; its mode {mode:.3f}) -> trained "
        f"{report.trained.mean:.3f} (deterministic); margin {report.margin:+.3f}"
    )
    print(f"evaluations: {report.cache} | {report.timesteps} steps in {report.seconds:.1f} s")
    for name, path in report.files.items():
        print(f"{name}: {path}")
    return 0


def add_baselines_commands(subparsers: Any) -> None:
    """Adds ``baselines`` (with ``ppo`` and ``llm-ppo``) to a parser's subparsers (``parser.add_subparsers()``)."""
    group = subparsers.add_parser("baselines", help="train or run bundled baseline agents")
    sub = group.add_subparsers(dest="baseline", metavar="BASELINE", required=True)
    help_text = "train the reference PPO agent over kernel templates; compare untrained and trained"
    ppo = sub.add_parser("ppo", help=help_text, description=help_text)
    _configure(ppo)
    ppo.set_defaults(func=_run_ppo)
    from cudagym.baselines.llm_ppo.cli import add_llm_ppo_command

    add_llm_ppo_command(sub)
