"""The one chart both commands draw: input tokens per request against the window.

matplotlib is imported here, inside the function, and only when a chart is written: it costs
about half a second to import and ``contextfold --help`` should not pay for it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contextfold.cli.files import write_output_file

# A chart is about 900 pixels wide: a line of more points than this is drawn as its envelope,
# the lowest and highest point of each of MAX_POINTS // 2 stretches of requests (about one
# per pixel column), so a spike or a compaction's drop shows as it would with every point.
# Below it every point is drawn. The same bound applies to the compaction markers.
MAX_POINTS = 2_000


@dataclass(frozen=True)
class Series:
    """One line on the chart: a run's request sizes, in request order (1-based on the axis)."""

    label: str
    sizes: Sequence[int]
    color: str
    # Requests (0-based) where compaction acted; drawn as markers so a reader sees the folds.
    marks: Sequence[int] = field(default_factory=tuple)
    dashed: bool = False


def write_size_chart(
    path: Path,
    series: Sequence[Series],
    *,
    window: int | None,
    window_label: str,
    trigger: int | None,
    budget: int | None = None,
    title: str,
    y_label: str = "input tokens per request",
) -> Path:
    """Draw ``series`` with the window and compaction-trigger lines; save a PNG at ``path``
    (in an existing folder)."""
    # A bare Figure renders with the Agg backend and skips pyplot: no global figure state,
    # no GUI backend probing, and a noticeably cheaper import.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig = Figure(figsize=(9, 6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for line in series:
        steps, sizes = _envelope(line.sizes)
        ax.plot(
            steps,
            sizes,
            color=line.color,
            linewidth=2,
            linestyle="--" if line.dashed else "-",
            label=line.label,
        )
        if line.marks:
            marks = _marks_kept(line.marks, line.sizes)
            ax.scatter(
                [i + 1 for i in marks],
                [line.sizes[i] for i in marks],
                color=line.color,
                marker="v",
                s=36,
                zorder=3,
                label=f"{line.label}: compaction",
            )
    if window:
        ax.axhline(window, color="#c62828", linewidth=1.6, label=window_label)
    if trigger:
        ax.axhline(
            trigger,
            color="#ef6c00",
            linewidth=1.3,
            linestyle=":",
            label=f"context-fold's compaction trigger ({trigger:,})",
        )
    if budget:
        ax.axhline(
            budget,
            color="#546e7a",
            linewidth=1.2,
            linestyle="-.",
            label=f"context-fold's budget ({budget:,})",
        )
    ax.set_title(title)
    ax.set_xlabel("model request (step)")
    ax.set_ylabel(y_label)
    # Headroom above the highest line, so the window line never sits on the frame.
    highest = max([*(max(line.sizes, default=0) for line in series), window or 0, trigger or 0])
    ax.set_ylim(0, max(highest, 1) * 1.08)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))
    ax.grid(True, alpha=0.3)
    # Below the plot, where it cannot hide a line.
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        fontsize="small",
        frameon=False,
    )
    fig.tight_layout()
    # Rendered in memory and written by the CLI's writer, which never follows a symlink.
    png = io.BytesIO()
    fig.savefig(png, format="png")
    return write_output_file(path, png.getvalue())


def _buckets(count: int) -> list[tuple[int, int]]:
    """``MAX_POINTS // 2`` consecutive stretches covering ``range(count)``, as even as can be."""
    buckets = MAX_POINTS // 2
    return [(b * count // buckets, (b + 1) * count // buckets) for b in range(buckets)]


def _envelope(sizes: Sequence[int]) -> tuple[Sequence[int], Sequence[int]]:
    """The points a line is drawn through: all of them (steps 1-based) up to MAX_POINTS,
    else, for each stretch of requests, its lowest and highest point in request order, and
    the first and last point of the whole line (so the line spans the same steps)."""
    count = len(sizes)
    if count <= MAX_POINTS:
        return range(1, count + 1), sizes
    values = list(sizes)
    kept = {0, count - 1}
    for start, end in _buckets(count):
        chunk = values[start:end]  # min, max and index run at C speed
        kept.add(start + chunk.index(min(chunk)))
        kept.add(start + chunk.index(max(chunk)))
    order = sorted(kept)
    return [i + 1 for i in order], [values[i] for i in order]


def _marks_kept(marks: Sequence[int], sizes: Sequence[int]) -> Sequence[int]:
    """The marked requests (0-based) to draw: all of them up to MAX_POINTS, else, for each
    stretch of requests holding marks, the lowest and highest marked point."""
    if len(marks) <= MAX_POINTS:
        return marks
    count = len(sizes)
    buckets = MAX_POINTS // 2
    lowest: dict[int, int] = {}
    highest: dict[int, int] = {}
    for mark in marks:
        bucket = mark * buckets // count
        size = sizes[mark]
        low = lowest.get(bucket)
        if low is None or size < sizes[low]:
            lowest[bucket] = mark
        high = highest.get(bucket)
        if high is None or size > sizes[high]:
            highest[bucket] = mark
    return sorted({*lowest.values(), *highest.values()})
