"""What a single-file solution's ``load_inline``/``load`` call asks to be built, as plain data.

A candidate never builds its own extension: its ``load_inline``/``load`` calls are replaced
(``inline_loader.py``) by a request that names everything the build depends on: the call's sources (the text of
``load``'s files), its functions and its flags. The trusted builder (``cudagym.inline_build``) builds each request
with cudagym's own cached builder and keys the result by :func:`request_key`, so that what a call gets depends only
on what it asked for. This module is pure (no torch, no harness imports): the candidate and the trusted side use the
same functions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

LOADERS = ("load_inline", "load")
STRING_LISTS = ("cpp_sources", "cuda_sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags")
FLAG_LISTS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
MAX_REQUEST_CHARS = 4 * 1024 * 1024  # sources and flags of one call, together


def string_list(value: Any, what: str) -> list[str]:
    """``value`` (None, a string or a sequence of strings) as a list of strings, as torch's loaders take them."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{what} must be a string or a list of strings, not {type(value).__name__}")


def function_list(functions: Any) -> list[list[str]] | None:
    """``load_inline``'s ``functions`` (a name, a list of names or a dict name -> docstring) as [[name, doc], ...]."""
    if functions is None:
        return None
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, (list, tuple)):
        functions = {f: f for f in functions}
    if not isinstance(functions, dict) or not all(isinstance(k, str) for k in functions):
        raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(functions)}")
    return [[name, str(doc)] for name, doc in functions.items()]


def request_key(request: dict[str, Any]) -> str:
    """The content key of a request: equal requests (same sources, functions and flags) have equal keys."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]
