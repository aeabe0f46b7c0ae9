"""Rejection fine-tuning (RFT) data: recorded episodes with a positive reward, as chat-format JSONL.

CUDA Agent's RFT stage keeps the agent trajectories with reward R > 0 and drops those with hallucinated
tool calls, invalid schemas or redundant loops, then fine-tunes the actor on them
(``docs/reference/cuda-agent-and-peers.md`` §1.6). :func:`export_rft` does that selection on the
trajectories :func:`cudagym.evaluation.evaluate` records (``cudagym eval --trajectories traj.jsonl``) and
writes one JSON line per kept episode, in OpenAI's chat format with function calling:

.. code-block:: json

    {"messages": [
        {"role": "system", "content": "<the task instructions>"},
        {"role": "user", "content": "## model.py\\n<the reference source>"},
        {"role": "assistant", "content": null,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\\"path\\": \\"model.py\\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "<the observation>"},
        ...],
     "tools": [<tool_schemas("openai")>],
     "metadata": {"task_id": ..., "reward": ..., "tier": ..., "agent": ..., "backend": ..., "turns": ...}}

Each action becomes an assistant message whose ``tool_calls`` holds the parsed call (arguments as a JSON
string, only those the agent gave); reasoning written around a ``<tool_call>`` block stays as the
message's ``content``. Each observation becomes the ``tool`` message answering it. The episode's last
observation (after ``submit``) is kept, so every call has its answer. That is OpenAI's fine-tuning form;
``chat_format="hf"`` (``cudagym rft-export --format hf``) writes the messages as Hugging Face chat templates take them
instead (:func:`cudagym.wrappers.to_hf`: arguments as objects or JSON text, no null content).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from cudagym.baselines.agents import split_first_observation
from cudagym.tools import ParseFailure, parse_action, tool_schemas
from cudagym.wrappers.chat import ArgumentsForm, to_hf

ChatFormat = Literal["openai", "hf"]

_TAG_RE = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class RFTFilter:
    """Which trajectories :func:`export_rft` keeps.

    Attributes:
        min_reward: keep a trajectory only when its reward is strictly greater (CUDA Agent: R > 0).
        drop_invalid: drop a trajectory with an action that is not one valid tool call (hallucinated
            tools, invalid schemas, bad JSON).
        max_repeats: drop a trajectory in which one action text comes more than this many times in a row
            (a redundant loop); None: keep them.
        include_tools: add the tools' OpenAI schemas to each line (``"tools"``).
    """

    min_reward: float = 0.0
    drop_invalid: bool = True
    max_repeats: int | None = 3
    include_tools: bool = True


@dataclasses.dataclass(frozen=True)
class RFTExport:
    """What :func:`export_rft` did.

    Attributes:
        read: trajectories read.
        kept: trajectories written.
        low_reward: dropped for reward <= ``min_reward``.
        invalid: dropped for an invalid tool call.
        loops: dropped for a repeated action.
        out: the file written.
    """

    read: int
    kept: int
    low_reward: int
    invalid: int
    loops: int
    out: Path


def _reasoning(action: str) -> str | None:
    """The text around a ``<tool_call>`` block (an agent's reasoning); None when there is none."""
    if "<tool_call>" not in action:
        return None
    text = _TAG_RE.sub("", action).strip()
    return text or None


def _longest_run(actions: Iterable[str]) -> int:
    longest = run = 0
    previous: str | None = None
    for action in actions:
        run = run + 1 if action == previous else 1
        previous = action
        longest = max(longest, run)
    return longest


def trajectory_messages(trajectory: Any, *, strict: bool = True) -> list[dict[str, Any]] | None:
    """The chat messages of one trajectory (see the module doc); None when ``strict`` and an action is
    not one valid tool call.

    Without ``strict``, an invalid action becomes an assistant message with the raw text as content and
    its observation a user message.

    Args:
        trajectory: a :class:`cudagym.evaluation.Trajectory`.
        strict: refuse trajectories with invalid actions.
    """
    instructions, task_text = split_first_observation(trajectory.observation)
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages.append({"role": "user", "content": task_text})
    for turn, step in enumerate(trajectory.steps, 1):
        call = parse_action(step.action)
        if isinstance(call, ParseFailure):
            if strict:
                return None
            messages.append({"role": "assistant", "content": step.action})
            messages.append({"role": "user", "content": step.observation})
            continue
        call_id = f"call_{turn}"
        arguments = call.model_dump(exclude_unset=True)
        messages.append(
            {
                "role": "assistant",
                "content": _reasoning(step.action),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.tool_name(), "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": step.observation})
    return messages


def export_rft(
    trajectories: str | Path,
    out: str | Path,
    rules: RFTFilter | None = None,
    *,
    chat_format: ChatFormat = "openai",
    arguments: ArgumentsForm = "object",
    null_content: str = "",
) -> RFTExport:
    """Writes the trajectories that pass ``rules`` as chat-format JSONL (see the module doc).

    Args:
        trajectories: the JSONL :func:`cudagym.evaluation.evaluate` recorded.
        out: the chat JSONL to write (overwritten).
        rules: the selection; None: CUDA Agent's (reward > 0, no invalid calls, no loops).
        chat_format: ``"openai"``: OpenAI's fine-tuning form (above: arguments as JSON text, ``content`` null next
            to tool calls); ``"hf"``: the messages through :func:`cudagym.wrappers.to_hf`, ready for a Hugging Face
            chat template (``tokenizer.apply_chat_template(line["messages"], tools=line["tools"])``, as TRL's
            SFTTrainer renders a ``messages``/``tools`` dataset).
        arguments: with ``"hf"``: the tool calls' arguments as objects (``"object"``, what Qwen3.5+, GLM-4-MoE and
            Gemma 4 templates need) or JSON text (``"string"``, what DeepSeek-V3's needs).
        null_content: with ``"hf"``: the text that stands for a null ``content``.
    """
    if chat_format not in ("openai", "hf"):
        raise ValueError(f"chat_format must be 'openai' or 'hf', got {chat_format!r}")
    from cudagym.evaluation import read_trajectories

    rules = rules or RFTFilter()
    records = read_trajectories(trajectories)
    kept = low = invalid = loops = 0
    schemas = tool_schemas("openai") if rules.include_tools else None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for trajectory in records:
            if not trajectory.reward > rules.min_reward:
                low += 1
                continue
            if rules.max_repeats is not None and _longest_run(s.action for s in trajectory.steps) > rules.max_repeats:
                loops += 1
                continue
            messages = trajectory_messages(trajectory, strict=rules.drop_invalid)
            if messages is None:
                invalid += 1
                continue
            if chat_format == "hf":
                messages = to_hf(messages, arguments=arguments, null_content=null_content)
            line: dict[str, Any] = {"messages": messages}
            if schemas is not None:
                line["tools"] = schemas
            line["metadata"] = {
                "task_id": trajectory.task_id,
                "reward": trajectory.reward,
                "tier": trajectory.tier,
                "agent": trajectory.agent,
                "backend": trajectory.backend,
                "turns": len(trajectory.steps),
            }
            f.write(json.dumps(line) + "\n")
            kept += 1
    return RFTExport(read=len(records), kept=kept, low_reward=low, invalid=invalid, loops=loops, out=out)
