"""The one codec of cudagym's dataclasses: results, tasks and configurations as JSON-ready builtins and back.

:func:`encode` is what a result's ``to_info()`` puts into ``info`` and what the evaluation service, the pool and the
Ray workers send between processes; :func:`decode` rebuilds the frozen dataclasses from it by their type hints. It
imports nothing of cudagym (the harness's children speak plain JSON of their own and need neither).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import types
import typing
from pathlib import Path
from typing import Any


def encode(value: Any) -> Any:
    """A dataclass tree as JSON-ready builtins: enums by value, tuples and mappings as lists and dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, collections.abc.Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(encode(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(tp: Any, data: Any) -> Any:
    """The inverse of :func:`encode` for a value of type ``tp`` (a dataclass, enum, tuple, ...)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if data is None or tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return decode(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in data)
        return tuple(decode(a, v) for a, v in zip(args, data, strict=True))
    if origin in (frozenset, set):
        return origin(decode(args[0], v) for v in data)
    if origin in (dict, collections.abc.Mapping):
        return {k: decode(args[1], v) for k, v in data.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: decode(hints[k], v) for k, v in data.items() if k in fields})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is Path:
        return Path(data)
    if tp is float and isinstance(data, int):
        return float(data)
    return data
