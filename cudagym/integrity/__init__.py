"""Integrity: the policy of what a solution may do, and the static checks that enforce it before any build.

``IntegrityPolicy()`` is CUDA Agent's rules; ``IntegrityPolicy.permissive()`` relaxes them for research.
``run_static_checks(files, policy)`` returns one ``IntegrityFinding`` per check and the violations found
in ``model_new.py`` (Python ``ast``) and ``kernels/*`` (C++ after its translation phases: splices joined,
macros expanded, comments dropped, string literals decoded and joined; then a lexer and the name rules).
"""

from __future__ import annotations

from cudagym.integrity.policy import RULES, IntegrityPolicy, Rule, Violation
from cudagym.integrity.static_checks import (
    CHECK_PREFIX,
    check_files,
    run_static_checks,
    static_findings,
    violation_message,
)

__all__ = [
    "CHECK_PREFIX",
    "RULES",
    "IntegrityPolicy",
    "Rule",
    "Violation",
    "check_files",
    "run_static_checks",
    "static_findings",
    "violation_message",
]
