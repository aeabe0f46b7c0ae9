"""A CUDA fault a candidate stage ran into (``cudagym.fault_text``), with the build's kernels and, where
``EvalConfig.fault_sanitizer`` allows it, compute-sanitizer's first finding on one call of the candidate
(``cudagym.sanitizer``). Its result: ``results.CudaFault``. An out-of-memory error that was the machine's shortage
rather than the candidate's (``cudagym.device_memory.shortage``) is no fault of the candidate's: the stage answers
it with a harness error (:func:`machine_shortage`); one judged the candidate's own is run once more before it counts
(:func:`judged_twice`)."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from cudagym import sanitizer
from cudagym.candidate_messages import read
from cudagym.device_memory import nvidia_smi_probe, shortage
from cudagym.eval_config import sanitizes_faults
from cudagym.fault_text import find_cuda_fault, says_out_of_memory
from cudagym.results import CompileResult, CudaFault, ProfileResult, Status, VerifyResult
from cudagym.sandbox import Child, exchange_dir
from cudagym.stages.wrapped import wrapped_run
from cudagym.text import clean
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger(__name__)
_R = TypeVar("_R", VerifyResult, ProfileResult)
# faults compute-sanitizer has nothing to place: no access went astray (a run of its own under memcheck would only
# ask the device for more of the memory it lacked); an out-of-memory stage is judged by ``judged_twice`` instead
UNLOCATED_FAULTS = frozenset({"out of memory"})


def cuda_fault(
    ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult, child: Child, output: str
) -> CudaFault | None:
    """The CUDA fault the candidate's error or output names, with the build's kernels and, where
    ``EvalConfig.fault_sanitizer`` allows it, compute-sanitizer's finding; None when it ran into none."""
    errors = [m.error.message for m in read(child.messages) if m.failed and m.error is not None]
    fault = next((f for f in map(find_cuda_fault, [*errors, output]) if f is not None), None)
    if fault is None:
        return None
    kernels = tuple(dict.fromkeys(k.name for k in compiled.kernels))
    located = sanitizes_faults(ev.config, ev.backend) and fault.kind not in UNLOCATED_FAULTS
    report = sanitize(ev, workspace, compiled) if located else ""
    return dataclasses.replace(fault, kernels=kernels, sanitizer=report)


def sanitize(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult) -> str:
    """compute-sanitizer's first finding on one call of the candidate (``cudagym.sanitizer``), or why none."""
    tool = sanitizer.find_tool()
    if tool is None:
        return ""
    try:
        with tempfile.TemporaryDirectory(prefix="cudagym-sanitizer-", dir=exchange_dir()) as tmp:
            folder = Path(tmp)
            log = folder / "sanitizer.log"
            prefix = sanitizer.command_prefix(tool, log)
            _, status, message = wrapped_run(ev, workspace, compiled, folder, prefix, sanitizer.TIMEOUT_S, "sanitizer")
            report = log.read_text(errors="replace") if log.exists() else ""
    except (OSError, RuntimeError) as exc:  # the fault is reported either way; its run is an extra
        return f"compute-sanitizer could not run: {clean(str(exc), 300)}"
    summary = sanitizer.summarize(clean(report, replace_paths={str(workspace.path): ""}))
    if summary:
        return summary
    return f"compute-sanitizer found no error in its run ({status.value}: {message or 'one call'})"[:400]


def machine_shortage(ev: LocalEvaluator, status: Status, message: str) -> str | None:
    """Why a candidate stage that ended in ``status`` with ``message`` ran out of device memory through no fault
    of its own (``device_memory.shortage``, read from the device now that the candidate has ended), or None: it
    did not run out of memory, ran out of its own accord, or the device cannot be read."""
    if status not in (Status.RUNTIME_ERROR, Status.LOAD_ERROR) or not ev.backend.is_cuda:
        return None
    why = shortage(message, nvidia_smi_probe(ev.backend)(), ev.device_peak_bytes())
    if why is not None:
        logger.warning("%s: a candidate ran out of device memory that other processes held", ev.task.id)
    return why


def ran_out_on_its_own(ev: LocalEvaluator, result: VerifyResult | ProfileResult) -> bool:
    """Whether a candidate stage's ``result`` is the candidate's own out-of-memory failure on the GPU: an error that
    says the device ran out, which :func:`machine_shortage` did not judge the machine's."""
    return (
        ev.backend.is_cuda
        and result.status in (Status.RUNTIME_ERROR, Status.LOAD_ERROR)
        and says_out_of_memory(result.message)
    )


def judged_twice(ev: LocalEvaluator, run: Callable[[], _R]) -> _R:
    """The result of the candidate stage ``run``, run a second time when the first ran out of device memory on its
    own by the device's reading (:func:`ran_out_on_its_own`), and then the second run's result.

    The reading is taken once the candidate has gone, so a process outside it that filled the device during its run
    and gave the memory back before the reading (another trainer, environment or test on the GPU) leaves the shortage
    looking like the candidate's. A second run tells them apart: on a device now free an honest candidate passes,
    one that runs out again is judged again (its own, or the machine's). Its verdict stands whatever the first run
    said, so a candidate gains nothing by the repeat but the time of one more stage, which its deadlines bound."""
    start = time.monotonic()
    first = run()
    if not ran_out_on_its_own(ev, first):
        return first
    logger.info("%s %s: the candidate ran out of device memory; run once more", first.stage.value, ev.task.id)
    again = run()
    return dataclasses.replace(again, seconds=time.monotonic() - start)
