"""Reward shapers by name: the built-in ones, those registered in code, and those of installed packages.

A factory is any callable ``factory(**options) -> shaper``. Installed packages add rewards through the
entry-point group ``cudagym.rewards`` (``name = "package.module:factory"``); an entry point is looked up
only when a name is not registered in code (so code wins a clash) and its module is imported only then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cudagym import registry
from cudagym.errors import CudaGymError

from .base import FunctionShaper, RewardShaper, Shaper
from .builtin import CompositeShaper, GradedShaper, MilestoneShaper, SpeedupShaper

ENTRY_POINT_GROUP = "cudagym.rewards"
DEFAULT_REWARD = "milestone"

ShaperFactory = Callable[..., RewardShaper]
RewardSpec = str | Shaper | type[Shaper] | Callable[..., Any] | None
"""What ``make_reward`` accepts: a registered name, a shaper, a ``Shaper`` class, or a reward function."""


class RewardNotFound(CudaGymError, KeyError):
    """No reward of that name is registered in code or declared by an installed package."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def make_composite(
    parts: Iterable[tuple[RewardSpec, float] | tuple[RewardSpec, float, Mapping[str, Any]]],
    *,
    name: str | None = None,
) -> CompositeShaper:
    """The ``"composite"`` reward: a :class:`CompositeShaper` whose children may be given by name.

    Args:
        parts: ``(spec, weight)`` or ``(spec, weight, options)`` tuples; each child is
            ``make_reward(spec, **options)``, e.g. ``[("milestone", 1.0), ("graded", 0.0)]``.
        name: the composite's name (default ``"composite"``).
    """
    children = []
    for part in parts:
        spec, weight, *rest = part
        options: Mapping[str, Any] = rest[0] if rest else {}
        children.append((make_reward(spec, **options), weight))
    return CompositeShaper(children, name=name)


_FACTORIES: dict[str, ShaperFactory] = {
    "milestone": MilestoneShaper,
    "speedup": SpeedupShaper,
    "graded": GradedShaper,
    "composite": make_composite,
}


def register_reward(name: str, factory: ShaperFactory, *, overwrite: bool = False) -> None:
    """Adds a reward under ``name``: ``make_reward(name, **options)`` then returns ``factory(**options)``.

    Raises:
        ValueError: ``name`` is empty, contains ``"/"``, or is already registered and ``overwrite`` is
            false.
        TypeError: ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"a reward name must be a non-empty str without '/', got {name!r}")
    if not callable(factory):
        raise TypeError(f"a reward factory must be callable, got {type(factory).__name__}")
    registry.add(_FACTORIES, "reward", name, factory, overwrite=overwrite)


def registered_rewards() -> list[str]:
    """Every reward name: registered in code and declared by installed packages, sorted."""
    return registry.names(_FACTORIES, ENTRY_POINT_GROUP)


def _factory(name: str) -> ShaperFactory:
    factory = _FACTORIES.get(name)
    if factory is not None:
        return factory
    ep = registry.entry_point(_FACTORIES, ENTRY_POINT_GROUP, "reward", name, RewardNotFound)
    try:
        return ep.load()
    except Exception as err:
        raise ImportError(f"reward {name!r} (entry point {ep.value!r}) could not be loaded: {err}") from err


def _as_shaper(made: object, name: str) -> Shaper:
    """What a factory made, as a checked :class:`Shaper`."""
    if isinstance(made, Shaper):
        return made
    if isinstance(made, RewardShaper):
        return FunctionShaper(made)
    raise TypeError(f"the factory of reward {name!r} returned {type(made).__name__}, not a reward shaper")


def make_reward(spec: RewardSpec = None, **options: Any) -> Shaper:
    """The shaper that ``spec`` names, ready to give rewards.

    Args:
        spec: ``None`` for the default (``"milestone"``); a registered or entry-point name, built with
            ``factory(**options)``; a :class:`Shaper`, returned as is; a ``Shaper`` subclass, built with
            ``cls(**options)``; any other callable (a reward function ``fn(step, history)``, or an
            object following :class:`RewardShaper`), wrapped in a :class:`FunctionShaper`
            (``options`` may hold its ``name``).
        **options: the factory's keyword arguments.

    Raises:
        RewardNotFound: no reward has that name (the message lists the names and a close match).
        TypeError: ``spec`` is none of the above, or options were given with a shaper instance.
    """
    if spec is None or isinstance(spec, str):
        name = spec or DEFAULT_REWARD
        return _as_shaper(_factory(name)(**options), name)
    if isinstance(spec, type) and issubclass(spec, Shaper):
        return spec(**options)
    if isinstance(spec, Shaper):
        if options:
            raise TypeError(f"options {sorted(options)} cannot apply to an already built shaper {spec!r}")
        return spec
    if callable(spec):
        return FunctionShaper(spec, **options)
    raise TypeError(f"a reward is a name, a shaper or a reward function, got {type(spec).__name__}")
