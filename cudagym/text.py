"""Text for observations: printable ASCII only, paths made relative, long text cut head+tail.

Gymnasium's ``Text`` space has a closed charset (``string.printable``). Every string that reaches an
observation goes through :func:`clean` so it always lies in the space, and it is made printable in one way
only, :func:`to_printable`: each character the space cannot hold is written as a Python/JSON-style escape
(``\\u00e9`` for e-acute, ``\\U0001f600`` beyond the BMP, ``\\u001b`` for ESC) and everything else is kept as
it is. The escapes are reversible: :func:`unescape` turns them back into the characters, and
:func:`find_shown` finds text as an observation showed it inside the original, which is how ``edit_file``
matches an ``old_string`` copied from a ``read_file`` observation.
"""

from __future__ import annotations

import bisect
import re
import string

PRINTABLE = frozenset(string.printable)
# an escape ``to_printable`` writes; only those of characters outside the charset are ever written
_ESCAPE_RE = re.compile(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")


def escape(char: str) -> str:
    """How one character outside ``string.printable`` is shown: ``\\uXXXX``, or ``\\UXXXXXXXX`` beyond the BMP."""
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def to_printable(text: str) -> str:
    """``text`` with every character outside ``string.printable`` written as its escape (see :func:`escape`)."""
    if PRINTABLE.issuperset(text):
        return text
    return "".join(c if c in PRINTABLE else escape(c) for c in text)


def unescape(text: str) -> str:
    """The inverse of :func:`to_printable`: the escapes of characters outside ``string.printable`` become those
    characters again. An escape of a printable character (``\\u0041``) is never written by ``to_printable`` and is
    left as it is, and so is an escape of a lone surrogate, which no file holds."""

    def replace(match: re.Match[str]) -> str:
        code = int(match.group(1) or match.group(2), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return match.group(0)
        char = chr(code)
        return match.group(0) if char in PRINTABLE else char

    return _ESCAPE_RE.sub(replace, text)


def find_shown(text: str, shown: str) -> list[tuple[int, int]]:
    """Where ``shown``, written as :func:`to_printable` shows ``text``, occurs in ``text``: the (start, end) spans
    of ``text`` whose printable form is ``shown``, non-overlapping, left to right. An occurrence that begins or
    ends inside one character's escape is not a match."""
    if not shown:
        return []
    starts: list[int] = []  # where each character of ``text`` begins in the printable form
    position = 0
    for char in text:
        starts.append(position)
        position += 1 if char in PRINTABLE else len(escape(char))
    starts.append(position)
    view = to_printable(text)
    spans: list[tuple[int, int]] = []
    at = view.find(shown)
    while at >= 0:
        first = bisect.bisect_left(starts, at)
        last = bisect.bisect_left(starts, at + len(shown))
        if starts[first] == at and last < len(starts) and starts[last] == at + len(shown):
            spans.append((first, last))
            at = view.find(shown, at + len(shown))
        else:
            at = view.find(shown, at + 1)
    return spans


def cut(text: str, limit: int, *, head_share: float = 0.5) -> str:
    """Keeps the head and the tail of ``text`` within ``limit`` characters, marking what was left out."""
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    marker = "\n[... {n} characters omitted ...]\n"
    room = max(limit - len(marker.format(n=len(text))), 0)
    head = int(room * head_share)
    tail = room - head
    omitted = len(text) - head - tail
    result = text[:head] + marker.format(n=omitted) + (text[-tail:] if tail else "")
    return result[:limit]


def clean(text: str, limit: int | None = None, *, replace_paths: dict[str, str] | None = None) -> str:
    """Printable ASCII (:func:`to_printable`), with ``replace_paths`` substituted (longest first) and cut to
    ``limit``."""
    for old, new in sorted((replace_paths or {}).items(), key=lambda kv: -len(kv[0])):
        if old:
            text = text.replace(old.rstrip("/") + "/", new).replace(old, new.rstrip("/") or ".")
    text = to_printable(text)
    return cut(text, limit) if limit is not None else text
