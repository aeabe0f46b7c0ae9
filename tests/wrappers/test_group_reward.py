"""GroupRelativeReward: return minus the group mean, optionally over the group's standard deviation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudagym.wrappers import GroupRelativeReward


def test_centering_and_normalising() -> None:
    returns = {"coder_0": 3.0, "coder_1": -1.0, "coder_2": 1.0, "coder_3": 1.0}
    assert GroupRelativeReward()(returns) == {"coder_0": 2.0, "coder_1": -2.0, "coder_2": 0.0, "coder_3": 0.0}
    shaped = GroupRelativeReward(normalize=True, eps=0.0)(returns)
    std = math.sqrt((4 + 4 + 0 + 0) / 4)
    assert shaped == pytest.approx({"coder_0": 2 / std, "coder_1": -2 / std, "coder_2": 0.0, "coder_3": 0.0})
    assert GroupRelativeReward.stats(returns) == (1.0, pytest.approx(std))


def test_equal_returns_give_zero_and_empty_groups_nothing() -> None:
    assert GroupRelativeReward(normalize=True)({"a": 2.0, "b": 2.0}) == {"a": 0.0, "b": 0.0}
    assert GroupRelativeReward()({}) == {}


def test_non_finite_returns_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        GroupRelativeReward()({"a": math.nan, "b": 1.0})


@given(st.lists(st.floats(min_value=-10, max_value=10), min_size=1, max_size=16))
def test_shaped_rewards_sum_to_zero_and_keep_the_order(values: list[float]) -> None:
    returns = {f"coder_{i}": v for i, v in enumerate(values)}
    for shaper in (GroupRelativeReward(), GroupRelativeReward(normalize=True)):
        shaped = shaper(returns)
        assert sum(shaped.values()) == pytest.approx(0.0, abs=1e-6)
        for a in returns:
            for b in returns:
                if returns[a] > returns[b]:
                    assert shaped[a] >= shaped[b]
