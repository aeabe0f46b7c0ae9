"""Wrappers: the chat-message view of the environment and group-relative rewards."""

from __future__ import annotations

from cudagym.wrappers.chat import ChatMessages, message_space, to_hf, to_openai, tool_call_space
from cudagym.wrappers.group import GroupRelativeReward

__all__ = ["ChatMessages", "GroupRelativeReward", "message_space", "to_hf", "to_openai", "tool_call_space"]
