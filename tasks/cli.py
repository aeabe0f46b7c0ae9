"""The ``cudagym tasks ...`` commands: look at task sets from the shell.

``cudagym tasks list [--task-set NAME] [--level L] [--path P]`` prints a table (id, name, level, ops);
``cudagym tasks show ID [--task-set NAME] [--path P] [--sizes NAME=VALUE ...]`` prints one task's metadata, what the
input checks found for it, and its reference source; ``cudagym tasks check`` runs the checks (``checks.py``).
``--sizes`` is the loader's ``sizes=`` option (``cudagym.tasks.load``), the same for the CLI and ``gym.make``.

The main CLI calls :func:`add_tasks_commands` on its subparsers and dispatches to :func:`main_tasks`.
Further subcommands plug in through :func:`register_tasks_command` (or by appending to
:data:`TASKS_COMMANDS`) before :func:`add_tasks_commands` runs; each is a :class:`TasksCommand`, a
name with a function that adds its arguments and one that runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from cudagym.tasks.registry import load, registered_names
from cudagym.tasks.requirements import requirement_notes
from cudagym.tasks.task import Task, TaskSet

DEFAULT_TASK_SET = "builtin"
OPS_WIDTH = 60
COLUMN_CAP = 48  # the widest a column of `tasks list` is padded to


@dataclasses.dataclass(frozen=True)
class TasksCommand:
    """One ``cudagym tasks <name>`` subcommand.

    Attributes:
        name: the subcommand's name.
        help: one line for ``--help``.
        configure: adds the subcommand's arguments to its parser.
        run: runs it with the parsed arguments and returns the exit status.
    """

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _add_source_options(parser: argparse.ArgumentParser, *, default_set: str | None) -> None:
    parser.add_argument(
        "--task-set",
        default=default_set,
        metavar="NAME",
        help=f"task set name (default: {default_set or 'the prefix of the id'})",
    )
    parser.add_argument("--path", default=None, metavar="P", help="local copy of the task set (path= option)")


def add_sizes_option(parser: argparse.ArgumentParser) -> None:
    """``--sizes NAME=VALUE`` (repeatable; ``--set`` is the same): the task-set option ``sizes=``."""
    parser.add_argument(
        "--sizes",
        "--set",
        dest="sizes",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="rewrite a module-level size constant in every task that assigns it (the loader's sizes= option), "
        "e.g. --sizes batch_size=16 dim=4096; a name no task assigns is an error",
    )


def parse_sizes(items: Sequence[str]) -> dict[str, Any]:
    """``["dim=4096", ...]`` as ``{"dim": 4096}`` (values are Python literals); ValueError for a malformed item."""
    import ast

    sizes: dict[str, Any] = {}
    for text in items:
        name, sep, value = text.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--sizes takes NAME=VALUE, got {text!r}")
        try:
            sizes[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"--sizes {text!r}: the value must be a Python literal such as 4096") from None
    return sizes


def _load(args: argparse.Namespace, name: str, **filters: Any) -> TaskSet:
    options: dict[str, Any] = {k: v for k, v in filters.items() if v}
    if args.path is not None:
        options["path"] = args.path
    sizes = parse_sizes(getattr(args, "sizes", None) or [])
    if sizes:
        options["sizes"] = sizes
    return load(name, **options)


def _format_table(rows: Sequence[Sequence[str]], cap: int = COLUMN_CAP) -> str:
    """Columns as wide as their longest cell, at most ``cap``: a longer cell is printed whole and pushes the rest of
    its own row to the right, so one long id does not pad every other row."""
    widths = [min(cap, max(len(row[i]) for row in rows)) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _ops_cell(task: Task) -> str:
    text = ", ".join(task.metadata.ops)
    return text if len(text) <= OPS_WIDTH else text[: OPS_WIDTH - 3] + "..."


def _configure_list(parser: argparse.ArgumentParser) -> None:
    _add_source_options(parser, default_set=DEFAULT_TASK_SET)
    parser.add_argument("--level", type=int, action="append", metavar="L", help="keep this level (repeat for several)")
    parser.add_argument("--names", action="append", metavar="PATTERN", help="shell pattern on name or id")
    parser.add_argument("--ops", action="append", metavar="PATTERN", help="shell pattern on operator names")


def _run_list(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    tasks = _load(args, args.task_set, level=args.level, names=args.names, ops=args.ops)
    rows = [("id", "name", "level", "ops")]
    rows += [(t.id, t.name, "" if t.metadata.level is None else str(t.metadata.level), _ops_cell(t)) for t in tasks]
    print(_format_table(rows), file=out)
    print(f"{len(tasks)} task(s) in {args.task_set!r}", file=out)
    return 0


def _configure_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "id",
        metavar="ID",
        help="task id, e.g. kernelbench/level1/19_ReLU, or a short name that matches one task (softmax, 19_ReLU)",
    )
    _add_source_options(parser, default_set=None)
    add_sizes_option(parser)


def describe_task(task: Task) -> str:
    """A task's id, name, metadata and notes on what it needs, followed by its reference source."""
    meta = task.metadata
    fields: list[tuple[str, Any]] = [
        ("id", task.id),
        ("name", task.name),
        ("source", meta.source),
        ("level", meta.level),
        ("ops", ", ".join(meta.ops)),
        ("dtype", meta.dtype),
        ("atol / rtol", f"{meta.atol} / {meta.rtol}"),
        ("input kinds", ", ".join(meta.input_kinds)),
        *((f"checked ({backend})", verdict.describe()) for backend, verdict in meta.input_verdicts.items()),
        ("requires", ", ".join(meta.requires)),
        ("sizes", {k: dict(v) for k, v in meta.sizes.items()}),
        ("extra", dict(meta.extra)),
        ("solutions", ", ".join(task.solutions)),
        ("expected tiers", dict(task.expected_tiers)),
    ]
    lines = [f"{key + ':':<16}{value}" for key, value in fields if value not in (None, "", {})]
    if not meta.input_verdicts:
        lines.append(f"{'checked:':<16}not yet (the first verify or `cudagym tasks check` probes its inputs)")
    lines += [f"{'note:':<16}{note}" for note in requirement_notes(task)]
    lines += ["", f"--- reference source ({task.id}) ---", task.source.rstrip("\n")]
    return "\n".join(lines)


