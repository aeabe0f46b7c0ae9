"""``ChatMessages``: the environment as a chat conversation, for LLM agents with native function calling.

The wrapped environment speaks one tool call per step as text. This wrapper speaks chat messages:

* **observation**: the whole conversation so far, a tuple of messages, growing by one assistant message and
  its results at every step. It starts with a ``system`` message (the task instructions, generated from the
  tool models like the tool schemas) and a ``user`` message (the reference ``model.py``). A native tool call
  is answered by a ``tool`` message carrying its ``tool_call_id``; a call written in the text (JSON or
  ``<tool_call>`` tags, no native ``tool_calls``) is answered by a ``user`` message.
* **action**: one assistant message, OpenAI style: a dict with ``content`` (text, may be empty or None)
  and/or ``tool_calls`` (a list of ``{"id", "type": "function", "function": {"name", "arguments"}}``,
  ``arguments`` a JSON string or an object). A plain string counts as the content, and an object with
  ``model_dump()`` (the OpenAI SDK's ``ChatCompletionMessage``) is dumped first. Every native call is
  executed in order, one turn of the wrapped environment each; calls after the one that ended the episode
  are answered with "not executed". With no native call, the content is parsed for a call.
* **reward**: the sum of the rewards of the calls the action made; ``terminated``/``truncated``: those of
  the call that ended the episode.
* **info**: the wrapped environment's info for the last executed call, plus ``info["calls"]``: one entry per
  executed call (``{"id", "reward", "info"}``). At reset, ``info["tools"]`` holds the OpenAI tool schemas.

Observation space. A list of dicts is not a Gymnasium space, so the conversation is a
``Sequence(Dict(...), stack=False)`` (a *tuple* of dicts), and every message has the same keys (a ``Dict``
space needs exactly its keys): ``role``, ``content``, ``tool_calls`` (a tuple of call dicts, empty when
none) and ``tool_call_id`` ("" when none). All text is printable ASCII (the spaces' charset, as in the
wrapped environment): the agent's own text is recorded cleaned (unusual characters become ``?``), while
the environment executes exactly what was sent. :func:`to_openai` turns an observation into the list an
OpenAI-compatible server accepts (empty fields dropped, ``content`` None next to tool calls); :func:`to_hf` into
the list Hugging Face chat templates accept (arguments as objects or JSON text, no None content). Tool output
longer than ``max_tool_chars`` keeps its head and tail (``max_tool_chars`` is the analogue of verl's
``max_tool_response_length``).

This layout passes ``gymnasium.utils.env_checker.check_env`` and works in vector environments (with
``shared_memory=False``, as any Text observation needs).
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import gymnasium as gym
from gymnasium import spaces

from cudagym.instructions import render_instructions
from cudagym.text import clean, cut
from cudagym.tools import tool_schemas

CHARSET = string.printable
ROLES = ("system", "user", "assistant", "tool")
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 128
NOT_EXECUTED = "Not executed: the episode ended at an earlier call of this message."

Message = dict[str, Any]


def tool_call_space(max_arguments_chars: int) -> spaces.Dict:
    """The space of one OpenAI ``tool_calls`` entry (``arguments`` is the JSON text of the arguments)."""
    return spaces.Dict(
        {
            "id": spaces.Text(max_length=MAX_ID_CHARS, min_length=0, charset=CHARSET),
            "type": spaces.Text(max_length=16, min_length=0, charset=string.ascii_lowercase),
            "function": spaces.Dict(
                {
                    "name": spaces.Text(max_length=MAX_NAME_CHARS, min_length=0, charset=CHARSET),
                    "arguments": spaces.Text(max_length=max_arguments_chars, min_length=0, charset=CHARSET),
                }
            ),
        }
    )


def message_space(max_content_chars: int) -> spaces.Dict:
    """The space of one chat message as this wrapper writes it (see the module doc)."""
    return spaces.Dict(
        {
            "role": spaces.Text(max_length=9, min_length=0, charset=string.ascii_lowercase),
            "content": spaces.Text(max_length=max_content_chars, min_length=0, charset=CHARSET),
            "tool_calls": spaces.Sequence(tool_call_space(max_content_chars), stack=False),
            "tool_call_id": spaces.Text(max_length=MAX_ID_CHARS, min_length=0, charset=CHARSET),
        }
    )


def to_openai(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """An observation as the ``messages`` list of an OpenAI-compatible chat request.

    Empty ``tool_calls`` and ``tool_call_id`` fields are dropped, tuples become lists, and an assistant
    message with tool calls and no text gets ``content`` None.
    """
    out = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message.get("content", "")}
        calls = message.get("tool_calls") or ()
        if calls:
            item["tool_calls"] = [
                {"id": c["id"], "type": c.get("type") or "function", "function": dict(c["function"])} for c in calls
            ]
            if not item["content"]:
                item["content"] = None
        if message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        out.append(item)
    return out


ArgumentsForm = Literal["object", "string"]


def to_hf(
    messages: Sequence[Mapping[str, Any]], *, arguments: ArgumentsForm = "object", null_content: str = ""
) -> list[dict[str, Any]]:
    """Messages as Hugging Face chat templates take them: ``tokenizer.apply_chat_template(to_hf(obs),
    tools=tool_schemas("openai"))``, the path TRL, verl and SkyRL render conversations through.

    Chat templates read tool calls in two ways, and no one form of the arguments suits both:

    * ``arguments="object"`` (the default): each call's ``arguments`` as a dict. Templates that iterate them
      (``tool_call.arguments.items()``: Qwen3.5 and later, GLM-4-MoE, the latest Gemma 4 revision, Nemotron 3, LFM2
      and others) fail on a JSON string, and most of the rest write a dict out with ``tojson``.
    * ``arguments="string"``: the arguments as JSON text, for templates that join them to other text
      (DeepSeek-V3's ``'...' + tool['function']['arguments'] + '...'`` fails on a dict).

    A missing ``content`` (None, as ``to_openai`` writes it next to tool calls, or empty next to tool calls, as an
    observation holds it) becomes ``null_content``: templates that join the content to other text (DeepSeek-V3's
    ``message['content'] + ...``) fail on None. Empty ``tool_calls`` and ``tool_call_id`` fields are left out and
    tuples become lists; ``to_hf(obs)`` and ``to_hf(to_openai(obs))`` are the same.

    Args:
        messages: a :class:`ChatMessages` observation, or messages in OpenAI's form (``to_openai``'s output, the
            ``messages`` of a ``cudagym rft-export`` line); content given as a list of text parts is joined.
        arguments: "object" or "string" (above).
        null_content: the text that stands for a None ``content``.

    Returns:
        New message dicts: ``role``, ``content`` (text), and where present ``tool_calls``
        (``{"id", "type": "function", "function": {"name", "arguments"}}``) and ``tool_call_id``.

    Raises:
        ValueError: ``arguments`` is neither form, or with "object" a call's arguments are not a JSON object (an
            agent's malformed call; "string" keeps its text as it is).
    """
    if arguments not in ("object", "string"):
        raise ValueError(f"arguments must be 'object' or 'string', got {arguments!r}")
    out = []
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") or ()
        content = _content_text(message.get("content"))
        missing = message.get("content") is None or (calls and not content)  # None, or "" as an observation has it
        item: dict[str, Any] = {"role": message["role"], "content": null_content if missing else content}
        if calls:
            item["tool_calls"] = [_hf_call(call, arguments, f"message {index}") for call in calls]
        if message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        out.append(item)
    return out


def _hf_call(call: Mapping[str, Any], form: ArgumentsForm, where: str) -> dict[str, Any]:
    """One ``tool_calls`` entry with its arguments in ``form`` (see :func:`to_hf`)."""
    function = call.get("function") or {}
    name, raw = function.get("name", ""), function.get("arguments")
    if form == "string":
        text = raw if isinstance(raw, str) else json.dumps({} if raw is None else raw)
        return {"id": call.get("id", ""), "type": "function", "function": {"name": name, "arguments": text}}
    if isinstance(raw, Mapping):
        value: Any = dict(raw)
    elif raw is None or (isinstance(raw, str) and not raw.strip()):
        value = {}
    else:
        try:
            value = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, dict):
        raise ValueError(
            f"{where}, call {call.get('id', '')!r} ({name}): the arguments {str(raw)[:80]!r} are not a JSON object, "
            "which arguments='object' needs; arguments='string' keeps them as the text they are"
        )
    return {"id": call.get("id", ""), "type": "function", "function": {"name": name, "arguments": value}}


def _message(role: str, content: str, *, tool_calls: tuple[dict, ...] = (), tool_call_id: str = "") -> Message:
    return {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": tool_call_id}


def _copy_message(message: Message) -> Message:
    calls = tuple({**c, "function": dict(c["function"])} for c in message["tool_calls"])
    return {**message, "tool_calls": calls}


def _as_dict(action: Any) -> Any:
    dump = getattr(action, "model_dump", None)
    if callable(dump) and not isinstance(action, Mapping):
        return dump(exclude_none=True)
    return action


def _content_text(content: Any) -> str:
    """Message content as text: a string, None, or a list of OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            part = _as_dict(part)
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


