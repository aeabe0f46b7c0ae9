"""Things by name: what both of cudagym's registries share (task sets in :mod:`cudagym.tasks.registry`, rewards in
:mod:`cudagym.reward_shaping.registry`).

A registry is a dict from name to entry, kept by the module that owns it (so a test can swap the module's dict), and
an entry-point group through which installed packages add entries without being imported first. A name registered in
code wins over an entry point of the same name. The functions here take the dict each time and raise the owner's
errors with the owner's word for what it holds (``"task set"``, ``"reward"``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, MutableMapping
from importlib import metadata as importlib_metadata
from typing import Any


def entry_points(group: str) -> dict[str, importlib_metadata.EntryPoint]:
    """The entry points installed packages declare in ``group``, by name (none of them imported)."""
    return {ep.name: ep for ep in importlib_metadata.entry_points(group=group)}


def names(table: Mapping[str, Any], group: str) -> list[str]:
    """Every name: registered in ``table`` and declared in the entry-point ``group``, sorted."""
    return sorted(set(table) | set(entry_points(group)))


def add(table: MutableMapping[str, Any], kind: str, name: str, entry: Any, *, overwrite: bool) -> None:
    """Puts ``entry`` under ``name``; ValueError when the name is taken and ``overwrite`` is false."""
    if name in table and not overwrite:
        raise ValueError(f"{kind} {name!r} is already registered (pass overwrite=True to replace it)")
    table[name] = entry


def entry_point(
    table: Mapping[str, Any], group: str, kind: str, name: str, missing: type[Exception]
) -> importlib_metadata.EntryPoint:
    """The entry point of ``name`` in ``group`` (not loaded), for a name ``table`` does not hold; ``missing`` (the
    owner's not-found error) when there is none, its message listing every name and the closest match."""
    found = entry_points(group).get(name)
    if found is None:
        known = names(table, group)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise missing(f"no {kind} named {name!r}; registered: {', '.join(known)}.{hint}")
    return found
