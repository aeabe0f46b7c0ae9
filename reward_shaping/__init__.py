"""Reward shapers: map each step's recorded result to a reward and its named terms.

``make_reward()`` gives the default, CUDA Agent's milestone tiers (-1, 1, 2, 3 at ``submit``).
``make_reward("speedup")``, ``"graded"`` and ``"composite"`` are the other built-ins;
``register_reward(name, factory)`` or the entry-point group ``cudagym.rewards`` add more, and any
function ``fn(step, history) -> float`` is a shaper too. A shaper that fails raises ``ShaperError``.
"""

from .base import (
    FunctionShaper,
    Reward,
    RewardShaper,
    Shaper,
    ShaperError,
    StepRecord,
    Terms,
)
from .builtin import (
    FAILED,
    TIERS,
    CompositeShaper,
    GradedShaper,
    MilestoneShaper,
    SpeedupShaper,
    evaluated_submit,
    log_speedup,
)
from .registry import (
    DEFAULT_REWARD,
    ENTRY_POINT_GROUP,
    RewardNotFound,
    RewardSpec,
    make_composite,
    make_reward,
    register_reward,
    registered_rewards,
)

__all__ = [
    "DEFAULT_REWARD",
    "ENTRY_POINT_GROUP",
    "FAILED",
    "TIERS",
    "CompositeShaper",
    "FunctionShaper",
    "GradedShaper",
    "MilestoneShaper",
    "Reward",
    "RewardNotFound",
    "RewardShaper",
    "RewardSpec",
    "Shaper",
    "ShaperError",
    "SpeedupShaper",
    "StepRecord",
    "Terms",
    "evaluated_submit",
    "log_speedup",
    "make_composite",
    "make_reward",
    "register_reward",
    "registered_rewards",
]
