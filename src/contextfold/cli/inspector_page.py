"""The inspector page: one self-contained HTML file of a run (or several) and its views.

Everything is inlined (the page's own CSS, JS and SVG; no network, no framework): a timeline
of request sizes against the window, budget and trigger, compaction markers, cache share and
cost per request, and any request's view, derived from `contextfold.inspection`.

What a long run costs the page: the timeline is drawn from an envelope of at most
`chart.MAX_POINTS` points (as the PNG chart); per-request figures, messages and passes are in
chunks of JSON, each compressed (raw deflate, base64) in a ``<script type=
"application/octet-stream">`` block that the page inflates only when a zoom or a click needs
it (the browser's own ``DecompressionStream``). Message previews are shortened until the
page fits `MAX_PAGE_BYTES`.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextfold.cli.chart import _envelope, _marks_kept
from contextfold.cli.files import write_output_file
from contextfold.inspection import Inspection, PassView

if TYPE_CHECKING:
    from contextfold.cli.demo import DemoResult
    from contextfold.cli.replay import ReplayResult
    from contextfold.evaluation import EvalReport

# Requests, messages and passes per compressed chunk: a click inflates one or two.
ROW_CHUNK = 4096
MESSAGE_CHUNK = 4096
PASS_CHUNK = 128
# The page's ceiling (a million-message replay included): previews shrink to fit it.
MAX_PAGE_BYTES = 9_500_000
PREVIEW_STEPS = (160, 80, 40, 16, 0)
# Characters of preview text all runs' messages share at first (about what compresses into
# a few megabytes of the page).
PREVIEW_BUDGET_CHARS = 24_000_000
ROLE_CODES = {"system": "s", "user": "u", "assistant": "a", "tool": "t", "developer": "d"}


@dataclass
class RunColumns:
    """One run's requests, as columns (one value per request, in request order)."""

    tokens_after: Sequence[int]
    history_messages: Sequence[int]
    tokens_before: Sequence[int] | None = None
    history_tokens: Sequence[int] | None = None
    prefix_tokens: Sequence[int] | None = None
    compacted: Sequence[bool] | None = None
    level: Sequence[int] | None = None
    applied: Sequence[Sequence[str]] | None = None
    refused: Sequence[bool] | None = None
    costs: Mapping[str, Sequence[float]] = field(default_factory=dict)  # pricing -> USD


@dataclass
class PageRun:
    """One run of the page: its label, limits, requests and (when recorded) its views."""

    label: str
    columns: RunColumns
    budget: int | None
    trigger: int | None = None
    window: int | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)  # shown in the run's header
    inspection: Inspection | None = None


def replay_run(result: ReplayResult, label: str) -> PageRun:
    """A replay as a run of the page (its rows, costs and recorded views)."""
    from contextfold.cli.replay import _row_columns

    names = (
        "tokens_after",
        "history_messages",
        "tokens_before",
        "history_tokens",
        "prefix_tokens",
        "compacted",
        "level",
        "applied",
    )
    values = dict(zip(names, _row_columns(result.rows, *names), strict=True))
    totals = result.totals
    target = result.config.get("target_usage")
    facts: dict[str, Any] = {
        "tokens sent": totals.tokens_sent_total,
        "whole history each time": totals.history_tokens_total,
        "saved": f"{totals.saved_share:.0%}",
        "cache share": f"{totals.prefix_share:.0%}",
    }
    if target is not None:
        facts["target_usage"] = str(target)
    for priced in result.costs:
        facts[f"cost ({priced.name})"] = (
            f"${priced.sent_usd:.4f} (whole history ${priced.history_usd:.4f})"
        )
    return PageRun(
        label=label,
        columns=RunColumns(
            **values, costs={priced.name: priced.requests for priced in result.costs}
        ),
        budget=totals.budget,
        trigger=totals.trigger,
        window=result.window,
        facts=facts,
        inspection=result.inspection,
    )