class ChatMessages(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Observations as a growing chat conversation and actions as assistant messages (see the module doc).

    Args:
        env: a ``CudaKernel-v0`` environment (made with ``gym.make`` or a ``CudaKernelEnv``).
        max_tool_chars: tool and environment messages longer than this keep their head and tail.
        max_content_chars: the longest text of any message (the space's bound); default: the larger of the
            wrapped environment's observation and action lengths.
    """

    def __init__(self, env: gym.Env, *, max_tool_chars: int = 16000, max_content_chars: int | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, max_tool_chars=max_tool_chars, max_content_chars=max_content_chars
        )
        gym.Wrapper.__init__(self, env)
        if max_tool_chars < 1:
            raise ValueError(f"max_tool_chars must be >= 1, got {max_tool_chars}")
        if max_content_chars is None:
            lengths = [getattr(space, "max_length", 0) for space in (env.observation_space, env.action_space)]
            max_content_chars = max(lengths) or 262144
        self.max_tool_chars = max_tool_chars
        self.max_content_chars = max_content_chars
        self.observation_space = spaces.Sequence(message_space(max_content_chars), stack=False)
        self.action_space = spaces.Dict(
            {
                "content": spaces.Text(max_length=max_content_chars, min_length=0, charset=CHARSET),
                "tool_calls": spaces.Sequence(tool_call_space(max_content_chars), stack=False),
            }
        )
        self._messages: list[Message] = []
        self._turn = 0

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling schemas of the tools (pass them as ``tools=``)."""
        return tool_schemas("openai")

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation so far (the latest observation), as new objects: callers may keep or modify them."""
        return tuple(_copy_message(m) for m in self._messages)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[Message, ...], dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        base = self.env.unwrapped
        task, backend = base.task, base.backend
        system = render_instructions(task, backend, max_turns=base.max_turns)
        user = f"## model.py\n{task.source_for(backend.name)}"
        self._messages = [
            _message("system", clean(system, self.max_content_chars)),
            _message("user", clean(user, self.max_content_chars)),
        ]
        self._turn = 0
        info = dict(info)
        info["tools"] = self.tools
        return self.messages, info

    def step(self, action: Any) -> tuple[tuple[Message, ...], float, bool, bool, dict[str, Any]]:
        self._turn += 1
        content, calls = self._split(action)
        recorded = tuple(self._record_call(call) for call in calls)
        self._messages.append(_message("assistant", clean(content, self.max_content_chars), tool_calls=recorded))
        total = 0.0
        terminated = truncated = False
        info: dict[str, Any] = {}
        executed: list[dict[str, Any]] = []
        if not calls:
            obs, reward, terminated, truncated, info = self.env.step(content)
            total += float(reward)
            executed.append({"id": "", "reward": float(reward), "info": info})
            self._messages.append(_message("user", self._cut(obs)))
        for call, record in zip(calls, recorded, strict=True):
            if terminated or truncated:
                self._messages.append(_message("tool", NOT_EXECUTED, tool_call_id=record["id"]))
                continue
            text = json.dumps({"type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}})
            obs, reward, terminated, truncated, info = self.env.step(text)
            total += float(reward)
            executed.append({"id": record["id"], "reward": float(reward), "info": info})
            self._messages.append(_message("tool", self._cut(obs), tool_call_id=record["id"]))
        info = dict(info)
        info["calls"] = executed
        return self.messages, total, bool(terminated), bool(truncated), info

    # -- helpers -----------------------------------------------------------------------------------

    def _cut(self, text: str) -> str:
        return cut(clean(str(text)), self.max_tool_chars)

    def _split(self, action: Any) -> tuple[str, list[dict[str, Any]]]:
        """The action's text and its native calls, each as ``{"id", "name", "arguments"}`` (raw values)."""
        action = _as_dict(action)
        if isinstance(action, str):
            return action, []
        if not isinstance(action, Mapping):
            return ("" if action is None else str(action)), []
        content = _content_text(action.get("content"))
        raw_calls = action.get("tool_calls") or ()
        if isinstance(raw_calls, (str, bytes)) or not isinstance(raw_calls, Sequence):
            raw_calls = (raw_calls,)
        calls = []
        for index, entry in enumerate(raw_calls):
            entry = _as_dict(entry)
            entry = entry if isinstance(entry, Mapping) else {}
            function = _as_dict(entry.get("function"))
            function = function if isinstance(function, Mapping) else entry  # flat {"name", "arguments"} too
            arguments = function.get("arguments", {})
            if not isinstance(arguments, str):
                try:
                    arguments = json.dumps(arguments)
                except (TypeError, ValueError):
                    arguments = str(arguments)
            call_id = entry.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = f"call_{self._turn}_{index}"
            name = function.get("name")
            calls.append({"id": call_id, "name": name if isinstance(name, str) else "", "arguments": arguments})
        return content, calls

    def _record_call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """A call as it is stored in the observation (printable text within the space's bounds)."""
        return {
            "id": clean(call["id"], MAX_ID_CHARS),
            "type": "function",
            "function": {
                "name": clean(call["name"], MAX_NAME_CHARS),
                "arguments": clean(call["arguments"], self.max_content_chars),
            },
        }
