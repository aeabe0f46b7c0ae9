"""The synthesis pipeline: compose, decontaminate, execute, accept; resumable and deterministic for a seed.

Candidates are numbered from 0; candidate ``i`` is drawn from its own seed (``candidate_seed(seed, i)``), so what is
composed does not depend on how many workers run or where a run resumed. Each goes through the stages:

1. **compose**: the rule-based composer (or the LLM composer) makes the candidate and renders it;
2. **decontaminate**: it is compared with KernelBench and with the tasks kept so far (``decontaminate.py``);
3. **execute**: the survivors run through the execution filters (``filters.py``), one trusted reference process per
   worker; a candidate outside the time window is tried once more with its batch rescaled by the measured time;
4. **accept**: in index order, a survivor is compared once more with the tasks kept meanwhile, then kept.

Every candidate ends as one line of ``journal.jsonl`` (its :class:`~cudagym.synth.records.Outcome`), written in index
order as soon as it and every earlier candidate are done, so a run cut short resumes after its last journaled one.
The run's settings are kept in ``settings.json`` and its catalogue in ``catalogue.json``; resuming with other
settings is refused.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import math
import random
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cudagym.backends import Backend, resolve_backend
from cudagym.synth.catalogue import Catalogue, OpSpec, build_catalogue, load_catalogue
from cudagym.synth.compose import ComposeError, Composer
from cudagym.synth.decontaminate import Decontaminator, Fingerprint, Thresholds, load_kernelbench
from cudagym.synth.filters import ExecutionFilter, FilterConfig
from cudagym.synth.llm import LLMComposer, LLMInvalid, LLMSettings
from cudagym.synth.memory_budget import device_budget
from cudagym.synth.plan import (
    BYTES_PER_ELEMENT,
    FOOTPRINT_FACTOR,
    PROFILES,
    footprint,
    plan_sizes,
    rescale,
    target_ms,
)
from cudagym.synth.records import Candidate, DropReason, Outcome, Verdict
from cudagym.synth.render import candidate as render_candidate
from cudagym.tasks.requirements import imported_packages
from cudagym.tasks.task import Task, TaskMetadata

logger = logging.getLogger(__name__)

JOURNAL = "journal.jsonl"
SETTINGS = "settings.json"
CATALOGUE = "catalogue.json"
COMPOSE_TRIES = 5
"""Draws of the composer per candidate before it is dropped as ``compose_failed``."""
DEFAULT_CANDIDATES_PER_TASK = 20
"""The run stops after ``count`` times this many candidates, accepted or not (say why in the log)."""
AHEAD_PER_WORKER = 3
"""Candidates in flight per worker beyond the oldest open one."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    """A started candidate: its composition (None when composing failed), the verdict so far, its execution."""

    index: int
    candidate: Candidate | None
    verdict: Verdict
    future: Future[tuple[Candidate, Verdict]] | None


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """One run of the pipeline.

    Attributes:
        out: the run's folder (journal, settings, catalogue, parquet, report).
        count: accepted tasks wanted.
        backend: ``"cpu"`` or ``"cuda"``: where the filters execute (and the time window's device).
        ops_range: the smallest and largest number of ops per task (within 1-5).
        seed: the run's seed.
        workers: candidates executed at once (each with its own reference process).
        kernelbench: a local KernelBench copy to decontaminate against (None: no KernelBench comparison).
        llm: an endpoint for the LLM composer (None: the rule-based composer).
        filters: the execution filters' settings (None: the backend's window, compile checked).
        catalogue: a catalogue file to use (None: built from what is installed, or the run's own when resuming).
        max_candidates: the most candidates to try (None: ``count * DEFAULT_CANDIDATES_PER_TASK``).
        cache_dir: the checks' cache (None: cudagym's).
        thresholds: the decontamination thresholds.
    """

    out: Path
    count: int
    backend: str = "cpu"
    ops_range: tuple[int, int] = (1, 5)
    seed: int = 0
    workers: int = 1
    kernelbench: Path | None = None
    llm: LLMSettings | None = None
    filters: FilterConfig | None = None
    catalogue: Path | None = None
    max_candidates: int | None = None
    cache_dir: Path | None = None
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {self.backend!r}")
        low, high = self.ops_range
        if not 1 <= low <= high <= 5:
            raise ValueError(f"ops per task must be a range within 1-5, got {low}-{high}")

    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the first (the count may grow)."""
        return {
            "backend": self.backend,
            "ops_range": list(self.ops_range),
            "seed": self.seed,
            "llm": self.llm.model if self.llm else None,
            "kernelbench": bool(self.kernelbench),
        }


