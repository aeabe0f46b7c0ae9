"""The settings of the staged recipe and the typed record each stage returns."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any


class Stage(enum.StrEnum):
    """The four stages of CUDA Agent's recipe, in the order they run."""

    SINGLE_TURN = "single-turn"  # PPO on one assistant message per episode
    RFT = "rft"  # rejection fine-tuning of the actor on good trajectories
    VALUE = "value"  # value pretraining of the critic on recorded returns
    AGENTIC = "agentic"  # multi-turn agentic PPO


@dataclasses.dataclass(frozen=True)
class PPOSettings:
    """Hyperparameters of the recipe (defaults: the paper's where it gives them, sized down elsewhere).

    Attributes:
        gamma: discount between assistant tokens (the paper: 1).
        lam: GAE's lambda (the paper: 0.95).
        clip_low: PPO's lower ratio clip, ratio >= 1 - clip_low (the paper: 0.2).
        clip_high: PPO's upper ratio clip, ratio <= 1 + clip_high (the paper: 0.28).
        value_clip: how far a value may move from its rollout value before the clipped loss takes over; None: no
            clipping.
        kl_coef: weight of the KL term to the frozen reference policy in the actor's loss (k3 estimator, >= 0).
        actor_lr: the actor's AdamW learning rate (the paper: 3e-6 at 230B; larger for small models).
        critic_lr: the critic's AdamW learning rate (the paper: 6e-6).
        epochs: optimisation passes over each batch of rollouts.
        minibatch: sequences per optimiser step.
        max_grad_norm: gradient norm clip.
        max_new_tokens: tokens one assistant message may have.
        max_context_tokens: an episode whose token sequence grows past this ends (truncated).
        temperature: sampling temperature of the rollouts.
        whiten_advantages: normalise advantages over a batch's assistant tokens.
        sft_epochs: passes over the RFT data.
        sft_lr: the actor's learning rate in RFT (None: ``actor_lr``). RFT data is often a few trajectories, an
            optimiser step or two an epoch, so a small model from scratch needs a larger rate to learn to copy them
            than PPO's updates can take.
        value_epochs: passes over the recorded returns in value pretraining.
    """

    gamma: float = 1.0
    lam: float = 0.95
    clip_low: float = 0.2
    clip_high: float = 0.28
    value_clip: float | None = 0.2
    kl_coef: float = 0.05
    actor_lr: float = 1e-5
    critic_lr: float = 2e-5
    epochs: int = 1
    minibatch: int = 4
    max_grad_norm: float = 1.0
    max_new_tokens: int = 512
    max_context_tokens: int = 16384
    temperature: float = 1.0
    whiten_advantages: bool = True
    sft_epochs: int = 2
    sft_lr: float | None = None
    value_epochs: int = 4

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"gamma and lam must lie in [0, 1], got {self.gamma} and {self.lam}")
        if self.clip_low <= 0 or self.clip_low >= 1 or self.clip_high <= 0:
            raise ValueError(f"clip_low must lie in (0, 1) and clip_high be > 0, got {self.clip_low}, {self.clip_high}")
        for name in ("epochs", "minibatch", "max_new_tokens", "max_context_tokens", "sft_epochs", "value_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("actor_lr", "critic_lr", "sft_lr"):
            if (value := getattr(self, name)) is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclasses.dataclass(frozen=True)
class StageResult:
    """What one stage did.

    Attributes:
        stage: which stage.
        steps: one dict of metrics per optimisation step (PPO steps or epochs), in order; every one has ``step``.
        mean_reward: the mean episode reward of the stage's rollouts (RL stages), else None.
        checkpoint: the folder the stage's actor and critic were saved to.
        files: the other artefacts written, by name.
        seconds: the stage's wall time.
    """

    stage: Stage
    steps: tuple[dict[str, float], ...]
    mean_reward: float | None
    checkpoint: Path
    files: dict[str, Path]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage.value,
            "steps": list(self.steps),
            "mean_reward": self.mean_reward,
            "checkpoint": str(self.checkpoint),
            "files": {k: str(v) for k, v in self.files.items()},
            "seconds": self.seconds,
        }
