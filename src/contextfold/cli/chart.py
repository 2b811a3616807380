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
        steps = range(1, len(line.sizes) + 1)
        ax.plot(
            steps,
            line.sizes,
            color=line.color,
            linewidth=2,
            linestyle="--" if line.dashed else "-",
            label=line.label,
        )
        if line.marks:
            ax.scatter(
                [i + 1 for i in line.marks],
                [line.sizes[i] for i in line.marks],
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
