"""The ``cudagym eval``, ``cudagym eval-report`` and ``cudagym rft-export`` commands.

* ``cudagym eval --agent scripted|random|llm [--task-set builtin] [--level L ...] [--ids ID ...]
  [--names PATTERN ...] [--ops PATTERN ...] [--sizes NAME=VALUE ...] [--backend cpu] [--workers N]
  [--out results.jsonl] [--resume] [--trajectories traj.jsonl] [--report-dir DIR]`` runs an agent over a task set
  (``cudagym.evaluation``) and prints the summary; the llm agent takes ``--model``, ``--base-url``, ``--api-key-env``,
  ``--tool-mode``, ``--token-budget``, ...
* ``cudagym eval-report results.jsonl --report-dir DIR`` writes the report of an existing results file.
* ``cudagym rft-export traj.jsonl rft.jsonl`` keeps the recorded episodes with reward > 0 as chat-format
  JSONL for rejection fine-tuning (``cudagym.baselines.rft``).

The main CLI calls :func:`add_eval_commands` on its subparsers; ``python -m cudagym.eval_cli`` runs these
commands alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudagym.baselines.agents import agent_names
from cudagym.tasks.cli import add_sizes_option, parse_sizes

DEFAULT_OUT = "results.jsonl"


def _add_task_options(parser: argparse.ArgumentParser, *, default_set: str | None) -> None:
    group = parser.add_argument_group("tasks")
    group.add_argument(
        "--task-set", default=default_set, metavar="NAME", help=f"task set name (default: {default_set or 'none'})"
    )
    group.add_argument("--path", default=None, metavar="P", help="local copy of the task set (path= option)")
    group.add_argument("--level", type=int, nargs="+", action="extend", metavar="L", help="keep these levels")
    group.add_argument("--ids", nargs="+", action="extend", metavar="ID", help="keep these task ids")
    group.add_argument("--names", nargs="+", action="extend", metavar="PATTERN", help="shell patterns on name or id")
    group.add_argument("--ops", nargs="+", action="extend", metavar="PATTERN", help="shell patterns on operator names")
    group.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N tasks after filtering")
    add_sizes_option(parser)


def _load_tasks(args: argparse.Namespace) -> Any:
    from cudagym.tasks import load

    options: dict[str, Any] = {}
    for key in ("level", "ids", "names", "ops"):
        value = getattr(args, key, None)
        if value:
            options[key] = value
    if args.path is not None:
        options["path"] = args.path
    sizes = parse_sizes(args.sizes)
    if sizes:
        options["sizes"] = sizes
    tasks = load(args.task_set, **options)
    if args.limit is not None:
        tasks = tasks[: args.limit]
    return tasks


def _configure_eval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", required=True, choices=agent_names(), help="the agent to run")
    _add_task_options(parser, default_set="builtin")
    run = parser.add_argument_group("run")
    run.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument("--workers", type=int, default=1, metavar="N", help="parallel episodes (default 1)")
    run.add_argument("--out", default=DEFAULT_OUT, metavar="FILE", help=f"results JSONL (default {DEFAULT_OUT})")
    run.add_argument("--resume", action="store_true", help="skip the tasks --out already holds finished results for")
    run.add_argument("--trajectories", default=None, metavar="FILE", help="also record every episode here (JSONL)")
    run.add_argument("--report-dir", default=None, metavar="DIR", help="write report.md, metrics.json and plots here")
    run.add_argument("--max-turns", type=int, default=200, metavar="N", help="turn budget per episode (default 200)")
    run.add_argument("--quick", action="store_true", help="3 checks and short timing: smoke runs, not for reporting")
    run.add_argument("--reward", default="milestone", help="reward name (default milestone)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    scripted = parser.add_argument_group("scripted agent")
    scripted.add_argument(
        "--direct-submit", action="store_true", help="write the solution and submit, without compile/verify/profile"
    )
    scripted.add_argument("--no-profile", action="store_true", help="skip the profile step before submit")
    rand = parser.add_argument_group("random agent")
    rand.add_argument("--seed", type=int, default=0, help="random agent seed (default 0)")
    rand.add_argument("--max-actions", type=int, default=None, metavar="N", help="random agent: actions per episode")
    llm = parser.add_argument_group("llm agent")
    llm.add_argument("--model", default=None, help="model name served by the endpoint")
    llm.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    llm.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR", help="variable holding the API key")
    llm.add_argument("--tool-mode", default="native", choices=("native", "text"), help="function calls or text tags")
    llm.add_argument("--token-budget", type=int, default=None, metavar="N", help="stop an episode after N tokens")
    llm.add_argument("--temperature", type=float, default=None)
    llm.add_argument("--max-tokens", type=int, default=None, metavar="N", help="completion limit per request")
    llm.add_argument("--max-retries", type=int, default=5, metavar="N", help="retries per request on API errors")


def _agent_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.agent == "scripted":
        return {"profile": not args.no_profile, "checks": not args.direct_submit}
    if args.agent == "random":
        return {"seed": args.seed, "max_actions": args.max_actions}
    if args.agent == "llm":
        if not args.model:
            raise ValueError("--agent llm needs --model")
        options: dict[str, Any] = {
            "model": args.model,
            "base_url": args.base_url,
            "api_key_env": args.api_key_env,
            "tool_mode": args.tool_mode,
            "token_budget": args.token_budget,
            "temperature": args.temperature,
            "max_tokens": args.max_tokens,
            "max_retries": args.max_retries,
            "seed": args.seed,
        }
        return options
    return {}


def _run_eval(args: argparse.Namespace) -> int:
    from cudagym.baselines.agents import make_agent
    from cudagym.evaluation import QUICK_EVAL_CONFIG, evaluate, format_summary

    tasks = _load_tasks(args)
    if len(tasks) == 0:
        raise ValueError("no task matches the filters")
    options = _agent_options(args)
    run = evaluate(
        tasks,
        lambda: make_agent(args.agent, **options),
        backend=args.backend,
        workers=args.workers,
        out=args.out,
        resume=args.resume,
        trajectories=args.trajectories,
        max_turns=args.max_turns,
        eval_config=QUICK_EVAL_CONFIG if args.quick else None,
        env_options={"reward": args.reward},
        progress=not args.no_progress,
    )
    print(f"{run.played} played, {run.skipped} already done; results in {args.out}")
    if args.trajectories:
        print(f"trajectories in {args.trajectories}")
    print(format_summary(run.metrics))
    if args.report_dir:
        _print_report(run.results, args.report_dir, task_ids=run.task_ids)
    if run.interrupted:
        print("interrupted: run again with --resume to finish", file=sys.stderr)
        return 130
    return 1 if run.metrics.errors else 0


def _print_report(results: Any, report_dir: str, *, task_ids: Sequence[str] | None) -> None:
    from cudagym.evaluation import write_report

    report = write_report(results, report_dir, task_ids=task_ids)
    print(f"report: {report.markdown}")
    for plot in report.plots:
        print(f"plot: {plot}")
    if report.note:
        print(report.note, file=sys.stderr)


def _configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="results JSONL written by cudagym eval")
    parser.add_argument("--report-dir", default="report", metavar="DIR", help="where to write (default report)")
    _add_task_options(parser, default_set=None)


def _run_report(args: argparse.Namespace) -> int:
    from cudagym.evaluation import format_summary
    from cudagym.metrics import compute_metrics, read_results

    if not Path(args.results).exists():
        raise FileNotFoundError(f"no results file {args.results}")
    results = read_results(args.results)
    task_ids = _load_tasks(args).ids if args.task_set else None
    print(format_summary(compute_metrics(results, task_ids=task_ids)))
    _print_report(results, args.report_dir, task_ids=task_ids)
    return 0


def _configure_rft(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trajectories", metavar="TRAJECTORIES", help="trajectories JSONL (cudagym eval --trajectories)")
    parser.add_argument("out", metavar="OUT", help="chat-format JSONL to write")
    parser.add_argument("--min-reward", type=float, default=0.0, help="keep reward > this (default 0)")
    parser.add_argument("--keep-invalid", action="store_true", help="keep trajectories with invalid tool calls")
    parser.add_argument(
        "--max-repeats", type=int, default=3, metavar="N", help="drop an action repeated more than N times in a row"
    )
    parser.add_argument("--no-tools", action="store_true", help="leave the tool schemas out of each line")
    parser.add_argument(
        "--format",
        choices=("openai", "hf"),
        default="openai",
        help="openai: OpenAI's fine-tuning form (arguments as JSON text); hf: messages as Hugging Face chat templates "
        "take them (cudagym.wrappers.to_hf)",
    )
    parser.add_argument(
        "--arguments",
        choices=("object", "string"),
        default="object",
        help="with --format hf: tool-call arguments as objects (Qwen3.5+, GLM-4-MoE, Gemma 4) or JSON text "
        "(DeepSeek-V3); default object",
    )
    parser.add_argument(
        "--null-content", default="", metavar="TEXT", help='with --format hf: the text for a null content (default "")'
    )


def _run_rft(args: argparse.Namespace) -> int:
    from cudagym.baselines.rft import RFTFilter, export_rft

    rules = RFTFilter(
        min_reward=args.min_reward,
        drop_invalid=not args.keep_invalid,
        max_repeats=args.max_repeats if args.max_repeats > 0 else None,
        include_tools=not args.no_tools,
    )
    done = export_rft(
        args.trajectories,
        args.out,
        rules,
        chat_format=args.format,
        arguments=args.arguments,
        null_content=args.null_content,
    )
    print(
        f"{done.kept} of {done.read} trajectories written to {done.out} (dropped: {done.low_reward} reward <= "
        f"{rules.min_reward:g}, {done.invalid} invalid calls, {done.loops} loops)"
    )
    return 0


_COMMANDS = {"eval": _run_eval, "eval-report": _run_report, "rft-export": _run_rft}


def _dispatch(args: argparse.Namespace) -> int:
    """Runs the parsed command; errors a user can fix print one line on stderr and give status 1."""
    try:
        return _COMMANDS[args.eval_command](args)
    except (KeyError, FileNotFoundError, ImportError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"cudagym {args.eval_command}: {message}", file=sys.stderr)
        return 1


def add_eval_commands(subparsers: Any) -> None:
    """Adds ``eval``, ``eval-report`` and ``rft-export`` to a parser's subparsers (``parser.add_subparsers()``).

    Each parsed namespace gets ``func`` (returns the exit status) and ``eval_command``.
    """
    specs = (
        ("eval", "run an agent over a task set and report the metrics", _configure_eval),
        ("eval-report", "write the report of a results file", _configure_report),
        ("rft-export", "export episodes with reward > 0 as chat JSONL for rejection fine-tuning", _configure_rft),
    )
    for name, help_text, configure in specs:
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        configure(parser)
        parser.set_defaults(func=_dispatch, eval_command=name)


def build_parser() -> argparse.ArgumentParser:
    """A parser with only these commands (``python -m cudagym.eval_cli``)."""
    parser = argparse.ArgumentParser(prog="cudagym", description="Evaluate agents on cudagym task sets.")
    add_eval_commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``eval``, ``eval-report`` or ``rft-export`` from ``argv``; returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
