"""The console script: the README's main job, and the tasks commands."""

from __future__ import annotations

import os
import subprocess
import sys

from cudagym.cli import CPU_NOTE, DEFAULT_TASK, build_parser, summary_line


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
    assert "| cpu backend, spread of the timed calls " in last and last.endswith(CPU_NOTE)


def test_the_summary_line_says_how_noisy_the_figures_are_and_what_cpu_ones_mean() -> None:
    info = {"tier": 2, "speedup_eager": 4.02, "speedup_compile": 1.01, "result": {"profile": {"spread": 0.123}}}
    cpu = summary_line("builtin/x", info, 2.0, "cpu")
    assert cpu.startswith("== builtin/x: tier 2 | reward 2 | speedup vs eager 4.02x | vs torch.compile 1.01x | ")
    assert "| cpu backend, spread of the timed calls 12% |" in cpu and cpu.endswith(f"| {CPU_NOTE}")
    assert "not a GPU's" in CPU_NOTE and "tier" in CPU_NOTE
    cuda = summary_line("builtin/x", info, 2.0, "cuda")
    assert cuda.endswith("| cuda backend, spread of the timed calls 12%") and CPU_NOTE not in cuda
    busy = {**info, "result": {"profile": {"spread": 0.5, "timing_fair": False}}}
    assert "spread of the timed calls 50%, timed while the machine was busy" in summary_line("b/x", busy, 2.0, "cuda")
    wrong = summary_line("b/x", {"tier": -1, "result": {"profile": None}}, -1.0, "cuda")
    assert wrong == "== b/x: tier -1 | reward -1 | speedup vs eager n/a | vs torch.compile n/a | cuda backend"


def test_tasks_list_through_the_console_script() -> None:
    out = subprocess.run([sys.executable, "-m", "cudagym.cli", "tasks", "list"], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert "builtin/relu" in out.stdout
