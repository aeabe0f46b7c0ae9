"""The pool's compile workers: builds on the machine's cores, with no evaluator held.

A compile needs no reference process and runs no agent code (the compiler runs in its own sandbox,
:mod:`cudagym.compiler_sandbox`), so the pool runs compile jobs here, beside the evaluators' verifies and profiles,
up to ``PoolLimits.compile_workers`` at once. Each worker thread keeps a :class:`~cudagym.build.Builder` per build
setting; all of them share the pool's cache (compiled objects, precompiled headers, ccache). A job passes the same
gate a local evaluator's compile does (:mod:`cudagym.compile_gate`) and gets the same result. A single-file
``model_new.py`` (load_inline) is compiled by importing it in a candidate process: such a job goes to an evaluator
instead (:meth:`CompileLane.takes` says which).
"""

from __future__ import annotations

import threading
from pathlib import Path

from cudagym.backends import Backend
from cudagym.build import Builder
from cudagym.compile_gate import gated_build
from cudagym.evaluator import is_single_file
from cudagym.pool.jobs import JobStage, PoolJob
from cudagym.results import CompileResult


class CompileLane:
    """Builds workspaces for compile jobs (see the module docstring); thread-safe (a builder per thread)."""

    def __init__(self, backend: Backend, cache_dir: Path) -> None:
        self.backend = backend
        self.cache_dir = cache_dir
        self._local = threading.local()

    @staticmethod
    def takes(job: PoolJob) -> bool:
        """Whether ``job`` is built here: a compile of kernel sources (not a single-file model_new.py)."""
        return job.stage is JobStage.COMPILE and not is_single_file(job.workspace)

    def _builder(self, job: PoolJob) -> Builder:
        builders: dict[str, Builder] = self._local.__dict__.setdefault("builders", {})
        options = job.config.build
        if repr(options) not in builders:
            builders[repr(options)] = Builder(self.backend, cache_dir=self.cache_dir, options=options)
        return builders[repr(options)]

    def run(self, job: PoolJob) -> CompileResult:
        """The gate, then the build (cached by content, so a later verify of the same files finds it built)."""
        policy = job.config.policy.with_task_hints(job.task.metadata.extra.get("integrity_policy"))
        return gated_build(job.workspace, policy, lambda: self._builder(job).build(job.workspace))
