"""Token-level rewards and generalised advantage estimation over the policy's own tokens.

The tokens of the prompt and of the tool outputs are not actions: GAE runs over the sequence of assistant tokens
only, as if the others were not there (the value after the last token of a turn is the value of the first token of
the next turn). A turn's reward sits on its last token; every other token gets 0. Masked positions get advantage
and return 0.
"""

from __future__ import annotations

import torch


def token_rewards(length: int, turn_ends: list[int], turn_rewards: list[float]) -> torch.Tensor:
    """``[length]``: each turn's reward on its last token, 0 elsewhere."""
    if len(turn_ends) != len(turn_rewards):
        raise ValueError(f"{len(turn_ends)} turn ends for {len(turn_rewards)} rewards")
    rewards = torch.zeros(length)
    for end, reward in zip(turn_ends, turn_rewards, strict=True):
        if not 0 <= end < length:
            raise ValueError(f"turn end {end} outside a sequence of {length} tokens")
        rewards[end] += reward
    return rewards


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (value targets) of one sequence, over the positions where ``mask`` is 1.

    Args:
        rewards: ``[T]`` per-token rewards.
        values: ``[T]`` the critic's values.
        mask: ``[T]`` 1 on the policy's tokens.
        gamma: the discount between consecutive policy tokens.
        lam: GAE's lambda.

    Returns:
        ``(advantages, returns)``, both ``[T]``, 0 where ``mask`` is 0; ``returns = advantages + values`` elsewhere.
    """
    if not rewards.shape == values.shape == mask.shape or rewards.dim() != 1:
        raise ValueError(f"rewards, values and mask must be 1-D of one length: {rewards.shape}, {values.shape}")
    positions = torch.nonzero(mask > 0).flatten().tolist()
    advantages = torch.zeros_like(values, dtype=torch.float32)
    r, v = rewards.tolist(), values.float().tolist()
    running, next_value = 0.0, 0.0
    for t in reversed(positions):
        delta = r[t] + gamma * next_value - v[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = v[t]
    returns = (advantages + values.float()) * (mask > 0)
    return advantages, returns


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``values`` shifted and scaled to mean 0 and variance 1 over the masked positions (0 elsewhere)."""
    selected = values[mask > 0]
    if selected.numel() < 2:
        return values * (mask > 0)
    return (values - selected.mean()) / (selected.std() + eps) * (mask > 0)
