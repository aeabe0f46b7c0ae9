"""The typed records that pass between the pipeline's stages and into its journal (``pipeline.py``).

A candidate is composed (:class:`Composition`), rendered into a task's code (:class:`Candidate`), judged by the
static and execution stages (:class:`Verdict`), and ends as one :class:`Outcome` in the journal: accepted with its
row's figures, or dropped with a :class:`DropReason`. Every record turns into JSON and back, so a run can resume from
its journal.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any


class Stage(enum.Enum):
    """The pipeline's stages, in order."""

    COMPOSE = "compose"
    DECONTAMINATE = "decontaminate"
    EXECUTE = "execute"
    ACCEPT = "accept"


class DropReason(enum.Enum):
    """Why a candidate was dropped (each is explained in ``docs/synth.md``)."""

    COMPOSE_FAILED = "compose_failed"
    LLM_INVALID = "llm_invalid"
    DUPLICATE = "duplicate"
    NEAR_DUPLICATE = "near_duplicate"
    KERNELBENCH_TWIN = "kernelbench_twin"
    DOES_NOT_EXECUTE = "does_not_execute"
    OUT_OF_MEMORY = "out_of_memory"
    NONDETERMINISTIC = "nondeterministic"
    NOT_FINITE = "not_finite"
    DEGENERATE = "degenerate"
    TOO_FAST = "too_fast"
    TOO_SLOW = "too_slow"
    COMPILE_FAILS = "compile_fails"

    @property
    def stage(self) -> Stage:
        if self in (DropReason.COMPOSE_FAILED, DropReason.LLM_INVALID):
            return Stage.COMPOSE
        if self in (DropReason.DUPLICATE, DropReason.NEAR_DUPLICATE, DropReason.KERNELBENCH_TWIN):
            return Stage.DECONTAMINATE
        return Stage.EXECUTE


@dataclasses.dataclass(frozen=True)
class Step:
    """One op of a composition.

    Attributes:
        op: the catalogue name of the op.
        operand: a binary op's second operand: ``"input:K"`` (the model's K-th extra input) or ``"value:J"`` (an
            earlier value: 0 is the model's first input, J the output of step J-1, a residual); None for a unary op.
        constructor: a module's constructor arguments as Python expressions (a size's name or a literal).
        shape: the output's shape as expressions of the size names.
    """

    op: str
    operand: str | None
    constructor: Mapping[str, str]
    shape: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Composition:
    """A chain of ops over the model's inputs: ``inputs`` are their shapes (expressions), ``sizes`` the module-level
    size constants, ``steps`` the ops in order (each reads the previous value)."""

    inputs: tuple[tuple[str, ...], ...]
    steps: tuple[Step, ...]
    sizes: Mapping[str, int]

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(step.op for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Composition:
        steps = tuple(Step(s["op"], s["operand"], dict(s["constructor"]), tuple(s["shape"])) for s in data["steps"])
        return cls(tuple(tuple(shape) for shape in data["inputs"]), steps, dict(data["sizes"]))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A rendered task: ``index`` numbers candidates in the order a seed generates them, ``seed`` is its own seed,
    ``origin`` "rule" (the rule-based composer) or "llm"."""

    index: int
    seed: int
    code: str
    ops: tuple[str, ...]
    data_source: str
    shapes: tuple[tuple[int, ...], ...]
    origin: str = "rule"
    composition: Composition | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a stage decided about a candidate: ``reason`` is None when it passes; ``detail`` says more."""

    reason: DropReason | None = None
    detail: str = ""
    eager_ms: float | None = None
    compile_ms: float | None = None
    nearest_kernelbench: str | None = None
    kernelbench_similarity: float | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict, compare=False)
    """Where the execution filters' time went (:data:`FILTER_PHASES`), waits for the device's slots included: how a
    run's rate is read, not part of the decision."""

    @property
    def passed(self) -> bool:
        return self.reason is None

    def adding(self, seconds: dict[str, float]) -> Verdict:
        """This verdict with ``seconds`` added to its own (a candidate judged twice: the second verdict decides, the
        time of both was spent)."""
        total = dict(self.seconds)
        for phase, spent in seconds.items():
            total[phase] = total.get(phase, 0.0) + spent
        return dataclasses.replace(self, seconds=total)


FILTER_PHASES = {
    "check": "the task checks (loading, determinism, shortcuts, input probe), their slot wait included",
    "check_wait": "of it, waiting for the device's shared slot",
    "compile": "a fresh input set, torch.compile's code generation and first run, their slot waits included",
    "compile_wait": "of it, waiting for the device's shared slot (the inputs', then the first run's)",
    "timing": "eager and torch.compile timed in one hold of the exclusive slot, its wait included",
    "timing_wait": "of it, waiting for the exclusive slot",
    "memory_wait": "before all of these, waiting for the device memory its tensors need (the workers' budget)",
}
"""The phases of :attr:`Verdict.seconds`."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One journal line: the candidate's index and ops, and how it ended (``reason`` None: accepted, with the
    row's figures in ``verdict`` and its code)."""

    index: int
    seed: int
    ops: tuple[str, ...]
    origin: str
    verdict: Verdict
    code: str = ""
    data_source: str = ""
    shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.verdict.passed

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdict"]["reason"] = self.verdict.reason.value if self.verdict.reason else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        verdict = dict(data["verdict"])
        verdict["reason"] = DropReason(verdict["reason"]) if verdict["reason"] else None
        return cls(
            index=int(data["index"]),
            seed=int(data["seed"]),
            ops=tuple(data["ops"]),
            origin=str(data["origin"]),
            verdict=Verdict(**verdict),
            code=str(data.get("code", "")),
            data_source=str(data.get("data_source", "")),
            shapes=tuple(tuple(shape) for shape in data.get("shapes", ())),
        )

    @classmethod
    def of(cls, candidate: Candidate, verdict: Verdict) -> Outcome:
        keep = verdict.passed
        return cls(
            index=candidate.index,
            seed=candidate.seed,
            ops=candidate.ops,
            origin=candidate.origin,
            verdict=verdict,
            code=candidate.code if keep else "",
            data_source=candidate.data_source,
            shapes=candidate.shapes,
        )
