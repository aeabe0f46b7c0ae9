"""Bundled agents."""

from cudagym.baselines.scripted import EpisodeLog, ScriptedAgent, play, solution_files, tool_call

__all__ = ["EpisodeLog", "ScriptedAgent", "play", "solution_files", "tool_call"]
