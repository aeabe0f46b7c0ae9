"""Whether a shortcut passes a task's correctness check: the reference process's side of the task checks
(``cudagym tasks check``) and of the input probe (``cudagym/input_probe.py``, ``cudagym/tasks/degeneracy.py``).

For each input set, drawn from a seed and an input kind: whether zeros, the output's mean as a constant, or an
input of the output's shape and dtype pass the tolerance, whether the previous set's output of the same kind does
(an output that ignores its inputs), whether the output is finite and, when asked, whether a second call gives
bitwise the same output. Each shortcut is also judged at :data:`NEAR_FACTOR` times the tolerance (``near``):
an input kind that is to close a shortcut must reject it by that margin, so that the verification's other seeds
reject it too (a softmax over 4096 values of signed normal inputs has outputs just above the tolerance on a few rows,
which some input sets lack). Only the task's reference runs here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .common import map_tensors
from .compare import flatten, tolerance_excess
from .protocol import ShortcutReport

NEAR_FACTOR = 4.0
"""A shortcut *comes near* when it passes at this many times the tolerance (``atol`` and ``rtol`` alike)."""
SHORTCUTS = ("zeros", "constant", "input", "independent")  # cudagym.tasks.input_verdict.SHORTCUTS (run apart from it)


def shortcut_report(
    model: Callable[..., Any],
    draw: Callable[[int, str], list[Any]],
    seeds: list[int],
    kinds: list[str],
    atol: float,
    rtol: float,
    *,
    twice: bool,
) -> tuple[ShortcutReport, list[Any] | None]:
    """The per-set report of the module docstring for one input set per ``(seed, kind)``, and the last set's inputs.

    ``draw(seed, kind)``: an input set on the reference's device and dtype. ``twice``: call the model twice per set
    and report ``deterministic`` (else it stays True)."""
    import torch

    deterministic = True
    finite_sets: list[bool] = []
    passes: dict[str, list[bool]] = {name: [] for name in SHORTCUTS}
    near: dict[str, list[bool]] = {name: [] for name in SHORTCUTS}
    previous: list[Any] | None = None
    previous_kind = None
    inputs: list[Any] | None = None
    for seed, kind in zip(seeds, kinds, strict=True):
        inputs = draw(seed, kind)
        with torch.no_grad():
            first = _detach(model(*inputs))
            second = _detach(model(*inputs)) if twice else first
        items, again = flatten(first) or [], flatten(second) or []
        tensors = [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]
        deterministic &= all(
            torch.equal(a, b) for a, b in zip(items, again, strict=True) if isinstance(a, torch.Tensor)
        )
        finite_sets.append(all(bool(torch.isfinite(t).all()) for t in tensors))

        fakes: dict[str, list[list[Any]]] = {
            "zeros": [[torch.zeros_like(t) for t in tensors]] if tensors else [],
            "constant": [[torch.full_like(t, float(t.double().mean())) for t in tensors]] if tensors else [],
            "input": [],
            "independent": [],
        }
        same_shape = [
            x
            for x in inputs
            if isinstance(x, torch.Tensor)
            and len(tensors) == 1
            and x.shape == tensors[0].shape
            and x.dtype == tensors[0].dtype
        ]
        fakes["input"] = [[x] for x in same_shape]
        if (
            tensors
            and previous is not None
            and previous_kind == kind
            and len(previous) == len(tensors)
            and all(p.shape == t.shape for p, t in zip(previous, tensors, strict=True))
        ):
            fakes["independent"] = [previous]
        for name, candidates in fakes.items():
            judged = [_judge(tensors, fake, atol, rtol) for fake in candidates]
            passes[name].append(any(passed for passed, _ in judged))
            near[name].append(any(close for _, close in judged))
        previous, previous_kind = tensors, kind
    report = ShortcutReport(
        kinds=list(kinds),
        passes=passes,
        near=near,
        finite_sets=finite_sets,
        finite=all(finite_sets),
        deterministic=deterministic,
    )
    return report, inputs


def _judge(real: list[Any], fake: list[Any], atol: float, rtol: float) -> tuple[bool, bool]:
    """Whether every fake output passes against its real one (``compare.tolerance_excess``, the rule of every
    comparison) and whether it comes near (the same at :data:`NEAR_FACTOR` times the tolerance)."""
    passed = near = True
    for t, f in zip(real, fake, strict=True):
        if t.numel() == 0:
            continue
        passed = passed and bool(tolerance_excess(t, f, atol, rtol).max() <= 0)
        near = near and bool(tolerance_excess(t, f, atol, rtol, NEAR_FACTOR).max() <= 0)
    return passed, near


def _detach(value: Any) -> Any:
    """A copy of the model's output that its next call cannot change."""
    return map_tensors(value, lambda tensor: tensor.detach().clone())
