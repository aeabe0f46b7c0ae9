"""The shaper contract: records, rewards, function shapers, and failures that raise instead of scoring 0."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Sequence

import numpy as np
import pytest

from cudagym.results import Stage, StageResult, Status
from cudagym.reward_shaping import (
    FunctionShaper,
    MilestoneShaper,
    Reward,
    RewardShaper,
    Shaper,
    ShaperError,
    StepRecord,
)

STEP = StepRecord(turn=1, tool="list_files", result=StageResult(stage=Stage.LIST_FILES, status=Status.OK))


class TestStepRecord:
    def test_turn_is_one_based(self) -> None:
        with pytest.raises(ValueError, match="1-based"):
            StepRecord(turn=0, tool="compile", result=StageResult(Stage.COMPILE, Status.OK))

    def test_frozen_with_defaults(self) -> None:
        assert (STEP.terminated, STEP.truncated) == (False, False)
        with pytest.raises(dataclasses.FrozenInstanceError):
            STEP.turn = 2  # type: ignore[misc]


class TestReward:
    def test_value_and_terms_become_floats(self) -> None:
        reward = Reward(3, {"tier": 3})
        assert reward.value == 3.0 and isinstance(reward.value, float)
        assert dict(reward.terms) == {"tier": 3.0} and isinstance(reward.terms["tier"], float)
        assert dict(Reward(0.0).terms) == {}

    def test_terms_are_a_frozen_copy(self) -> None:
        source = {"a": 1.0}
        reward = Reward(1.0, source)
        source["b"] = 2.0
        assert dict(reward.terms) == {"a": 1.0}
        with pytest.raises(TypeError):
            reward.terms["a"] = 5.0  # type: ignore[index]

    def test_equal_hashable_and_picklable(self) -> None:
        reward = Reward(1.5, {"x": 0.5, "y": 1.0})
        assert reward == Reward(1.5, {"y": 1.0, "x": 0.5})
        assert hash(reward) == hash(Reward(1.5, {"y": 1.0, "x": 0.5}))
        clone = pickle.loads(pickle.dumps(reward))
        assert clone == reward and dict(clone.terms) == {"x": 0.5, "y": 1.0}

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite_value_or_term_rejected(self, bad: float) -> None:
        with pytest.raises(ValueError, match="finite"):
            Reward(bad)
        with pytest.raises(ValueError, match="finite"):
            Reward(0.0, {"t": bad})

    @pytest.mark.parametrize("bad", [True, "1.0", None])
    def test_non_numbers_rejected(self, bad: object) -> None:
        with pytest.raises(TypeError, match="real number"):
            Reward(bad)  # type: ignore[arg-type]

    def test_term_names_are_strings(self) -> None:
        with pytest.raises(TypeError, match="str"):
            Reward(0.0, {1: 1.0})  # type: ignore[dict-item]


def constant(step: StepRecord, history: Sequence[StepRecord]) -> float:
    return 0.25


class TestFunctionShaper:
    def test_float_becomes_a_term_named_after_the_function(self) -> None:
        reward = FunctionShaper(constant)(STEP, [])
        assert reward == Reward(0.25, {"constant": 0.25})

    def test_name_override_and_reward_passthrough(self) -> None:
        shaper = FunctionShaper(lambda step, history: Reward(2.0, {"a": 1.0, "b": 1.0}), name="pair")
        assert shaper.name == "pair"
        assert shaper(STEP, []) == Reward(2.0, {"a": 1.0, "b": 1.0})

    def test_ints_and_numpy_floats_accepted(self) -> None:
        assert FunctionShaper(lambda s, h: 2, name="i")(STEP, []) == Reward(2.0, {"i": 2.0})
        assert FunctionShaper(lambda s, h: np.float32(0.5), name="f")(STEP, []).value == 0.5

    def test_history_is_passed_through(self) -> None:
        earlier = [STEP, dataclasses.replace(STEP, turn=2)]
        shaper = FunctionShaper(lambda step, history: float(len(history) * 10 + step.turn), name="count")
        assert shaper(dataclasses.replace(STEP, turn=3), earlier).value == 23.0

    def test_reset_is_forwarded_to_objects_that_have_one(self) -> None:
        class Counting:
            name = "counting"

            def __init__(self) -> None:
                self.seen = 0

            def reset(self) -> None:
                self.seen = 0

            def __call__(self, step: StepRecord, history: Sequence[StepRecord]) -> float:
                self.seen += 1
                return float(self.seen)

        inner = Counting()
        assert isinstance(inner, RewardShaper)
        shaper = FunctionShaper(inner)
        assert shaper.name == "counting"
        assert [shaper(STEP, []).value for _ in range(3)] == [1.0, 2.0, 3.0]
        shaper.reset()
        assert shaper(STEP, []).value == 1.0

    def test_not_callable_rejected(self) -> None:
        with pytest.raises(TypeError, match="callable"):
            FunctionShaper(1.0)  # type: ignore[arg-type]


class TestShaperError:
    def test_a_raising_shaper_raises_with_its_name_and_cause(self) -> None:
        def broken(step: StepRecord, history: Sequence[StepRecord]) -> float:
            raise ZeroDivisionError("division by zero in my reward")

        with pytest.raises(ShaperError, match=r"reward shaper 'broken' failed: ZeroDivisionError") as info:
            FunctionShaper(broken)(STEP, [])
        assert info.value.shaper == "broken"
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert isinstance(info.value, RuntimeError)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite_float_raises(self, bad: float) -> None:
        with pytest.raises(ShaperError, match="non-finite"):
            FunctionShaper(lambda s, h: bad, name="nan")(STEP, [])

    def test_non_finite_reward_object_raises(self) -> None:
        with pytest.raises(ShaperError, match=r"'nan_reward' failed: ValueError") as info:
            FunctionShaper(lambda s, h: Reward(math.nan), name="nan_reward")(STEP, [])
        assert isinstance(info.value.__cause__, ValueError)

    @pytest.mark.parametrize("bad", [None, "1.0", True, [1.0]])
    def test_not_a_float_or_reward_raises(self, bad: object) -> None:
        with pytest.raises(ShaperError, match="expected a float or a Reward"):
            FunctionShaper(lambda s, h: bad, name="odd")(STEP, [])

    def test_subclass_compute_errors_are_wrapped(self) -> None:
        class Broken(Shaper):
            name = "broken_subclass"

            def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> float:
                return {}["missing"]

        with pytest.raises(ShaperError, match="'broken_subclass' failed: KeyError") as info:
            Broken()(STEP, [])
        assert isinstance(info.value.__cause__, KeyError)

    def test_nested_shaper_error_keeps_the_inner_name(self) -> None:
        inner = FunctionShaper(lambda s, h: math.nan, name="inner")
        outer = FunctionShaper(lambda s, h: inner(s, h), name="outer")
        with pytest.raises(ShaperError) as info:
            outer(STEP, [])
        assert info.value.shaper == "inner"

    def test_picklable(self) -> None:
        err = pickle.loads(pickle.dumps(ShaperError("x", "why")))
        assert (err.shaper, err.reason, str(err)) == ("x", "why", "reward shaper 'x' failed: why")


def test_builtin_shapers_follow_the_protocol() -> None:
    assert isinstance(MilestoneShaper(), RewardShaper)
    assert isinstance(FunctionShaper(constant), RewardShaper)
