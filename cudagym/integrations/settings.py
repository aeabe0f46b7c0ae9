"""What the trainer plugs share: environment settings read from a library's config, and an episode's figures.

Trainer libraries configure environments from YAML or Hydra files, which hold plain values only. ``env_kwargs``
turns such a mapping into ``CudaKernelEnv``'s keyword arguments: ``eval_config`` and ``workspace_limits`` may be
given as nested mappings (``{"num_checks": 3, "timing": {"min_reps": 5}}``) and become the dataclasses; a key the
dataclass does not have raises TypeError naming the valid ones. Everything else passes through unchanged.

``episode_metrics`` is what a trainer logs per episode: the turns taken and, after a submit, the tier, whether the
solution compiled and was correct, and the speedups that were measured.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from cudagym.evaluator import EvalConfig
from cudagym.workspace import WorkspaceLimits

DATACLASS_OPTIONS: dict[str, type] = {"eval_config": EvalConfig, "workspace_limits": WorkspaceLimits}
"""``CudaKernelEnv`` options that a config file may give as a mapping, and the dataclass each becomes."""

SUBMIT_FIGURES = ("tier", "compiled", "correct", "speedup_eager", "speedup_compile")
"""The submit's ``info`` entries an episode's metrics carry (where measured: a None is left out)."""


def env_kwargs(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``CudaKernelEnv``'s keyword arguments from a config mapping (see the module doc)."""
    kwargs = {str(key): value for key, value in (config or {}).items()}
    for name, cls in DATACLASS_OPTIONS.items():
        value = kwargs.get(name)
        if isinstance(value, Mapping):
            kwargs[name] = dataclass_from_mapping(cls, value, where=name)
    return kwargs


def dataclass_from_mapping(cls: type, values: Mapping[str, Any], *, where: str = "") -> Any:
    """An instance of the dataclass ``cls`` from ``values``: a nested mapping becomes the field's dataclass, a list
    the tuple or frozenset the field holds; an unknown key raises TypeError naming the valid ones."""
    where = where or cls.__name__
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(str(key) for key in values if key not in fields)
    if unknown:
        raise TypeError(f"{where}: unknown option(s) {unknown}; {cls.__name__} takes: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    arguments: dict[str, Any] = {}
    for key, value in values.items():
        hint = hints[key]
        inner = _dataclass_in(hint)
        if inner is not None and isinstance(value, Mapping):
            value = dataclass_from_mapping(inner, value, where=f"{where}.{key}")
        elif (collection := _collection_in(hint)) and isinstance(value, Sequence) and not isinstance(value, str):
            value = collection(value)
        arguments[str(key)] = value
    return cls(**arguments)


def _union_members(hint: Any) -> tuple[Any, ...]:
    """The types a union names, or the type alone."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass a field's type names (alone or in a union with None), else None."""
    for candidate in _union_members(hint):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _collection_in(hint: Any) -> type | None:
    """``tuple`` or ``frozenset`` where a field's type is one (alone or in a union), else None: what a list from a
    config file becomes."""
    for candidate in _union_members(hint):
        kind = typing.get_origin(candidate) or candidate
        if kind in (tuple, frozenset):
            return kind
    return None


def episode_metrics(info: Mapping[str, Any], turns: int) -> dict[str, Any]:
    """An episode's figures from its last step's ``info``: ``turns``, ``submitted`` and the submit's figures that were
    measured (``SUBMIT_FIGURES``; booleans stay booleans)."""
    metrics: dict[str, Any] = {"turns": turns, "submitted": "tier" in info}
    for key in SUBMIT_FIGURES:
        if info.get(key) is not None:
            metrics[key] = info[key]
    return metrics


def task_id_from(row: Mapping[str, Any]) -> str | None:
    """The task a dataset row names: its ``task_id``, or its ``extra_info``'s (where trainers keep extra columns)."""
    if row.get("task_id"):
        return str(row["task_id"])
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and extra.get("task_id"):
        return str(extra["task_id"])
    return None
