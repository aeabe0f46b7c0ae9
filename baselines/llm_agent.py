"""The LLM agent: any OpenAI-compatible chat endpoint plays the episode (the ``openai`` extra).

The conversation opens with a system message (the task instructions) and a user message (the reference
``model.py``). Two ways to call tools:

* ``native``: the request carries the tools' function schemas (``tool_schemas("openai")``); the model
  answers with ``tool_calls``; the first call is the action and each result goes back as a ``role: tool``
  message with its ``tool_call_id`` (further calls in the same answer are answered "not executed": the
  environment takes one call per turn). An answer without ``tool_calls`` is sent as text (the environment
  still finds a ``<tool_call>`` block in it) and its observation comes back as a user message.
* ``text``: no schemas; the model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in
  its content, the content is the action and each observation comes back as a user message.

Limits: ``max_turns`` actions, and a token budget: once the ``usage.total_tokens`` of the episode's
requests add up to ``token_budget`` or more, the agent stops (``act`` returns None). API errors that can
pass (connection, timeout, 408/409/429, 5xx) are retried with exponential backoff and jitter; when the
retries run out, or on another API error, the agent stops and reports the error in ``episode_stats()``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from cudagym.baselines.agents import split_first_observation
from cudagym.tasks.task import Task
from cudagym.tools import tool_schemas

ToolMode = Literal["native", "text"]

TEXT_MODE_NOTE = (
    "Answer with exactly one tool call per message, written as "
    '<tool_call>{"name": <tool>, "arguments": {...}}</tool_call>. You may think before it.'
)
NATIVE_MODE_NOTE = "Call exactly one tool per message."
SKIPPED_CALL = "Not executed: the environment runs one tool call per turn; only the first call of a message runs."
RETRY_STATUS = frozenset({408, 409, 429})


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    """How the LLM agent talks to its endpoint.

    Attributes:
        model: the model name the endpoint serves.
        base_url: the endpoint (e.g. ``http://localhost:8000/v1`` for vLLM); None: the OpenAI API.
        api_key: the key; None: read from the environment variable ``api_key_env`` (a local endpoint
            without a key gets the placeholder ``"EMPTY"``).
        api_key_env: the environment variable holding the key.
        tool_mode: ``"native"`` function calling or ``"text"`` ``<tool_call>`` blocks (see the module doc).
        temperature: sampling temperature; None: the endpoint's default.
        max_tokens: the completion limit of one request; None: the endpoint's default.
        token_budget: stop once the episode's requests used this many tokens in all (prompt and
            completion, as ``usage.total_tokens`` reports them); None: no budget.
        max_turns: stop after this many actions; None: only the environment's turn limit applies.
        max_retries: retries of one request after a retryable API error.
        backoff_initial: seconds before the first retry; doubled each retry, up to ``backoff_max``.
        backoff_max: the longest wait between retries.
        request_timeout: seconds one request may take.
        system_prompt: replaces the instructions as the system message; None: the task instructions.
        extra_body: extra JSON fields for every request (e.g. ``{"top_k": 20}`` for vLLM).
        seed: seeds the retry jitter.
    """

    model: str = "gpt-4o-mini"
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    tool_mode: ToolMode = "native"
    temperature: float | None = None
    max_tokens: int | None = None
    token_budget: int | None = None
    max_turns: int | None = None
    max_retries: int = 5
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    request_timeout: float = 600.0
    system_prompt: str | None = None
    extra_body: Mapping[str, Any] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tool_mode not in ("native", "text"):
            raise ValueError(f"tool_mode must be 'native' or 'text', got {self.tool_mode!r}")
        if self.max_retries < 0 or self.backoff_initial < 0 or self.backoff_max < 0:
            raise ValueError("max_retries, backoff_initial and backoff_max must be >= 0")
        for name in ("token_budget", "max_turns", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")

    def resolved_api_key(self) -> str:
        """The API key: ``api_key``, else ``$api_key_env``, else the placeholder ``"EMPTY"``."""
        return self.api_key or os.environ.get(self.api_key_env) or "EMPTY"


def _retryable(error: Exception) -> bool:
    import openai

    if isinstance(error, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)):
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRY_STATUS or error.status_code >= 500
    return False


def _describe(error: Exception) -> str:
    status = getattr(error, "status_code", None)
    text = " ".join(str(error).split())[:500]
    return f"{type(error).__name__}{f' {status}' if status else ''}: {text}"


class LLMAgent:
    """An LLM behind an OpenAI-compatible endpoint (see the module doc).

    Args:
        config: endpoint, tool-call mode and limits.
        client: an ``openai.OpenAI``-like client (``client.chat.completions.create``); None: one is made
            from ``config`` (its own retries off: the agent retries).
        sleep: waits between retries (tests pass a fake).
    """

    name = "llm"

    def __init__(
        self, config: LLMConfig | None = None, *, client: Any = None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.config = config or LLMConfig()
        if client is None:
            try:
                import openai
            except ImportError as e:  # pragma: no cover - depends on the installation
                raise ImportError("the llm agent needs the openai package: pip install 'cudagym[openai]'") from e
            client = openai.OpenAI(
                base_url=self.config.base_url,
                api_key=self.config.resolved_api_key(),
                max_retries=0,
                timeout=self.config.request_timeout,
            )
        self.client = client
        self._sleep = sleep
        self._jitter = random.Random(self.config.seed)
        self.messages: list[dict[str, Any]] = []
        self._pending: list[str] = []  # tool_call ids awaiting a result (native mode)
        self._turns = 0
        self._tokens = 0
        self._requests = 0
        self._retries = 0
        self._stop_reason = ""
        self._error = ""

    # -- Agent protocol ----------------------------------------------------------------------------

    def reset(self, task: Task, backend: str, observation: str) -> None:
        instructions, task_text = split_first_observation(observation)
        note = NATIVE_MODE_NOTE if self.config.tool_mode == "native" else TEXT_MODE_NOTE
        system = self.config.system_prompt if self.config.system_prompt is not None else instructions
        system = f"{system}\n\n{note}" if system else note
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": task_text}]
        self._pending = []
        self._turns = self._tokens = self._requests = self._retries = 0
        self._stop_reason = self._error = ""

    def act(self, observation: str) -> str | None:
        if self._stop_reason:
            return None
        if self._turns > 0:
            self._add_observation(observation)
        if self.config.max_turns is not None and self._turns >= self.config.max_turns:
            return self._stop(f"max_turns ({self.config.max_turns}) reached")
        budget = self.config.token_budget
        if budget is not None and self._tokens >= budget:
            return self._stop(f"token budget spent ({self._tokens} >= {budget} tokens)")
        response = self._complete()
        if response is None:
            return None
        self._turns += 1
        return self._take(response)

    def episode_stats(self) -> Mapping[str, Any]:
        """Tokens, requests and retries of the episode; ``stop_reason`` and ``error`` once it stopped."""
        stats: dict[str, Any] = {"tokens": self._tokens, "requests": self._requests, "retries": self._retries}
        if self._stop_reason:
            stats["stop_reason"] = self._stop_reason
        if self._error:
            stats["error"] = self._error
        return stats

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    # -- conversation ------------------------------------------------------------------------------

    def _stop(self, reason: str, error: str = "") -> None:
        self._stop_reason = reason
        self._error = error
        return None

    def _add_observation(self, observation: str) -> None:
        if self._pending:
            first, *rest = self._pending
            self.messages.append({"role": "tool", "tool_call_id": first, "content": observation})
            self.messages += [{"role": "tool", "tool_call_id": i, "content": SKIPPED_CALL} for i in rest]
            self._pending = []
        else:
            self.messages.append({"role": "user", "content": observation})

    def _request(self) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.config.model, "messages": self.messages}
        if self.config.tool_mode == "native":
            request["tools"] = tool_schemas("openai")
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            request["max_tokens"] = self.config.max_tokens
        if self.config.extra_body:
            request["extra_body"] = dict(self.config.extra_body)
        return request

    def _complete(self) -> Any | None:
        """One completion, with retries; None (and the agent stopped) when it cannot be had."""
        request = self._request()
        for attempt in range(self.config.max_retries + 1):
            self._requests += 1
            try:
                response = self.client.chat.completions.create(**request)
            except Exception as error:
                if attempt < self.config.max_retries and _retryable(error):
                    self._retries += 1
                    delay = min(self.config.backoff_max, self.config.backoff_initial * 2**attempt)
                    self._sleep(delay * (0.5 + 0.5 * self._jitter.random()))
                    continue
                tries = f" after {attempt + 1} attempts" if attempt else ""
                return self._stop("api_error", f"{_describe(error)}{tries}")
            usage = getattr(response, "usage", None)
            self._tokens += int(getattr(usage, "total_tokens", 0) or 0)
            if not getattr(response, "choices", None):
                return self._stop("api_error", "the endpoint returned no choices")
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _take(self, response: Any) -> str:
        """Adds the assistant message to the conversation and returns the action text."""
        message = response.choices[0].message
        content = message.content or ""
        calls = list(getattr(message, "tool_calls", None) or []) if self.config.tool_mode == "native" else []
        calls = [c for c in calls if getattr(c, "function", None) is not None]
        if not calls:
            self.messages.append({"role": "assistant", "content": content})
            return content
        entries = [
            {
                "id": call.id or f"call_{self._turns}_{i}",
                "type": "function",
                "function": {"name": call.function.name or "", "arguments": call.function.arguments or ""},
            }
            for i, call in enumerate(calls)
        ]
        self.messages.append({"role": "assistant", "content": content or None, "tool_calls": entries})
        self._pending = [entry["id"] for entry in entries]
        return json.dumps(entries[0])
