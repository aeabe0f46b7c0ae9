"""Compiler and linker output made short for the agent: the first error with its context, and a count of the rest.

A compiler reports every error it finds, and most after the first follow from it: a missing ``;`` or an undeclared
name gives a screen of errors, each with notes ("candidate: ...", "suggested alternative: ..."), template instantiation
chains and, for a binding that includes torch, paths deep inside the installation. What the agent can act on is the
first error: its location and message, the source excerpt under it, and the context before it (the ``#include`` chain
that led to the file, the function or instantiation it is in). :func:`condense` keeps that and one line counting what
it left out; :func:`first_error_location` gives the place to name in the advice.

Understood: GCC's and Clang's ``file:line:col: error: ...`` form, nvcc's front end (``file(line): error: ...``), ptxas,
nvlink and the linker (``undefined reference to``). Output in no form it knows is kept as it is, repeats collapsed.
"""

from __future__ import annotations

import dataclasses
import re

from cudagym.fault_text import collapse_repeats, hide_install_paths
from cudagym.text import cut

_GCC_RE = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(?::\d+)?: (?P<kind>fatal error|error|warning|note): (?P<message>.*)$"
)
_NVCC_RE = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning|remark|note)"
    r"(?: #[\w-]+)?: (?P<message>.*)$"
)
# errors of the other tools in a build: ptxas, nvlink, the linker (whose lines name no source line)
_TOOL_ERROR_RE = re.compile(
    r"^(?:ptxas (?:fatal|error)\s*:|nvlink (?:fatal|error)\s*:"
    r"|.*\bundefined reference to\b|.*\bmultiple definition of\b)"
)
# what a diagnostic comes after: the include chain, the function or instantiation it is in, the linker's function
_CONTEXT_RE = re.compile(
    r"^(?:In file included from |\s+from \S+:\d+|.*: (?:In (?:member |static member )?function|In instantiation of"
    r"|In constructor|In destructor|In lambda function|In substitution of|At global scope|In static member function)"
    r"|.*:\d+:\d+:\s+required (?:from|by) |.*: in function [`'])"
)
# the compiler's closing lines: a count it gave itself, or the build tool's verdict
_SUMMARY_RE = re.compile(
    r"^(?:\d+ errors? detected in the compilation of|compilation terminated\.|collect2: error: ld returned"
    r"|ninja: build stopped|make(?:\[\d+\])?: \*\*\*|Error limit reached|Remark: The warnings can be suppressed)"
)
MAX_CONTEXT_LINES = 8  # of an include chain or an instantiation chain: its first and last lines beyond that
MAX_EXCERPT_LINES = 8  # source and caret lines under a diagnostic


@dataclasses.dataclass
class Diagnostic:
    """One diagnostic of a compiler's output: what came before it, its own line and the lines under it."""

    kind: str  # "error", "warning" or "note"
    file: str
    line: str  # the diagnostic's own line
    context: list[str] = dataclasses.field(default_factory=list)
    excerpt: list[str] = dataclasses.field(default_factory=list)

    @property
    def location(self) -> str:
        match = _GCC_RE.match(self.line) or _NVCC_RE.match(self.line)
        return f"{match.group('file')}:{match.group('line')}" if match else ""


def _kind(word: str) -> str:
    if word in ("fatal error", "catastrophic error", "error"):
        return "error"
    return "warning" if word == "warning" else "note"


def parse(text: str) -> list[Diagnostic]:
    """The diagnostics of a compiler's or linker's output, in order."""
    found: list[Diagnostic] = []
    context: list[str] = []
    current: Diagnostic | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if _SUMMARY_RE.match(line.strip()):
            current = None
            continue
        match = _GCC_RE.match(line) or _NVCC_RE.match(line)
        if match is not None:
            current = Diagnostic(_kind(match.group("kind")), match.group("file"), line, context)
        elif _TOOL_ERROR_RE.match(line):
            current = Diagnostic("error", "", line, context)
        elif _CONTEXT_RE.match(line):
            context.append(line)
            current = None
            continue
        elif current is not None and line.startswith((" ", "\t")):
            current.excerpt.append(line)
            continue
        else:  # a blank line, a command echoed by the build tool, anything else: the end of a diagnostic
            current = None
            continue
        found.append(current)
        context = []
    return found


def _bounded(lines: list[str], limit: int, what: str) -> list[str]:
    if len(lines) <= limit:
        return lines
    head = limit // 2
    tail = limit - head
    return [*lines[:head], f"  [... {len(lines) - limit} more {what} ...]", *lines[-tail:]]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def condense(text: str, limit: int = 4000) -> str:
    """``text`` (a compiler's or linker's output) as its first error with its context and excerpt, then a line saying
    how many more errors, warnings and notes it held; without errors, the first warning so. At most ``limit``
    characters."""
    diagnostics = parse(text)
    errors = [d for d in diagnostics if d.kind == "error"]
    warnings = list({d.line: d for d in diagnostics if d.kind == "warning"}.values())
    notes = sum(1 for d in diagnostics if d.kind == "note")
    shown = errors[0] if errors else warnings[0] if warnings else None
    if shown is None:
        return cut("\n".join(collapse_repeats(hide_install_paths(text).splitlines())).strip(), limit)
    lines = [
        *_bounded(shown.context, MAX_CONTEXT_LINES, "lines of context"),
        shown.line,
        *_bounded(shown.excerpt, MAX_EXCERPT_LINES, "lines"),
    ]
    left_out: list[str] = []
    # each error once: a compiler repeats one for every candidate it tried and every instantiation it is in
    more_errors = list({d.line: d for d in errors if d.line != shown.line}.values())
    if more_errors:
        files = sorted({d.file for d in more_errors if d.file})
        where = f" (in {', '.join(files[:4])}{', ...' if len(files) > 4 else ''})" if files else ""
        left_out.append(_count(len(more_errors), "more error") + where)
    more_warnings = len(warnings) - (0 if errors else 1)
    if more_warnings:
        left_out.append(_count(more_warnings, "warning" if errors else "more warning"))
    if notes:
        left_out.append(_count(notes, "note"))
    if left_out:
        advice = ": fix this one first, later errors often follow from it" if more_errors else ""
        lines.append(f"[{', '.join(left_out)} not shown{advice}]")
    return cut(hide_install_paths("\n".join(lines)), limit)


def first_error_location(text: str) -> str:
    """``file:line`` of the first error in a compiler's output, "" when it names none."""
    return next((d.location for d in parse(text) if d.kind == "error" and d.location), "")


def has_diagnostics(text: str) -> bool:
    """Whether ``text`` holds a diagnostic in a form :func:`parse` knows."""
    return bool(parse(text))
