"""``cudagym tasks list`` and ``cudagym tasks show``, driven through argparse as the main CLI does."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from cudagym.tasks import cli
from cudagym.tasks.task import Task, TaskSet


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cudagym")
    cli.add_tasks_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func is cli.main_tasks
    return args.func(args)


def test_list_kernelbench_level(kernelbench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run(["tasks", "list", "--task-set", "kernelbench", "--path", str(kernelbench_dir), "--level", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "name", "level", "ops"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    relu = next(line for line in lines if line.startswith("kernelbench/level1/19_ReLU "))
    assert relu.split() == ["kernelbench/level1/19_ReLU", "19_ReLU", "1", "torch.relu"]
    assert "kernelbench/level2/" not in out
    assert lines[-1] == "100 task(s) in 'kernelbench'"


def test_list_ops6k_with_pattern_filters(ops6k_jsonl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["tasks", "list", "--task-set", "ops6k", "--path", str(ops6k_jsonl), "--ops", "torch.nn.*"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "ops6k/0002" in out and "ops6k/0003" in out and "ops6k/0000" not in out
    assert out.splitlines()[-1] == "2 task(s) in 'ops6k'"


def test_show_infers_the_set_from_the_id(kernelbench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run(["tasks", "show", "kernelbench/level1/19_ReLU", "--path", str(kernelbench_dir)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "id:             kernelbench/level1/19_ReLU" in out
    assert "level:          1" in out
    assert "ops:            torch.relu" in out
    assert "'problem_id': 19" in out
    assert "return torch.relu(x)" in out  # the reference source follows the metadata


def test_show_flags_missing_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    (tmp_path / "level4").mkdir()
    (tmp_path / "level4" / "3_gpt2.py").write_text("import transformers\n\nclass Model:\n    pass\n")
    rc = _run(["tasks", "show", "kernelbench/level4/3_gpt2", "--task-set", "kernelbench", "--path", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "requires:       transformers" in out
    assert "pip install transformers" in out
    assert "weights must be downloadable" in out


def test_errors_are_one_line_and_status_1(kernelbench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run(["tasks", "show", "kernelbench/level1/19_Relu", "--path", str(kernelbench_dir)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Did you mean: kernelbench/level1/19_ReLU" in err
    rc = _run(["tasks", "list", "--task-set", "kernelbenhc"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "registered:" in err and "Did you mean 'kernelbench'?" in err
    assert err.count("\n") == 1


def test_extension_point(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "TASKS_COMMANDS", list(cli.TASKS_COMMANDS))

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--strict", action="store_true")

    def run(args: argparse.Namespace) -> int:
        print(f"checked strict={args.strict}")
        return 3

    cli.register_tasks_command(cli.TasksCommand("audit", "audit tasks", configure, run))
    assert _run(["tasks", "audit", "--strict"]) == 3
    assert capsys.readouterr().out == "checked strict=True\n"
    with pytest.raises(ValueError, match="already exists"):
        cli.register_tasks_command(cli.TasksCommand("list", "again", configure, run))


def test_check_takes_several_ids_after_one_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(args: argparse.Namespace) -> int:
        seen.append(args.ids)
        return 0

    monkeypatch.setattr(cli, "TASKS_COMMANDS", [dataclasses.replace(cli.TASKS_COMMANDS[2], run=run)])
    assert _run(["tasks", "check", "--ids", "builtin/relu", "builtin/elu", "--ids", "builtin/glu"]) == 0
    assert seen == [["builtin/relu", "builtin/elu", "builtin/glu"]]


def test_show_takes_a_short_name(kernelbench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["tasks", "show", "softmax"]) == 0
    assert "id:             builtin/softmax\n" in capsys.readouterr().out
    rc = _run(["tasks", "show", "19_ReLU", "--task-set", "kernelbench", "--path", str(kernelbench_dir)])
    assert rc == 0 and "id:             kernelbench/level1/19_ReLU\n" in capsys.readouterr().out


def test_an_ambiguous_short_name_names_its_matches() -> None:
    tasks = TaskSet("mine", [Task(id=f"mine/level{i}/relu", name="relu", source="") for i in (1, 2)])
    with pytest.raises(KeyError, match=r"ambiguous.*mine/level1/relu, mine/level2/relu"):
        tasks.find("relu")
    assert tasks.find("mine/level2/relu").id == "mine/level2/relu"
    with pytest.raises(KeyError, match="Did you mean"):
        tasks.find("mine/level3/relu")


def test_list_columns_are_capped(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [("id", "name"), ("x" * 100, "long"), ("short", "s")]
    lines = cli._format_table(rows, cap=10).splitlines()
    assert lines[1] == "-" * 10 + "  " + "-" * 4
    assert lines[2] == "x" * 100 + "  long"  # the long cell is whole and pushes only its own row
    assert lines[3] == "short       s"
