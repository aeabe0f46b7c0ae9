"""What the candidate stages (verify, profile, the wrapped runs) share: the prechecks, a serving candidate's job, its
stage on the reference's clock, input sets drawn for untimed use, and the result of a harness failure."""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudagym.candidate_stage import CandidateStage
from cudagym.eval_config import resolve_hang_seconds
from cudagym.harness.protocol import CandidateJob, ExportState, Prepare, Prepared
from cudagym.reference_process import ReferenceProcess
from cudagym.results import CompileResult, Stage, Status
from cudagym.stages.compilation import is_single_file
from cudagym.text import clean
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")


def prechecks(
    ev: LocalEvaluator, workspace: Workspace, stage: Stage, cls: type, compiled: CompileResult | None = None
) -> tuple[CompileResult | None, Any]:
    """Compiles (cached when unchanged; the fixed-file and static checks come first) unless ``compiled`` is this
    workspace's compile of the moment (a submit's, with no agent action since); returns (compiled, failure)."""
    start = time.monotonic()
    compiled = compiled if compiled is not None else ev.compile(workspace)
    if not compiled.ok:
        integrity = compiled.status is Status.INTEGRITY
        return compiled, cls(
            stage=stage,
            status=compiled.status,
            seconds=time.monotonic() - start,
            message=compiled.message if integrity else "The build failed; call compile to see the diagnostics.",
            stderr=compiled.diagnostics,
        )
    if not (workspace.path / "model_new.py").is_file():
        return compiled, cls(
            stage=stage,
            status=Status.LOAD_ERROR,
            seconds=time.monotonic() - start,
            message="model_new.py does not exist; write it (it defines class ModelNew).",
        )
    return compiled, None


def job(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult, folder: Path) -> CandidateJob:
    """A serving candidate's job (its link to the clock is added by ``CandidateStage``); the weights travel as a
    file in its private ``folder``."""
    state = folder / "state.pt"
    ev.reference().call(ExportState(path=str(state)))
    # None: a workspace-layout solution, whose kernels cudagym builds from its files (no load_inline served)
    inline = ev._inline_builds.get(compiled.build_hash or "", {}) if is_single_file(workspace) else None
    return CandidateJob(
        mode="serve",
        workspace=str(workspace.path),
        extension=compiled.artifact,
        inline_builds=inline,
        state_path=str(state),
        device=ev.backend.device,
        dtype=ev.task.metadata.dtype,
        threads=ev.backend.threads,
        eval_mode=ev._eval_mode,
    )


def serving_stage(
    ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult, deadline: float, *, refill: bool
) -> CandidateStage:
    """A candidate stage with the evaluator's pool and reference, timed by the reference's clock; its job comes from
    ``LocalEvaluator._job``."""
    timing = ev.timing
    return CandidateStage(
        ev.pool,
        ev.reference(),
        lambda folder: ev._job(workspace, compiled, folder),
        deadline=deadline,
        gpu_library=timing.gpu_library,
        symbols_dir=str(ev.cache_dir / "symbols"),
        refill=refill,
        hang_s=resolve_hang_seconds(ev.config, ev.backend),
        device_slot=lambda label: ev._shared_slot(label, deadline),
    )


def unchecked_inputs(ev: LocalEvaluator, ref: ReferenceProcess, key: str, path: str = "") -> Prepared:
    """A fresh input set ``key`` from a secret seed, kept in the reference (and written to ``path``); drawing it
    runs the reference on the device, so never beside another environment's timing (the device's shared slot)."""
    with ev._shared_slot("inputs"):
        return ref.call(Prepare(key=key, seed=secrets.randbits(62), kind="task", path=path))


def harness_failure(cls: type, stage: Stage, exc: Exception, start: float) -> Any:
    """A result saying that the evaluation machinery (not the agent's code) failed, with the reason."""
    logger.warning("%s: the evaluation harness failed: %s", stage.value, exc)
    return cls(
        stage=stage,
        status=Status.HARNESS_ERROR,
        seconds=time.monotonic() - start,
        message=f"The evaluation harness failed: {clean(str(exc), 1500)}",
    )
