"""A verifiers-style multi-turn rollout of CudaKernel-v0, in plain Python (no verifiers dependency).

It follows the shape of verifiers' ``MultiTurnEnv`` so that porting it is mechanical:

* ``get_dataset()``: rows as verifiers' ``GymEnv`` builds them: one per seed, the seed stored as the row's
  ``"answer"``, the first messages as its ``"prompt"`` and the task id as ``"task"``;
* ``setup_state(row)``: per-rollout resources (here: a fresh environment, reset with the row's seed);
* ``env_response(messages, state)``: the environment's reply to the last assistant message (tool messages
  tied to the call ids, or a user message when the call was written in the text);
* ``is_completed(messages, state)``: the episode ended (submit or turn budget);
* ``rollout(policy, row)``: alternates ``policy(messages) -> assistant message`` with ``env_response``;
* rubric: ``reward_funcs`` and ``reward_weights``, functions that ask for what they need by argument name
  (``state``); the reward is the weighted sum, weight 0 makes a logged metric.

``policy`` is any callable from the message list to an assistant message (an OpenAI-style dict): an
LLM client (see :func:`openai_policy`) or, as in ``main()``, the scripted agent.

    python examples/verifiers_rollout.py --backend cpu --task builtin/relu
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from cudagym.backends import resolve_backend
from cudagym.baselines.scripted import ScriptedAgent
from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load as load_tasks
from cudagym.tools import parse_action
from cudagym.wrappers import ChatMessages, to_openai

Policy = Callable[[list[dict[str, Any]]], dict[str, Any]]


def episode_return(state: dict[str, Any]) -> float:
    """The episode's return: the sum of the environment's rewards (the tier after a submit)."""
    return float(sum(step["reward"] for step in state["trajectory"]))


def compiled(state: dict[str, Any]) -> float:
    """1.0 when the submitted kernels compiled (a metric)."""
    return float(bool(state["final_info"].get("compiled")))


def correct(state: dict[str, Any]) -> float:
    """1.0 when the submitted model was correct (a metric)."""
    return float(bool(state["final_info"].get("correct")))


class CudaKernelMultiTurnEnv:
    """CudaKernel-v0 behind verifiers' multi-turn protocol (see the module doc).

    Args:
        num_examples: rows in the dataset (seeds ``seed`` ... ``seed + num_examples - 1``).
        seed: the first seed.
        max_tool_chars: tool outputs are cut (head and tail kept) to this many characters.
        **env_kwargs: passed to ``CudaKernelEnv`` (``backend``, ``max_turns``, ``eval_config``, task filters...).
    """

    reward_funcs = (episode_return, compiled, correct)
    reward_weights = (1.0, 0.0, 0.0)

    def __init__(self, *, num_examples: int = 8, seed: int = 0, max_tool_chars: int = 16000, **env_kwargs: Any):
        self.num_examples = num_examples
        self.seed = seed
        self.max_tool_chars = max_tool_chars
        self.env_kwargs = env_kwargs

    def _make_env(self) -> ChatMessages:
        return ChatMessages(CudaKernelEnv(**self.env_kwargs), max_tool_chars=self.max_tool_chars)

    def get_dataset(self) -> list[dict[str, Any]]:
        """One row per seed: ``prompt`` (the first messages), ``answer`` (the seed), ``task``, ``info``."""
        env = self._make_env()
        rows = []
        try:
            for i in range(self.num_examples):
                seed = self.seed + i
                messages, info = env.reset(seed=seed)
                rows.append(
                    {
                        "prompt": to_openai(messages),
                        "answer": str(seed),
                        "task": info["task_id"],
                        "info": {"task_id": info["task_id"], "backend": info["backend"]},
                    }
                )
        finally:
            env.close()
        return rows

    def setup_state(self, row: dict[str, Any]) -> dict[str, Any]:
        """A fresh environment reset with the row's seed, and an empty trajectory."""
        env = self._make_env()
        messages, info = env.reset(seed=int(row["answer"]))
        return {
            "env": env,
            "prompt": to_openai(messages),
            "trajectory": [],
            "final_info": {},
            "done": False,
            "task": info["task_id"],
        }

    def env_response(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
        """Steps the environment with the last assistant message; returns the new tool/user messages."""
        env: ChatMessages = state["env"]
        before = len(env.messages)
        observation, reward, terminated, truncated, info = env.step(messages[-1])
        new = to_openai(observation[before + 1 :])  # skip the recorded assistant message
        state["trajectory"].append({"completion": messages[-1], "response": new, "reward": reward, "extras": info})
        state["final_info"] = info
        state["done"] = bool(terminated or truncated)
        return new

    def is_completed(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> bool:
        return bool(state["done"])

    def cleanup(self, state: dict[str, Any]) -> None:
        """Releases the rollout's workspace and processes."""
        state["env"].close()

    def rollout(self, policy: Policy, row: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Plays one episode; returns the completion (every message after the prompt) and the state."""
        state = self.setup_state(row)
        messages = list(state["prompt"])
        completion: list[dict[str, Any]] = []
        try:
            while not self.is_completed(messages, state):
                reply = dict(policy(messages))
                reply.setdefault("role", "assistant")
                messages.append(reply)
                completion.append(reply)
                response = self.env_response(messages, state)
                messages.extend(response)
                completion.extend(response)
        finally:
            self.cleanup(state)
        state["completion"] = completion
        return completion, state

    def score(self, state: dict[str, Any]) -> dict[str, float]:
        """The rubric: every reward function's value and their weighted sum under ``"reward"``."""
        values = {fn.__name__: fn(state) for fn in self.reward_funcs}
        values["reward"] = sum(
            w * values[fn.__name__] for fn, w in zip(self.reward_funcs, self.reward_weights, strict=True)
        )
        return values


def openai_policy(client: Any, model: str, tools: list[dict[str, Any]], **request_options: Any) -> Policy:
    """A policy backed by an OpenAI-compatible chat server, answering with native tool calls."""

    def policy(messages: list[dict[str, Any]]) -> dict[str, Any]:
        response = client.chat.completions.create(model=model, messages=messages, tools=tools, **request_options)
        return response.choices[0].message.model_dump(exclude_none=True)

    return policy


def scripted_policy(actions: Iterator[str]) -> Policy:
    """A policy that answers with the next of ``actions`` (tool-call text) as a native tool call."""
    counter = iter(range(10**9))

    def policy(messages: list[dict[str, Any]]) -> dict[str, Any]:
        call = parse_action(next(actions))
        arguments = call.model_dump_json()
        call_id = f"call_{next(counter)}"
        function = {"name": call.tool_name(), "arguments": arguments}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    return policy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A verifiers-style rollout with the scripted agent.")
    parser.add_argument("--task", default="builtin/relu")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    vf_env = CudaKernelMultiTurnEnv(num_examples=1, backend=args.backend, ids=[args.task])
    row = vf_env.get_dataset()[0]
    task = load_tasks("builtin").get(args.task)
    actions = ScriptedAgent(profile=False).actions(task, resolve_backend(args.backend).name)
    completion, state = vf_env.rollout(scripted_policy(actions), row)
    print(f"{row['task']}: {len(completion)} messages, scores {vf_env.score(state)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
