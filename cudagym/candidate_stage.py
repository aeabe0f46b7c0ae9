"""One candidate process through one verify or profile stage, with the reference process as its trusted clock.

The evaluator's side of the conversation (``harness/clock.py`` and ``harness/stages.py`` are the reference's):

1. a candidate process is taken from the pool (warm: torch imported, CUDA initialised), and the reference sets up
   the stage's clock in the candidate's private exchange folder (``attach``);
2. the candidate gets its job, maps the control block and the input sets and says ``calibrating``;
3. the reference calibrates the handshake with it, before any of the agent's code is in the process, then the
   candidate loads ``model_new.py`` and the extension and says ``ready``;
4. the reference verifies or times it (``verify`` / ``time``); the evaluator only relays the results;
5. the reference ends the stage; the candidate reports its kernel breakdown and ``done``; the clock is released.

Every wait is bounded by the stage's deadline. What the candidate reports on its channel (load errors, exceptions,
its kernels) is its word; what decides the result comes from the reference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cudagym.candidate_messages import Step, read
from cudagym.candidate_pool import CandidatePool
from cudagym.harness.protocol import (
    Attach,
    Calibrate,
    CandidateJob,
    Detach,
    EndCandidate,
    TimeCandidate,
    Timed,
    Verified,
    VerifyCandidate,
)
from cudagym.reference_process import ReferenceProcess
from cudagym.results import KernelTime
from cudagym.sandbox import Child

SILENT_GRACE_S = 1.0
HeardT = TypeVar("HeardT", Verified, Timed)


class CandidateStage:
    """See the module docstring. ``job`` is the candidate's job without its link (``make_job(exchange)`` builds
    it once the candidate's private folder is known); ``gpu_library`` is the clock's library on cuda,
    ``symbols_dir`` is where the cpu sampler caches libraries' symbols, ``hang_s`` the floor of the clock's bound on one
    handshake (``EvalConfig.hang_seconds``), ``device_slot(label)`` the device's shared slot, held while the reference
    works on the device for the stage (never beside another environment's timing)."""

    def __init__(
        self,
        pool: CandidatePool,
        ref: ReferenceProcess,
        make_job: Callable[[Path], CandidateJob],
        *,
        deadline: float,
        gpu_library: str = "",
        symbols_dir: str = "",
        refill: bool = True,
        hang_s: float = 0.0,
        device_slot: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.pool, self.ref, self.make_job, self.deadline = pool, ref, make_job, deadline
        self.gpu_library, self.symbols_dir, self.refill = gpu_library, symbols_dir, refill
        self.hang_s = hang_s
        self.device_slot = device_slot or (lambda label: contextlib.nullcontext())
        self.child: Child | None = None
        self.attached = False
        self.silent = ""  # why the candidate stopped answering the clock, when it did
        self.max_calls = 1
        self.moved_bytes = 0  # what every correct solution reads and writes per call (the speed-of-light bound)
        self.calibration: dict[str, float] = {}

    def remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def start(self) -> bool:
        """Steps 1 and 2: False when the candidate failed before it could be calibrated (its messages say why)."""
        child = self.child = self.pool.acquire(refill=self.refill)
        if child.exchange is None:
            raise RuntimeError("a candidate process without an exchange folder")
        if self.pool.await_stage(child, Step.WARM, self.deadline) is None:
            return False
        with self.device_slot("attach"):  # the reference draws the stage's input sets on the device
            reply = self.ref.call(
                Attach(
                    exchange=child.exchange,
                    root_pid=child.proc.pid,
                    gpu_library=self.gpu_library,
                    symbols_dir=self.symbols_dir,
                    hang_s=self.hang_s,
                )
            )
        self.attached = True
        self.max_calls = reply.max_calls
        self.moved_bytes = reply.bytes
        child.send(dataclasses.asdict(dataclasses.replace(self.make_job(Path(child.exchange)), link=reply.link)))
        return self.pool.await_stage(child, Step.CALIBRATING, self.deadline) is not None

    def calibrate(self) -> bool:
        """Step 3, first half: False when the candidate stopped answering during calibration."""
        reply = self.ref.call(Calibrate(seconds=self.remaining()), timeout=self.remaining() + 5)
        if reply.silent:
            self.silent = reply.silent
            return False
        self.calibration = reply.total_us
        return True

    def await_ready(self) -> bool:
        """Step 3, second half: the candidate loaded the agent's code (False when it failed to)."""
        assert self.child is not None
        return self.pool.await_stage(self.child, Step.READY, self.deadline) is not None

    def verify(
        self, plan: list[tuple[int, str]], repeat_first: bool, atol: float, rtol: float, precision: str
    ) -> Verified | None:
        """Step 4 of a verify (``VerifyCandidate``, within what is left of the stage); None when the candidate went
        silent."""
        seconds = self.remaining()
        request = VerifyCandidate(plan, repeat_first, atol, rtol, seconds, precision)
        return self._heard(self.ref.call(request, timeout=seconds + 5))

    def time(self, timing: dict[str, Any], atol: float, rtol: float, precision: str) -> Timed | None:
        """Step 4 of a profile (``TimeCandidate``), as ``verify``."""
        seconds = self.remaining()
        return self._heard(self.ref.call(TimeCandidate(timing, atol, rtol, seconds, precision), timeout=seconds + 5))

    def _heard(self, reply: HeardT) -> HeardT | None:
        if reply.silent:
            self.silent = reply.silent
            return None
        return reply

    def finish(self) -> tuple[bool, int | None]:
        """Step 5: (the candidate ended in time, its exit code). A candidate the clock stopped waiting for is given
        ``SILENT_GRACE_S`` to end, not the rest of the stage: a hung kernel costs its hang bound and the kill."""
        assert self.child is not None
        if self.attached:
            self.ref.call(EndCandidate())
        deadline = min(self.deadline, time.monotonic() + SILENT_GRACE_S) if self.silent else self.deadline
        finished, code = self.pool.finish(self.child, deadline)
        self.detach()
        return finished, code

    def detach(self) -> None:
        if self.attached and self.ref.alive:
            self.attached = False
            self.ref.call(Detach())

    def kernels(self) -> tuple[KernelTime, ...]:
        """The candidate's per-kernel device time over the stage (its word), when it reported a readable one."""
        assert self.child is not None
        return next((m.kernels for m in read(self.child.messages) if m.step is Step.KERNELS), ())

    def discard(self) -> None:
        """Kills the candidate if it still runs and releases the clock (idempotent)."""
        if self.child is not None:
            self.pool.discard(self.child)
        with contextlib.suppress(RuntimeError):
            self.detach()


@contextlib.contextmanager
def candidate_stage(stage: CandidateStage) -> Iterator[CandidateStage]:
    """``stage``, discarded whatever happens in the block."""
    try:
        yield stage
    finally:
        stage.discard()