def candidate_seed(seed: int, index: int) -> int:
    """Candidate ``index``'s own seed, derived from the run's."""
    return int.from_bytes(hashlib.sha256(f"cudagym-synth:{seed}:{index}".encode()).digest()[:8], "big")


def synth_task(candidate: Candidate) -> Task:
    """The task the filters run for a candidate."""
    metadata = TaskMetadata(
        ops=candidate.ops,
        source="synth",
        requires=imported_packages(candidate.code),
        extra={"data_source": candidate.data_source},
    )
    return Task(
        id=f"synth/{candidate.index:06d}",
        name="_".join(o.rsplit(".", 1)[-1] for o in candidate.ops),
        source=candidate.code,
        metadata=metadata,
    )


def candidate_footprint(candidate: Candidate) -> int:
    """The device memory judging ``candidate`` is assumed to hold (``plan.footprint``); for a candidate without a
    composition (the LLM composer's), its inputs' float32 bytes as if every op made one more tensor of their size."""
    if candidate.composition is not None:
        return footprint(candidate.composition)
    inputs = sum(math.prod(shape) for shape in candidate.shapes) * BYTES_PER_ELEMENT
    return FOOTPRINT_FACTOR * inputs * (len(candidate.ops) + 1)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a run ended with: every outcome (this run's and the resumed ones, in index order), the catalogue, and
    whether the wanted count was reached."""

    outcomes: tuple[Outcome, ...]
    catalogue: Catalogue
    complete: bool

    @property
    def accepted(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.accepted)


class Pipeline:
    """Runs :class:`SynthConfig`. ``llm_client``: an OpenAI-like client for the LLM composer (None: made from the
    settings); ``backend``: an already resolved backend (None: resolved from ``config.backend``)."""

    def __init__(self, config: SynthConfig, *, llm_client: Any = None, backend: Backend | None = None) -> None:
        self.config = config
        self.backend = backend or resolve_backend(config.backend)  # first: a missing GPU is said before any work
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_settings()
        self.catalogue = self._catalogue()
        self.ops: Mapping[str, OpSpec] = {op.name: op for op in self.catalogue.ops}
        composable = self.catalogue.composable()
        self.composer = Composer(composable, config.ops_range)
        self.llm = LLMComposer(config.llm, composable, config.ops_range, llm_client) if config.llm else None
        self.filters = config.filters or FilterConfig.for_backend(config.backend)
        self.profile = PROFILES[config.backend]
        self.target = target_ms(self.filters.min_ms, self.filters.max_ms)
        kernelbench = load_kernelbench(config.kernelbench) if config.kernelbench else []
        self.decontaminator = Decontaminator(kernelbench, config.thresholds)
        self.budget = device_budget(self.backend, config.workers)
        self._local = threading.local()
        self._workers: list[ExecutionFilter] = []
        self._lock = threading.Lock()

    # -- setup -------------------------------------------------------------------------------------------------

    def _check_settings(self) -> None:
        path = self.out / SETTINGS
        wanted = self.config.settings()
        if path.exists():
            found = json.loads(path.read_text())
            if found != wanted:
                differ = sorted(k for k in wanted if found.get(k) != wanted[k])
                raise ValueError(
                    f"{self.out} holds a run with other settings ({', '.join(differ)}): "
                    f"resume it with the same ones ({found}) or use another --out"
                )
        else:
            path.write_text(json.dumps(wanted, indent=1))

    def _catalogue(self) -> Catalogue:
        own = self.out / CATALOGUE
        if own.exists():
            return load_catalogue(own)
        catalogue = load_catalogue(self.config.catalogue) if self.config.catalogue else build_catalogue()
        catalogue.save(own)
        return catalogue

    def journal(self) -> list[Outcome]:
        """The outcomes written so far, in index order."""
        path = self.out / JOURNAL
        if not path.exists():
            return []
        return [Outcome.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]

    # -- stages ------------------------------------------------------------------------------------------------

    def compose(self, index: int) -> Candidate | Verdict:
        """Stage 1: candidate ``index``, or the verdict that drops it."""
        seed = candidate_seed(self.config.seed, index)
        if self.llm is not None:
            try:
                return self.llm.candidate(index, seed)
            except LLMInvalid as exc:
                return Verdict(DropReason.LLM_INVALID, str(exc))
        rng = random.Random(seed)
        error = ""
        for _ in range(COMPOSE_TRIES):
            try:
                composition = self.composer.compose(rng)
            except ComposeError as exc:
                error = str(exc)
                continue
            sized = plan_sizes(composition, self.ops, self.profile, self.target, rng)
            return render_candidate(sized, self.ops, index, seed)
        return Verdict(DropReason.COMPOSE_FAILED, error)

    def _filter(self) -> ExecutionFilter:
        found = getattr(self._local, "filter", None)
        if found is None:
            found = ExecutionFilter(self.backend, self.filters, self.config.cache_dir, self.budget)
            self._local.filter = found
            with self._lock:
                self._workers.append(found)
        return found

    def execute(self, candidate: Candidate) -> tuple[Candidate, Verdict]:
        """Stage 3: the execution filters' verdict, after one rescaled try for a candidate outside the window."""
        judge = self._filter()
        verdict = judge.judge(synth_task(candidate), candidate_footprint(candidate))
        if verdict.reason in (DropReason.TOO_FAST, DropReason.TOO_SLOW) and candidate.composition and verdict.eager_ms:
            resized = rescale(candidate.composition, verdict.eager_ms, self.target, self.profile.memory_cap)
            if resized is not None:
                candidate = render_candidate(resized, self.ops, candidate.index, candidate.seed, candidate.origin)
                verdict = judge.judge(synth_task(candidate), candidate_footprint(candidate)).adding(verdict.seconds)
        return candidate, verdict

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self, progress: Callable[[Outcome], None] | None = None) -> RunResult:
        """Runs until ``count`` tasks are accepted or the candidates run out; returns every outcome.

        Up to ``AHEAD_PER_WORKER * workers`` candidates are composed and in execution ahead of the oldest one still
        open; outcomes are finished and journaled strictly in index order (a slow compile holds back the journal, not
        the workers)."""
        outcomes = self.journal()
        for outcome in outcomes:
            if outcome.accepted:
                self.decontaminator.keep(Fingerprint.of(f"synth/{outcome.index:06d}", outcome.code, outcome.ops))
        accepted = sum(o.accepted for o in outcomes)
        index = outcomes[-1].index + 1 if outcomes else 0
        limit = self.config.max_candidates or self.config.count * DEFAULT_CANDIDATES_PER_TASK
        ahead = AHEAD_PER_WORKER * self.config.workers
        if outcomes:
            logger.info("resuming %s: %d candidates done, %d accepted", self.out, len(outcomes), accepted)
        pending: collections.deque[_Pending] = collections.deque()
        pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="synth")
        try:
            with (self.out / JOURNAL).open("a") as journal:
                while accepted < self.config.count:
                    while len(pending) < ahead and index < limit:
                        pending.append(self._start(index, pool))
                        index += 1
                    if not pending:
                        break
                    outcome = self._finish(pending.popleft())
                    journal.write(json.dumps(outcome.to_dict()) + "\n")
                    journal.flush()
                    outcomes.append(outcome)
                    accepted += outcome.accepted
                    if progress is not None:
                        progress(outcome)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for worker in self._workers:
                worker.close()
        complete = accepted >= self.config.count
        if not complete:
            logger.warning(
                "%s: %d of %d tasks accepted after %d candidates", self.out, accepted, self.config.count, len(outcomes)
            )
        return RunResult(tuple(outcomes), self.catalogue, complete)

    def _start(self, index: int, pool: ThreadPoolExecutor) -> _Pending:
        """Composes candidate ``index``, judges it against KernelBench and the tasks kept so far, and submits the
        survivor to the execution filters."""
        made = self.compose(index)
        if isinstance(made, Verdict):
            return _Pending(index, None, made, None)
        static = self.decontaminator.judge(self._print(made))
        future = pool.submit(self.execute, made) if static.passed else None
        return _Pending(index, made, static, future)

    def _finish(self, item: _Pending) -> Outcome:
        """The outcome of a started candidate, once its execution is done; a survivor is compared once more with the
        tasks kept meanwhile, then kept."""
        if item.candidate is None:
            origin = "llm" if self.llm is not None else "rule"
            return Outcome(item.index, candidate_seed(self.config.seed, item.index), (), origin, item.verdict)
        candidate, verdict = item.candidate, item.verdict
        if item.future is not None:
            candidate, executed = item.future.result()
            verdict = dataclasses.replace(
                executed,
                nearest_kernelbench=verdict.nearest_kernelbench,
                kernelbench_similarity=verdict.kernelbench_similarity,
            )
            if verdict.passed:
                again = self.decontaminator.judge(self._print(candidate))
                if again.passed:
                    self.decontaminator.keep(self._print(candidate))
                else:
                    verdict = dataclasses.replace(verdict, reason=again.reason, detail=again.detail)
        return Outcome.of(candidate, verdict)

    @staticmethod
    def _print(candidate: Candidate) -> Fingerprint:
        return Fingerprint.of(f"synth/{candidate.index:06d}", candidate.code, candidate.ops)
