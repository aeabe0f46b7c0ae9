"""The console script: the README's main job, and the tasks commands."""

from __future__ import annotations

import os
import subprocess
import sys

from cudagym.cli import DEFAULT_TASK, build_parser


def test_parser_defaults() -> None:
    args = build_parser().parse_args(["run"])
    assert args.task == DEFAULT_TASK and args.backend == "auto"


def test_main_job_plays_the_default_task(cache_dir) -> None:
    env = dict(os.environ, CUDAGYM_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-m", "cudagym.cli", "run", "--backend", "cpu"], capture_output=True,
                         text=True, timeout=900, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[submit] tier" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith(f"== {DEFAULT_TASK}: tier ") and "reward" in last


def test_tasks_list_through_the_console_script() -> None:
    out = subprocess.run([sys.executable, "-m", "cudagym.cli", "tasks", "list"], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert "builtin/relu" in out.stdout
