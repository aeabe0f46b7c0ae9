"""The gate before every build: a compile carries what it found (``CompileResult.integrity``), and nothing is built
past a failed gate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cudagym.compile_gate import gated_build
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.results import CompileResult, Stage, Status
from cudagym.workspace import Workspace


@pytest.fixture
def ws() -> Iterator[Workspace]:
    workspace = Workspace("MODEL = 1\n", "instructions")
    yield workspace
    workspace.remove()


class CountingBuild:
    """A build that records that it ran."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> CompileResult:
        self.calls += 1
        return CompileResult(stage=Stage.COMPILE, status=Status.OK, seconds=1.5, build_hash="abc")


def test_a_clean_workspace_builds_and_reports_every_check(ws: Workspace) -> None:
    ws.write("model_new.py", "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    build = CountingBuild()
    result = gated_build(ws, IntegrityPolicy(), build)
    assert build.calls == 1 and result.ok and result.build_hash == "abc" and result.seconds == 1.5
    checks = {f.check: f for f in result.integrity}
    assert checks["fixed_files_unchanged"].passed and checks["fixed_files_unchanged"].detail == ""
    assert len(checks) > 1 and all(f.passed for f in result.integrity)  # one finding per static check too


def test_changed_fixed_files_are_restored_and_nothing_is_built(ws: Workspace) -> None:
    target = ws.path / "model.py"
    target.chmod(0o644)
    target.write_text("MODEL = 2\n")
    build = CountingBuild()
    result = gated_build(ws, IntegrityPolicy(), build)
    assert build.calls == 0 and result.status is Status.INTEGRITY and "model.py" in result.message
    (finding,) = result.integrity
    assert (finding.check, finding.passed, finding.detail) == ("fixed_files_unchanged", False, "restored: model.py")
    assert ws.tampered_fixed() == [] and target.read_text() == "MODEL = 1\n"


def test_a_static_violation_stops_the_build_and_names_its_check(ws: Workspace) -> None:
    ws.write("model_new.py", "import os\nos.environ['OMP_NUM_THREADS'] = '64'\n")
    build = CountingBuild()
    result = gated_build(ws, IntegrityPolicy(), build)
    assert build.calls == 0 and result.status is Status.INTEGRITY
    failed = [f.check for f in result.integrity if not f.passed]
    assert failed and "fixed_files_unchanged" not in failed
