"""Conversations as token sequences with the model's own chat template, and which tokens the policy wrote.

A multi-turn episode is one growing token sequence: the prompt (system and user messages with the tools), then for
each turn the assistant's tokens (what the policy generated, up to and including its end-of-turn token) and the
template's text for the environment's answer up to the next assistant header. Only the assistant's tokens carry
loss; the prompt and the tool outputs are context. The sequence is never re-rendered from the messages once
generated, so the tokens trained on are exactly the tokens sampled.

Rendering a piece of a conversation alone is done by difference: the template renders a fixed two-message
conversation with and without the new messages, and the text after the end-of-turn tokens of the fixed part is the
new part. That works for templates that render earlier messages the same whatever follows them (ChatML, Llama 3,
Qwen, ...); one that does not is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from cudagym.wrappers.chat import to_hf

_BASE = ({"role": "user", "content": "."}, {"role": "assistant", "content": "."})


@dataclasses.dataclass
class TokenTrajectory:
    """One episode as tokens.

    Attributes:
        input_ids: the whole sequence.
        action_mask: 1 on the tokens the policy wrote (assistant turns), 0 on the prompt and tool outputs.
        turn_ends: the index of the last policy token of each assistant turn.
        turn_rewards: the environment's reward for each turn (same length as ``turn_ends``).
        task_id: the task played.
        messages: the conversation (Hugging Face form), for the records.
        terminated: the episode ended by a submit (else it ran out of turns or context).
    """

    input_ids: list[int]
    action_mask: list[int]
    turn_ends: list[int]
    turn_rewards: list[float]
    task_id: str
    messages: list[dict[str, Any]]
    terminated: bool = False

    @property
    def episode_return(self) -> float:
        return float(sum(self.turn_rewards))


class ChatRenderer:
    """Renders messages to token ids with ``tokenizer``'s chat template (see the module doc).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template and an ``eos_token`` that ends assistant turns.
        tools: the tool schemas the template writes into the system prompt.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]]) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template")
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has no eos_token (the end of an assistant turn)")
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools]
        self.eos = tokenizer.eos_token
        self.eos_id = tokenizer.eos_token_id
        base = self._text(list(_BASE), generation_prompt=False)
        self._base_turns = base.count(self.eos)
        if self._base_turns < 2:
            raise ValueError(f"the chat template does not end turns with the eos token {self.eos!r}")

    def _text(self, messages: list[dict[str, Any]], *, generation_prompt: bool, tools: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools if tools else None, tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The opening messages (system, user) with the tools and the first assistant header."""
        return self.encode(self._text(to_hf(messages), generation_prompt=True, tools=True))

    def _after_base(self, new: Sequence[Mapping[str, Any]], *, generation_prompt: bool) -> str:
        text = self._text([*_BASE, *to_hf(new)], generation_prompt=generation_prompt)
        cut = -1
        for _ in range(self._base_turns):
            cut = text.find(self.eos, cut + 1)
            if cut < 0:
                raise ValueError("the chat template renders earlier turns differently once messages follow them")
        return text[cut + len(self.eos) :]

    def answer_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The environment's answer (tool or user messages) after an assistant turn's eos, up to the next assistant
        header."""
        return self.encode(self._after_base(messages, generation_prompt=True))

    def assistant_ids(self, message: Mapping[str, Any]) -> list[int]:
        """A recorded assistant message's tokens as the policy would have written them: from after the assistant
        header up to and including eos (e.g. for RFT data)."""
        text = self._after_base([message], generation_prompt=False)
        prompt = self._text(list(_BASE), generation_prompt=True)
        header = prompt[prompt.rfind(self.eos) + len(self.eos) :]  # what follows a turn's eos up to the new header
        if not text.startswith(header):
            raise ValueError("the chat template's assistant header differs between a prompt and a rendered message")
        body = text[len(header) :]
        end = body.rfind(self.eos)
        if end < 0:
            raise ValueError("the chat template ends an assistant message without the eos token")
        return self.encode(body[: end + len(self.eos)])

    def conversation(self, messages: Sequence[Mapping[str, Any]], reward: float, task_id: str = "") -> TokenTrajectory:
        """A recorded conversation (an RFT line's ``messages``) as a trajectory whose last assistant turn carries
        ``reward``; the assistant messages are the policy's tokens."""
        messages = to_hf(messages)
        opening = 0
        while opening < len(messages) and messages[opening]["role"] in ("system", "user"):
            opening += 1
        if opening == 0 or opening == len(messages):
            raise ValueError("a conversation needs opening system/user messages and at least one assistant message")
        ids = self.prompt_ids(messages[:opening])
        mask = [0] * len(ids)
        ends: list[int] = []
        index = opening
        while index < len(messages):
            message = messages[index]
            if message["role"] != "assistant":
                raise ValueError(f"message {index}: expected an assistant message, got {message['role']!r}")
            body = self.assistant_ids(message)
            ids += body
            mask += [1] * len(body)
            ends.append(len(ids) - 1)
            index += 1
            answers = []
            while index < len(messages) and messages[index]["role"] != "assistant":
                answers.append(messages[index])
                index += 1
            if answers:
                tail = self.answer_ids(answers)
                ids += tail
                mask += [0] * len(tail)
        rewards = [0.0] * len(ends)
        rewards[-1] = float(reward)
        return TokenTrajectory(ids, mask, ends, rewards, task_id, messages, terminated=True)
