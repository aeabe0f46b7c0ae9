"""The losses of the recipe, each a mean over the policy's tokens (mask 1) of a batch."""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` where ``mask`` is 1 (0 when nothing is masked in)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate with an asymmetric clip (ratio in [1 - clip_low, 1 + clip_high]).

    Returns:
        ``(loss, clip_fraction)``: the loss to minimise and the share of tokens whose ratio was clipped.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask)
    fraction = masked_mean((clipped < unclipped).float(), mask)
    return loss, fraction.detach()


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *, clip: float | None
) -> torch.Tensor:
    """Half the squared error to the returns; with ``clip``, the larger of it and the error of the value moved at
    most ``clip`` from ``old_values`` (PPO's value clipping)."""
    error = (values - returns) ** 2
    if clip is not None:
        moved = old_values + torch.clamp(values - old_values, -clip, clip)
        error = torch.maximum(error, (moved - returns) ** 2)
    return 0.5 * masked_mean(error, mask)


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate ``exp(d) - d - 1`` with ``d = ref - pi`` (Schulman's k3: never negative,
    0 exactly where the two log-probabilities agree)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The negative log-likelihood of the policy's tokens (rejection fine-tuning)."""
    return -masked_mean(logprobs, mask)
