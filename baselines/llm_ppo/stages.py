"""The four stages of the recipe and the PPO update they share.

* :func:`rl_stage` — PPO with the critic: batched rollouts, GAE over the assistant tokens, the clipped policy loss
  plus the KL term to the frozen reference, the clipped value loss. Stage 1 (single-turn RL) is this with one
  assistant message per episode; stage 4 (agentic PPO) with many.
* :func:`rejection_finetune` — stage 2: the actor's negative log-likelihood of the assistant tokens of good
  trajectories (``cudagym rft-export`` lines).
* :func:`value_pretrain` — stage 3: the critic alone, fitted to GAE targets of recorded returns (gamma and lambda
  as in PPO), the targets recomputed from the critic's own values each epoch.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from cudagym.baselines.llm_ppo.advantages import gae, token_rewards, whiten
from cudagym.baselines.llm_ppo.artefacts import RunLog, read_chat_lines, write_rollouts
from cudagym.baselines.llm_ppo.config import PPOSettings, Stage, StageResult
from cudagym.baselines.llm_ppo.losses import kl_to_reference, masked_mean, policy_loss, sft_loss, value_loss
from cudagym.baselines.llm_ppo.policy import Policy, token_logprobs, token_values
from cudagym.baselines.llm_ppo.render import ChatRenderer, TokenTrajectory
from cudagym.baselines.llm_ppo.rollout import collect

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Batch:
    """Trajectories as right-padded tensors with what the update needs, all ``[B, T]``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def rows(self, index: list[int]) -> Batch:
        return Batch(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


def pad(trajectories: Sequence[TokenTrajectory], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(input_ids, attention_mask, action_mask)`` right-padded to the longest trajectory."""
    width = max(len(t.input_ids) for t in trajectories)
    ids = [t.input_ids + [pad_id] * (width - len(t.input_ids)) for t in trajectories]
    attention = [[1] * len(t.input_ids) + [0] * (width - len(t.input_ids)) for t in trajectories]
    action = [t.action_mask + [0] * (width - len(t.action_mask)) for t in trajectories]
    return tuple(torch.tensor(x, device=device) for x in (ids, attention, action))


def _chunks(count: int, size: int, shuffle: bool) -> list[list[int]]:
    order = list(range(count))
    if shuffle:
        random.shuffle(order)
    return [order[i : i + size] for i in range(0, count, size)]


@torch.no_grad()
def score(policy: Policy, trajectories: Sequence[TokenTrajectory], settings: PPOSettings) -> Batch:
    """The batch of an update: the rollout policy's and the reference's log-probabilities, the critic's values, and
    GAE's advantages (whitened over the assistant tokens when the settings say so) and returns."""
    if policy.reference is None:
        raise ValueError("the policy has no reference: call freeze_reference() when the stage starts")
    ids, attention, action = pad(trajectories, policy.tokenizer.pad_token_id, policy.device)
    parts: dict[str, list[torch.Tensor]] = {"old": [], "ref": [], "values": []}
    policy.actor.eval()
    policy.critic.eval()
    for rows in _chunks(len(trajectories), settings.minibatch, shuffle=False):
        parts["old"].append(token_logprobs(policy.actor, ids[rows], attention[rows], settings.temperature))
        parts["ref"].append(token_logprobs(policy.reference, ids[rows], attention[rows], settings.temperature))
        parts["values"].append(token_values(policy.critic, ids[rows], attention[rows]))
    old, ref, values = (torch.cat(parts[k]) for k in ("old", "ref", "values"))
    advantages, returns = torch.zeros_like(values), torch.zeros_like(values)
    for row, trajectory in enumerate(trajectories):
        length = len(trajectory.input_ids)
        rewards = token_rewards(length, trajectory.turn_ends, trajectory.turn_rewards)
        adv, ret = gae(
            rewards, values[row, :length].cpu(), action[row, :length].cpu(), gamma=settings.gamma, lam=settings.lam
        )
        advantages[row, :length], returns[row, :length] = adv.to(values.device), ret.to(values.device)
    if settings.whiten_advantages:
        advantages = whiten(advantages, action)
    return Batch(ids, attention, action, old, ref, values, advantages, returns)


def ppo_update(
    policy: Policy,
    batch: Batch,
    settings: PPOSettings,
    actor_opt: torch.optim.Optimizer,
    critic_opt: torch.optim.Optimizer,
) -> dict[str, float]:
    """``settings.epochs`` passes of minibatch PPO over ``batch``; the metrics are means over the minibatches."""
    totals = {"policy_loss": 0.0, "value_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
    count = 0
    policy.actor.train()
    policy.critic.train()
    for _ in range(settings.epochs):
        for rows in _chunks(batch.input_ids.shape[0], settings.minibatch, shuffle=True):
            part = batch.rows(rows)
            logprobs = token_logprobs(policy.actor, part.input_ids, part.attention_mask, settings.temperature)
            loss, clipped = policy_loss(
                logprobs,
                part.old_logprobs,
                part.advantages,
                part.action_mask,
                clip_low=settings.clip_low,
                clip_high=settings.clip_high,
            )
            kl = masked_mean(kl_to_reference(logprobs, part.ref_logprobs), part.action_mask)
            actor_opt.zero_grad()
            (loss + settings.kl_coef * kl).backward()
            torch.nn.utils.clip_grad_norm_(policy.actor.parameters(), settings.max_grad_norm)
            actor_opt.step()
            values = token_values(policy.critic, part.input_ids, part.attention_mask)
            v_loss = value_loss(values, part.old_values, part.returns, part.action_mask, clip=settings.value_clip)
            critic_opt.zero_grad()
            v_loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.critic.parameters(), settings.max_grad_norm)
            critic_opt.step()
            for key, value in (("policy_loss", loss), ("value_loss", v_loss), ("kl", kl), ("clip_fraction", clipped)):
                totals[key] += value.item()
            count += 1
    return {key: value / max(count, 1) for key, value in totals.items()}


def _optimiser(model: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)


def rl_stage(
    stage: Stage,
    policy: Policy,
    renderer: ChatRenderer,
    envs: Sequence[Any],
    next_tasks: Callable[[int], list[str]],
    settings: PPOSettings,
    *,
    steps: int,
    max_turns: int,
    out: Path,
    log: RunLog,
) -> StageResult:
    """PPO for ``steps`` updates, each on one episode per environment (tasks from ``next_tasks(len(envs))``).

    Writes ``out/<stage>/rollouts.jsonl`` (every episode, with its reward) and the checkpoint ``out/<stage>/``.
    """
    if stage not in (Stage.SINGLE_TURN, Stage.AGENTIC):
        raise ValueError(f"{stage} is not a reinforcement-learning stage")
    start = time.monotonic()
    folder = out / stage.value
    folder.mkdir(parents=True, exist_ok=True)
    rollouts = folder / "rollouts.jsonl"
    rollouts.unlink(missing_ok=True)
    policy.freeze_reference()
    actor_opt, critic_opt = _optimiser(policy.actor, settings.actor_lr), _optimiser(policy.critic, settings.critic_lr)
    history, rewards = [], []
    for step in range(steps):
        trajectories = collect(policy, renderer, envs, next_tasks(len(envs)), settings, max_turns=max_turns)
        write_rollouts(rollouts, trajectories, renderer.tools)
        mean = sum(t.episode_return for t in trajectories) / len(trajectories)
        rewards.append(mean)
        metrics = ppo_update(policy, score(policy, trajectories, settings), settings, actor_opt, critic_opt)
        metrics = {"step": float(step), "mean_reward": mean, **metrics}
        metrics["tokens"] = float(sum(sum(t.action_mask) for t in trajectories))
        log.record(stage.value, metrics)
        history.append(metrics)
        logger.info("%s step %d: %s", stage.value, step, metrics)
    policy.save(folder)
    return StageResult(
        stage,
        tuple(history),
        sum(rewards) / len(rewards) if rewards else None,
        folder,
        {"rollouts": rollouts},
        time.monotonic() - start,
    )


def _trajectories(renderer: ChatRenderer, paths: Sequence[str | Path]) -> list[TokenTrajectory]:
    out = []
    for line in read_chat_lines(paths):
        metadata = line["metadata"]
        out.append(renderer.conversation(line["messages"], float(metadata["reward"]), metadata.get("task_id", "")))
    return out


def rejection_finetune(
    policy: Policy, renderer: ChatRenderer, data: Sequence[str | Path], settings: PPOSettings, *, out: Path, log: RunLog
) -> StageResult:
    """Stage 2: ``settings.sft_epochs`` passes of the actor's NLL over the assistant tokens of ``data`` (chat JSONL
    as ``cudagym rft-export --format hf`` writes it; its filter chose the good trajectories)."""
    start = time.monotonic()
    trajectories = _trajectories(renderer, data)
    optimiser = _optimiser(policy.actor, settings.actor_lr if settings.sft_lr is None else settings.sft_lr)
    history = []
    policy.actor.train()
    for epoch in range(settings.sft_epochs):
        losses = []
        for rows in _chunks(len(trajectories), settings.minibatch, shuffle=True):
            ids, attention, action = pad([trajectories[i] for i in rows], policy.tokenizer.pad_token_id, policy.device)
            loss = sft_loss(token_logprobs(policy.actor, ids, attention), action)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.actor.parameters(), settings.max_grad_norm)
            optimiser.step()
            losses.append(loss.item())
        metrics = {"step": float(epoch), "sft_loss": sum(losses) / len(losses)}
        log.record(Stage.RFT.value, metrics)
        history.append(metrics)
    folder = out / Stage.RFT.value
    policy.save(folder)
    return StageResult(Stage.RFT, tuple(history), None, folder, {}, time.monotonic() - start)


def value_pretrain(
    policy: Policy, renderer: ChatRenderer, data: Sequence[str | Path], settings: PPOSettings, *, out: Path, log: RunLog
) -> StageResult:
    """Stage 3: ``settings.value_epochs`` passes fitting the critic to GAE targets of the recorded returns of
    ``data`` (chat JSONL lines with ``metadata.reward``: RFT exports, or the rollouts an RL stage wrote). Each
    epoch's ``value_loss`` is measured before its updates, against that epoch's targets."""
    start = time.monotonic()
    trajectories = _trajectories(renderer, data)
    optimiser = _optimiser(policy.critic, settings.critic_lr)
    history = []
    for epoch in range(settings.value_epochs):
        losses = []
        for rows in _chunks(len(trajectories), settings.minibatch, shuffle=True):
            part = [trajectories[i] for i in rows]
            ids, attention, action = pad(part, policy.tokenizer.pad_token_id, policy.device)
            policy.critic.train()
            values = token_values(policy.critic, ids, attention)
            targets = torch.zeros_like(values)
            for row, trajectory in enumerate(part):
                length = len(trajectory.input_ids)
                rewards = token_rewards(length, trajectory.turn_ends, trajectory.turn_rewards)
                _, ret = gae(
                    rewards,
                    values[row, :length].detach().cpu(),
                    action[row, :length].cpu(),
                    gamma=settings.gamma,
                    lam=settings.lam,
                )
                targets[row, :length] = ret.to(values.device)
            loss = value_loss(values, values.detach(), targets, action, clip=None)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.critic.parameters(), settings.max_grad_norm)
            optimiser.step()
            losses.append(loss.item())
        metrics = {"step": float(epoch), "value_loss": sum(losses) / len(losses)}
        log.record(Stage.VALUE.value, metrics)
        history.append(metrics)
    folder = out / Stage.VALUE.value
    policy.save(folder)
    return StageResult(Stage.VALUE, tuple(history), None, folder, {}, time.monotonic() - start)
