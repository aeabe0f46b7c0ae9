"""The built-in reward shapers: ``milestone`` (the default), ``speedup``, ``graded`` and ``composite``.

Every shaper scores a step from its recorded result only. What they share:

* A step is an *evaluated submit* when its result is a ``SubmitResult``; ``tool == "submit"`` with a
  malformed call produces a parse result instead and is an ordinary step.
* An evaluated submit is checked before it is scored, and a shaper raises (as a ``ShaperError``)
  rather than invent a reward when the submit was not evaluated (status ``HARNESS_ERROR``), when its
  tier is not one of -1, 1, 2, 3, or when a positive tier comes with ``compiled`` or ``correct`` false.
* Tier -1 is CUDA Agent's failure tier: not compiled, not correct, or rejected by an integrity check.
* A step that is truncated (the turn budget ran out) and is not an evaluated submit scores
  ``truncation_penalty`` (default 0.0, term ``"truncated"``); a submit on the last turn is scored as a
  submit.
* Every other step scores 0.0 with no terms, unless a shaper's options say otherwise (``graded``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from cudagym.results import CompileResult, Status, SubmitResult, VerifyResult

from .base import FunctionShaper, Reward, RewardShaper, Shaper, StepRecord, _real

TIERS = (-1, 1, 2, 3)
"""CUDA Agent's milestone tiers: failure, correct, faster than eager, faster than eager and compile."""

FAILED = -1.0
"""The ``speedup`` shaper's reward for a failed submit (tier -1)."""


def evaluated_submit(step: StepRecord) -> SubmitResult | None:
    """The step's ``SubmitResult`` when the step is an evaluated submit, else None.

    Raises:
        ValueError: the submit cannot be scored honestly: the harness failed to evaluate it, its tier
            is not one of ``TIERS``, or a positive tier contradicts ``compiled``/``correct``.
    """
    result = step.result
    if not isinstance(result, SubmitResult):
        return None
    if result.status is Status.HARNESS_ERROR:
        raise ValueError(f"the submit was not evaluated: the harness failed: {result.message[:1000]}")
    if result.tier not in TIERS:
        raise ValueError(f"a submit's tier must be one of {TIERS}, got {result.tier!r}")
    if result.tier > 0 and not (result.compiled and result.correct):
        raise ValueError(f"tier {result.tier} contradicts compiled={result.compiled}, correct={result.correct}")
    return result


def _truncation(penalty: float) -> Reward:
    return Reward(penalty, {"truncated": penalty})


def _agent_failed(result: CompileResult | VerifyResult) -> bool:
    """The stage failed because of the agent's code (a harness failure is not the agent's)."""
    return not result.ok and result.status is not Status.HARNESS_ERROR


class MilestoneShaper(Shaper):
    """CUDA Agent's milestone reward (paper Eq. 1), cudagym's default.

    Values:
        evaluated submit: its tier, -1 (not compiled, not correct, or an integrity check failed), 1
            (correct), 2 (correct and more than 5% faster than eager) or 3 (also more than 5% faster
            than torch.compile); term ``{"tier": tier}``.
        truncated without a submit: ``truncation_penalty`` (0.0 by default: the episode gets no
            reward, and the environment reports the truncation); term ``{"truncated": penalty}``.
        any other step: 0.0, no terms.

    Args:
        truncation_penalty: the reward of a step that ends the episode by truncation.
        name: the shaper's name (default ``"milestone"``).
    """

    name = "milestone"

    def __init__(self, truncation_penalty: float = 0.0, *, name: str | None = None) -> None:
        self.truncation_penalty = _real(truncation_penalty, "truncation_penalty")
        self.name = name or type(self).name

    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        submit = evaluated_submit(step)
        if submit is not None:
            return Reward(submit.tier, {"tier": submit.tier})
        if step.truncated:
            return _truncation(self.truncation_penalty)
        return Reward(0.0)


