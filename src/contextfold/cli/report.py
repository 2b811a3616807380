"""What the commands print and write: rich tables, the JSON record and the output folder."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from itertools import compress
from math import isfinite
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from contextfold.cli.files import check_output_option, make_output_folder, write_output_parts
from contextfold.prices import REFERENCE_PRICING, reference_prices

if TYPE_CHECKING:
    from contextfold.cli.demo import DemoResult, RunSummary
    from contextfold.cli.replay import ReplayResult, ReplayTotals

DEFAULT_OUT_ROOT = Path("contextfold-out")


def output_folder(out: str | None, prefix: str) -> Path:
    """``out`` as given, else a fresh ``contextfold-out/<prefix>-<timestamp>`` folder.

    ``out`` must not be empty or a symlink (see ``files.check_output_option``).
    """
    check_output_option(out)
    if out is not None:
        folder = Path(out)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = DEFAULT_OUT_ROOT / f"{prefix}-{stamp}"
        # Two runs within one second must not overwrite each other.
        serial = 2
        while folder.exists():
            folder = DEFAULT_OUT_ROOT / f"{prefix}-{stamp}-{serial}"
            serial += 1
    return make_output_folder(folder)


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as indented JSON, never through a symlink. A string that is not valid
    Unicode text (a lone surrogate) is written as its ``\\uXXXX`` escape, still valid JSON.

    Containers are indented, but one holding nothing deeper than a container of plain values
    is written on one line: a replay's rows stay one to a line, and they are encoded at C
    speed (the json module's indenting encoder is pure Python: half a million rows took
    seconds). Each line is what ``json.dumps(value, ensure_ascii=False)`` writes."""
    chunks: list[str] = []
    _json_chunks(data, "", chunks, _line_encoder())  # all of it, before the file is opened
    chunks.append("\n")
    return write_output_parts(path, _encoded(chunks))


def _encoded(chunks: list[str], size: int = 1 << 20) -> Iterator[bytes]:
    """``"".join(chunks).encode("utf-8", "backslashreplace")`` in parts of about ``size``
    characters and more (the same bytes: each character is encoded on its own), so the
    text is never held a second and a third time, joined and encoded, beside its chunks."""
    start = length = 0
    for end, chunk in enumerate(chunks, start=1):
        length += len(chunk)
        if length >= size:
            yield "".join(chunks[start:end]).encode("utf-8", "backslashreplace")
            start, length = end, 0
    if start < len(chunks):
        yield "".join(chunks[start:]).encode("utf-8", "backslashreplace")


