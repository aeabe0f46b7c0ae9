"""The ``cudagym`` command line.

``cudagym run``: the main job: a scripted agent plays a built-in task's reference solution through
tool calls (write, compile, verify, profile, submit) and prints the episode and its reward.
``cudagym tasks list|show``: inspect task sets.
``cudagym serve``: the local evaluation service shared by the environments of one machine.
``cudagym prepare``: the precompiled header, the GPU library and the bytecode cache, built ahead of time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

DEFAULT_TASK = "builtin/scale_bias_tanh"


def _run(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import cudagym  # noqa: F401  (registers the environment)
    from cudagym.baselines.scripted import ScriptedAgent, play

    env = gym.make("CudaKernel-v0", task_set=args.task_set, backend=args.backend, max_turns=args.max_turns)
    try:
        log = play(
            env,
            ScriptedAgent(profile=not args.no_profile),
            task_id=args.task,
            seed=args.seed,
            echo=(lambda text: print(text, flush=True)) if not args.quiet else None,
        )
    finally:
        env.close()
    info = log.final_info
    print(
        f"\n== {log.task_id}: tier {info.get('tier')} | reward {log.total_reward:g} | "
        f"speedup vs eager {_fmt(info.get('speedup_eager'))} | vs torch.compile {_fmt(info.get('speedup_compile'))}"
    )
    return 0 if log.terminated and info.get("tier", -1) >= 1 else 1


def _fmt(value: float | None) -> str:
    return f"{value:.3g}x" if isinstance(value, (int, float)) else "n/a"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudagym", description="GPU-kernel optimisation as an RL environment.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = sub.add_parser("run", help="play a task's reference solution with the scripted agent")
    run.add_argument("--task", default=DEFAULT_TASK, help=f"task id (default {DEFAULT_TASK})")
    run.add_argument("--task-set", default="builtin", help="task set name (default builtin)")
    run.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--max-turns", type=int, default=200)
    run.add_argument("--no-profile", action="store_true", help="skip the profile step before submit")
    run.add_argument("--quiet", action="store_true", help="print only the summary line")
    run.set_defaults(func=_run)
    from cudagym.tasks.cli import add_tasks_commands

    add_tasks_commands(sub)
    from cudagym.eval_cli import add_eval_commands

    add_eval_commands(sub)
    from cudagym.baselines.ppo_cli import add_baselines_commands

    add_baselines_commands(sub)
    from cudagym.service import add_service_commands

    add_service_commands(sub)
    from cudagym.prepare import add_prepare_command

    add_prepare_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
