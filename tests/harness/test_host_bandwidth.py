"""The cpu speed-of-light bound (``reference._copy_bandwidth``) on a busy host: its copies are charged like a
candidate's calls, the time they ran, so waiting for a core does not lower the bound and fail honest code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# one core, shared with three processes that never sleep: a copy of 64 MiB waits for the core several times over
SCRIPT = """
import json, os, subprocess, sys
import torch
from cudagym.harness import reference
os.sched_setaffinity(0, {{{CPU}}})
torch.set_num_threads(1)
quiet = max(reference._copy_bandwidth(128 << 20) for _ in range(3))
busy_loop = "import os; os.sched_setaffinity(0, {{{CPU}}})\\nwhile True: pass"
hogs = [subprocess.Popen([sys.executable, "-c", busy_loop]) for _ in range(3)]
try:
    busy = min(reference._copy_bandwidth(128 << 20) for _ in range(3))
finally:
    for hog in hogs:
        hog.kill()
print(json.dumps({{"quiet": quiet, "busy": busy}}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_a_busy_core_does_not_lower_the_hosts_bound() -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(CPU=cpu)], capture_output=True, text=True, timeout=120, check=True
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    # four processes on one core: charged by the wall clock, the busy bound would read about a quarter of the quiet
    assert figures["busy"] >= 0.6 * figures["quiet"], figures