class SpeedupShaper(Shaper):
    """The raw speed-up reward that CUDA Agent's "w/o robust reward" ablation trains on.

    Values:
        evaluated submit, tier -1 (not compiled, not correct, or an integrity check failed): -1.0;
            term ``{"failed": -1.0}``.
        evaluated submit, correct, speed-up against ``baseline`` measured: ``log(speedup)``, natural
            log, clipped to ``[-clip, clip]`` when ``clip`` is set; term ``{"log_speedup_compile": v}``
            (``"log_speedup_eager"`` with ``baseline="eager"``).
        evaluated submit, correct, speed-up not measured (``None``): ``unmeasured`` (0.0 by default,
            the log of "as fast as the baseline"); term ``{"unmeasured": value}``.
        truncated without a submit: ``truncation_penalty`` (0.0); term ``{"truncated": penalty}``.
        any other step: 0.0, no terms.

    Args:
        baseline: which speed-up to reward: ``"compile"`` (torch.compile, as in the paper) or
            ``"eager"``.
        clip: when set (> 0), the log speed-up is clipped to ``[-clip, clip]``.
        unmeasured: the reward of a correct submit whose speed-up was not measured.
        truncation_penalty: the reward of a step that ends the episode by truncation.
        name: the shaper's name (default ``"speedup"``).
    """

    name = "speedup"

    def __init__(
        self,
        baseline: Literal["compile", "eager"] = "compile",
        clip: float | None = None,
        unmeasured: float = 0.0,
        truncation_penalty: float = 0.0,
        *,
        name: str | None = None,
    ) -> None:
        if baseline not in ("compile", "eager"):
            raise ValueError(f"baseline must be 'compile' or 'eager', got {baseline!r}")
        if clip is not None and not _real(clip, "clip") > 0:
            raise ValueError(f"clip must be positive, got {clip}")
        self.baseline = baseline
        self.clip = None if clip is None else float(clip)
        self.unmeasured = _real(unmeasured, "unmeasured")
        self.truncation_penalty = _real(truncation_penalty, "truncation_penalty")
        self.name = name or type(self).name

    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        submit = evaluated_submit(step)
        if submit is None:
            return _truncation(self.truncation_penalty) if step.truncated else Reward(0.0)
        if submit.tier == -1:
            return Reward(FAILED, {"failed": FAILED})
        speedup = submit.speedup_compile if self.baseline == "compile" else submit.speedup_eager
        if speedup is None:
            return Reward(self.unmeasured, {"unmeasured": self.unmeasured})
        value = log_speedup(speedup)
        if self.clip is not None:
            value = min(max(value, -self.clip), self.clip)
        return Reward(value, {f"log_speedup_{self.baseline}": value})


def log_speedup(speedup: float) -> float:
    """The natural log of a measured speed-up; raises ValueError unless it is positive and finite."""
    if not (math.isfinite(speedup) and speedup > 0):
        raise ValueError(f"a measured speed-up must be positive and finite, got {speedup}")
    return math.log(speedup)


