"""How every child starts the harness (``cudagym.harness.common.launch_arguments``): as ``cudagym.harness.*``, the
one name the library imports it by, single-threaded until the sandbox is entered, and with nothing of the working
directory on ``sys.path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cudagym.harness.common import launch_arguments

PROBE = """
import importlib, json, os, sys
found = {"threads": len(os.listdir("/proc/self/task")), "gymnasium": "gymnasium" in sys.modules}
found["main"] = sys.modules["__main__"].__spec__.name
found["harness"] = importlib.import_module("cudagym.harness.common").__name__
try:
    importlib.import_module("shadow_of_the_cwd")
    found["cwd_importable"] = True
except ImportError:
    found["cwd_importable"] = False
print(json.dumps(found))
"""


def test_a_harness_module_runs_under_its_package_name_without_the_package_init(tmp_path: Path) -> None:
    package = tmp_path / "site" / "launch_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(PROBE)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "shadow_of_the_cwd.py").write_text("")
    paths = [str(tmp_path / "site"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, *launch_arguments("launch_probe.main")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # cudagym's __init__ imports Gymnasium, whose numpy starts BLAS threads: a candidate could no longer unshare
    assert found == {
        "threads": 1,
        "gymnasium": False,
        "main": "launch_probe.main",
        "harness": "cudagym.harness.common",
        "cwd_importable": False,
    }


def test_the_library_imports_the_harness_under_the_same_names() -> None:
    from cudagym.harness import candidate, clock, forkserver, reference

    for module in (candidate, clock, forkserver, reference):
        assert module.__name__.startswith("cudagym.harness.") and module.__package__ == "cudagym.harness"
