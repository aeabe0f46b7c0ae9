"""The gate before anything is built or run: fixed files unchanged (restored when not) and the static integrity checks.

Every compile passes it, whoever runs the build: the evaluator (:class:`~cudagym.evaluator.LocalEvaluator`) and the
machine pool's compile workers (:mod:`cudagym.pool.compile_lane`). It reads and restores only the workspace it is
given, with that workspace's own record of its fixed files, so nothing of one workspace reaches another.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from cudagym.integrity.policy import IntegrityPolicy
from cudagym.integrity.static_checks import run_static_checks, violation_message
from cudagym.results import CompileResult, IntegrityFinding, Stage, Status
from cudagym.workspace import Workspace


@dataclasses.dataclass(frozen=True)
class GateOutcome:
    """What the gate found in one workspace.

    Attributes:
        failure: (status, message) of the first failure (an ``INTEGRITY`` status), or None when the build may go on.
        tampered: the fixed files that had been changed (restored by the gate); empty when none were.
        static_findings: one finding per static check (empty when the fixed files failed, which ends the gate).
    """

    failure: tuple[Status, str] | None
    tampered: tuple[str, ...] = ()
    static_findings: tuple[IntegrityFinding, ...] = ()

    @property
    def findings(self) -> tuple[IntegrityFinding, ...]:
        """What a compile reports of the gate (``CompileResult.integrity``): the fixed files' check, then one
        finding per static check."""
        restored = f"restored: {', '.join(self.tampered)}" if self.tampered else ""
        return (IntegrityFinding("fixed_files_unchanged", not self.tampered, restored), *self.static_findings)


def check_workspace(workspace: Workspace, policy: IntegrityPolicy) -> GateOutcome:
    """Runs the gate on ``workspace`` under ``policy`` (the task's integrity policy)."""
    tampered = tuple(workspace.tampered_fixed())
    if tampered:
        workspace.restore_fixed()
        message = (
            f"Fixed workspace files were modified ({', '.join(tampered)}); they have been restored. "
            "Fixed files must not be changed."
        )
        return GateOutcome((Status.INTEGRITY, message), tampered)
    findings, violations = run_static_checks(workspace.snapshot(), policy, known_files=workspace.listing_names())
    failure = (Status.INTEGRITY, violation_message(violations, policy)) if violations else None
    return GateOutcome(failure, (), tuple(findings))


def gated_build(workspace: Workspace, policy: IntegrityPolicy, build: Callable[[], CompileResult]) -> CompileResult:
    """A compile: the gate on ``workspace``, then ``build()`` when it passed; the result carries what the gate found
    (``CompileResult.integrity``), read from this workspace alone, so an evaluator or compile worker that serves many
    sessions never reports one workspace's findings in another's submit."""
    start = time.monotonic()
    outcome = check_workspace(workspace, policy)
    if outcome.failure is not None:
        status, message = outcome.failure
        return CompileResult(
            stage=Stage.COMPILE,
            status=status,
            message=message,
            seconds=time.monotonic() - start,
            integrity=outcome.findings,
        )
    return dataclasses.replace(build(), integrity=outcome.findings)
