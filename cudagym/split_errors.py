"""Whether the errors of a split file's failed device unit are the file's own (``cudagym.kernel_split``).

A single-file solution's ``cuda.cu`` is compiled as a device unit without torch's headers and a host unit
(``cudagym.inline_build``). Where the device unit fails, the file as written may still compile (a name torch's
headers declare), so the whole file is compiled next, which takes tens of seconds; but an agent's broken edit is
mostly a typo or a name it never declared, which the whole file would only report again. This module tells those
apart, from the device unit's diagnostics alone: its errors stand, told in the file's name, where every one is

* a typo of :data:`_TYPO_RE`'s kinds, which no declaration elsewhere makes right, or
* ``identifier "X" is undefined`` where X is not a word of the file's directives as the file as written
  preprocesses them (torch's headers, which the split left out, and the file's own headers, which may declare more
  where torch's macros are defined; declarations and macros alike, as nvcc's device pass reads them:
  :func:`torch_words`) nor of the host unit (a host variable a kernel names is an error as written too, but another
  one),

on a line of the file's own text (left of a launcher inserted in it), and there is one at least. Anything else (a
name torch could declare, a header's error, a fault of a later stage, a shape not known) gives None: the file is
compiled whole, as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cudagym.kernel_split import LAUNCHER_DEFINITION_RE, TORCH_INCLUDE_RE, mask
from cudagym.light_headers import IDENTIFIER_RE

# nvcc's front end: "<file>(<line>): error: <what>", then the line (as preprocessed) and a caret under the place
_FRONT_END_ERROR_RE = re.compile(r"^(?P<file>\S.*)\((?P<line>\d+)\): error: (?P<what>.*)$")
_NOT_AN_ERROR_RE = re.compile(r"^(\S.*\(\d+\): (warning|remark)\b|\S.*:\d+:\d+: (warning|note)\b|Remark: )")
_ERROR_COUNT_RE = re.compile(r"^\d+ errors? detected in the compilation of ")
# errors of the text at hand, which no declaration elsewhere makes right (a name torch's headers would have declared
# shows as "identifier ... is undefined", or in a declaration as a missing type, never as one of these alone)
_TYPO_RE = re.compile(
    r"^(expected an? |unrecognized token|missing closing quote|too (few|many) arguments in function call"
    r'|a value of type ".*" cannot be (used to initialize|assigned to) an entity of type'
    r"|expression must be a modifiable lvalue|return value type does not match the function type)"
)
_UNDEFINED_RE = re.compile(r'^identifier "(?P<name>[A-Za-z_][A-Za-z0-9_]*)" is undefined$')


def directives(source: str) -> str:
    """The preprocessor's view of ``source`` where it includes torch's headers, which its device unit leaves out:
    its directives (conditions kept, so an include under ``#if __has_include(...)`` stays as guarded), the rest
    blank; "" where it includes none of them."""
    if not any(TORCH_INCLUDE_RE.match(line) for line in source.splitlines()):
        return ""
    kept, going_on = [], False
    for line, masked in zip(source.splitlines(), mask(source).splitlines(), strict=True):
        directive = going_on or masked.lstrip().startswith("#")
        kept.append(line if directive else "")
        going_on = directive and line.endswith("\\")
    return "\n".join(kept) + "\n"


def torch_words(preprocessed: str) -> frozenset[str]:
    """Every word of the preprocessor's output (``-dD``: macro definitions kept) of :func:`directives`: whatever
    the headers left out of the device unit could declare or define is among them."""
    return frozenset(IDENTIFIER_RE.findall(preprocessed))


def errors_of_the_file(
    diagnostics: str,
    name: str,
    *,
    device: str,
    host: str,
    source: str,
    torch_names: Callable[[], frozenset[str] | None],
) -> str | None:
    """``diagnostics`` of the failed compile of the device unit ``split/<name>`` (text ``device``, its host unit
    ``host``) of ``source`` told as the file as written would tell them (its name, no launcher), where they are the
    file's own (this module's rules); else None. ``torch_names`` gives :func:`torch_words` of the left-out includes
    (None where they could not be read), asked only where a name is undefined."""
    lines = diagnostics.splitlines()
    device_lines, source_lines = device.splitlines(), source.splitlines()
    undefined: set[str] = set()
    found = False
    for i, line in enumerate(lines):
        if not line or line[0].isspace() or "error" not in line.lower():
            continue
        if _NOT_AN_ERROR_RE.match(line) or _ERROR_COUNT_RE.match(line):
            continue
        hit = _FRONT_END_ERROR_RE.match(line)
        if hit is None or hit["file"] != f"split/{name}":
            return None
        if missing := _UNDEFINED_RE.match(hit["what"]):
            undefined.add(missing["name"])
        elif not _TYPO_RE.match(hit["what"]):
            return None
        number = int(hit["line"])
        if not 0 < number <= min(len(device_lines), len(source_lines)):
            return None
        mine, theirs = device_lines[number - 1], source_lines[number - 1]
        if mine != theirs:
            # the line where a kernel ends, its launcher inserted after it: the caret must point left of the launcher,
            # which leaves the line shown under the error
            inserted = LAUNCHER_DEFINITION_RE.search(mine)
            if inserted is None or mine[: inserted.start()] + mine[inserted.end() :] != theirs or i + 2 >= len(lines):
                return None
            context, caret = lines[i + 1], lines[i + 2]
            shown = LAUNCHER_DEFINITION_RE.search(context)
            if shown is None or not 0 <= caret.find("^") < shown.start():
                return None
            lines[i + 1] = context[: shown.start()] + context[shown.end() :]
        lines[i] = line.replace(f"split/{name}", name)
        found = True
    if not found:
        return None
    if undefined:
        if undefined & set(IDENTIFIER_RE.findall(mask(host))):
            return None
        words = torch_names()
        if words is None or undefined & words:
            return None
    told = "\n".join(lines).replace(f'compilation of "split/{name}"', f'compilation of "{name}"')
    return told + ("\n" if diagnostics.endswith("\n") else "")
