"""One untimed, unchecked call of the candidate in a process started under a tool (Nsight Compute here,
compute-sanitizer in ``faults``), and Nsight Compute's report for ``profile(ncu=True)``: text for the agent."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cudagym.candidate_pool import classify
from cudagym.gpu_lock import TimingSlotTimeout
from cudagym.harness.protocol import Drop
from cudagym.ncu import summarize_ncu
from cudagym.results import CompileResult, Status
from cudagym.sandbox import Child, exchange_dir
from cudagym.stages.candidates import unchecked_inputs
from cudagym.text import clean
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator


def ncu(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult) -> str:
    """Nsight Compute's speed-of-light and occupancy figures for the candidate's own kernels (a run of its own,
    not timed: ncu needs the host's namespaces, so it gets no private exchange folder)."""
    if not ev.backend.is_cuda:
        return "Nsight Compute needs the cuda backend."
    tool = shutil.which("ncu")
    if tool is None:
        return "Nsight Compute (ncu) is not installed on this machine."
    with tempfile.TemporaryDirectory(prefix="cudagym-ncu-", dir=exchange_dir()) as tmp:
        return ncu_run(ev, workspace, compiled, Path(tmp), tool)


def ncu_run(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult, folder: Path, tool: str) -> str:
    log = folder / "ncu.csv"
    prefix = (
        tool,
        "--clock-control",
        "none",
        "--section",
        "SpeedOfLight",
        "--section",
        "Occupancy",
        "--csv",
        "--page",
        "details",
        "--log-file",
        str(log),
        "--launch-count",
        "40",
    )
    try:
        child, status, message = wrapped_run(ev, workspace, compiled, folder, prefix, ev.config.profile_timeout, "ncu")
    except TimingSlotTimeout:
        wait = ev.config.profile_timeout
        return f"ncu did not run: the GPU was busy with other environments' timing for {wait:.0f} s."
    if status is not Status.OK:
        return f"ncu run failed: {message}"
    if not log.exists():
        return "ncu produced no report: " + clean(child.output.text(), 1500)
    return summarize_ncu(log.read_text(errors="replace"))


def wrapped_run(
    ev: LocalEvaluator,
    workspace: Workspace,
    compiled: CompileResult,
    folder: Path,
    prefix: tuple[str, ...],
    timeout: float,
    label: str,
) -> tuple[Child, Status, str]:
    """One call of ModelNew on an input set of its own (drawn by the reference into ``folder``) in a candidate
    started under ``prefix`` (a tool such as ncu or compute-sanitizer, named by ``label``); untimed, unchecked.
    Raises TimingSlotTimeout when the device's shared slot is not free within ``timeout``."""
    job = dataclasses.replace(ev._job(workspace, compiled, folder), mode="ncu", inputs_file=str(folder / "ncu.pt"))
    unchecked_inputs(ev, ev.reference(), "ncu", path=job.inputs_file)
    ev.reference().call(Drop(key="ncu"))
    # the whole run (the wrapper's replays included) in the device's shared slot: never beside another env's timing;
    # the candidate takes no slot of its own inside it (``CandidatePool``)
    with ev._shared_slot(label, time.monotonic() + timeout):
        child, finished, code = ev.pool.run(job, timeout, prefix=prefix)
    status, message, _ = classify(child, finished, code, timeout)
    return child, status, message
