"""The submit stage: compile, verify and profile in turn (each through the evaluator, cached where unchanged), the
milestone tier (``results.milestone_tier``) capped by the task's input verdict, and every stage's integrity findings
merged into one per check. Its result: ``SubmitResult``."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from cudagym.input_probe import verdict_key_for
from cudagym.results import IntegrityFinding, Stage, Status, SubmitResult, milestone_tier
from cudagym.stages import profiling, verification
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")


def submit(ev: LocalEvaluator, workspace: Workspace) -> SubmitResult:
    """Compiles, verifies and profiles ``workspace`` in turn (each stage only when the one before passed) and gives
    the tier; a harness error in any stage makes the submit one (no tier to trust)."""
    start = time.monotonic()
    compiled = ev.compile(workspace)  # the gate once: the later stages take this compile (nothing changed since)
    verify = verification.verify(ev, workspace, compiled) if compiled.ok else None
    correct = verify is not None and verify.ok
    profile = profiling.profile(ev, workspace, compiled=compiled) if correct else None
    rejected = (Status.MISMATCH, Status.INTEGRITY)
    tier = milestone_tier(correct and (profile is None or profile.status not in rejected), profile)
    correct = correct and tier > 0
    # known once a verify ran (it probes when the cache has no verdict); None when none ran and none is stored
    verdict = ev.verdicts.read(verdict_key_for(ev.task, ev.backend.name, ev.config))
    tier = min(tier, verdict.max_tier) if verdict is not None else tier
    findings = [
        *compiled.integrity,
        *(verify.integrity if verify else ()),
        *(profile.integrity if profile else ()),
    ]
    if profile is not None:
        findings.append(
            IntegrityFinding(
                "timed_output_rechecked",
                profile.status is not Status.MISMATCH,
                profile.message if profile.status is Status.MISMATCH else "",
            )
        )
    failing = next((r for r in (compiled, verify, profile) if r is not None and not r.ok), None)
    message = f"Tier {tier}. " + (failing.message if failing is not None and tier < 1 else "")
    if verdict is not None and verdict.degenerate and tier > 0:
        message += f"{verdict.describe()}: speed is not rewarded. "
    if profile is not None and profile.ok:
        message += profile.message
    degenerate = verdict.degenerate if verdict is not None else None
    status = Status.OK if tier > 0 else (failing.status if failing else Status.MISMATCH)
    if failing is not None and failing.status is Status.HARNESS_ERROR:  # not the agent's doing: no tier to trust
        status, tier, message = Status.HARNESS_ERROR, -1, f"Not evaluated: {failing.message}"
    logger.info("submit %s: %s, tier %d", ev.task.id, status.value, tier)
    return SubmitResult(
        stage=Stage.SUBMIT,
        status=status,
        message=message.strip(),
        seconds=time.monotonic() - start,
        tier=tier,
        compiled=compiled.ok,
        correct=correct,
        # a degenerate task's speed proves nothing (a shortcut is fastest): the profile keeps the figures
        speedup_eager=profile.speedup_eager if profile and not degenerate else None,
        speedup_compile=profile.speedup_compile if profile and not degenerate else None,
        timing_fair=profile.timing_fair if profile else True,
        input_kinds=verdict.kinds if verdict is not None else (),
        degenerate=degenerate,
        compile=compiled,
        verify=verify,
        profile=profile,
        integrity=merge_findings(findings),
    )


def merge_findings(findings: list[IntegrityFinding]) -> tuple[IntegrityFinding, ...]:
    """One finding per check, in first-seen order: the first failure when a stage failed it, else the first."""
    merged: dict[str, IntegrityFinding] = {}
    for finding in findings:
        if finding.check not in merged or (merged[finding.check].passed and not finding.passed):
            merged[finding.check] = finding
    return tuple(merged.values())