def _run_show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    prefix = args.id.split("/", 1)[0]
    name = args.task_set or (prefix if "/" in args.id and prefix in registered_names() else DEFAULT_TASK_SET)
    tasks = _load(args, name)
    print(describe_task(tasks.find(args.id)), file=out)
    return 0


def _configure_check(parser: argparse.ArgumentParser) -> None:
    _configure_list(parser)
    parser.add_argument(
        "--ids", action="extend", nargs="+", metavar="ID", help="check only these tasks (several, or repeat --ids)"
    )
    parser.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"), help="where references run")
    parser.add_argument("--runs", type=int, default=3, help="input sets per distribution (default 3)")
    add_sizes_option(parser)
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a task is flagged")


def _run_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from cudagym.backends import resolve_backend
    from cudagym.tasks.checks import check_tasks, format_report

    out = out or sys.stdout
    tasks = _load(args, args.task_set, level=args.level, names=args.names, ops=args.ops, ids=args.ids)
    results = check_tasks(tasks, resolve_backend(args.backend), runs=args.runs)
    print(format_report(results), file=out)
    flagged = [r for r in results if r.flagged]
    print(f"{len(results)} task(s) checked, {len(flagged)} flagged", file=out)
    return 1 if args.strict and flagged else 0


TASKS_COMMANDS: list[TasksCommand] = [
    TasksCommand("list", "list the tasks of a task set", _configure_list, _run_list),
    TasksCommand("show", "show one task's metadata and reference source", _configure_show, _run_show),
    TasksCommand(
        "check", "run each reference and flag nondeterministic or degenerate tasks", _configure_check, _run_check
    ),
]


def register_tasks_command(command: TasksCommand) -> None:
    """Adds a ``cudagym tasks`` subcommand (call before :func:`add_tasks_commands`)."""
    if any(existing.name == command.name for existing in TASKS_COMMANDS):
        raise ValueError(f"a tasks subcommand named {command.name!r} already exists")
    TASKS_COMMANDS.append(command)


def add_tasks_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``tasks`` and its subcommands to a parser's subparsers (``parser.add_subparsers()``).

    The parsed namespace gets ``func=main_tasks`` and ``tasks_command=<subcommand name>``.

    Returns:
        The ``tasks`` parser.
    """
    parser = subparsers.add_parser(
        "tasks", help="list and inspect task sets", description="List and inspect task sets."
    )
    sub = parser.add_subparsers(dest="tasks_command", metavar="COMMAND", required=True)
    for command in TASKS_COMMANDS:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(child)
    parser.set_defaults(func=main_tasks)
    return parser


def main_tasks(args: argparse.Namespace) -> int:
    """Runs the ``tasks`` subcommand named by ``args.tasks_command``; returns the exit status.

    Errors a user can fix (an unknown set or id, a missing path or package) are printed on stderr as one
    line and give status 1.
    """
    commands = {command.name: command for command in TASKS_COMMANDS}
    command = commands.get(args.tasks_command)
    if command is None:
        print(f"unknown tasks command {args.tasks_command!r}; known: {', '.join(commands)}", file=sys.stderr)
        return 2
    try:
        return command.run(args)
    except (KeyError, FileNotFoundError, ImportError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"cudagym tasks {command.name}: {message}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cudagym.tasks.cli tasks ...``: the tasks commands without the main CLI."""
    parser = argparse.ArgumentParser(prog="cudagym", epilog=f"task sets: {', '.join(registered_names())}")
    add_tasks_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
