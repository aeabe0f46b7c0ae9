"""Task sets from installed packages: an entry point in ``cudagym.task_sets`` is loadable by name
from a fresh interpreter, without importing the package first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MODULE = '''
"""A third-party task set."""

from cudagym.tasks import Task, TaskMetadata

SOURCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(8)]


def get_init_inputs():
    return []
"""


def load(path=None, **options):
    return [
        Task(id=f"mytasks/{i}", name=f"relu{i}", source=SOURCE,
             metadata=TaskMetadata(level=i, ops=("torch.relu",), source="mytasks",
                                   extra={"path": path}))
        for i in (1, 2, 3)
    ]
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mytasks-pkg"
version = "0.1.0"

[project.entry-points."cudagym.task_sets"]
mytasks = "mytasks_pkg:load"

[tool.setuptools]
py-modules = ["mytasks_pkg"]
"""

CHECK = textwrap.dedent(
    """
    import json, sys
    import cudagym.tasks
    names = cudagym.tasks.registered_names()
    imported_before = "mytasks_pkg" in sys.modules
    tasks = cudagym.tasks.load("mytasks", path="/data", level=[2, 3])
    print(json.dumps({
        "names": names,
        "imported_before": imported_before,
        "ids": list(tasks.ids),
        "extra": dict(tasks[0].metadata.extra),
        "set": tasks.name,
    }))
    """
)


def _run_check(site: Path) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _assert_loaded(report: dict[str, object]) -> None:
    assert "mytasks" in report["names"]  # type: ignore[operator]
    assert report["imported_before"] is False
    assert report["ids"] == ["mytasks/2", "mytasks/3"]
    assert report["extra"] == {"path": "/data"}
    assert report["set"] == "mytasks"


def test_entry_point_from_dist_info(tmp_path: Path) -> None:
    """What an installer leaves on sys.path: the module and a ``.dist-info`` with ``entry_points.txt``."""
    site = tmp_path / "site"
    dist_info = site / "mytasks_pkg-0.1.0.dist-info"
    dist_info.mkdir(parents=True)
    (site / "mytasks_pkg.py").write_text(MODULE)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: mytasks-pkg\nVersion: 0.1.0\n")
    (dist_info / "entry_points.txt").write_text("[cudagym.task_sets]\nmytasks = mytasks_pkg:load\n")
    _assert_loaded(_run_check(site))


def test_entry_point_of_a_pip_installed_package(tmp_path: Path) -> None:
    """A real ``pip install`` of a package declaring the entry point in its pyproject.

    It installs into a target folder (``--target``), not into the running environment, so nothing has to
    be uninstalled afterwards and parallel test runs cannot interfere.
    """
    pytest.importorskip("setuptools")
    project = tmp_path / "mytasks"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "mytasks_pkg.py").write_text(MODULE)
    site = tmp_path / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0 and "No module named pip" in result.stderr:
        pytest.skip("pip is not available in this interpreter")
    assert result.returncode == 0, result.stderr
    assert (site / "mytasks_pkg-0.1.0.dist-info" / "entry_points.txt").is_file()
    _assert_loaded(_run_check(site))
