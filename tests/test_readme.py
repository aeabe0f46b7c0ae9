"""The README's quick start stays true: two commands, the ones CI runs, and the summary line `cudagym run` prints."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from cudagym.cli import CPU_NOTE, summary_line

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> tuple[str, list[str]]:
    """The README's quick-start section and the commands of its ``bash`` blocks."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    return section, commands


def test_the_quick_start_is_two_commands_and_ci_runs_them() -> None:
    section, commands = quick_start()
    assert section.lstrip().startswith("Two commands")
    assert len(commands) == 2, commands
    assert not any(re.search(r"&&|\|\||;|#", command) for command in commands), commands  # one command each
    setup, tests = commands
    assert setup == "./quickstart.sh" and "pytest" in tests
    script = ROOT / "quickstart.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    body = script.read_text()
    assert "-m pip install -q -e '.[test]'" in body and "-m cudagym.cli run" in body
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert setup in ci and tests in ci


def test_the_readme_shows_the_summary_line_the_command_prints() -> None:
    """The README's example is ``summary_line`` of a real run's figures, with what cpu figures mean."""
    section, _ = quick_start()
    info = {
        "tier": 1,
        "speedup_eager": 0.842,
        "speedup_compile": 1.1,
        "result": {"profile": {"spread": 0.18, "timing_fair": True}},
    }
    example = summary_line("builtin/scale_bias_tanh", info, 1.0, "cpu")
    assert example in section and CPU_NOTE in example
