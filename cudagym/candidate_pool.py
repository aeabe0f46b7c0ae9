"""Single-use candidate processes: started ahead, talked to, classified, and reaped.

A candidate process runs the agent's code for one stage and is then discarded, so nothing one
candidate does can leak into the next. To keep that cheap, the pool keeps ``Tuning.prestart``
processes started ahead (torch imported, CUDA and its tracing initialised: several seconds each), and a
used process that said it was done is killed by a background thread instead of being waited for
(tearing down a CUDA context takes about a second). The evaluator asks the pool to hold back both
while it times (``start(refill=False)``, ``join_reapers``), so that no process starts or dies on the
device during a timed run; and a reaper kills in the device's shared slot (``ending``), so that neither does one
of another evaluator's.

With ``fork_server`` on (the default; ``$CUDAGYM_FORK_SERVER=0`` turns it off), candidates are forked
from a server that imported torch once (``cudagym.forkserver``), which saves each the interpreter's start
and torch's import (3.5 s on the H200 machine). The server starts with the pool's first spare and fills the
pool once it is ready; if it cannot start (twice), the pool falls back to new interpreters and says why
in ``fork_server_error``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cudagym.backends import Backend
from cudagym.candidate_messages import CandidateError, CandidateMessage, Step, parse, read
from cudagym.fault_text import headline
from cudagym.forkserver import ForkServer, ForkServerError, fork_server_allowed
from cudagym.harness.common import PROFILER_WARMUP_ENV, WARMUP_SLOT_ENV
from cudagym.harness.protocol import CandidateJob
from cudagym.results import Status
from cudagym.sandbox import HARNESS_DIR, Child, ChildLimits, scrubbed_env, signal_name
from cudagym.text import clean

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from cudagym.workspace import Workspace


class CandidatePool:
    """The candidate processes of one evaluator (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        limits: ChildLimits,
        prestart: int,
        env: dict[str, str],
        *,
        fork_server: bool = True,
        ending: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.backend = backend
        # what a used candidate is killed in by its reaper: the device's shared slot (``LocalEvaluator``), so that the
        # teardown of its CUDA context never runs beside another evaluator's timed run; None: nothing
        self.ending = ending
        self.limits = limits
        self.env = env
        # on the CPU, processes warming up would share the cores with the timed runs: one ahead at most
        self.prestart = int(prestart) if backend.is_cuda else min(1, int(prestart))
        self.fork_server = fork_server and fork_server_allowed()
        self.fork_server_error = ""  # why candidates are not forked, when they should be
        self._server: ForkServer | None = None
        self._server_failures = 0
        self._lock = threading.RLock()  # the fork server's readiness fills the pool from another thread
        self._spares: list[Child] = []
        self._running: list[Child] = []
        self._reapers: list[threading.Thread] = []

    def _launcher(self) -> ForkServer | None:
        """The fork server (started on first use), or None when candidates start as new interpreters."""
        if not self.fork_server or self._server_failures >= 2:
            return None
        if self._server is None or not self._server.alive:
            if self._server is not None:
                self._server_failed(self._server, "the fork server exited")
            self._server = ForkServer(scrubbed_env(self.backend.threads, self.env), on_ready=self._server_ready)
            logger.debug("fork server started (pid %d)", self._server.proc.pid)
        return self._server

    def _server_ready(self, server: ForkServer) -> None:
        with self._lock:
            if self._server is server:
                self.fill()

    def _server_failed(self, server: ForkServer, why: str) -> None:
        self._server_failures += 1
        self.fork_server_error = why
        fallback = "candidates start as new interpreters" if self._server_failures >= 2 else "starting another"
        logger.warning("the fork server failed (%s): %s", fallback, why)
        server.close()
        if self._server is server:
            self._server = None

    def _new(self, prefix: tuple[str, ...] = ()) -> Child:
        launcher = None if prefix else self._launcher()
        env = self.env
        if prefix:
            # under a wrapper (ncu), which is a CUDA profiling client itself, the candidate starts no torch profiler
            # session of its own (it needs no per-kernel breakdown there; whether the two clashed was never shown:
            # ncu's empty reports came from killing the wrapper early, see ``run``). Nor does it take the device's
            # shared slot to warm up: a wrapped run lives inside its caller's shared slot (``stages.wrapped``), and
            # a second shared holder queues behind any timing waiting at the turnstile, which in turn waits for the
            # caller's slot to end: the run would hang to its deadline whenever another env wanted to time.
            env = {k: v for k, v in self.env.items() if k != WARMUP_SLOT_ENV}
            env[PROFILER_WARMUP_ENV] = "0"
        child = functools.partial(
            Child, "candidate", limits=self.limits, threads=self.backend.threads, env=env, prefix=prefix
        )
        try:
            return child(launcher=launcher)
        except ForkServerError as exc:  # only a fork can raise it: the server failed, start a new interpreter
            assert launcher is not None
            self._server_failed(launcher, str(exc))
        return child()

    def fill(self) -> None:
        """Starts candidate processes until ``prestart`` of them are warming or warm (once the fork server
        is ready, when there is one: it fills the pool itself when it gets there)."""
        with self._lock:
            for dead in [s for s in self._spares if not s.alive]:
                dead.kill()
                self._spares.remove(dead)
            launcher = self._launcher()
            if launcher is not None and not launcher.ready:
                return
            while len(self._spares) < self.prestart:
                self._spares.append(self._new())

    def acquire(self, prefix: tuple[str, ...] = (), *, refill: bool = True) -> Child:
        """A single-use candidate that has not been given its job yet (send it with ``child.send``).

        It is the oldest spare when there is one, else a new process; ``prefix`` (a wrapper such as ncu)
        always gets a new one. ``refill=False``: no successor starts now (call :meth:`fill` later)."""
        with self._lock:
            if prefix:
                child = self._new(prefix)
            else:
                self.fill()
                child = self._spares.pop(0) if self._spares else self._new()
                if refill:
                    self.fill()
            self._running.append(child)
        return child

    def start(self, job: CandidateJob, prefix: tuple[str, ...] = (), *, refill: bool = True) -> Child:
        """A single-use candidate with its job sent (``acquire``, then the job); it then does its stage."""
        child = self.acquire(prefix, refill=refill)
        child.send(dataclasses.asdict(job))
        return child

    @staticmethod
    def await_stage(child: Child, stage: Step, deadline: float, key: str = "") -> CandidateMessage | None:
        """The candidate's next ``stage`` message (for ``key``); None when it failed, died or ran out of time. Lines
        that are not messages of the protocol are passed over (``cudagym.candidate_messages``)."""
        while True:
            raw = child.receive(deadline)
            if raw is None:
                return None
            message = parse(raw)
            if message.failed:
                return None
            if message.step is stage and (not key or message.key == key):
                return message

    def finish(self, child: Child, deadline: float, *, wait_for_exit: bool = False) -> tuple[bool, int | None]:
        """Ends the conversation and the process; returns (finished in time, returncode). A candidate that
        said it was done is killed by a background thread, unless ``wait_for_exit``."""
        child.send({"op": "end"}, close_stdin=True)
        if not wait_for_exit and self.await_stage(child, Step.DONE, deadline) is not None:
            self._forget(child)
            reaper = threading.Thread(target=self._reap, args=(child,), name="cudagym-reap", daemon=True)
            reaper.start()
            with self._lock:
                self._reapers = [r for r in self._reapers if r.is_alive()] + [reaper]
            return True, 0
        finished = child.receive_all(deadline)
        code = child.wait(deadline - time.monotonic() + 1) if finished else None
        child.kill()
        self._forget(child)
        return finished and code is not None, code

    def run(self, job: CandidateJob, timeout: float, prefix: tuple[str, ...] = ()) -> tuple[Child, bool, int | None]:
        """Runs a candidate that needs no commands (import, ncu) to its end or its deadline. A wrapped run
        (``prefix``, such as ncu) is waited for until the wrapper exits: ncu writes its report after the
        candidate has ended, and killing it at the candidate's "done" lost the report."""
        child = self.start(job, prefix)
        finished, code = self.finish(child, time.monotonic() + timeout, wait_for_exit=bool(prefix))
        return child, finished, code

    def _reap(self, child: Child) -> None:
        """Kills a used candidate (on its reaper's thread), in the ``ending`` slot where there is one."""
        with self.ending() if self.ending is not None else contextlib.nullcontext():
            child.kill()

    def discard(self, child: Child) -> None:
        """Kills a candidate that is still running (idempotent; one already being reaped is left to its reaper)."""
        with self._lock:
            if child in self._running:
                child.kill()
                self._forget(child)

    def _forget(self, child: Child) -> None:
        with self._lock:
            if child in self._running:
                self._running.remove(child)

    def join_reapers(self, timeout: float = 10.0) -> None:
        """Waits until used candidates are gone (their CUDA contexts torn down); safe from several threads."""
        with self._lock:
            reapers = list(self._reapers)
        for reaper in reapers:
            reaper.join(timeout=timeout)
        with self._lock:
            self._reapers = [r for r in self._reapers if r.is_alive()]

    def process_ids(self) -> list[int]:
        """The processes the pool keeps: its fork server, spare candidates and those running a stage.

        Read without the pool's lock (copies of its lists and a reference to its server): the machine pool weighs
        evaluators from its dispatcher, which must never wait behind a candidate's start or a close in progress."""
        server = self._server
        children = [c for c in (*self._running, *self._spares) if c.alive]
        own = [server.proc.pid] if server is not None and server.alive else []
        return own + [c.proc.pid for c in children]

    def close(self) -> None:
        """Kills every candidate, running or spare, ends the fork server and waits for the reapers
        (idempotent). A pool used again after ``close`` starts afresh. The waits (the server's exit, up to seconds
        for one that is busy forking; the reapers) come after the lock is let go."""
        with self._lock:
            children = [*self._running, *self._spares]
            self._running.clear()
            self._spares.clear()
            server, self._server = self._server, None
        for child in children:
            child.kill()
        if server is not None:
            server.close()
        self.join_reapers()


def classify(
    child: Child | None, finished: bool, code: int | None, timeout: float, silent: str = ""
) -> tuple[Status, str, str]:
    """How a candidate's stage ended: (status, message, signal name); ``Status.OK`` when it said done. ``silent``:
    why the trusted clock stopped waiting for it, when it did."""
    if child is None:
        return Status.CRASH, "The candidate process could not be started.", ""
    messages = read(child.messages)
    errors = [m for m in messages if m.failed]
    stages = {m.step for m in messages}
    if not finished and silent:
        return Status.TIMEOUT, f"The candidate was killed: {silent}.", ""
    if not finished:
        return Status.TIMEOUT, f"The candidate did not finish within {timeout:.0f} s and was killed.", ""
    sig = signal_name(code)
    if errors:
        err = errors[-1]
        info = err.error or CandidateError()
        where = "loading model_new.py / the extension" if err.step is Step.LOAD else "running ModelNew"
        status = Status.LOAD_ERROR if err.step is Step.LOAD else Status.RUNTIME_ERROR
        # the message's first line that says something: torch's C++ frames and its advice go to the output's condensing
        what = headline(info.message)
        if info.cuda:
            return status, f"CUDA fault while {where}: {what}", sig
        return status, f"{info.type or 'An error it did not describe'} while {where}: {what}", sig
    if sig:
        # a candidate that reported ``ready`` was serving calls (ModelNew built); ``run`` is the ncu mode's
        where = "while running" if {Step.READY, Step.RUN} & stages else "while loading"
        return Status.CRASH, f"The candidate process was killed by {sig} {where} ModelNew.", sig
    if Step.DONE not in stages:
        return Status.CRASH, f"The candidate process exited with status {code} before finishing.", sig
    if silent:
        return Status.CRASH, f"The candidate stopped answering the evaluation: {silent}.", sig
    return Status.OK, "", sig


def candidate_output(child: Child, workspace: Workspace, limit: int) -> str:
    """The candidate's traceback (if it reported one) and its stdout/stderr, cleaned and cut to ``limit``."""
    messages = read(child.messages)
    tracebacks = [m.error.traceback for m in messages if m.failed and m.error is not None]
    # a candidate that reported "done" wrote all it had to say before that: no need to wait for its exit
    done = any(m.step is Step.DONE for m in messages)
    text = "\n".join([*tracebacks, child.output.text(wait=0.2 if done else 2.0)]).strip()
    replace = {str(workspace.path): "", str(HARNESS_DIR): "<harness>/"}
    return clean(text, limit, replace_paths=replace)


class Phases:
    """Wall-clock seconds spent in each part of a stage, in order (``phases`` of verify/profile results)."""

    def __init__(self, start: float) -> None:
        self._last = start
        self._items: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self._items.append((name, round(now - self._last, 4)))
        self._last = now

    def items(self) -> tuple[tuple[str, float], ...]:
        return tuple(self._items)
