"""What a reward shaper is: a named function from one step (and the steps before it) to a reward.

The environment builds a :class:`StepRecord` after every tool call and asks the episode's shaper for a
:class:`Reward`: a float for the trainer plus its named components (``terms``), which the environment
reports in ``info`` so every part of the signal can be watched, including parts weighted 0.

A shaper that fails raises :class:`ShaperError`. It never returns a silent 0: a reward that crashed
must not look like a kernel that failed (verifiers' ``Rubric`` anti-pattern).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from cudagym.errors import CudaGymError
from cudagym.results import StageResult


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step of an episode as a reward shaper sees it; the environment builds one per step.

    Attributes:
        turn: the step's number in the episode, starting at 1.
        tool: the tool the action called (``"submit"``, ``"compile"``, ...); ``""`` when the action
            text did not parse into a tool call.
        result: what the tool returned (a ``SubmitResult`` for an evaluated submit).
        terminated: the episode ended on this step (after ``submit``).
        truncated: the episode was cut on this step (the turn budget ran out).
    """

    turn: int
    tool: str
    result: StageResult
    terminated: bool = False
    truncated: bool = False

    def __post_init__(self) -> None:
        if self.turn < 1:
            raise ValueError(f"turn is 1-based, got {self.turn}")


def _real(value: object, what: str) -> float:
    """``value`` as a finite float; raises for bools, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {number}")
    return number


class Terms(Mapping[str, float]):
    """A read-only ``{name: value}`` mapping of reward components.

    Unlike ``types.MappingProxyType`` it can be pickled (rewards cross process boundaries in vector
    envs) and hashed.
    """

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, float] | None = None) -> None:
        data: dict[str, float] = {}
        for key, value in (items or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"a reward term's name must be a str, got {key!r}")
            data[key] = _real(value, f"reward term {key!r}")
        self._data = data

    def __getitem__(self, key: str) -> float:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return repr(self._data)

    def __getstate__(self) -> dict[str, float]:
        return self._data

    def __setstate__(self, state: dict[str, float]) -> None:
        self._data = state


@dataclasses.dataclass(frozen=True)
class Reward:
    """The reward of one step.

    Attributes:
        value: what the trainer receives; always a finite float.
        terms: the named components behind ``value``, reported in ``info``. For the built-in shapers
            a term is present only when its event happened on this step, so a term weighted 0 still
            shows that the event occurred.
    """

    value: float
    terms: Mapping[str, float] = dataclasses.field(default_factory=Terms)

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _real(self.value, "reward value"))
        object.__setattr__(self, "terms", Terms(self.terms))


@runtime_checkable
class RewardShaper(Protocol):
    """What the environment needs from a reward shaper.

    Attributes:
        name: identifies the shaper in ``info``, in composite terms and in error messages.
    """

    name: str

    def reset(self) -> None:
        """Forgets the previous episode; called on every ``env.reset``."""
        ...

    def __call__(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        """The reward for ``step``; ``history`` is the episode's earlier steps, oldest first."""
        ...


class ShaperError(CudaGymError, RuntimeError):
    """A reward shaper failed: it raised, or returned a non-finite number or something not a reward.

    The original exception, if any, is chained as ``__cause__``.

    Attributes:
        shaper: the name of the shaper that failed.
        reason: what went wrong.
    """

    def __init__(self, shaper: str, reason: str) -> None:
        super().__init__(shaper, reason)
        self.shaper = shaper
        self.reason = reason

    def __str__(self) -> str:
        return f"reward shaper {self.shaper!r} failed: {self.reason}"


def _to_reward(name: str, output: object) -> Reward:
    """Checks what a shaper returned: a ``Reward`` passes, a real number becomes ``{name: value}``."""
    if isinstance(output, Reward):
        return output
    if isinstance(output, bool) or not isinstance(output, numbers.Real):
        raise ShaperError(name, f"returned {type(output).__name__} {output!r}, expected a float or a Reward")
    if not math.isfinite(float(output)):
        raise ShaperError(name, f"returned a non-finite value ({float(output)})")
    return Reward(float(output), {name: float(output)})


class Shaper(abc.ABC):
    """Base class of reward shapers: subclasses implement :meth:`compute`.

    Calling a shaper runs ``compute`` and checks its output: an exception raised inside becomes a
    :class:`ShaperError` naming the shaper (the original chained with ``from``); a non-finite number,
    or anything that is neither a real number nor a :class:`Reward`, is a :class:`ShaperError` too. A
    real number ``x`` becomes ``Reward(x, {name: x})``.
    """

    name: str = "shaper"

    def reset(self) -> None:  # noqa: B027 (an optional hook: stateless shapers keep the no-op)
        """Forgets the previous episode. Stateless shapers keep this no-op."""

    @abc.abstractmethod
    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> float | Reward:
        """The reward for ``step`` given the episode's earlier steps ``history`` (oldest first)."""

    def __call__(self, step: StepRecord, history: Sequence[StepRecord]) -> Reward:
        try:
            output = self.compute(step, history)
        except ShaperError:
            raise  # a nested shaper already named itself
        except Exception as err:
            raise ShaperError(self.name, f"{type(err).__name__}: {err}") from err
        return _to_reward(self.name, output)

    def __repr__(self) -> str:
        fields = {"name": self.name, **vars(self)}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class FunctionShaper(Shaper):
    """A plain function ``fn(step, history) -> float | Reward`` used as a shaper.

    A float result ``x`` becomes ``Reward(x, {name: x})``. When ``fn`` has a ``reset()`` method (an
    object that follows :class:`RewardShaper` without subclassing :class:`Shaper`), ``reset`` calls it.

    Args:
        fn: the reward function.
        name: the shaper's name; by default ``fn.name`` when it is a string, else ``fn.__name__``,
            else the name of ``fn``'s type.
    """

    def __init__(self, fn: Callable[[StepRecord, Sequence[StepRecord]], Any], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"a reward function must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or _name_of(fn)

    def reset(self) -> None:
        reset = getattr(self.fn, "reset", None)
        if callable(reset):
            reset()

    def compute(self, step: StepRecord, history: Sequence[StepRecord]) -> float | Reward:
        return self.fn(step, history)


def _name_of(fn: object) -> str:
    name = getattr(fn, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(fn, "__name__", None) or type(fn).__name__
