"""Failures remembered by content: a stage whose candidate timed out or was killed is not run again on the same
files.

An infinite loop would otherwise cost a verify timeout, then a profile timeout, then both again at submit, on code
that did not change. :class:`FailureMemo` remembers such a failure under a key made of everything the candidate's
behaviour depends on (:func:`memo_key`: the agent's files, the built extension, the task, the backend, the
evaluation settings and the episode's workspace), and a later stage on the same key answers at once with it,
saying so.

What keeps it safe to use at submit:

* only failures are remembered, and only those that really happened to the candidate: a timeout for which the
  candidate itself had most of the stage's time (not one eaten by the harness starting up), or a crash by a fault
  signal of its own (SIGSEGV, SIGABRT, ...); a harness error, a mismatch or an integrity finding is never
  remembered (they are cheap to find again, or not the candidate's doing);
* a recalled result is always that failure (never a pass), for the same key, and the stage's checks that run
  before the candidate (fixed files, static integrity checks, the build) still run first;
* a verify failure answers verify and profile (a profile runs the candidate on more calls of the same inputs'
  shapes); a profile failure answers profile only (verify runs fewer calls: it may finish).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping

from cudagym.backends import Backend
from cudagym.eval_config import EvalConfig
from cudagym.results import CompileResult, ProfileResult, Stage, Status, VerifyResult
from cudagym.tasks.task import Task
from cudagym.workspace import Workspace

logger = logging.getLogger(__name__)

CANDIDATE_SHARE = 0.75
"""A timeout is remembered when the candidate had at least this share of the stage's time limit itself."""

CAPACITY = 64
"""Failures kept per evaluator (the oldest is forgotten first)."""

FAULT_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS"})
"""Signals a process's own code raises (a SIGKILL or SIGTERM may come from the harness or the machine)."""

CandidateResult = VerifyResult | ProfileResult
_ANSWERS: dict[Stage, tuple[Stage, ...]] = {Stage.VERIFY: (Stage.VERIFY,), Stage.PROFILE: (Stage.VERIFY, Stage.PROFILE)}


def candidate_key(
    workspace: Workspace, compiled: CompileResult, task: Task, backend: Backend, config: EvalConfig
) -> str:
    """What a candidate's behaviour depends on, hashed (:func:`memo_key`): its files and build, the task, the
    backend, the evaluation settings, and the episode's workspace."""
    return memo_key(
        workspace.snapshot(),
        compiled.build_hash,
        compiled.artifact,
        task.id,
        task.source_for(backend.name),
        repr(task.metadata),
        backend.name,
        backend.arch,
        repr(config),
        str(workspace.path),
    )


def memo_key(files: Mapping[str, bytes], *context: str) -> str:
    """The content hash of the agent's ``files`` (path and bytes) and ``context`` (the build's hash, the task, the
    backend, the settings, the workspace: whatever else the candidate's behaviour depends on)."""
    digest = hashlib.sha256()
    for part in context:
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    for path in sorted(files):
        digest.update(path.encode("utf-8", "surrogatepass") + b"\0" + str(len(files[path])).encode() + b"\0")
        digest.update(files[path])
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Observed:
    """A failure that happened: the stage's result and when (``time.monotonic()``)."""

    result: CandidateResult
    at: float


def remembered(result: CandidateResult, candidate_seconds: float | None, timeout: float) -> bool:
    """Whether ``result`` is a failure of the candidate's own that the same files would meet again: a timeout for
    which the candidate had ``candidate_seconds`` >= ``CANDIDATE_SHARE`` of ``timeout`` (None: it never got to run
    its code), or a crash by one of the ``FAULT_SIGNALS``."""
    if result.status is Status.TIMEOUT:
        return candidate_seconds is not None and candidate_seconds >= CANDIDATE_SHARE * timeout
    return result.status is Status.CRASH and result.signal in FAULT_SIGNALS


class FailureMemo:
    """The failures observed by one evaluator, by :func:`memo_key` (see the module docstring)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._seen: collections.OrderedDict[tuple[str, Stage], Observed] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def remember(self, key: str, result: CandidateResult, *, candidate_seconds: float | None, timeout: float) -> bool:
        """Keeps ``result`` under ``key`` when it is a failure worth remembering (:func:`remembered`); returns
        whether it was kept."""
        if not remembered(result, candidate_seconds, timeout):
            return False
        self._seen[(key, result.stage)] = Observed(result, time.monotonic())
        self._seen.move_to_end((key, result.stage))
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        logger.debug("remembered a %s in %s under %s", result.status.value, result.stage.value, key[:12])
        return True

    def recall(self, key: str, stage: Stage, seconds: float = 0.0) -> CandidateResult | None:
        """The failure that answers ``stage`` (VERIFY or PROFILE) for ``key``, as a result of ``stage`` whose message
        says that nothing was run (``seconds``: what the stage took to find it); None when none is remembered."""
        observed = next((self._seen[(key, s)] for s in _ANSWERS[stage] if (key, s) in self._seen), None)
        if observed is None:
            return None
        return _recalled(observed, stage, seconds)


def _recalled(observed: Observed, stage: Stage, seconds: float) -> CandidateResult:
    """``observed`` told again as the result of ``stage``, which took ``seconds``."""
    before = observed.result
    what = "timed out" if before.status is Status.TIMEOUT else "crashed"
    said = before.message.rstrip(". ")
    said = said[:1].lower() + said[1:]
    message = (
        f"Not run again: the same files {what} in {before.stage.value} {_ago(time.monotonic() - observed.at)} "
        f"({said}); change them first."
    )
    fields = {
        "stage": stage,
        "status": before.status,
        "message": message,
        "stderr": before.stderr,
        "signal": before.signal,
        "fault": before.fault,
        "integrity": before.integrity,
        "seconds": seconds,
    }
    if stage is Stage.VERIFY and isinstance(before, VerifyResult):
        return dataclasses.replace(before, **fields, phases=())
    return ProfileResult(**fields)


def _ago(seconds: float) -> str:
    """How long ago, in words: ``under a second ago``, ``12 s ago``, ``3 min ago``."""
    if seconds < 1:
        return "under a second ago"
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"
