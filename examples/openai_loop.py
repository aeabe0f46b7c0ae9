"""Play one CudaKernel-v0 episode with any OpenAI-compatible chat server (OpenAI, vLLM, SGLang, ...).

The plainest agent loop: the environment, seen through :class:`cudagym.wrappers.ChatMessages`, gives the
conversation; the model answers with native tool calls (``tools=`` the schemas generated from the tool
models); each answer is the next action, until the episode ends.

    pip install -e '.[openai]'
    python examples/openai_loop.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B --backend cpu

The API key is read from ``--api-key`` or ``OPENAI_API_KEY`` (local servers accept any value).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

import gymnasium as gym

import cudagym  # noqa: F401  (registers CudaKernel-v0)
from cudagym.wrappers import ChatMessages, to_openai


@dataclasses.dataclass
class EpisodeResult:
    """What one episode gave: its task, return, the tool calls executed, how it ended and the final info."""

    task_id: str
    total_reward: float
    turns: int
    terminated: bool
    truncated: bool
    final_info: dict[str, Any]


def run_episode(
    client: Any,
    model: str,
    env: ChatMessages,
    *,
    seed: int | None = None,
    task_id: str | None = None,
    max_requests: int = 1000,
    echo: Any = None,
    **request_options: Any,
) -> EpisodeResult:
    """Plays one episode: ask the model, step the environment with its message, until the episode ends.

    Args:
        client: an ``openai.OpenAI`` client (or anything with ``chat.completions.create``).
        model: the model name the server knows.
        env: the chat view of a ``CudaKernel-v0`` environment.
        seed: picks the task (ignored when ``task_id`` is given).
        task_id: play this task.
        max_requests: a guard on the number of model calls (the environment's own turn budget ends
            the episode first unless this is smaller).
        echo: called with a line of text for every request and answer, for logging.
        **request_options: passed to ``chat.completions.create`` (``temperature``, ``max_tokens``, ...).
    """
    options = {"task_id": task_id} if task_id else None
    messages, info = env.reset(seed=seed, options=options)
    total = 0.0
    terminated = truncated = False
    requests = turns = 0
    while not (terminated or truncated) and requests < max_requests:
        response = client.chat.completions.create(
            model=model, messages=to_openai(messages), tools=info.get("tools", env.tools), **request_options
        )
        requests += 1
        message = response.choices[0].message
        action = message.model_dump(exclude_none=True)
        if echo:
            calls = [c["function"]["name"] for c in action.get("tool_calls") or []]
            echo(f"[request {requests}] tool calls: {calls or 'none'}")
        messages, reward, terminated, truncated, info = env.step(action)
        total += reward
        turns += len(info["calls"])
        if echo:
            for new in messages[-max(1, len(action.get("tool_calls") or [])) :]:
                echo(f"  {new['role']}: {new['content'][:200]}")
    return EpisodeResult(
        task_id=env.unwrapped.task.id,
        total_reward=total,
        turns=turns,
        terminated=terminated,
        truncated=truncated,
        final_info=info,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="the server's /v1 URL")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "unused"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", default=None, help="task id (default: chosen from --seed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--max-turns", type=int, default=50)
    parser.add_argument("--max-tool-chars", type=int, default=16000)
    parser.add_argument("--temperature", type=float, default=None)
    args = parser.parse_args(argv)

    from openai import OpenAI  # the `openai` extra

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    env = ChatMessages(
        gym.make("CudaKernel-v0", backend=args.backend, max_turns=args.max_turns), max_tool_chars=args.max_tool_chars
    )
    extra = {} if args.temperature is None else {"temperature": args.temperature}
    try:
        result = run_episode(client, args.model, env, seed=args.seed, task_id=args.task, echo=print, **extra)
    finally:
        env.close()
    info = result.final_info
    print(
        f"== {result.task_id}: return {result.total_reward:g} after {result.turns} turns "
        f"({'submitted, tier ' + str(info.get('tier')) if result.terminated else 'not submitted'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
