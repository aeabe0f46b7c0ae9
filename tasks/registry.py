"""Task sets by name: the built-in ones, those registered in code, and those of installed packages.

A loader is any callable ``loader(**options) -> Iterable[Task]``. Loaders run lazily, on the first
``load`` of their name. Installed packages add sets through the entry-point group ``cudagym.task_sets``
(``name = "package.module:loader"``); they are found without being imported first.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cudagym import registry
from cudagym.errors import CudaGymError
from cudagym.tasks.degeneracy import annotate_all
from cudagym.tasks.task import Task, TaskSet, for_precision, module_constants, with_sizes

logger = logging.getLogger(__name__)
TaskLoader = Callable[..., Iterable[Task]]
ENTRY_POINT_GROUP = "cudagym.task_sets"

_LOADERS: dict[str, TaskLoader | str] = {
    "builtin": "cudagym.tasks.builtin:load_builtin",
    "kernelbench": "cudagym.tasks.kernelbench:load_kernelbench",
    "ops6k": "cudagym.tasks.ops6k:load_ops6k",
}

FILTER_KEYS = ("level", "ids", "names", "ops")
SET_OPTIONS = ("precision", "sizes")
"""Options :func:`load` applies to the tasks of any set (after the loader), besides the filters."""


class TaskSetNotFound(CudaGymError, KeyError):
    """No task set of that name is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def register_task_set(name: str, loader: TaskLoader | str, *, overwrite: bool = False) -> None:
    """Adds a task set. ``loader`` is a callable or a ``"module:attr"`` string resolved on first use."""
    if not name or "/" in name:
        raise ValueError(f"a task set name must be non-empty and contain no '/', got {name!r}")
    registry.add(_LOADERS, "task set", name, loader, overwrite=overwrite)


def registered_names() -> list[str]:
    """Every task set name: registered in code and declared by installed packages."""
    return registry.names(_LOADERS, ENTRY_POINT_GROUP)


def _resolve(name: str) -> TaskLoader:
    loader = _LOADERS.get(name)
    if loader is None:
        ep = registry.entry_point(_LOADERS, ENTRY_POINT_GROUP, "task set", name, TaskSetNotFound)
        loader = ep.load()
        logger.debug("task set %r from the entry point %s", name, ep.value)
        _LOADERS[name] = loader
    if isinstance(loader, str):
        module, _, attr = loader.partition(":")
        loader = getattr(importlib.import_module(module), attr)
        _LOADERS[name] = loader
    return loader


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, int)):
        return (value,)
    return tuple(value)


def filter_tasks(
    tasks: Iterable[Task],
    *,
    level: int | Sequence[int] | None = None,
    ids: str | Sequence[str] | None = None,
    names: str | Sequence[str] | None = None,
    ops: str | Sequence[str] | None = None,
) -> list[Task]:
    """Keeps the tasks that match every given filter.

    ``level``: one level or several. ``ids``: exact ids. ``names``: shell-style patterns matched against
    the name and the id. ``ops``: the task composes at least one of these operator names (a pattern too).
    """
    levels, wanted_ids = set(_as_tuple(level)), set(_as_tuple(ids))
    patterns, op_patterns = _as_tuple(names), _as_tuple(ops)
    kept = []
    for task in tasks:
        if levels and task.metadata.level not in levels:
            continue
        if wanted_ids and task.id not in wanted_ids:
            continue
        if patterns and not any(fnmatch.fnmatch(task.name, p) or fnmatch.fnmatch(task.id, p) for p in patterns):
            continue
        if op_patterns and not any(fnmatch.fnmatch(op, p) for op in task.metadata.ops for p in op_patterns):
            continue
        kept.append(task)
    if wanted_ids:
        missing = wanted_ids - {t.id for t in kept}
        if missing:
            raise KeyError(f"unknown task ids after filtering: {sorted(missing)}")
    return kept


def loader_options(loader: TaskLoader) -> tuple[str, ...] | None:
    """The keyword options ``loader`` takes, or None when it takes any (``**kwargs``)."""
    try:
        parameters = inspect.signature(loader).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: it decides itself
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in parameters if p.kind in kinds)


def check_options(name: str, loader: TaskLoader, options: Mapping[str, Any]) -> None:
    """Raises TypeError naming the valid options when ``options`` holds one that neither ``loader`` nor
    :func:`load` takes (a loader with ``**kwargs`` accepts any)."""
    accepted = loader_options(loader)
    if accepted is None:
        return
    unknown = sorted(set(options) - set(accepted))
    if not unknown:
        return
    valid = sorted({*accepted, *FILTER_KEYS, *SET_OPTIONS})
    close = [m for option in unknown for m in difflib.get_close_matches(option, valid, n=1)]
    hint = f" Did you mean {', '.join(repr(m) for m in close)}?" if close else ""
    raise TypeError(f"unknown option(s) for task set {name!r}: {', '.join(unknown)}; valid: {', '.join(valid)}.{hint}")


def apply_sizes(name: str, tasks: Sequence[Task], sizes: Mapping[str, Any]) -> list[Task]:
    """Every task with the size constants of ``sizes`` it assigns rewritten (``with_sizes``); a name no task of the set
    assigns raises ValueError naming the ones they do (a typo must not pass silently)."""
    if not sizes:
        return list(tasks)
    assigned: set[str] = set()
    for task in tasks:
        assigned |= set(module_constants(task.source))
    unknown = sorted(set(sizes) - assigned)
    if unknown:
        close = [m for option in unknown for m in difflib.get_close_matches(option, sorted(assigned), n=1)]
        hint = f" Did you mean {', '.join(repr(m) for m in close)}?" if close else ""
        shown = sorted(assigned)
        names = ", ".join(shown[:40]) + (f", ... ({len(shown)} in all)" if len(shown) > 40 else "")
        raise ValueError(
            f"no task of {name!r} assigns the size constant(s) {', '.join(unknown)} at module level; "
            f"the tasks assign: {names}.{hint}"
        )
    return [with_sizes(task, sizes) for task in tasks]


def load(name: str, **options: Any) -> TaskSet:
    """Loads the task set ``name``.

    Options for every set: the filters (``level``, ``ids``, ``names``, ``ops``) apply after loading; ``precision``
    ("fp32", "bf16" or "fp16") puts every task on that track (``for_precision``: ids ``<id>@bf16``; filter by those);
    ``sizes`` (a mapping ``{"batch_size": 16, ...}``) rewrites those module-level size constants in every task that
    assigns them (``with_sizes``; ``cudagym tasks check --sizes`` is the same option). The remaining options
    (``path=`` ...) go to the loader; one that neither the loader nor this function takes raises TypeError naming
    the valid ones. The tasks carry the input verdicts stored in cudagym's cache (``metadata.input_verdicts``)."""
    filters = {k: options.pop(k) for k in FILTER_KEYS if k in options}
    precision = options.pop("precision", "fp32")
    sizes = options.pop("sizes", None) or {}
    loader = _resolve(name)
    check_options(name, loader, options)
    tasks = apply_sizes(name, [for_precision(task, precision) for task in loader(**options)], sizes)
    if filters:
        tasks = filter_tasks(tasks, **filters)
    logger.debug("task set %r: %d task(s) (options %s, filters %s)", name, len(tasks), sorted(options), filters)
    return TaskSet(name, annotate_all(tasks))