def demo_run(result: DemoResult, key: str = "managed") -> PageRun | None:
    """The demo's run with context-fold (sizes as the provider measured them), with its
    views; None when that run was not recorded."""
    run, inspection = result.run(key), result.inspections.get(key)
    if run is None or inspection is None:
        return None
    points = run.points[: len(inspection.request_messages)]
    return PageRun(
        label=run.label,
        columns=RunColumns(
            tokens_after=[p.tokens for p in points],
            history_messages=inspection.request_messages[: len(points)],
            prefix_tokens=[p.prefix_tokens for p in points],
            compacted=[p.compacted for p in points],
            refused=[p.rejected for p in points],
            costs={
                "anthropic": [p.cost_anthropic_usd for p in points],
                "openai": [p.cost_openai_usd for p in points],
            },
        ),
        budget=run.budget,
        trigger=run.trigger,
        window=result.settings.window,
        facts={
            "input limit": run.input_limit,
            "sizes": "as the provider measured them",
            "cost (anthropic)": f"${run.costs.get('anthropic', 0.0):.4f}",
            "cost (openai)": f"${run.costs.get('openai', 0.0):.4f}",
        },
        inspection=inspection,
    )


def eval_runs(report: EvalReport) -> list[PageRun]:
    """Every run of an eval as a run of the page: its requests (exact o200k sizes, cached
    prefix, costs, refusals) and, for contextfold's policies, every view."""
    from contextfold.evaluation.runner import PRICING_NAMES

    labels = {policy.key: policy.label for policy in report.policies}
    counts = {(c.corpus, c.id): len(c.messages) for c in report.conversations}
    runs = []
    for run in report.runs:
        records = run.requests
        total = counts.get((run.corpus, run.conversation), 0)
        inspection = run.inspection
        compacted = None
        if inspection is not None:
            made = {p.request for p in inspection.passes}
            compacted = [i + 1 in made for i in range(len(records))]
        refused = sum(r.refused for r in records)
        runs.append(
            PageRun(
                label=(
                    f"{run.corpus} / {run.conversation} / {labels.get(run.policy, run.policy)} "
                    f"/ {run.window:,}"
                ),
                columns=RunColumns(
                    tokens_after=[r.tokens for r in records],
                    history_messages=[
                        total if r.message_index is None else r.message_index for r in records
                    ],
                    prefix_tokens=[r.cached_tokens for r in records],
                    compacted=compacted,
                    refused=[r.refused for r in records],
                    costs={
                        name: [r.costs[i] if i < len(r.costs) else 0.0 for r in records]
                        for i, name in enumerate(PRICING_NAMES)
                    },
                ),
                budget=run.window,
                trigger=run.trigger,
                facts={
                    "policy": labels.get(run.policy, run.policy),
                    "refused": refused,
                    "sizes": "exact o200k recount",
                },
                inspection=inspection,
            )
        )
    return runs


def write_inspector_page(path: Path, title: str, runs: Sequence[PageRun]) -> Path:
    """Write the page of ``runs`` to ``path`` (never through a symlink); returns the path."""
    html = inspector_html(title, runs)
    return write_output_file(path, html.encode("utf-8"))


