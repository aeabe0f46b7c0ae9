"""The report's plots: labelled ticks that cover the data's whole range without overlapping, and a fast_p axis that
gives the p <= 2 thresholds room."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudagym.metrics import EpisodeResult
from cudagym.plots import MAX_TICKS, fast_p_figure, log_ticks, plot_fast_p, plot_speedups, speedup_figure

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def results(speedups: list[float]) -> list[EpisodeResult]:
    """Correct results with these speedups vs eager, and half of them vs torch.compile."""
    return [
        EpisodeResult(f"t/{i}", tier=2, correct=True, compiled=True, speedup_eager=s, speedup_compile=s / 2)
        for i, s in enumerate(speedups)
    ] + [EpisodeResult("t/wrong", compiled=True)]


def labelled_ticks(fig: Figure) -> tuple[Axes, list[tuple[float, str]]]:
    """The x axis's labelled ticks, major and minor (value, label), after drawing, asserting that no two labels
    overlap."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    renderer = canvas.get_renderer()
    low, high = ax.get_xlim()
    every = ax.xaxis.get_major_ticks() + ax.xaxis.get_minor_ticks()
    shown = [t for t in every if t.label1.get_visible() and t.label1.get_text()]
    shown = [t for t in shown if low - 1e-9 <= t.get_loc() <= high + 1e-9]
    boxes = sorted((t.label1.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
    for left, right in itertools.pairwise(boxes):
        assert left.x1 < right.x0, "tick labels overlap"
    return ax, sorted((float(t.get_loc()), t.label1.get_text()) for t in shown)


WIDE = [0.31, 0.8, 1.0, 1.2, 2.5, 4.0, 9.0, 17.0, 33.0, 58.0]


def test_speedup_ticks_cover_the_data_without_overlap(tmp_path: Path) -> None:
    ax, ticks = labelled_ticks(speedup_figure(results(WIDE)))
    values = [v for v, _ in ticks]
    assert min(values) <= min(s / 2 for s in WIDE) and max(values) >= max(WIDE)  # 58x is inside the labels
    assert ("50x" in dict(ticks).values() or "100x" in dict(ticks).values()) and len(ticks) <= MAX_TICKS
    assert ax.get_xscale() == "log"
    assert plot_speedups(results(WIDE), tmp_path / "speedup_hist.png").read_bytes()[:4] == b"\x89PNG"


def test_fast_p_gives_the_thresholds_room_and_reaches_the_largest_speedup(tmp_path: Path) -> None:
    ax, ticks = labelled_ticks(fast_p_figure(results(WIDE), len(WIDE) + 1))
    labels = [label for _, label in ticks]
    assert labels[:5] == ["0", "0.5", "1", "1.5", "2"]
    assert max(v for v, _ in ticks) >= max(WIDE)
    left, right = ax.get_xlim()
    to_pixels = ax.transData.transform
    share = (to_pixels((2.0, 0))[0] - to_pixels((left, 0))[0]) / (to_pixels((right, 0))[0] - to_pixels((left, 0))[0])
    assert share >= 0.3, share  # a linear axis to 64 would give p <= 2 about 3%
    assert plot_fast_p(results(WIDE), len(WIDE) + 1, tmp_path / "fast_p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_range_of_many_decades_is_thinned() -> None:
    _, ticks = labelled_ticks(speedup_figure(results([0.002, 1.0, 4000.0])))
    assert len(ticks) <= MAX_TICKS
    assert min(v for v, _ in ticks) <= 0.001 and max(v for v, _ in ticks) >= 4000


@given(st.floats(1e-4, 1e4), st.floats(1.0, 1e6))
def test_log_ticks_bracket_the_range(low: float, factor: float) -> None:
    high = low * factor
    ticks = log_ticks(low, high)
    assert ticks[0] <= low * (1 + 1e-9) and ticks[-1] >= high * (1 - 1e-9)
    assert 1 <= len(ticks) <= MAX_TICKS and ticks == sorted(set(ticks))
