"""The evaluation report's plots: the speedup histogram and the fast_p curve, with axes that fit the data.

Speedups of correct solutions span orders of magnitude (0.3x to 60x in one run is common), and KernelBench's fast_p
thresholds sit between 0 and 2. Both plots therefore choose their own ticks (:func:`log_ticks`: 1-2-5 steps thinned
until they fit, the first at or below the smallest value and the last at or above the largest), and the fast_p
curve uses a piecewise axis: linear from 0 to :data:`FAST_P_LINEAR_UP_TO` (where the thresholds are), logarithmic
beyond it. matplotlib is imported on use (it is an optional dependency).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cudagym.metrics import FAST_P_THRESHOLDS, EpisodeResult, fast_p

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_TICKS = 8
"""Labelled ticks at most on an axis: the labels of a 7-inch axis stay apart."""

FAST_P_LINEAR_UP_TO = 2.0
"""fast_p's axis is linear from 0 to this threshold (KernelBench's thresholds) and logarithmic beyond."""

_STEPS: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))


def _ladder(low: float, high: float, mantissas: Sequence[float], every: int) -> list[float]:
    """``m * 10**d`` for m in ``mantissas`` and every ``every``-th decade d, from the last at or below ``low`` to
    the first at or above ``high``."""
    first = math.floor(math.log10(low)) - 1
    first -= first % every
    values = [
        float(f"{m * 10.0**d:.12g}")
        for d in range(first, math.ceil(math.log10(high)) + every + 1, every)
        for m in mantissas
    ]
    below = max(v for v in values if v <= low * (1 + 1e-9))
    above = min(v for v in values if v >= high * (1 - 1e-9))
    return [v for v in values if below <= v <= above]


def log_ticks(low: float, high: float, max_ticks: int = MAX_TICKS) -> list[float]:
    """Ticks for a log axis over [low, high] (both > 0): 1-2-5, else 1-3, else 1 per decade, else every k-th decade,
    the densest of those with at most ``max_ticks`` ticks; the first is at or below ``low``, the last at or above
    ``high``."""
    if not 0 < low <= high:
        raise ValueError(f"log ticks need 0 < low <= high, got {low}, {high}")
    every = 1
    while True:
        for mantissas in _STEPS if every == 1 else ((1.0,),):
            ticks = _ladder(low, high, mantissas, every)
            if len(ticks) <= max_ticks:
                return ticks
        every += 1


def speedup_label(value: float) -> str:
    """A tick label of a speedup: ``0.5x``, ``2x``, ``100x``."""
    return f"{value:g}x"


def speedup_figure(results: Iterable[EpisodeResult]) -> Figure:
    """A histogram of the correct results' speedups vs eager and vs torch.compile on a log axis whose labelled ticks
    cover every value."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    correct = [r for r in results if r.correct]
    series = {
        "vs eager": [s for r in correct if (s := r.speedup("eager")) is not None and s > 0],
        "vs torch.compile": [s for r in correct if (s := r.speedup("compile")) is not None and s > 0],
    }
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    values = [v for vs in series.values() for v in vs]
    if values:
        low, high = min(min(values), 0.9), max(max(values), 1.1)
        edges = [low * (high / low) ** (i / 24) for i in range(25)]
        for label, vs in series.items():
            if vs:
                ax.hist(vs, bins=edges, alpha=0.6, label=f"{label} (n={len(vs)})")
        ticks = log_ticks(low, high)
        ax.set_xscale("log")
        ax.set_xlim(ticks[0], ticks[-1])
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: speedup_label(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(1.0, color="black", linewidth=1)
        ax.axvline(1 / 0.95, color="grey", linewidth=1, linestyle="--", label="5% faster")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no correct, timed results", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("speedup (baseline time / candidate time, log scale)")
    ax.set_ylabel("problems")
    ax.set_title("Speedups of correct solutions")
    return fig


def fast_p_ticks(top: float) -> list[float]:
    """fast_p's ticks: every 0.5 up to ``FAST_P_LINEAR_UP_TO``, then log ticks beyond it, the last at or above
    ``top``."""
    linear = [FAST_P_LINEAR_UP_TO * i / 4 for i in range(5)]
    if top <= FAST_P_LINEAR_UP_TO:
        return linear
    beyond = [t for t in log_ticks(FAST_P_LINEAR_UP_TO, top, MAX_TICKS - 3) if t > FAST_P_LINEAR_UP_TO]
    # a tick less than a quarter of a decade past the linear part would crowd its label (the last one stays)
    return linear + [t for t in beyond[:-1] if t >= FAST_P_LINEAR_UP_TO * 10**0.25] + beyond[-1:]


def fast_p_figure(results: Iterable[EpisodeResult], n: int) -> Figure:
    """The fast_p curve (fraction of all n problems correct with speedup > p) vs both baselines, on an axis linear
    up to p = 2 and logarithmic beyond (``FAST_P_LINEAR_UP_TO``), up to the largest speedup."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    results = list(results)
    speedups = [s for r in results if r.correct for b in ("eager", "compile") if (s := r.speedup(b)) is not None]  # type: ignore[arg-type]
    ticks = fast_p_ticks(max([2.5, *[1.1 * s for s in speedups]]))
    top = ticks[-1]
    linear = [FAST_P_LINEAR_UP_TO * i / 200 for i in range(200)]
    beyond = [FAST_P_LINEAR_UP_TO * (top / FAST_P_LINEAR_UP_TO) ** (i / 200) for i in range(201)]
    grid = sorted({*linear, *beyond, *(s for s in speedups if s < top)})
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for baseline, label in (("eager", "vs eager"), ("compile", "vs torch.compile")):
        curve = [fast_p(results, n, p, baseline) for p in grid]  # type: ignore[arg-type]
        ax.plot(grid, curve, label=label, drawstyle="steps-post")
        marks = list(FAST_P_THRESHOLDS)
        ax.scatter(marks, [fast_p(results, n, p, baseline) for p in marks], s=18)  # type: ignore[arg-type]
    # symlog: linear on [0, 2], which takes the width of one decade, logarithmic beyond
    ax.set_xscale("symlog", linthresh=FAST_P_LINEAR_UP_TO, linscale=1.0)
    ax.set_xlim(0.0, top)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.axvline(FAST_P_LINEAR_UP_TO, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"p (speedup threshold; linear up to {FAST_P_LINEAR_UP_TO:g}, log beyond)")
    ax.set_ylabel(f"fast_p (fraction of {n} problems)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("fast_p: correct and speedup > p")
    ax.legend()
    return fig


def plot_speedups(results: Iterable[EpisodeResult], path: str | Path) -> Path:
    """:func:`speedup_figure` as a PNG at ``path``."""
    path = Path(path)
    speedup_figure(results).savefig(path, dpi=110)
    return path


def plot_fast_p(results: Iterable[EpisodeResult], n: int, path: str | Path) -> Path:
    """:func:`fast_p_figure` as a PNG at ``path``."""
    path = Path(path)
    fast_p_figure(results, n).savefig(path, dpi=110)
    return path
