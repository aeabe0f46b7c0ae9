"""Cleaning text for observations: printable ASCII only, paths made relative, long text cut head+tail.

Gymnasium's ``Text`` space has a closed charset; compilers print Unicode quotes and colour codes. Every
string that reaches an observation goes through :func:`clean` so it always lies in the space.
"""

from __future__ import annotations

import re
import string

PRINTABLE = frozenset(string.printable)
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_TRANSLATE = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2026": "...",
        "\u00b5": "u",
        "\u03bc": "u",
        "\u00d7": "x",
        "\u2192": "->",
        "\u00a0": " ",
    }
)


def to_printable(text: str) -> str:
    """Maps common Unicode punctuation to ASCII and anything else outside ``string.printable`` to '?'."""
    text = _ANSI_RE.sub("", text).translate(_TRANSLATE)
    text = text.replace("\r\n", "\n")
    return "".join(c if c in PRINTABLE else "?" for c in text)


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
    """Printable ASCII, with ``replace_paths`` substituted (longest first) and cut to ``limit``."""
    for old, new in sorted((replace_paths or {}).items(), key=lambda kv: -len(kv[0])):
        if old:
            text = text.replace(old.rstrip("/") + "/", new).replace(old, new.rstrip("/") or ".")
    text = to_printable(text)
    return cut(text, limit) if limit is not None else text
