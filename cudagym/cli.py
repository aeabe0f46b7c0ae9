"""The ``cudagym`` command line.

``cudagym run``: the main job: a scripted agent plays a built-in task's reference solution through
tool calls (write, compile, verify, profile, submit) and prints the episode and its reward.
``cudagym tasks list|show``: inspect task sets.
``cudagym serve``: the local evaluation service shared by the environments of one machine.
``cudagym prepare``: the precompiled header, the GPU library and the bytecode cache, built ahead of time.
``cudagym synth``: make an Ops-6K-style task set, filtered by execution (``cudagym.synth``).
``cudagym serve-openenv``: the environment served over OpenEnv (``cudagym.integrations.openenv``).

``--log-level debug|info|warning|error`` (before or right after the command; default warning) sends the library's
log records (the ``cudagym`` logger) to stderr at that level.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

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
    print("\n" + summary_line(log.task_id, info, log.total_reward, env.unwrapped.backend.name))
    return 0 if log.terminated and info.get("tier", -1) >= 1 else 1


CPU_NOTE = (
    "cpu figures: C++ kernels vs PyTorch on this machine's cores, not a GPU's; they move with the machine's load "
    "from run to run, and the tier with them"
)
"""What the cpu backend's speedups mean, said wherever they are summed up."""


def summary_line(task_id: str, info: Mapping[str, Any], reward: float, backend: str) -> str:
    """``cudagym run``'s last line: the tier, the reward and the speedups, with the backend, how noisy the timed calls
    were (their spread: interquartile range over median) and, on cpu, what its figures mean (``CPU_NOTE``)."""
    profile = (info.get("result") or {}).get("profile") or {}
    timing = f"{backend} backend"
    if profile.get("spread") is not None:
        timing += f", spread of the timed calls {profile['spread']:.0%}"
    if profile and not profile.get("timing_fair", True):
        timing += ", timed while the machine was busy"
    parts = [
        f"tier {info.get('tier')}",
        f"reward {reward:g}",
        f"speedup vs eager {_fmt(info.get('speedup_eager'))}",
        f"vs torch.compile {_fmt(info.get('speedup_compile'))}",
        timing,
    ]
    if backend == "cpu":
        parts.append(CPU_NOTE)
    return f"== {task_id}: " + " | ".join(parts)


def _fmt(value: float | None) -> str:
    return f"{value:.3g}x" if isinstance(value, (int, float)) else "n/a"


LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LOG_LEVEL = "warning"


def configure_logging(level: str) -> None:
    """Sends the ``cudagym`` logger's records at ``level`` and above to stderr, one line each (replacing the handler
    an earlier call added; other loggers are left as they are)."""
    logger = logging.getLogger("cudagym")
    for handler in [h for h in logger.handlers if getattr(h, "cudagym_cli", False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    handler.cudagym_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level.upper())


def _add_log_level(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=default if default is not None else argparse.SUPPRESS,
        help=f"log the library's records at this level and above to stderr (default {DEFAULT_LOG_LEVEL})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudagym", description="GPU-kernel optimisation as an RL environment.")
    _add_log_level(parser, DEFAULT_LOG_LEVEL)
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
    from cudagym.synth.cli import add_synth_command

    add_synth_command(sub)
    from cudagym.integrations.openenv_cli import add_openenv_command

    add_openenv_command(sub)
    for command in sub.choices.values():  # also after the command: cudagym run --log-level info
        _add_log_level(command, None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
