"""The exception hierarchy of cudagym: every exception the library defines derives from :class:`CudaGymError`.

Tool calls never raise these at the agent: their failures are results. These are for the people using the library
(bad configuration, a missing toolchain, a service out of reach). Most also keep the builtin base callers catch
(``ConfigError`` is a ``ValueError``, ``HarnessError`` a ``RuntimeError``, ``TaskSetNotFound`` a ``KeyError``, ...),
so ``except CudaGymError`` catches the library's own errors and the builtin ``except`` clauses catch them as before.

The harness (``cudagym/harness``) runs in child processes without the package: its few exceptions stay inside those
processes and come back as results, so they are not part of this hierarchy.
"""

from __future__ import annotations


class CudaGymError(Exception):
    """Root of cudagym's exceptions."""


class BackendUnavailable(CudaGymError):
    """The requested backend cannot run here (no GPU, no nvcc, no torch); the message says what is missing."""


class ConfigError(CudaGymError, ValueError):
    """An environment or evaluator option has an invalid value."""


class HarnessError(CudaGymError, RuntimeError):
    """The evaluation machinery itself failed (not the agent's code): the base of the fork server's and the
    evaluation service's errors."""
