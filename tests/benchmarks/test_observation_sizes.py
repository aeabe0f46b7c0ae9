"""benchmarks/observation_sizes.py: its scripted edits still apply to the shipped ReLU solutions, its random agent is
seeded and reaches every kind of action, its table counts what it saw, and a short random episode runs end to end on
the CPU backend."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
from test_benchmarks_smoke import BENCHMARKS, run_benchmark

from cudagym.tasks import load
from cudagym.tools import ParseFailure, parse_action


@pytest.fixture(scope="module")
def sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("observation_sizes", BENCHMARKS / "observation_sizes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["observation_sizes"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_scripted_edits_apply_to_the_relu_solution(sizes: ModuleType, backend: str) -> None:
    task = load("builtin").get("builtin/relu")
    files = sizes.solution_files(task, backend)
    for what, (path, old, new) in sizes.RELU_EDITS[backend].items():
        changed = sizes.edited(files, path, old, new)
        assert changed[path] != files[path] and new in changed[path], what


def test_the_random_agent_is_seeded_and_makes_every_kind_of_action(sizes: ModuleType) -> None:
    solution = {"kernels/relu.cpp": "int a;\nint b;\n", "model_new.py": "import torch\n"}
    first = [sizes.RandomAgent(random.Random(3), solution).action() for _ in range(1)]
    agent = sizes.RandomAgent(random.Random(3), solution)
    actions = [agent.action() for _ in range(300)]
    assert actions[:1] == first  # the same seed, the same calls
    parsed = [parse_action(a) for a in actions]
    tools = {p.tool_name() for p in parsed if not isinstance(p, ParseFailure)}
    assert tools == {"write_file", "edit_file", "read_file", "list_files", "compile", "verify", "profile", "submit"}
    assert sum(isinstance(p, ParseFailure) for p in parsed) > 20  # garbage too


def test_the_table_has_a_row_per_kind_and_a_total(sizes: ModuleType) -> None:
    seen = [
        sizes.Observed("random", "verify/crash", 300, 5),
        sizes.Observed("random", "verify/crash", 500, 7),
        sizes.Observed("random", "reset", 5000, 100),
    ]
    rows = sizes.table(seen).splitlines()
    assert "| random | verify/crash | 2 | 400 | 500 | 6 | 7 |" in rows
    assert rows[-1] == "| random | (all) | 3 | 500 | 5000 | 7 | 100 |"


def test_a_short_random_episode_runs_on_cpu(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "sizes.json"
    stdout = run_benchmark(
        "observation_sizes.py",
        *("--backend", "cpu", "--episodes", "random", "--random-steps", "12", "--seed", "1"),
        *("--max-seconds", "60", "--cache-dir", str(cache_dir), "--json", str(out)),
    )
    assert "| episode | observation | n | median bytes | max bytes | median lines | max lines |" in stdout
    observed = json.loads(out.read_text())["observations"]
    assert observed[0]["kind"] == "reset" and len(observed) >= 13
    assert all(o["bytes"] > 0 and o["lines"] >= 1 for o in observed)
