"""The test session's compile cache is removed when the run ends (``tests/conftest.py``), with and without xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ONE_FAST_TEST = "tests/test_text.py::test_shown_text_is_found_in_the_original"


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["plain", "xdist"])
def test_a_run_leaves_no_cache_behind(tmp_path: Path, workers: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CUDAGYM_"))}
    env["TMPDIR"] = str(tmp_path)
    command = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q", *workers]
    proc = subprocess.run([*command, ONE_FAST_TEST], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob("cudagym-test-cache-*")) == []
