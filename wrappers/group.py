"""Group-relative rewards (GRPO-style): each member's return minus the group's mean, optionally over its std.

Given the returns ``R_1..R_k`` of k attempts at the same task, the shaped reward of attempt i is
``R_i - mean(R)`` (``normalize=False``, as in Dr. GRPO) or ``(R_i - mean(R)) / (std(R) + eps)``
(``normalize=True``, as in GRPO), with the population standard deviation. A group whose returns are all
equal gets 0 for everyone. ``CudaKernelGroupEnv(group_reward=GroupRelativeReward(...))`` applies it when
every agent of the group is done; it is a plain function of the returns, usable by any trainer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K")


@dataclasses.dataclass(frozen=True)
class GroupRelativeReward:
    """Maps a group's returns to group-relative rewards (see the module doc).

    Args:
        normalize: divide by the group's standard deviation (plus ``eps``) after subtracting the mean.
        eps: added to the standard deviation so that a near-constant group does not blow up.
    """

    normalize: bool = False
    eps: float = 1e-6

    def __call__(self, returns: Mapping[K, float]) -> dict[K, float]:
        """The shaped reward of each member, keyed like ``returns``."""
        if not returns:
            return {}
        if not all(math.isfinite(float(v)) for v in returns.values()):
            raise ValueError(f"group returns must be finite, got {dict(returns)}")
        mean, std = self.stats(returns)
        scale = (std + self.eps) if self.normalize else 1.0
        return {key: (float(value) - mean) / scale for key, value in returns.items()}

    @staticmethod
    def stats(returns: Mapping[K, float]) -> tuple[float, float]:
        """The group's mean and (population) standard deviation."""
        values = [float(v) for v in returns.values()]
        if not values:
            return 0.0, 0.0
        mean = sum(values) / len(values)
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
