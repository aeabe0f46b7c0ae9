"""Python source parsed into an AST from many threads at once.

CPython keeps the depth counter of its AST construction (``ast2obj``) in state its threads share: a thread switch
inside a parse (a garbage collection running a finaliser, say) lets another thread's parse move the counter, and one
of them fails with ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905; seen here with 16
environments on one evaluation pool). Every parse of the library that can run beside another goes through
:func:`parse`, one at a time per process (the command line's literal reads of its arguments need not); a parse takes
milliseconds and a workspace's files are bounded in size.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never beside another thread's parse; raises what ``ast.parse`` raises."""
    with _LOCK:
        return ast.parse(source, filename)