class GradedShaper(Shaper):
    """Graded penalties per failed stage, in the manner of KernelGYM / Dr.Kernel, plus a speed-up bonus.

    Every option is a signed amount added to the step's reward, except ``turn_cost``, which is
    subtracted. The step's value is the sum of its terms. Defaults:

    Evaluated submit, the first that applies:
        an integrity check failed: ``integrity_failed`` = -1.0 (KernelGYM's decoy-kernel reward, so a
            hack never pays better than an honest failure); term ``"integrity_failed"``.
        not compiled: ``compile_failed`` = -0.5; term ``"compile_failed"``.
        not correct: ``incorrect`` = -0.3; term ``"incorrect"``.
        correct, tier 1 (not more than 5% faster than eager): ``not_faster`` = -0.1; term
            ``"not_faster"``.
        tier 2 or 3: ``faster`` = +1.0 (term ``"faster"``) plus ``speedup_bonus`` = 0.5 times
            ``log(speedup_eager)`` clipped to ``[0, log(max_speedup)]`` with ``max_speedup`` = 10.0
            (term ``"speedup_bonus"``), plus, for tier 3 only, ``beats_compile`` = +0.5 (term
            ``"beats_compile"``). So tier 2 lies in (1.026, 2.151] and tier 3 in (1.526, 2.651].
    Other steps:
        a ``compile`` that failed (any status but OK or HARNESS_ERROR): ``step_compile_failed`` = 0.0;
            term ``"step_compile_failed"``, present whenever it happens, so at weight 0 the failure
            is observed without being trained on.
        a ``verify`` that failed (same rule): ``step_verify_failed`` = 0.0; term
            ``"step_verify_failed"``.
        truncated without a submit: ``truncation_penalty`` = 0.0; term ``"truncated"`` (added to
            the above when the last step is a failed compile or verify).
    Every step, submit included: ``-turn_cost`` (``turn_cost`` = 0.0); term ``"turn_cost"``, present
    only when ``turn_cost`` is not 0.

    A tier-2 or tier-3 submit without a positive, finite ``speedup_eager``, or a correct, unrejected
    submit of tier -1, is inconsistent and raises.
    """

    name = "graded"

    def __init__(
        self,
        *,
        integrity_failed: float = -1.0,
        compile_failed: float = -0.5,
        incorrect: float = -0.3,
        not_faster: float = -0.1,
        faster: float = 1.0,
        speedup_bonus: float = 0.5,
        max_speedup: float = 10.0,
        beats_compile: float = 0.5,
        step_compile_failed: float = 0.0,
        step_verify_failed: float = 0.0,
        turn_cost: float = 0.0,
        truncation_penalty: float = 0.0,
        name: str | None = None,
    ) -> None:
        self.integrity_failed = _real(integrity_failed, "integrity_failed")
        self.compile_failed = _real(compile_failed, "compile_failed")
        self.incorrect = _real(incorrect, "incorrect")
        self.not_faster = _real(not_faster, "not_faster")
        self.faster = _real(faster, "faster")
        self.speedup_bonus = _real(speedup_bonus, "speedup_bonus")
        self.max_speedup = _real(max_speedup, "max_speedup")
        if self.max_speedup < 1:
            raise ValueError(f"max_speedup must be at least 1, got {max_speedup}")
        self.beats_compile = _real(beats_compile, "beats_compile")
        self.step_compile_failed = _real(step_compile_failed, "step_compile_failed")
        self.step_verify_failed = _real(step_verify_failed, "step_verify_failed")
        self.turn_cost = _real(turn_cost, "turn_cost")
        self.truncation_penalty = _real(truncation_penalty, "truncation_penalty")
        self.name = name or type(self).name

    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        submit = evaluated_submit(step)
        terms = self._submit_terms(submit) if submit is not None else self._step_terms(step)
        if self.turn_cost:
            terms["turn_cost"] = -self.turn_cost
        return Reward(sum(terms.values()), terms)

    def _submit_terms(self, submit: SubmitResult) -> dict[str, float]:
        if any(not finding.passed for finding in submit.integrity):
            return {"integrity_failed": self.integrity_failed}
        if not submit.compiled:
            return {"compile_failed": self.compile_failed}
        if not submit.correct:
            return {"incorrect": self.incorrect}
        if submit.tier == -1:
            raise ValueError("a compiled, correct submit with no failed integrity check has tier -1")
        if submit.tier == 1:
            return {"not_faster": self.not_faster}
        if submit.speedup_eager is None:
            raise ValueError(f"a tier-{submit.tier} submit has no measured speedup_eager")
        log_eager = min(max(log_speedup(submit.speedup_eager), 0.0), math.log(self.max_speedup))
        terms = {"faster": self.faster, "speedup_bonus": self.speedup_bonus * log_eager}
        if submit.tier == 3:
            terms["beats_compile"] = self.beats_compile
        return terms

    def _step_terms(self, step: StepRecord) -> dict[str, float]:
        result = step.result
        terms: dict[str, float] = {}
        if isinstance(result, CompileResult) and _agent_failed(result):
            terms["step_compile_failed"] = self.step_compile_failed
        if isinstance(result, VerifyResult) and _agent_failed(result):
            terms["step_verify_failed"] = self.step_verify_failed
        if step.truncated:
            terms["truncated"] = self.truncation_penalty
        return terms


class CompositeShaper(Shaper):
    """A weighted sum of shapers: ``value = sum(weight * child.value)``.

    Terms: for each child, ``"<child name>"`` holds the child's unweighted value and
    ``"<child name>/<term>"`` each of the child's terms, so a child weighted 0 is observed without
    being trained on. A child that fails fails the composite with the child's ``ShaperError``.

    Args:
        parts: ``(shaper, weight)`` pairs; a shaper is a :class:`Shaper`, or any object following
            :class:`RewardShaper`, or a plain reward function (wrapped in :class:`FunctionShaper`).
            Children's names must be unique and contain no ``"/"``. Use ``make_reward("composite",
            parts=...)`` to name children by their registered names.
        name: the shaper's name (default ``"composite"``).
    """

    name = "composite"

    def __init__(
        self,
        parts: Iterable[tuple[RewardShaper | Callable[..., float | Reward], float]],
        *,
        name: str | None = None,
    ) -> None:
        children: list[tuple[Shaper, float]] = []
        for shaper, weight in parts:
            child = shaper if isinstance(shaper, Shaper) else FunctionShaper(shaper)
            if "/" in child.name:
                raise ValueError(f"a composite's child name cannot contain '/', got {child.name!r}")
            if any(child.name == other.name for other, _ in children):
                raise ValueError(f"two children named {child.name!r}; pass name= to one of them")
            children.append((child, _real(weight, f"weight of {child.name!r}")))
        if not children:
            raise ValueError("a composite shaper needs at least one (shaper, weight) part")
        self.parts: tuple[tuple[Shaper, float], ...] = tuple(children)
        self.name = name or type(self).name

    def reset(self) -> None:
        for child, _ in self.parts:
            child.reset()

    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        value = 0.0
        terms: dict[str, float] = {}
        for child, weight in self.parts:
            reward = child(step, history)
            value += weight * reward.value
            terms[child.name] = reward.value
            terms.update({f"{child.name}/{term}": v for term, v in reward.terms.items()})
        return Reward(value, terms)
