"""What a task's inputs can prove: which input distributions its verification draws, and whether it is degenerate.

A *shortcut* is an answer that does no work: zeros, a constant, one of the inputs returned as it is, or an output
that ignores the inputs. When a shortcut passes the tolerance on every input set of the task's own distribution
(KernelBench's ReLU on inputs in [0, 1) is the identity), a verification drawing only that distribution cannot tell
it from a solution. The probe (:mod:`cudagym.tasks.degeneracy`) then adds the input kinds that close it; a task that
no kind closes is *degenerate*: correctness is all it can prove, so its tier is capped at
:data:`DEGENERATE_MAX_TIER`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

SHORTCUTS: Mapping[str, str] = {
    "zeros": "zeros pass",
    "constant": "a constant passes",
    "input": "an input passes",
    "independent": "the output ignores the inputs",
}
"""The shortcuts the probe tries, and how a report names them."""

KIND_NAMES: Mapping[str, str] = {
    "task": "the task's own inputs",
    "normal": "signed normal inputs",
    "large": "normal inputs of magnitude 1e2-1e3",
}
"""The input kinds ``draw_inputs`` knows (``cudagym/harness/reference.py``), as a report names them."""

DEGENERATE_MAX_TIER = 1
"""The highest tier a degenerate task pays: correct, never faster (the fastest "correct" answer is a shortcut)."""


@dataclasses.dataclass(frozen=True)
class InputVerdict:
    """The probe's decision for one evaluated task (a source at its sizes, dtype, tolerances and declared kinds).

    Attributes:
        kinds: the input kinds verification draws, in the order its checks cycle through them: the added kinds
            first (so that even one check draws a kind that closes the shortcut), then the declared ones.
        added: the kinds beyond the declared ones, each added because it closes a shortcut the others leave open.
        shortcuts: the shortcuts that pass on every input set of a declared kind (names of :data:`SHORTCUTS`).
        unclosed: the shortcuts that no usable kind closes: the task is degenerate.
        unusable: candidate kinds rejected because the reference failed or gave NaN/Inf on them.
    """

    kinds: tuple[str, ...]
    added: tuple[str, ...] = ()
    shortcuts: tuple[str, ...] = ()
    unclosed: tuple[str, ...] = ()
    unusable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("kinds", "added", "shortcuts", "unclosed", "unusable"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.kinds:
            raise ValueError("a verdict needs at least one input kind")

    @property
    def degenerate(self) -> bool:
        """A shortcut passes whatever input kind verification draws: the task cannot tell it from a solution."""
        return bool(self.unclosed)

    @property
    def max_tier(self) -> int:
        """The highest tier a submit on this task can earn (3, or :data:`DEGENERATE_MAX_TIER`)."""
        return DEGENERATE_MAX_TIER if self.degenerate else 3

    def describe(self) -> str:
        """One line for observations, reports and ``cudagym tasks show``."""
        kinds = ", ".join(self.kinds)
        if self.degenerate:
            found = " and ".join(SHORTCUTS[s] for s in self.unclosed)
            return (
                f"DEGENERATE: {found} on every input kind available (drawn: {kinds}); "
                f"the tier is capped at {DEGENERATE_MAX_TIER}"
            )
        if not self.shortcuts:
            return f"drawn: {kinds}; no shortcut passes"
        found = " and ".join(SHORTCUTS[s] for s in self.shortcuts)
        closers = " and ".join(KIND_NAMES.get(k, k) for k in self.added) or "the declared kinds"
        return f"drawn: {kinds}; {found} on the task's declared inputs, {closers} close it"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON): the fields and ``degenerate``."""
        return {
            **{f.name: list(getattr(self, f.name)) for f in dataclasses.fields(self)},
            "degenerate": self.degenerate,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputVerdict:
        """The inverse of :meth:`to_dict` (``degenerate`` is derived, so ignored)."""
        return cls(**{f.name: tuple(data.get(f.name, ())) for f in dataclasses.fields(cls)})
