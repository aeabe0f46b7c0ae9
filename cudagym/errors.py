"""The exception hierarchy of cudagym. Tool calls never raise these at the agent: their failures are
results. These are for the people using the library (bad configuration, a missing toolchain)."""

from __future__ import annotations


class Error(Exception):
    """Root of cudagym's exceptions."""


class BackendUnavailable(Error):
    """The requested backend cannot run here (no GPU, no nvcc, no torch); the message says what is missing."""


class ConfigError(Error, ValueError):
    """An environment or evaluator option has an invalid value."""


class HarnessError(Error):
    """The evaluation machinery itself failed (not the agent's code)."""
