"""The static checks' entry points: run every rule on a solution's files, report findings and a message.

``check_files`` takes the agent's files (``model_new.py``, ``kernels/*``) by workspace path and returns
the violations; ``static_findings`` turns them into one :class:`~cudagym.results.IntegrityFinding` per
check (``static_<rule>``), passed or not; ``violation_message`` is the observation's text: the rule, the
file and line, and what the policy allows instead. Nothing here runs the agent's code or reads
anything but the files given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from cudagym.integrity.cpp_checks import check_cpp_sources
from cudagym.integrity.cpp_preprocess import CppSource
from cudagym.integrity.policy import RULES, IntegrityPolicy, Violation
from cudagym.integrity.python_checks import PythonChecker
from cudagym.results import IntegrityFinding

CHECK_PREFIX = "static_"
CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc", ".cxx")
_SHOWN = 3  # violations spelled out in a finding's detail or in the message


def _text(content: str | bytes) -> str:
    return content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content


def check_files(
    files: Mapping[str, str | bytes],
    policy: IntegrityPolicy | None = None,
    *,
    known_files: Iterable[str] = (),
) -> list[Violation]:
    """Every violation in ``files`` (workspace path -> content), sorted by file and line.

    ``model_new.py`` (any ``.py``) is checked as Python, ``.cu``/``.cuh``/``.cpp``/``.h`` files as C++, all
    the C++ together (with the sources model_new.py holds in strings): a macro or declaration of one source
    holds in the others. ``known_files`` lists the workspace's other paths (fixed files), so that includes
    of them resolve.
    """
    policy = policy or IntegrityPolicy()
    known = {*known_files, *files}
    found: list[Violation] = []
    cpp: list[CppSource] = []
    for path, content in files.items():
        suffix = PurePosixPath(path).suffix
        if suffix == ".py":
            checker = PythonChecker(_text(content), path, policy, known)
            found += checker.run()
            cpp += checker.cpp_sources
        elif suffix in CPP_SUFFIXES:
            cpp.append(CppSource(path, _text(content)))
    found += check_cpp_sources(cpp, policy, known_files=known)
    order = {path: i for i, path in enumerate(files)}
    unique = {(v.rule, v.path, v.line, v.what): v for v in found}
    rank = list(RULES)

    def key(v: Violation) -> tuple[bool, int, int, int]:  # a missing extension call is reported after its cause
        return (v.rule == "extension_called", order.get(v.path, len(order)), v.line, rank.index(v.rule))

    return sorted(unique.values(), key=key)


def static_findings(violations: list[Violation], policy: IntegrityPolicy | None = None) -> list[IntegrityFinding]:
    """One finding per static check, in :data:`RULES` order: passed, or the first violations it found."""
    policy = policy or IntegrityPolicy()
    findings = []
    for rule in RULES:
        if not policy.enabled(rule):
            findings.append(IntegrityFinding(CHECK_PREFIX + rule, True, "not run (disabled by the policy)"))
            continue
        broken = [v for v in violations if v.rule == rule]
        detail = "; ".join(str(v) for v in broken[:_SHOWN])
        if len(broken) > _SHOWN:
            detail += f"; and {len(broken) - _SHOWN} more"
        findings.append(IntegrityFinding(CHECK_PREFIX + rule, not broken, detail))
    return findings


def violation_message(violations: list[Violation], policy: IntegrityPolicy | None = None) -> str:
    """The agent's message for a solution that breaks rules: the first violation in full (rule, file,
    line, what, what is allowed instead), then the next few briefly."""
    policy = policy or IntegrityPolicy()
    first = violations[0]
    message = (
        f"Integrity rule static_{first.rule} broken at {first.path}:{first.line}: {first.what}. "
        f"The rule forbids {RULES[first.rule].forbids}. {policy.allowed_text(first.rule)}"
    )
    rest = violations[1:]
    if rest:
        listed = "; ".join(f"{v} [static_{v.rule}]" for v in rest[:_SHOWN])
        more = f"; and {len(rest) - _SHOWN} more" if len(rest) > _SHOWN else ""
        message += f" Also: {listed}{more}."
    return message


def run_static_checks(
    files: Mapping[str, str | bytes],
    policy: IntegrityPolicy | None = None,
    *,
    known_files: Iterable[str] = (),
) -> tuple[list[IntegrityFinding], list[Violation]]:
    """(one finding per check, the violations) for the agent's ``files``: what the evaluator runs before
    compiling anything."""
    policy = policy or IntegrityPolicy()
    violations = check_files(files, policy, known_files=known_files)
    return static_findings(violations, policy), violations