_CONTAINERS = (dict, list, tuple)
# What json writes as a plain value (exact types: a subclass takes the general path).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _line_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False)``, without building an encoder per call: the
    C encoder ``json.dumps`` itself uses, made once (one per file, so its cycle check starts
    clean) with the very settings ``json.dumps`` passes it."""
    # (json's C encoder, or None without the accelerator: a name typeshed does not declare)
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # no C accelerator: json.dumps is the same thing, only slower
        return lambda value: json.dumps(value, ensure_ascii=False)
    defaults = json.JSONEncoder(ensure_ascii=False)
    encoder = make(
        {},  # markers: json.dumps's circular-reference check
        defaults.default,
        json.encoder.encode_basestring,
        None,  # no indent: one line
        defaults.key_separator,
        defaults.item_separator,
        defaults.sort_keys,
        defaults.skipkeys,
        defaults.allow_nan,
    )
    join = "".join
    return lambda value: join(encoder(value, 0))


def _json_chunks(value: Any, indent: str, out: list[str], encode: Callable[[Any], str]) -> None:
    if not isinstance(value, _CONTAINERS) or _is_row(value):
        out.append(encode(value))  # one line, encoded at C speed
        return
    inner = indent + "  "
    if isinstance(value, dict):
        out.append("{")
        for position, (key, item) in enumerate(value.items()):
            name = key if isinstance(key, str) else json.dumps(key)  # as json names keys
            out.append(f"{',' if position else ''}\n{inner}{encode(name)}: ")
            _json_chunks(item, inner, out, encode)
        out.append("\n" + indent + "}")
        return
    out.append("[")
    separator, between = "\n" + inner, ",\n" + inner
    # A stretch at a time, so what a stretch of rows costs to write stays small.
    for start in range(0, len(value), _ROWS_AT_ONCE):
        items = value[start : start + _ROWS_AT_ONCE]
        lines = _row_lines(items, encode)
        if lines is not None:  # rows sharing their keys (a replay's): a column at a time
            out.append(separator + between.join(lines))
            separator = between
            continue
        for item in items:
            out.append(separator)
            separator = between
            if type(item) in _SCALARS or _is_row(item):  # a list of rows: one to a line
                out.append(encode(item))
            else:
                _json_chunks(item, inner, out, encode)
    out.append("\n" + indent + "]")


# Rows written together by `_row_lines` (its working copies of their values are this long).
_ROWS_AT_ONCE = 8192


def _is_row(value: Any) -> bool:
    """Whether a container goes on one line: a list of plain values, or a dict of plain
    values and such lists (a replay's row with its list of rungs). A list of rows is not one:
    its rows go one to a line. (False for what is not a container.)"""
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        return not any(isinstance(item, _CONTAINERS) for item in value)
    else:
        return False
    kinds = set(map(type, items))
    if kinds <= _SCALARS:
        return True
    if kinds <= _SCALARS_AND_LIST and all(  # a row: lists of plain values
        set(map(type, item)) <= _SCALARS for item in items if type(item) is list
    ):
        return True
    for item in items:
        if isinstance(item, dict) or (isinstance(item, _CONTAINERS) and not _is_row(item)):
            return False
    return True


_SCALARS_AND_LIST = _SCALARS | {list}
_JSON_BOOLS = {True: "true", False: "false"}


def _row_lines(items: Any, encode: Callable[[Any], str]) -> list[str] | None:
    """Each of ``items`` on its line, as ``encode`` writes it, when they are rows sharing
    their keys: dicts (exactly) with the same string keys in the same order, whose values
    are plain values or lists of them. None for anything else, written item by item.

    Each line is one formatting of a template holding the keys (the C encoder writes every
    key again on every row): integers and finite floats are formatted by the template
    itself (``%d`` and ``%r`` write what json writes for them), any other column is turned
    into text first, one C-level call per column.
    """
    if len(items) < 2 or type(items) is not list or set(map(type, items)) != {dict}:
        return None
    keys = tuple(items[0])
    if len(keys) < 2 or not all(type(key) is str for key in keys):
        return None
    if not all(map(keys.__eq__, map(tuple, items))):
        return None
    fields: list[str] = []
    columns: list[Sequence[Any]] = []
    # Values row by row (one C call per row), then column by column:
    by_column = zip(*map(itemgetter(*keys), items), strict=True)
    for key, values in zip(keys, by_column, strict=True):
        column = _column_text(values, encode)
        if column is None:
            return None
        name = encode(key).replace("%", "%%")
        fields.append(f"{name}: {column[0]}")
        columns.append(column[1])
    template = "{" + ", ".join(fields) + "}"
    return list(map(template.__mod__, zip(*columns, strict=True)))


def _column_text(
    column: Sequence[Any], encode: Callable[[Any], str]
) -> tuple[str, Sequence[Any]] | None:
    """How a column of values goes into a row's template: ``(conversion, values)``, where
    the conversion writes each value as ``encode`` does; None if a value is no row's."""
    kinds = set(map(type, column))
    if kinds == {int}:
        return "%d", column
    if kinds == {float} and all(map(isfinite, column)):
        return "%r", column
    if kinds == {bool}:
        return "%s", list(map(_JSON_BOOLS.__getitem__, column))
    if kinds == {str}:
        return "%s", list(map(json.encoder.encode_basestring, column))
    if kinds <= _SCALARS:
        return "%s", list(map(encode, column))
    if kinds == {list}:
        text = ["[]"] * len(column)
        for position in compress(range(len(column)), column):  # the lists not empty
            values = column[position]
            if not set(map(type, values)) <= _SCALARS:
                return None
            text[position] = encode(values)
        return "%s", text
    return None


# -- demo ------------------------------------------------------------------------------------


def demo_table(result: DemoResult) -> Table:
    """The runs side by side: the handful of numbers that tell the story."""
    settings = result.settings
    runs = result.runs
    unmanaged = result.unmanaged
    limit = result.managed.input_limit
    table = Table(
        title=(
            f"{settings.steps} tool-using steps in a {settings.window:,}-token window "
            f"(input limit {limit:,})"
        ),
        box=box.SIMPLE_HEAD,
        title_justify="left",
    )
    table.add_column("", style="bold", no_wrap=True)
    for run in runs:
        table.add_column(run.label, justify="right")
    summarizes = any(run.summarizes for run in runs)

    def row(name: str, render: Callable[[RunSummary], str]) -> None:
        table.add_row(name, *(render(run) for run in runs))

    row("largest request", _largest)
    row("requests made", lambda run: str(run.requests))
    row("compactions (levels)", _compactions)
    if summarizes:
        row("rungs applied", _rungs)
        row("summaries written / reused", _summaries)
    row("tokens sent in total", lambda run: _total(run, unmanaged))
    # Absolute figures: a share of cache reads says little when the totals differ 3x.
    row("  read from the prompt cache", _cached)
    row("  not from the cache", lambda run: f"{run.uncached_tokens:,}")
    if summarizes:
        row("  to the summarizer", _summarizer)
        row("recalled byte-identical", _recall)
    # What each run cost, at list prices (docs/pricing.md): Anthropic's, then OpenAI's.
    for name, prices in zip(REFERENCE_PRICING, reference_prices(), strict=True):
        row(f"cost ({prices.name})", partial(_cost, baseline=unmanaged, pricing=name))
    row("full history kept", _history)
    row("request over the window", _overflow)
    if settings.tools:
        row("whole-request counts", lambda run: f"{run.count_calls:,}")
    row("task finished", lambda run: _yes(run.completed))
    return table


def _cost(run: RunSummary, baseline: RunSummary, pricing: str) -> str:
    usd = run.costs.get(pricing, 0.0)
    base = baseline.costs.get(pricing, 0.0)
    if run is baseline or not base:
        return f"${usd:.4f}"
    return f"${usd:.4f} ({(usd - base) / base:+.0%})"


def _total(run: RunSummary, baseline: RunSummary) -> str:
    if run is baseline:
        return f"{run.total_tokens:,}"
    return f"{run.total_tokens:,} ({_change(run.total_tokens, baseline.total_tokens)})"


def _rungs(run: RunSummary) -> str:
    return "\n".join(run.rungs_used) or "-"


def _summaries(run: RunSummary) -> str:
    return f"{run.summaries_written} / {run.summaries_reused}" if run.summarizes else "-"


def _summarizer(run: RunSummary) -> str:
    if not run.summarizes:
        return "-"
    return f"{run.summary_tokens:,} ({run.summary_requests} calls)"


def _recall(run: RunSummary) -> str:
    if not run.recall_checked:
        return "-"
    return f"{run.recall_identical}/{run.recall_checked} results"


def _largest(run: RunSummary) -> str:
    return f"{run.largest_request:,} ({_percent(run.largest_request / run.input_limit)})"


def _cached(run: RunSummary) -> str:
    return f"{run.cache_read_tokens:,} ({_percent(run.cache_share)})"


def _compactions(run: RunSummary) -> str:
    if not run.compactions:
        return "0"
    levels = ", ".join(str(level) for level in run.levels_used)
    return f"{run.compactions} ({'level' if len(run.levels_used) == 1 else 'levels'} {levels})"


def _history(run: RunSummary) -> str:
    kept = "yes" if run.history_kept else "NO"
    return f"{kept} ({run.history_messages}/{run.expected_messages} messages)"


def _overflow(run: RunSummary) -> str:
    over = sum(1 for point in run.points if point.overflowed)
    return f"yes ({over} of {run.requests})" if over else "no"


# -- replay ----------------------------------------------------------------------------------


def replay_rows_table(result: ReplayResult) -> Table:
    """One line per request: what the history holds, what is sent, what was done.

    ``msgs`` is messages sent / messages in history; the view's size before this request's
    pass (``tokens_before``) is in the JSON, the table keeps to what a reader compares.
    """
    table = Table(box=box.SIMPLE_HEAD, title="requests", title_justify="left")
    for name in ("#", "msgs", "history", "sent", "level"):
        table.add_column(name, justify="right")
    # Wide enough for the longest rung name, so names wrap between rungs, never inside one.
    table.add_column("applied", min_width=21)
    table.add_column("prefix reuse", justify="right")
    for row in result.rows:
        sent = f"{row.tokens_after:,}"
        if row.over_budget:
            sent = f"[red]{sent}[/red]"
        reuse = (
            f"{row.prefix_messages} msgs, {_percent(row.prefix_share)}" if row.request > 1 else "-"
        )
        table.add_row(
            str(row.request),
            f"{row.messages_after}/{row.history_messages}",
            f"{row.history_tokens:,}",
            sent,
            str(row.level) if row.compacted else "-",
            ", ".join(row.applied) if row.applied else "",
            reuse,
        )
    return table


def replay_heading(result: ReplayResult, source: str, file_format: str) -> str:
    window = f"window {result.window:,} tokens" if result.window else "no --window given"
    return f"replay of {source} ({file_format}, {result.totals.messages} messages), {window}"


def replay_totals_table(result: ReplayResult) -> Table:
    """The replay at a glance, one number per line."""
    totals = result.totals
    table = Table(box=box.SIMPLE_HEAD, title="totals", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    window = f"{result.window:,}" if result.window else "not given"
    levels = ", ".join(str(level) for level in totals.levels_used) or "-"
    rows = [
        ("window / context-fold's budget", f"{window} / {totals.budget:,}"),
        ("compaction trigger", f"{totals.trigger:,}"),
        ("requests", str(totals.requests)),
        ("compactions (levels)", f"{totals.compactions} ({levels})"),
        ("rungs used", ", ".join(totals.rungs_used) or "-"),
        (
            "largest request: history / sent",
            f"{totals.largest_history:,} / {totals.largest_after:,}",
        ),
        (
            "tokens in total: history / sent",
            f"{totals.history_tokens_total:,} / {totals.tokens_sent_total:,} "
            f"({_change(totals.tokens_sent_total, totals.history_tokens_total)})",
        ),
        ("prefix reused from previous request", _percent(totals.prefix_share)),
        *(
            (
                f"input cost at {priced.prices.name}",
                f"history {_dollars(priced.history_usd)}, sent {_dollars(priced.sent_usd)} "
                f"({_change_float(priced.sent_usd, priced.history_usd)})"
                + (
                    f", summaries {_dollars(priced.summary_usd)} "
                    f"({priced.summary_requests} requests, input and output)"
                    if priced.summary_requests
                    else ""
                ),
            )
            for priced in result.costs
        ),
        ("tool results clipped at admission", _ingress(totals)),
        ("requests over the budget", str(totals.over_budget_requests)),
        ("full history kept", _yes(totals.history_kept)),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _ingress(totals: ReplayTotals) -> str:
    """The ingress cap's work, on its own line: it is not compaction and not in "history"."""
    if not totals.ingress_clipped_results:
        return "0"
    return (
        f"{totals.ingress_clipped_results} ({totals.ingress_bytes_removed:,} bytes removed "
        "before counting)"
    )


# -- formatting ------------------------------------------------------------------------------


def _percent(share: float) -> str:
    return f"{share:.0%}"


def _dollars(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.4f}"


def _change_float(new: float, old: float) -> str:
    if not old:
        return "n/a"
    change = f"{(new - old) / old:+.0%}"
    return "±0%" if change in {"+0%", "-0%"} else change


def _change(new: int, old: int) -> str:
    if not old:
        return "n/a"
    change = f"{(new - old) / old:+.0%}"
    return "±0%" if change in {"+0%", "-0%"} else change


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"
