"""The built-in shapers give their documented values on recorded results."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from cudagym.results import (
    CompileResult,
    IntegrityFinding,
    Stage,
    StageResult,
    Status,
    SubmitResult,
    VerifyResult,
)
from cudagym.reward_shaping import (
    CompositeShaper,
    FunctionShaper,
    GradedShaper,
    MilestoneShaper,
    Reward,
    ShaperError,
    SpeedupShaper,
    StepRecord,
)

LN = math.log


def record(result: StageResult, *, turn: int = 5, truncated: bool = False) -> StepRecord:
    tool = "" if result.stage is Stage.PARSE else result.stage.value
    terminated = isinstance(result, SubmitResult)
    return StepRecord(turn=turn, tool=tool, result=result, terminated=terminated, truncated=truncated)


def submit(
    tier: int,
    *,
    status: Status = Status.OK,
    compiled: bool = True,
    correct: bool = True,
    eager: float | None = None,
    compile_: float | None = None,
    integrity: tuple[IntegrityFinding, ...] = (),
    truncated: bool = False,
) -> StepRecord:
    result = SubmitResult(
        stage=Stage.SUBMIT,
        status=status,
        tier=tier,
        compiled=compiled,
        correct=correct,
        speedup_eager=eager,
        speedup_compile=compile_,
        integrity=integrity,
    )
    return record(result, truncated=truncated)


# The submit outcomes every shaper is checked against.
OUTCOMES = {
    "compile_error": submit(-1, status=Status.COMPILE_ERROR, compiled=False, correct=False),
    "mismatch": submit(-1, status=Status.MISMATCH, correct=False),
    "integrity": submit(
        -1, status=Status.INTEGRITY, eager=3.0, compile_=2.0, integrity=(IntegrityFinding("fallback", False),)
    ),
    "tier1": submit(1, eager=1.02, compile_=0.5),
    "tier2": submit(2, eager=2.0, compile_=0.9),
    "tier3": submit(3, eager=4.0, compile_=1.5),
}

OTHER_STEPS = [
    record(CompileResult(stage=Stage.COMPILE, status=Status.OK)),
    record(CompileResult(stage=Stage.COMPILE, status=Status.COMPILE_ERROR, diagnostics="error: x")),
    record(VerifyResult(stage=Stage.VERIFY, status=Status.MISMATCH)),
    record(StageResult(stage=Stage.WRITE_FILE, status=Status.OK)),
    record(StageResult(stage=Stage.PARSE, status=Status.INVALID_CALL)),
]

INVALID_SUBMITS = {
    "harness_error": (submit(-1, status=Status.HARNESS_ERROR, compiled=False, correct=False), "harness"),
    "unknown_tier": (submit(5, eager=9.0, compile_=9.0), "tier must be one of"),
    "tier_without_correct": (submit(3, correct=False, eager=4.0, compile_=1.5), "contradicts"),
}

ALL_SHAPERS = [MilestoneShaper, SpeedupShaper, GradedShaper]


def assert_reward(reward: Reward, value: float, terms: dict[str, float]) -> None:
    assert reward.value == pytest.approx(value, abs=1e-12)
    assert dict(reward.terms) == pytest.approx(terms, abs=1e-12)


class TestMilestone:
    @pytest.mark.parametrize(
        ("outcome", "tier"),
        [
            ("compile_error", -1),
            ("mismatch", -1),
            ("integrity", -1),
            ("tier1", 1),
            ("tier2", 2),
            ("tier3", 3),
        ],
    )
    def test_submit_scores_its_tier(self, outcome: str, tier: int) -> None:
        assert_reward(MilestoneShaper()(OUTCOMES[outcome], []), tier, {"tier": tier})

    @pytest.mark.parametrize("step", OTHER_STEPS, ids=lambda s: f"{s.result.stage.value}-{s.result.status.value}")
    def test_other_steps_score_zero_without_terms(self, step: StepRecord) -> None:
        assert_reward(MilestoneShaper()(step, []), 0.0, {})

    def test_malformed_submit_call_is_an_ordinary_step(self) -> None:
        step = StepRecord(turn=3, tool="submit", result=StageResult(Stage.PARSE, Status.INVALID_CALL))
        assert_reward(MilestoneShaper()(step, []), 0.0, {})

    def test_truncation_defaults_to_zero_and_is_configurable(self) -> None:
        cut = record(StageResult(stage=Stage.READ_FILE, status=Status.OK), turn=200, truncated=True)
        assert_reward(MilestoneShaper()(cut, []), 0.0, {"truncated": 0.0})
        assert_reward(MilestoneShaper(truncation_penalty=-1.0)(cut, []), -1.0, {"truncated": -1.0})

    def test_submit_on_the_last_turn_scores_the_tier_not_the_truncation(self) -> None:
        step = submit(2, eager=2.0, compile_=0.9, truncated=True)
        assert_reward(MilestoneShaper(truncation_penalty=-1.0)(step, []), 2.0, {"tier": 2.0})

    def test_name_override(self) -> None:
        assert MilestoneShaper(name="tiers").name == "tiers"
        assert MilestoneShaper().name == "milestone"


class TestSpeedup:
    @pytest.mark.parametrize(
        ("outcome", "value", "terms"),
        [
            ("compile_error", -1.0, {"failed": -1.0}),
            ("mismatch", -1.0, {"failed": -1.0}),
            ("integrity", -1.0, {"failed": -1.0}),
            ("tier1", LN(0.5), {"log_speedup_compile": LN(0.5)}),
            ("tier2", LN(0.9), {"log_speedup_compile": LN(0.9)}),
            ("tier3", LN(1.5), {"log_speedup_compile": LN(1.5)}),
        ],
    )
    def test_against_compile(self, outcome: str, value: float, terms: dict[str, float]) -> None:
        assert_reward(SpeedupShaper()(OUTCOMES[outcome], []), value, terms)

    @pytest.mark.parametrize(("outcome", "speedup"), [("tier1", 1.02), ("tier2", 2.0), ("tier3", 4.0)])
    def test_against_eager(self, outcome: str, speedup: float) -> None:
        reward = SpeedupShaper(baseline="eager")(OUTCOMES[outcome], [])
        assert_reward(reward, LN(speedup), {"log_speedup_eager": LN(speedup)})

    def test_clip(self) -> None:
        shaper = SpeedupShaper(baseline="eager", clip=0.5)
        assert_reward(shaper(OUTCOMES["tier3"], []), 0.5, {"log_speedup_eager": 0.5})
        assert_reward(shaper(OUTCOMES["tier2"], []), 0.5, {"log_speedup_eager": 0.5})
        slow = SpeedupShaper(clip=0.5)(OUTCOMES["tier1"], [])  # log(0.5) = -0.69 -> -0.5
        assert_reward(slow, -0.5, {"log_speedup_compile": -0.5})
        inside = SpeedupShaper(clip=1.0)(OUTCOMES["tier3"], [])
        assert_reward(inside, LN(1.5), {"log_speedup_compile": LN(1.5)})
        assert_reward(shaper(OUTCOMES["mismatch"], []), -1.0, {"failed": -1.0})  # the failure is not clipped

    def test_correct_but_unmeasured(self) -> None:
        step = submit(1)
        assert_reward(SpeedupShaper()(step, []), 0.0, {"unmeasured": 0.0})
        assert_reward(SpeedupShaper(unmeasured=-0.2)(step, []), -0.2, {"unmeasured": -0.2})

    @pytest.mark.parametrize("step", OTHER_STEPS, ids=lambda s: f"{s.result.stage.value}-{s.result.status.value}")
    def test_other_steps_score_zero(self, step: StepRecord) -> None:
        assert_reward(SpeedupShaper()(step, []), 0.0, {})

    def test_truncation(self) -> None:
        cut = record(StageResult(stage=Stage.READ_FILE, status=Status.OK), turn=200, truncated=True)
        assert_reward(SpeedupShaper()(cut, []), 0.0, {"truncated": 0.0})
        assert_reward(SpeedupShaper(truncation_penalty=-1.0)(cut, []), -1.0, {"truncated": -1.0})

    @pytest.mark.parametrize("bad", [0.0, -1.0, math.inf])
    def test_impossible_speedup_raises(self, bad: float) -> None:
        with pytest.raises(ShaperError, match="positive and finite"):
            SpeedupShaper()(submit(1, eager=1.0, compile_=bad), [])

    def test_bad_options(self) -> None:
        with pytest.raises(ValueError, match="baseline"):
            SpeedupShaper(baseline="cudnn")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="clip"):
            SpeedupShaper(clip=0.0)


class TestGraded:
    @pytest.mark.parametrize(
        ("outcome", "terms"),
        [
            ("compile_error", {"compile_failed": -0.5}),
            ("mismatch", {"incorrect": -0.3}),
            ("integrity", {"integrity_failed": -1.0}),
            ("tier1", {"not_faster": -0.1}),
            ("tier2", {"faster": 1.0, "speedup_bonus": 0.5 * LN(2.0)}),
            ("tier3", {"faster": 1.0, "speedup_bonus": 0.5 * LN(4.0), "beats_compile": 0.5}),
        ],
    )
    def test_submit_defaults(self, outcome: str, terms: dict[str, float]) -> None:
        assert_reward(GradedShaper()(OUTCOMES[outcome], []), sum(terms.values()), terms)

    def test_documented_numbers(self) -> None:
        shaper = GradedShaper()
        assert shaper(OUTCOMES["tier2"], []).value == pytest.approx(1.3465736, abs=1e-6)
        assert shaper(OUTCOMES["tier3"], []).value == pytest.approx(2.1931472, abs=1e-6)
        capped = shaper(submit(3, eager=50.0, compile_=20.0), [])  # the bonus stops at 10x
        assert capped.value == pytest.approx(1.0 + 0.5 * LN(10.0) + 0.5)
        assert capped.value == pytest.approx(2.6512925, abs=1e-6)

    def test_the_outcomes_are_ordered(self) -> None:
        values = [GradedShaper()(OUTCOMES[o], []).value for o in OUTCOMES]
        # integrity < compile_error < mismatch < tier1 < tier2 < tier3
        order = ["integrity", "compile_error", "mismatch", "tier1", "tier2", "tier3"]
        by_name = dict(zip(OUTCOMES, values, strict=True))
        assert [by_name[o] for o in order] == sorted(values)

    def test_integrity_failure_wins_over_compile_failure(self) -> None:
        step = submit(
            -1,
            status=Status.INTEGRITY,
            compiled=False,
            correct=False,
            integrity=(IntegrityFinding("x", False),),
        )
        assert_reward(GradedShaper()(step, []), -1.0, {"integrity_failed": -1.0})

    def test_passed_integrity_findings_do_not_count(self) -> None:
        step = submit(2, eager=2.0, compile_=0.9, integrity=(IntegrityFinding("static", True),))
        assert GradedShaper()(step, []).value == pytest.approx(1.0 + 0.5 * LN(2.0))

    def test_custom_values(self) -> None:
        shaper = GradedShaper(compile_failed=-2.0, faster=3.0, speedup_bonus=1.0, max_speedup=3.0, beats_compile=0.0)
        assert_reward(shaper(OUTCOMES["compile_error"], []), -2.0, {"compile_failed": -2.0})
        terms = {"faster": 3.0, "speedup_bonus": LN(3.0), "beats_compile": 0.0}
        assert_reward(shaper(OUTCOMES["tier3"], []), 3.0 + LN(3.0), terms)

    def test_intermediate_failures_are_observed_at_weight_zero(self) -> None:
        shaper = GradedShaper()
        failed_compile, failed_verify = OTHER_STEPS[1], OTHER_STEPS[2]
        assert_reward(shaper(failed_compile, []), 0.0, {"step_compile_failed": 0.0})
        assert_reward(shaper(failed_verify, []), 0.0, {"step_verify_failed": 0.0})
        assert_reward(shaper(OTHER_STEPS[0], []), 0.0, {})  # a compile that succeeded
        assert_reward(shaper(OTHER_STEPS[3], []), 0.0, {})

    def test_intermediate_failure_penalties(self) -> None:
        shaper = GradedShaper(step_compile_failed=-0.05, step_verify_failed=-0.02)
        assert_reward(shaper(OTHER_STEPS[1], []), -0.05, {"step_compile_failed": -0.05})
        assert_reward(shaper(OTHER_STEPS[2], []), -0.02, {"step_verify_failed": -0.02})
        timeout = record(VerifyResult(stage=Stage.VERIFY, status=Status.TIMEOUT))
        assert shaper(timeout, []).value == pytest.approx(-0.02)
        not_ready = record(VerifyResult(stage=Stage.VERIFY, status=Status.NOT_READY))
        assert shaper(not_ready, []).value == pytest.approx(-0.02)

    def test_harness_failures_are_not_the_agents(self) -> None:
        shaper = GradedShaper(step_compile_failed=-0.05, step_verify_failed=-0.02)
        assert_reward(shaper(record(CompileResult(stage=Stage.COMPILE, status=Status.HARNESS_ERROR)), []), 0.0, {})
        assert_reward(shaper(record(VerifyResult(stage=Stage.VERIFY, status=Status.HARNESS_ERROR)), []), 0.0, {})

    def test_turn_cost_on_every_step(self) -> None:
        shaper = GradedShaper(turn_cost=0.01)
        assert_reward(shaper(OTHER_STEPS[3], []), -0.01, {"turn_cost": -0.01})
        terms = {"faster": 1.0, "speedup_bonus": 0.5 * LN(2.0), "turn_cost": -0.01}
        assert_reward(shaper(OUTCOMES["tier2"], []), sum(terms.values()), terms)

    def test_truncation_adds_to_a_failed_last_step(self) -> None:
        shaper = GradedShaper(truncation_penalty=-0.5, step_compile_failed=-0.05, turn_cost=0.01)
        last = record(CompileResult(stage=Stage.COMPILE, status=Status.COMPILE_ERROR), turn=200, truncated=True)
        terms = {"step_compile_failed": -0.05, "truncated": -0.5, "turn_cost": -0.01}
        assert_reward(shaper(last, []), -0.56, terms)

    def test_inconsistent_submits_raise(self) -> None:
        with pytest.raises(ShaperError, match="no measured speedup_eager"):
            GradedShaper()(submit(2, compile_=0.9), [])
        with pytest.raises(ShaperError, match="tier -1"):
            GradedShaper()(submit(-1, eager=2.0, compile_=2.0), [])

    def test_bad_options(self) -> None:
        with pytest.raises(ValueError, match="max_speedup"):
            GradedShaper(max_speedup=0.5)
        with pytest.raises(ValueError, match="finite"):
            GradedShaper(incorrect=math.nan)


class TestInvalidSubmits:
    @pytest.mark.parametrize("shaper_cls", ALL_SHAPERS)
    @pytest.mark.parametrize("case", sorted(INVALID_SUBMITS))
    def test_raise_rather_than_score(self, shaper_cls: type, case: str) -> None:
        step, message = INVALID_SUBMITS[case]
        shaper = shaper_cls()
        with pytest.raises(ShaperError, match=message) as info:
            shaper(step, [])
        assert info.value.shaper == shaper.name
        assert isinstance(info.value.__cause__, ValueError)


class TestComposite:
    def test_weighted_sum_and_prefixed_terms(self) -> None:
        composite = CompositeShaper([(MilestoneShaper(), 1.0), (SpeedupShaper(), 0.5), (GradedShaper(), 0.0)])
        reward = composite(OUTCOMES["tier3"], [])
        graded = 1.0 + 0.5 * LN(4.0) + 0.5
        assert_reward(
            reward,
            3.0 + 0.5 * LN(1.5),
            {
                "milestone": 3.0,
                "milestone/tier": 3.0,
                "speedup": LN(1.5),
                "speedup/log_speedup_compile": LN(1.5),
                "graded": graded,
                "graded/faster": 1.0,
                "graded/speedup_bonus": 0.5 * LN(4.0),
                "graded/beats_compile": 0.5,
            },
        )

    def test_weights_scale_failures_too(self) -> None:
        composite = CompositeShaper([(MilestoneShaper(), 2.0), (GradedShaper(), -1.0)])
        reward = composite(OUTCOMES["compile_error"], [])
        assert reward.value == pytest.approx(2.0 * -1.0 + -1.0 * -0.5)
        assert reward.terms["graded/compile_failed"] == -0.5

    def test_other_steps_report_each_child(self) -> None:
        composite = CompositeShaper([(MilestoneShaper(), 1.0), (GradedShaper(turn_cost=0.1), 1.0)])
        assert_reward(
            composite(OTHER_STEPS[3], []),
            -0.1,
            {"milestone": 0.0, "graded": -0.1, "graded/turn_cost": -0.1},
        )

    def test_function_children_and_names(self) -> None:
        def bonus(step: StepRecord, history: Sequence[StepRecord]) -> float:
            return 0.5

        composite = CompositeShaper([(bonus, 2.0), (MilestoneShaper(name="tiers"), 1.0)], name="mine")
        assert composite.name == "mine"
        assert_reward(
            composite(OUTCOMES["tier1"], []),
            2.0,
            {"bonus": 0.5, "bonus/bonus": 0.5, "tiers": 1.0, "tiers/tier": 1.0},
        )

    def test_nested_composites_nest_prefixes(self) -> None:
        inner = CompositeShaper([(MilestoneShaper(), 1.0)], name="inner")
        outer = CompositeShaper([(inner, 2.0)])
        reward = outer(OUTCOMES["tier2"], [])
        assert reward.value == 4.0
        assert dict(reward.terms) == {"inner": 2.0, "inner/milestone": 2.0, "inner/milestone/tier": 2.0}

    def test_history_reaches_children(self) -> None:
        seen: list[int] = []

        def spy(step: StepRecord, history: Sequence[StepRecord]) -> float:
            seen.append(len(history))
            return 0.0

        CompositeShaper([(spy, 1.0)])(OUTCOMES["tier1"], OTHER_STEPS)
        assert seen == [len(OTHER_STEPS)]

    def test_reset_reaches_children(self) -> None:
        class Counting(MilestoneShaper):
            resets = 0

            def reset(self) -> None:
                self.resets += 1

        child = Counting()
        composite = CompositeShaper([(child, 1.0), (GradedShaper(), 0.0)])
        composite.reset()
        composite.reset()
        assert child.resets == 2

    def test_a_failing_child_fails_the_composite(self) -> None:
        def broken(step: StepRecord, history: Sequence[StepRecord]) -> float:
            raise RuntimeError("boom")

        composite = CompositeShaper([(MilestoneShaper(), 1.0), (broken, 0.0)])
        with pytest.raises(ShaperError, match="'broken' failed: RuntimeError: boom") as info:
            composite(OUTCOMES["tier3"], [])
        assert isinstance(info.value.__cause__, RuntimeError)

    def test_a_nan_child_fails_even_at_weight_zero(self) -> None:
        composite = CompositeShaper([(MilestoneShaper(), 1.0), (FunctionShaper(lambda s, h: math.nan, "nan"), 0.0)])
        with pytest.raises(ShaperError, match="non-finite"):
            composite(OUTCOMES["tier3"], [])

    def test_construction_errors(self) -> None:
        with pytest.raises(ValueError, match="two children named 'milestone'"):
            CompositeShaper([(MilestoneShaper(), 1.0), (MilestoneShaper(truncation_penalty=-1.0), 0.0)])
        with pytest.raises(ValueError, match="'/'"):
            CompositeShaper([(MilestoneShaper(name="a/b"), 1.0)])
        with pytest.raises(ValueError, match="at least one"):
            CompositeShaper([])
        with pytest.raises(ValueError, match="finite"):
            CompositeShaper([(MilestoneShaper(), math.inf)])