def inspector_html(title: str, runs: Sequence[PageRun]) -> str:
    """The page's text: previews shortened step by step until it fits `MAX_PAGE_BYTES`."""
    if not runs:
        raise ValueError("an inspector page needs at least one run")
    messages = sum(len(run.inspection.messages) for run in runs if run.inspection is not None)
    # A first guess from the message count (a long run's previews are most of the page),
    # then shorter ones until the page fits.
    first = min(PREVIEW_STEPS[0], PREVIEW_BUDGET_CHARS // max(messages, 1))
    html = ""
    for chars in (first, *(step for step in PREVIEW_STEPS if step < first)):
        html = _page(title, runs, chars)
        if len(html.encode("utf-8")) <= MAX_PAGE_BYTES:
            break
    return html


def _page(title: str, runs: Sequence[PageRun], preview_chars: int) -> str:
    blocks: list[str] = []
    summaries = []
    for number, run in enumerate(runs):
        summary, chunks = _run_data(number, run, preview_chars)
        summaries.append(summary)
        blocks.extend(_chunk_block(name, data) for name, data in chunks)
    page_data = {"title": title, "runs": summaries}
    template = resources.files("contextfold.cli").joinpath("inspector_assets")
    css = template.joinpath("page.css").read_text(encoding="utf-8")
    script = template.joinpath("page.js").read_text(encoding="utf-8")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Nothing is fetched: a strict policy says so, and keeps a stray URL from loading.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_escape(title)}</title><style>{css}</style></head>\n<body>\n"
        f'<script type="application/json" id="page-data">{_script_json(page_data)}</script>\n'
        + "\n".join(blocks)
        + f"\n<script>{script}</script>\n</body></html>\n"
    )


