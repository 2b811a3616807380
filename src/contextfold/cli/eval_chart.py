"""The eval's chart: where far facts stand, per policy, for each corpus and window.

One panel per corpus and window; a bar per policy, split into the four categories (in view,
ledger or summary, recoverable, lost), with a dot for the near facts in view. matplotlib is
imported only when the chart is drawn.
"""

from __future__ import annotations

import io
from pathlib import Path

from contextfold.cli.files import write_output_file
from contextfold.evaluation import CATEGORIES, EvalReport
from contextfold.evaluation.metrics import ANSWERED, format_value
from contextfold.evaluation.runner import PRICING_NAMES

COLORS = {
    "in_view": "#2e7d32",
    "ledger_or_summary": "#1565c0",
    "recoverable": "#f9a825",
    "lost": "#c62828",
}
# The x axis runs past 100% to leave room for the text beside each bar.
ANNOTATED_XLIM = 1.45
LABELS = {
    "in_view": "far: in view",
    "ledger_or_summary": "far: ledger or summary",
    "recoverable": "far: recoverable",
    "lost": "far: lost",
}


def write_eval_chart(path: Path, report: EvalReport) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    corpora, windows = report.corpora, report.settings.windows
    labels = [policy.label for policy in report.policies]
    fig = Figure(
        figsize=(4.2 * len(windows) + 2.2, 0.42 * len(labels) * len(corpora) + 1.6 * len(corpora)),
        dpi=110,
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(corpora), len(windows), squeeze=False, sharex=True)
    for row, corpus in enumerate(corpora):
        for column, window in enumerate(windows):
            ax = axes[row][column]
            totals = {t.policy: t for t in report.totals_for(corpus, window)}
            ordered = [totals[p.key] for p in report.policies]
            positions = list(range(len(ordered)))[::-1]
            left = [0.0] * len(ordered)
            for category in CATEGORIES:
                shares = [t.share("far", category) or 0.0 for t in ordered]
                ax.barh(
                    positions,
                    shares,
                    left=left,
                    color=COLORS[category],
                    label=LABELS[category],
                    height=0.7,
                )
                left = [a + b for a, b in zip(left, shares, strict=True)]
            near = [t.share("near", "in_view") for t in ordered]
            ax.scatter(
                [value for value in near if value is not None],
                [p for p, value in zip(positions, near, strict=True) if value is not None],
                color="black",
                marker="o",
                s=18,
                zorder=3,
                label="near facts in view",
            )
            # Beside each bar: what the policy sent, and paid, on the requests every
            # policy answered (the same requests for each: a refusal sends nothing).
            for position, totals_of in zip(positions, ordered, strict=True):
                tokens = format_value(totals_of.answered_tokens, "tokens")
                cost = format_value(totals_of.answered_cost(PRICING_NAMES[0]), "usd")
                ax.text(1.02, position, f"{tokens} · {cost}", va="center", fontsize="x-small")
            ax.set_xlim(0, ANNOTATED_XLIM)
            ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
            ax.xaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_yticks(positions)
            ax.set_yticklabels(labels if column == 0 else [""] * len(labels), fontsize="small")
            ax.set_title(f"{corpus}, {window:,}-token window", fontsize="medium")
            ax.grid(True, axis="x", alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=5, fontsize="small", frameon=False)
    fig.suptitle(
        "contextfold eval: where the facts the next step needs stand in the view\n"
        f"(beside each bar, {ANSWERED}: tokens sent · cost at {PRICING_NAMES[0]}'s prices)",
        fontsize="medium",
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    png = io.BytesIO()
    fig.savefig(png, format="png")
    return write_output_file(path, png.getvalue())
