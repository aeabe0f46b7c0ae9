"""Batched rollouts: several environments play at once, one batched ``generate`` per turn for all live episodes.

Each environment is ``CudaKernel-v0`` behind the :class:`cudagym.wrappers.ChatMessages` wrapper. A turn: the live
episodes' token sequences are left-padded into one batch and sampled from; each reply is parsed into an assistant
message with native tool calls (``trl.chat_template_utils.parse_response`` with the tokenizer's response schema,
where it has one; else the reply's text is the message's content and the environment parses a call from it); the
environments step in threads (their evaluations run in child processes); each answer is rendered with the chat
template and appended to the sequence as context. An episode ends at a submit, at the environment's truncation, at
``max_turns`` assistant turns or past ``max_context_tokens``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import torch

from cudagym.baselines.llm_ppo.config import PPOSettings
from cudagym.baselines.llm_ppo.policy import Policy
from cudagym.baselines.llm_ppo.render import ChatRenderer, TokenTrajectory
from cudagym.wrappers.chat import ChatMessages, to_openai

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], gym.Env]


def make_env_factory(
    *,
    task_set: str = "builtin",
    backend: str = "auto",
    reward: str = "milestone",
    eval_config: Any = None,
    **kwargs: Any,
) -> EnvFactory:
    """A factory of ``ChatMessages(CudaKernel-v0)`` environments with these options (``kwargs`` go to the env)."""

    def make() -> gym.Env:
        env = gym.make(
            "cudagym:CudaKernel-v0",
            task_set=task_set,
            backend=backend,
            reward=reward,
            eval_config=eval_config,
            **kwargs,
        )
        return ChatMessages(env)

    return make


@dataclasses.dataclass
class _Live:
    """An episode being played."""

    env: gym.Env
    trajectory: TokenTrajectory
    observation: tuple[dict[str, Any], ...]
    done: bool = False


def sample(policy: Policy, prompts: Sequence[list[int]], settings: PPOSettings) -> list[tuple[list[int], bool]]:
    """One reply per prompt, sampled in one batch: (its tokens up to and including eos, whether it reached eos)."""
    tokenizer = policy.tokenizer
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=policy.device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=policy.device)
    policy.actor.eval()
    with torch.no_grad():
        out = policy.actor.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=settings.max_new_tokens,
            do_sample=True,
            temperature=settings.temperature,
            top_k=0,
            top_p=1.0,
            pad_token_id=pad,
            eos_token_id=eos,
        )
    replies = []
    for row in out[:, width:].tolist():
        if eos in row:
            replies.append((row[: row.index(eos) + 1], True))
        else:
            replies.append((row, False))
    return replies


def parse_reply(tokenizer: Any, reply: list[int], prefix: list[int], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A reply as an assistant message: native tool calls where the tokenizer can parse them (see the module doc)."""
    if importlib.util.find_spec("trl") is not None and (
        getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None)
    ):
        from trl.chat_template_utils import parse_response

        return parse_response(tokenizer, reply, prefix=prefix, tools=tools)
    return {"role": "assistant", "content": tokenizer.decode(reply, skip_special_tokens=True)}


def collect(
    policy: Policy,
    renderer: ChatRenderer,
    envs: Sequence[gym.Env],
    task_ids: Sequence[str],
    settings: PPOSettings,
    *,
    max_turns: int,
) -> list[TokenTrajectory]:
    """Plays one episode per environment (``task_ids[i]`` in ``envs[i]``) and returns them as token trajectories."""
    if len(envs) != len(task_ids) or not envs:
        raise ValueError(f"{len(envs)} environments for {len(task_ids)} tasks")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    live = []
    for env, task_id in zip(envs, task_ids, strict=True):
        observation, _ = env.reset(options={"task_id": task_id})
        ids = renderer.prompt_ids(observation)
        trajectory = TokenTrajectory(ids, [0] * len(ids), [], [], task_id, [])
        live.append(_Live(env, trajectory, observation))
    sampling: list[tuple[float, int, int]] = []  # per turn: seconds, longest reply, longest context
    stepping = 0.0
    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        for turn in range(max_turns):
            playing = [episode for episode in live if not episode.done]
            if not playing:
                break
            began = time.monotonic()
            replies = sample(policy, [e.trajectory.input_ids for e in playing], settings)
            longest = max(len(reply) for reply, _ in replies)
            context = max(len(e.trajectory.input_ids) for e in playing)
            sampling.append((time.monotonic() - began, longest, context))
            messages = [
                parse_reply(policy.tokenizer, reply, e.trajectory.input_ids, renderer.tools)
                for e, (reply, _) in zip(playing, replies, strict=True)
            ]
            for episode, (reply, ended) in zip(playing, replies, strict=True):
                trajectory = episode.trajectory
                trajectory.input_ids += reply
                trajectory.action_mask += [1] * len(reply)
                trajectory.turn_ends.append(len(trajectory.input_ids) - 1)
                if not ended:  # cut at max_new_tokens: close the turn as the template would, as context
                    trajectory.input_ids.append(renderer.eos_id)
                    trajectory.action_mask.append(0)
            began = time.monotonic()
            steps = list(pool.map(lambda pair: pair[0].env.step(pair[1]), zip(playing, messages, strict=True)))
            stepping += time.monotonic() - began
            for episode, (observation, reward, terminated, truncated, _) in zip(playing, steps, strict=True):
                trajectory = episode.trajectory
                trajectory.turn_rewards.append(float(reward))
                answers = observation[len(episode.observation) + 1 :]
                episode.observation = observation
                trajectory.terminated = bool(terminated)
                last = turn == max_turns - 1 or terminated or truncated
                if not last:
                    tail = renderer.answer_ids(answers)
                    trajectory.input_ids += tail
                    trajectory.action_mask += [0] * len(tail)
                    last = len(trajectory.input_ids) + settings.max_new_tokens > settings.max_context_tokens
                episode.done = last
    for episode in live:
        episode.trajectory.messages = to_openai(episode.observation)
    logger.info(
        "collected %d episodes in %d turns, mean return %.3f; environments %.1f s; sampling %.1f s: %s",
        len(live),
        len(sampling),
        _mean([e.trajectory for e in live]),
        stepping,
        sum(seconds for seconds, _, _ in sampling),
        ", ".join(f"{seconds:.1f} s for {tokens} tokens after {context}" for seconds, tokens, context in sampling),
    )
    return [episode.trajectory for episode in live]


def _mean(trajectories: Sequence[TokenTrajectory]) -> float:
    return sum(t.episode_return for t in trajectories) / max(len(trajectories), 1)