def _run_data(
    number: int, run: PageRun, preview_chars: int
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The run's summary (inline JSON) and its chunks ``(name, data)`` to compress."""
    columns = run.columns
    sizes = list(columns.tokens_after)
    count = len(sizes)
    steps, sent = _envelope(sizes)
    samples = [step - 1 for step in steps]
    inspection = run.inspection
    pass_requests = [p.request for p in inspection.passes] if inspection else []
    if inspection is None and columns.compacted is not None:
        pass_requests = [i + 1 for i, flag in enumerate(columns.compacted) if flag]
    marks = [r - 1 for r in pass_requests if 0 < r <= count]
    kept_marks = list(_marks_kept(marks, sizes))
    pass_number = {request - 1: n for n, request in enumerate(pass_requests)}
    costs = {name: list(values) for name, values in columns.costs.items()}
    shares = _shares(columns)
    timeline: dict[str, Any] = {
        "x": [i + 1 for i in samples],
        "sent": list(sent),
        "history": _pick(columns.history_tokens, samples),
        "share": _pick(shares, samples),
        "cost": {name: _pick(values, samples) for name, values in costs.items()},
    }
    summary: dict[str, Any] = {
        "id": number,
        "label": run.label,
        "requests": count,
        "budget": run.budget,
        "trigger": run.trigger,
        "window": run.window,
        "facts": dict(run.facts),
        "timeline": timeline,
        "markers": [
            {"request": i + 1, "size": sizes[i], "pass": pass_number.get(i)} for i in kept_marks
        ],
        "passes": len(pass_requests),
        "messages": len(inspection.messages) if inspection else None,
        "pricings": list(costs),
        "rowChunk": ROW_CHUNK,
        "messageChunk": MESSAGE_CHUNK,
        "passChunk": PASS_CHUNK,
        "previewChars": preview_chars,
        "hasViews": inspection is not None,
    }
    chunks: list[tuple[str, Any]] = []
    for start in range(0, count, ROW_CHUNK):
        end = min(start + ROW_CHUNK, count)
        chunks.append(
            (f"r{number}-rows-{start // ROW_CHUNK}", _rows(columns, shares, costs, start, end))
        )
    if inspection is not None:
        messages = inspection.messages
        for start in range(0, len(messages), MESSAGE_CHUNK):
            part = messages[start : start + MESSAGE_CHUNK]
            chunks.append(
                (
                    f"r{number}-msgs-{start // MESSAGE_CHUNK}",
                    {
                        "role": "".join(ROLE_CODES.get(m.role, "o") for m in part),
                        "unit": [m.unit for m in part],
                        "tokens": [m.tokens for m in part],
                        "sent": "".join("1" if m.sent else "0" for m in part),
                        "preview": [_clip(m.preview, preview_chars) for m in part],
                    },
                )
            )
        passes = inspection.passes
        summary["passRequests"] = pass_requests
        summary["passMessages"] = [p.messages for p in passes]
        for start in range(0, len(passes), PASS_CHUNK):
            chunks.append(
                (
                    f"r{number}-passes-{start // PASS_CHUNK}",
                    [_pass(p, preview_chars) for p in passes[start : start + PASS_CHUNK]],
                )
            )
    return summary, chunks


def _rows(
    columns: RunColumns,
    shares: Sequence[float] | None,
    costs: Mapping[str, Sequence[float]],
    start: int,
    end: int,
) -> dict[str, Any]:
    def cut(values: Sequence[Any] | None) -> list[Any] | None:
        return None if values is None else list(values[start:end])

    applied = cut(columns.applied)
    return {
        "after": cut(columns.tokens_after),
        "messages": cut(columns.history_messages),
        "before": cut(columns.tokens_before),
        "history": cut(columns.history_tokens),
        "prefix": cut(columns.prefix_tokens),
        "share": None if shares is None else [round(s, 4) for s in shares[start:end]],
        "compacted": None
        if columns.compacted is None
        else [int(c) for c in cut(columns.compacted) or ()],
        "level": cut(columns.level),
        "applied": None if applied is None else [list(a) for a in applied],
        "refused": None
        if columns.refused is None
        else [int(r) for r in cut(columns.refused) or ()],
        "cost": {name: [round(v, 8) for v in values[start:end]] for name, values in costs.items()},
    }


def _pass(view: PassView, preview_chars: int) -> dict[str, Any]:
    return {
        "request": view.request,
        "messages": view.messages,
        "layout": [list(run) for run in view.layout],
        "changed": [
            [index, status, _clip(text, max(preview_chars, 40))]
            for index, (status, text) in sorted(view.changed.items())
        ],
        "dropped": [list(r) for r in view.dropped],
        "summarized": [list(r) for r in view.summarized],
        "notice": view.notice,
        "noticeTokens": view.notice_tokens,
        "summary": view.summary,
        "level": view.level,
        "rungs": view.rungs,
        "before": view.tokens_before,
        "after": view.tokens_after,
        "passLevel": view.pass_level,
        "applied": list(view.applied),
    }


def _shares(columns: RunColumns) -> list[float] | None:
    """Each request's share of its tokens repeating the previous request (cacheable)."""
    if columns.prefix_tokens is None:
        return None
    return [
        0.0 if i == 0 else min(prefix / max(size, 1), 1.0)
        for i, (prefix, size) in enumerate(
            zip(columns.prefix_tokens, columns.tokens_after, strict=True)
        )
    ]


def _pick(values: Sequence[Any] | None, samples: Sequence[int]) -> list[Any] | None:
    if values is None:
        return None
    return [values[i] for i in samples]


def _clip(text: str | None, chars: int) -> str:
    if not text:
        return ""
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + ("…" if chars else "")


def _chunk_block(name: str, data: Any) -> str:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw deflate: 'deflate-raw' in JS
    packed = compressor.compress(json.dumps(data, separators=(",", ":")).encode("utf-8"))
    packed += compressor.flush()
    encoded = base64.b64encode(packed).decode("ascii")
    return f'<script type="application/octet-stream" id="{name}">{encoded}</script>'


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element: every '<' escaped, so nothing can close it."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def iter_chunk_names(html: str) -> Iterator[str]:
    """The names of a page's compressed chunks (for tests and tools)."""
    marker = 'type="application/octet-stream" id="'
    position = html.find(marker)
    while position >= 0:
        start = position + len(marker)
        yield html[start : html.index('"', start)]
        position = html.find(marker, start)


__all__ = [
    "MAX_PAGE_BYTES",
    "PageRun",
    "RunColumns",
    "demo_run",
    "eval_runs",
    "inspector_html",
    "iter_chunk_names",
    "replay_run",
    "write_inspector_page",
]
