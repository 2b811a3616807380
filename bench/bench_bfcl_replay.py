"""Replay real BFCL multi-turn conversations through contextfold in a small window.

Every conversation of a category (default ``long_context``: tool results up to ~20,000 tokens)
grows one message at a time, and the view is requested the way an orchestrator requests it:
before every assistant message and once at the end, with ``token_budget=window``. Per
conversation and in total the bench reports:

- requests, and requests contextfold refused with ``ContextLengthError`` (the protected content
  alone, e.g. one tool result bigger than the window, cannot fit: refusing beats overflowing);
- the largest request without contextfold (the whole history) and with it (the view sent);
- compactions, the levels and rungs used;
- views over the window (must be 0), views whose tool groups are broken (an orphan tool
  result, or a call left unanswered before the tail: must be 0);
- prefix reuse: the share of each view's leading messages identical to the previous view's,
  in messages and weighted by tokens (what a provider's prompt cache could serve).

Sizes are contextfold's own counts (exact o200k by default). The same conversations are also
run through ``contextfold.cli.replay.replay_messages`` and every request it records must agree
with this driver's (the two are independent implementations of the same loop).

``--refusals`` compares, side by side on the same requests, contextfold (its defaults, or
``--config``) with a naive drop-oldest policy in a small window (default 4,000 tokens, tool
results capped at 4,096 bytes on the way in for both): each conversation alone, and every
``--chain`` (5) conversations chained into one session. The naive policy keeps the system
messages, drops the oldest whole turn or call group (a call and its results leave together)
until the view fits, and refuses only when the newest group alone cannot fit. Reported per
policy: requests refused, views over the budget, views that split a call group, and the share
of "facts" kept: the argument values of the next tool call that appear somewhere in the
history, found in the view sent (cheap, and what the next call needs).

``--ladders`` replays the same conversations under three ladders side by side (window 8,000
tokens, tool results capped at 4,096 bytes on the way in): the defaults, the defaults plus
``clear_tool_results`` (after ``truncate_long_text``), and ``summarize`` with the offline
scripted summarizer (``strip_thinking, truncate_tool_results, summarize, drop_oldest``).
Reported per ladder: tokens sent, refusals, views over budget, split groups, cache share (the
share of each request's tokens in the prefix it shares with the previous request, by
provider-scripted's rule), summarizer calls / reused / written, and facts kept.

    uv run python bench/bench_bfcl_replay.py
    uv run python bench/bench_bfcl_replay.py --window 16000 --json bench/out/replay.json
    uv run python bench/bench_bfcl_replay.py --refusals
    uv run python bench/bench_bfcl_replay.py --ladders
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_corpus import Conversation, build_corpus, chain_conversations

DEFAULT_WINDOW = 8_000
REFUSAL_WINDOW = 4_000
REFUSAL_CAP_BYTES = 4_096
REFUSAL_CHAIN = 5


# --------------------------------------------------------------------------- per request


@dataclass
class RequestRow:
    message_index: int  # messages admitted when the request was made
    full_tokens: int  # the whole history, counted by contextfold's counter
    sent_tokens: int | None  # the delivered view (None: refused)
    messages_sent: int | None
    compacted: bool = False
    level: int = 0
    applied: list[str] = field(default_factory=list)
    over_window: bool = False
    group_problems: list[str] = field(default_factory=list)
    prefix_messages: int = 0
    prefix_share_messages: float = 0.0  # of this view's messages
    prefix_tokens: int = 0
    prefix_intact: bool = True  # the whole previous view is this view's prefix (cache-friendly)
    refused: str = ""  # ContextLengthError text, when refused


@dataclass
class ConversationResult:
    id: str
    messages: int
    rows: list[RequestRow]
    replay_agrees: bool | None = None  # None: replay_messages unavailable
    replay_note: str = ""

    @property
    def delivered(self) -> list[RequestRow]:
        return [r for r in self.rows if r.refused == ""]

    def summary(self) -> dict[str, Any]:
        delivered = self.delivered
        later = delivered[1:]
        later_tokens = sum(r.sent_tokens or 0 for r in later)
        return {
            "id": self.id,
            "messages": self.messages,
            "requests": len(self.rows),
            "refused": len(self.rows) - len(delivered),
            "largest_full": max((r.full_tokens for r in self.rows), default=0),
            "largest_sent": max((r.sent_tokens or 0 for r in delivered), default=0),
            "compactions": sum(1 for r in delivered if r.compacted),
            "levels": sorted({r.level for r in delivered if r.level}),
            "rungs": sorted({rung for r in delivered for rung in r.applied}),
            "over_window": sum(1 for r in delivered if r.over_window),
            "broken_groups": sum(1 for r in delivered if r.group_problems),
            "prefix_share_messages": (
                statistics.fmean(r.prefix_share_messages for r in later) if later else None
            ),
            "prefix_share_tokens": (
                sum(r.prefix_tokens for r in later) / later_tokens if later_tokens else None
            ),
            "prefix_breaks": sum(1 for r in later if not r.prefix_intact),
            "replay_agrees": self.replay_agrees,
        }


def group_problems(view: Sequence[Mapping[str, Any]]) -> list[str]:
    """Tool-group integrity: every result answers a call of the assistant message that opens
    its group, and every call is answered before the next non-tool message."""
    problems: list[str] = []
    open_calls: list[str] = []
    for index, message in enumerate(view):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
            else:
                problems.append(f"orphan tool result {call_id!r} at {index}")
            continue
        if open_calls:
            problems.append(f"calls {open_calls} unanswered before message {index}")
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        open_calls = [call.get("id") for call in calls]
    # Calls may stay open only when their assistant message is the very last one.
    if open_calls and view and view[-1].get("role") != "assistant":
        problems.append(f"calls {open_calls} unanswered at the end")
    return problems


def _common_prefix(previous: Sequence[Any], current: Sequence[Any]) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new and old != new:
            break
        shared += 1
    return shared


class _CountCache:
    """Per-message token counts, cached by object (views reuse the same dicts request after
    request; the cache holds a reference so ids are never recycled)."""

    def __init__(self, counter: Any) -> None:
        self._counter = counter
        self._cache: dict[int, tuple[Mapping[str, Any], int]] = {}

    def __call__(self, message: Mapping[str, Any]) -> int:
        hit = self._cache.get(id(message))
        if hit is None:
            hit = (message, self._counter.count_message(message))
            self._cache[id(message)] = hit
        return hit[1]


async def replay_conversation(
    conv: Conversation, config: Mapping[str, Any], window: int
) -> ConversationResult:
    from contextfold import ContextFold, ContextLengthError

    ctx = ContextFold({**config})
    count = _CountCache(ctx.counter)
    rows: list[RequestRow] = []
    previous: list[Mapping[str, Any]] = []
    full = 0

    async def request(admitted: int) -> None:
        nonlocal previous
        try:
            view = await ctx.get_messages_for_request(token_budget=window)
        except ContextLengthError as exc:
            rows.append(RequestRow(admitted, full, None, None, refused=str(exc)))
            return
        report = ctx.last_report
        shared = _common_prefix(previous, view) if previous else 0
        rows.append(
            RequestRow(
                message_index=admitted,
                full_tokens=full,
                sent_tokens=report.tokens_after,
                messages_sent=len(view),
                compacted=report.compacted,
                level=report.level,
                applied=list(report.applied),
                over_window=report.tokens_after > window,
                group_problems=group_problems(view),
                prefix_messages=shared,
                prefix_share_messages=shared / len(view) if view and previous else 0.0,
                prefix_tokens=sum(count(m) for m in view[:shared]),
                prefix_intact=shared == len(previous),
            )
        )
        previous = view

    for index, message in enumerate(conv.messages):
        if message["role"] == "assistant" and index > 0:
            await request(index)
        await ctx.add_message(dict(message))
        full += count(conv.messages[index])
    await request(len(conv.messages))
    return ConversationResult(conv.id, len(conv.messages), rows)


# --------------------------------------------------------------------------- cross-check


def _replay_function() -> Any | None:
    try:
        from contextfold.cli.replay import replay_messages_async
    except ImportError:
        return None
    return replay_messages_async


async def cross_check(
    result: ConversationResult,
    conv: Conversation,
    config: Mapping[str, Any],
    window: int,
    replay: Any,
) -> None:
    """Run the CLI's replay on the same conversation; its requests must match ours.

    ``replay_messages`` stops at the first refused request (ours records it and goes on), so
    the comparison covers every request up to that point.
    """
    from contextfold import ContextLengthError

    theirs: list[Any] = []
    stopped = False
    try:
        # window=None: the budget comes from max_tokens, i.e. token_budget=window here.
        await replay(
            conv.messages, {**config, "max_tokens": window}, None, on_request=theirs.append
        )
    except ContextLengthError:
        stopped = True
    ours = result.rows
    if stopped:
        first_refusal = next((i for i, r in enumerate(ours) if r.refused), None)
        if first_refusal is None or len(theirs) != first_refusal:
            result.replay_agrees = False
            result.replay_note = "replay refused a request this driver delivered"
            return
        ours = ours[:first_refusal]
        result.replay_note = f"replay stopped at the refused request {first_refusal + 1}"
    elif len(ours) != len(theirs):
        result.replay_agrees = False
        result.replay_note = f"{len(ours)} requests here, {len(theirs)} in replay"
        return
    for mine, other in zip(ours, theirs, strict=True):
        same = (
            mine.sent_tokens == other.tokens_after
            and mine.compacted == other.compacted
            and mine.level == other.level
            and mine.prefix_messages == other.prefix_messages
        )
        if not same:
            result.replay_agrees = False
            result.replay_note = f"request before message {mine.message_index} differs"
            return
    result.replay_agrees = True


# --------------------------------------------------------------------------- totals


def totals(results: list[ConversationResult], window: int, category: str) -> dict[str, Any]:
    rows = [r for res in results for r in res.rows]
    delivered = [r for r in rows if not r.refused]
    later = [r for res in results for r in res.delivered[1:]]
    later_tokens = sum(r.sent_tokens or 0 for r in later)
    levels = Counter(r.level for r in delivered if r.compacted)
    rungs = Counter(rung for r in delivered for rung in r.applied)
    agree = [res.replay_agrees for res in results if res.replay_agrees is not None]
    full_total = sum(r.full_tokens for r in delivered)
    sent_total = sum(r.sent_tokens or 0 for r in delivered)
    return {
        "category": category,
        "window": window,
        "conversations": len(results),
        "conversations_with_refusals": sum(
            1 for res in results if len(res.delivered) < len(res.rows)
        ),
        "requests": len(rows),
        "requests_refused": len(rows) - len(delivered),
        "largest_full": max((r.full_tokens for r in rows), default=0),
        "largest_sent": max((r.sent_tokens or 0 for r in delivered), default=0),
        "requests_over_window_without_contextfold": sum(1 for r in rows if r.full_tokens > window),
        "compactions": sum(1 for r in delivered if r.compacted),
        "levels_used": dict(sorted(levels.items())),
        "rungs_used": dict(rungs.most_common()),
        "views_over_window": sum(1 for r in delivered if r.over_window),
        "views_with_broken_groups": sum(1 for r in delivered if r.group_problems),
        "tokens_full_total": full_total,
        "tokens_sent_total": sent_total,
        "saved_share": 1 - sent_total / full_total if full_total else 0.0,
        "prefix_share_messages": statistics.fmean(r.prefix_share_messages for r in later)
        if later
        else None,
        "prefix_share_tokens": sum(r.prefix_tokens for r in later) / later_tokens
        if later_tokens
        else None,
        "prefix_breaks": sum(1 for r in later if not r.prefix_intact),
        "prefix_compared": len(later),
        "replay_checked": len(agree),
        "replay_agrees": sum(1 for a in agree if a),
    }


# --------------------------------------------------------------------------- output


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_report(
    results: list[ConversationResult], summary: dict[str, Any], show: int, seconds: float
) -> None:
    from rich.console import Console
    from rich.table import Table

    # A fixed width when piped (rich would default to 80 columns and squash the table).
    console = Console(width=None if sys.stdout.isatty() else 150)
    rows = sorted((r.summary() for r in results), key=lambda s: -s["largest_full"])
    shown = rows if show == 0 else rows[:show]
    table = Table(
        title=f"BFCL {summary['category']} replay, window {summary['window']:,} tokens "
        f"({len(shown)} of {len(rows)} conversations, largest first)"
    )
    columns = (
        "id", "msgs", "reqs", "refused", "max full", "max sent", "compact",
        "levels", "over", "broken", "prefix msgs", "prefix tok", "prefix breaks", "replay",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "id" else "right")
    for s in shown:
        table.add_row(
            s["id"].removeprefix(f"multi_turn_{summary['category']}_"),
            str(s["messages"]),
            str(s["requests"]),
            str(s["refused"] or ""),
            f"{s['largest_full']:,}",
            f"{s['largest_sent']:,}",
            str(s["compactions"]),
            ",".join(map(str, s["levels"])) or "-",
            str(s["over_window"]),
            str(s["broken_groups"]),
            _pct(s["prefix_share_messages"]),
            _pct(s["prefix_share_tokens"]),
            str(s["prefix_breaks"]),
            {True: "same", False: "DIFFERS", None: "-"}[s["replay_agrees"]],
        )
    console.print(table)
    t = summary
    lines = [
        f"conversations              {t['conversations']}"
        f" ({t['conversations_with_refusals']} with refused requests)",
        f"requests                   {t['requests']:,} ({t['requests_refused']} refused:"
        " protected content alone exceeds the window)",
        f"largest request            {t['largest_full']:,} tokens without contextfold, "
        f"{t['largest_sent']:,} with it (window {t['window']:,})",
        f"requests over the window   {t['requests_over_window_without_contextfold']:,} without"
        f" contextfold, {t['views_over_window']} with it",
        f"compactions                {t['compactions']:,}; levels {t['levels_used']}",
        f"rungs used                 {t['rungs_used']}",
        f"views with broken groups   {t['views_with_broken_groups']}",
        f"tokens sent                {t['tokens_sent_total']:,} of {t['tokens_full_total']:,}"
        f" ({t['saved_share']:.1%} saved)",
        f"prefix reuse               {_pct(t['prefix_share_messages'])} of messages,"
        f" {_pct(t['prefix_share_tokens'])} of tokens identical to the previous view;"
        f" previous view kept whole as prefix in {t['prefix_compared'] - t['prefix_breaks']:,}"
        f" of {t['prefix_compared']:,} requests",
        f"replay_messages agrees     on {t['replay_agrees']} of {t['replay_checked']}"
        " conversations (requests up to its first refusal)",
        f"wall time                  {seconds:.1f} s",
    ]
    console.print("\n".join(lines), highlight=False)


def _json_report(results: list[ConversationResult], summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "totals": summary,
        "conversations": [
            res.summary() | {"replay_note": res.replay_note, "rows": [asdict(r) for r in res.rows]}
            for res in results
        ],
    }


# --------------------------------------------------------------------------- refusals


@dataclass
class PolicyTally:
    """What one context policy did on a run of requests."""

    policy: str
    requests: int = 0
    refused: int = 0
    over_budget: int = 0
    split_groups: int = 0
    facts_needed: int = 0
    facts_kept: int = 0

    @property
    def facts_kept_share(self) -> float | None:
        return self.facts_kept / self.facts_needed if self.facts_needed else None


def _message_text(message: Mapping[str, Any]) -> str:
    """The words a model reads in a message: its text and its calls' arguments."""
    content = message.get("content")
    parts = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        parts += [str(b.get("text", b.get("content", ""))) for b in content if isinstance(b, dict)]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(str(function.get("arguments", call.get("arguments", ""))))
    return "\n".join(parts)


def _argument_values(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for value in node.values() for v in _argument_values(value)]
    if isinstance(node, list):
        return [v for value in node for v in _argument_values(value)]
    if isinstance(node, bool) or node is None:
        return []
    text = str(node)
    return [text] if len(text) >= 3 else []  # shorter values match anywhere by chance


def facts_needed(next_message: Mapping[str, Any] | None, history_text: str) -> set[str]:
    """Argument values of the next tool calls that the history holds (a fact the model must
    still see to make those calls); values found nowhere in the history are not counted."""
    if next_message is None:
        return set()
    values: set[str] = set()
    for call in next_message.get("tool_calls") or []:
        raw = (call.get("function") or {}).get("arguments", "{}")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            continue
        values.update(_argument_values(arguments))
    return {value for value in values if value in history_text}


def cap_tool_result(message: dict[str, Any], cap_bytes: int) -> dict[str, Any]:
    """The naive policy's ingress cap: a tool result's text cut to ``cap_bytes`` UTF-8 bytes."""
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str):
        return message
    data = content.encode()
    if len(data) <= cap_bytes:
        return message
    return dict(message, content=data[:cap_bytes].decode(errors="ignore"))


def _units(history: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Removable units, oldest first: a call and its results together, any other message alone."""
    units: list[list[int]] = []
    for index, message in enumerate(history):
        if message.get("role") == "system":
            continue
        if message.get("role") == "tool" and units and history[units[-1][0]].get("tool_calls"):
            units[-1].append(index)
        else:
            units.append([index])
    return units


def naive_view(
    history: Sequence[dict[str, Any]], costs: Sequence[int], window: int
) -> list[dict[str, Any]] | None:
    """Drop the oldest whole units until the view fits; None when the newest alone cannot."""
    units = _units(history)
    total = sum(costs)
    dropped: set[int] = set()
    for unit in units[:-1]:
        if total <= window:
            break
        dropped.update(unit)
        total -= sum(costs[i] for i in unit)
    if total > window:
        return None
    return [m for i, m in enumerate(history) if i not in dropped]


async def compare_refusals(
    conversations: Sequence[Conversation],
    config: Mapping[str, Any],
    window: int,
    cap_bytes: int,
) -> dict[str, PolicyTally]:
    """Replay each conversation under contextfold and the naive policy, request for request."""
    tallies = {"contextfold": PolicyTally("contextfold"), "naive": PolicyTally("naive")}
    for conv in conversations:
        await _compare_one(conv, config, window, cap_bytes, tallies)
    return tallies


async def _compare_one(
    conv: Conversation,
    config: Mapping[str, Any],
    window: int,
    cap_bytes: int,
    tallies: Mapping[str, PolicyTally],
) -> None:
    from contextfold import ContextFold, ContextLengthError

    ctx = ContextFold({**config, "max_tool_result_bytes": cap_bytes})
    count = _CountCache(ctx.counter)
    history: list[dict[str, Any]] = []
    costs: list[int] = []
    history_text: list[str] = []

    async def request(next_index: int) -> None:
        nxt = conv.messages[next_index] if next_index < len(conv.messages) else None
        needed = facts_needed(nxt, "\n".join(history_text))
        view: list[dict[str, Any]] | None
        try:
            view = await ctx.get_messages_for_request(token_budget=window)
            size = ctx.last_report.tokens_after
        except ContextLengthError:
            view, size = None, 0
        _tally(tallies["contextfold"], view, size, window, needed)
        naive = naive_view(history, costs, window)
        naive_size = sum(count(m) for m in naive) if naive is not None else 0
        _tally(tallies["naive"], naive, naive_size, window, needed)

    for index, message in enumerate(conv.messages):
        if message["role"] == "assistant" and index > 0:
            await request(index)
        await ctx.add_message(dict(message))
        capped = cap_tool_result(message, cap_bytes)
        history.append(capped)
        costs.append(count(capped))
        history_text.append(_message_text(message))
    await request(len(conv.messages))


def _tally(
    tally: PolicyTally,
    view: Sequence[Mapping[str, Any]] | None,
    size: int,
    window: int,
    needed: set[str],
) -> None:
    tally.requests += 1
    tally.facts_needed += len(needed)
    if view is None:
        tally.refused += 1
        return
    tally.over_budget += size > window
    tally.split_groups += bool(group_problems(view))
    text = "\n".join(_message_text(m) for m in view)
    tally.facts_kept += sum(1 for fact in needed if fact in text)


def refusal_summary_line(
    separate: Mapping[str, PolicyTally],
    chained: Mapping[str, PolicyTally],
    *,
    conversations: int,
    window: int,
    cap_bytes: int,
    chain: int,
) -> str:
    cf, nv, ccf, cnv = (
        separate["contextfold"], separate["naive"], chained["contextfold"], chained["naive"],
    )  # fmt: skip
    return (
        f"BFCL long-context, {conversations} conversations, {window:,}-token window, tool "
        f"results capped at {cap_bytes:,} bytes: contextfold refuses {cf.refused} of "
        f"{cf.requests:,} requests, naive drop-oldest {nv.refused} ({chain} chained per session: "
        f"{ccf.refused} vs {cnv.refused} of {ccf.requests:,}); views over budget "
        f"{cf.over_budget + ccf.over_budget} vs {nv.over_budget + cnv.over_budget}, split groups "
        f"{cf.split_groups + ccf.split_groups} vs {nv.split_groups + cnv.split_groups}; "
        f"facts kept {_pct(cf.facts_kept_share)} vs {_pct(nv.facts_kept_share)}."
    )


def print_refusals(
    runs: Mapping[str, Mapping[str, PolicyTally]], summary_line: str, seconds: float
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title="Refusals beside a naive drop-oldest policy")
    table.add_column("metric")
    for run_name in runs:
        for policy in ("contextfold", "naive"):
            table.add_column(f"{run_name}\n{policy}", justify="right")
    metrics = (
        ("requests", lambda t: f"{t.requests:,}"),
        ("refused", lambda t: str(t.refused)),
        ("views over budget", lambda t: str(t.over_budget)),
        ("views splitting a call group", lambda t: str(t.split_groups)),
        ("facts kept", lambda t: f"{_pct(t.facts_kept_share)} of {t.facts_needed:,}"),
    )
    for label, render in metrics:
        table.add_row(
            label,
            *(render(tallies[p]) for tallies in runs.values() for p in ("contextfold", "naive")),
        )
    console.print(table)
    console.print(summary_line, highlight=False, soft_wrap=True)  # one line, quotable
    console.print(f"wall time {seconds:.1f} s", highlight=False)


def main_refusals(args: argparse.Namespace, config: dict[str, Any]) -> int:
    started = time.perf_counter()
    window = args.window or REFUSAL_WINDOW
    corpus = build_corpus(args.category, args.limit)
    conversations = corpus.conversations
    chain = args.chain or REFUSAL_CHAIN
    separate = asyncio.run(compare_refusals(conversations, config, window, args.cap_bytes))
    chained_convs = chain_conversations(conversations, chain)
    chained = asyncio.run(compare_refusals(chained_convs, config, window, args.cap_bytes))
    line = refusal_summary_line(
        separate,
        chained,
        conversations=len(conversations),
        window=window,
        cap_bytes=args.cap_bytes,
        chain=chain,
    )
    runs = {"one per session": separate, f"{chain} chained": chained}
    print_refusals(runs, line, time.perf_counter() - started)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "window": window,
            "cap_bytes": args.cap_bytes,
            "chain": chain,
            "summary": line,
            "runs": {
                name: {p: asdict(t) | {"facts_kept_share": t.facts_kept_share}
                       for p, t in tallies.items()}
                for name, tallies in runs.items()
            },
        }  # fmt: skip
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- ladders


LADDER_WINDOW = 8_000
LADDER_CAP_BYTES = 4_096
# The summary is reserved in every view once written: 400 tokens is 5 % of the default
# 8,000-token window, enough for the digest to keep each ask and call of a span.
LADDER_SUMMARY_TOKENS = 400
LADDER_SUMMARY_INPUT_TOKENS = 8_000


@dataclass(frozen=True)
class Ladder:
    """One compaction ladder of the side-by-side run: its strategies, and whether it needs a
    summarizer."""

    name: str
    strategies: tuple[Any, ...]
    summarizes: bool = False


def ladders(
    summary_tokens: int = LADDER_SUMMARY_TOKENS,
    summary_input_tokens: int = LADDER_SUMMARY_INPUT_TOKENS,
) -> tuple[Ladder, ...]:
    """The three ladders compared: the defaults, the defaults plus clear_tool_results, and
    summarize in place of text truncation (drop_oldest still the last resort)."""
    from contextfold.compaction.ladder import DEFAULT_STRATEGIES

    defaults = tuple(DEFAULT_STRATEGIES)
    at = defaults.index("truncate_long_text") + 1
    summarize = {
        "name": "summarize",
        "max_input_tokens": summary_input_tokens,
        "max_output_tokens": summary_tokens,
    }
    return (
        Ladder("defaults", defaults),
        Ladder("clear_tool_results", (*defaults[:at], "clear_tool_results", *defaults[at:])),
        Ladder(
            "summarize",
            ("strip_thinking", "truncate_tool_results", summarize, "drop_oldest"),
            summarizes=True,
        ),
    )


@dataclass
class LadderTally:
    """What one ladder did on a run of requests."""

    ladder: str
    requests: int = 0
    refused: int = 0
    tokens_sent: int = 0  # the views sent, message by message (the provider's count)
    tokens_cached: int = 0  # of those, the prefix shared with the previous request's view
    over_budget: int = 0
    split_groups: int = 0
    compactions: int = 0
    facts_needed: int = 0
    facts_kept: int = 0
    summary_calls: int = 0  # summary_stats, summed over conversations
    summary_reused: int = 0
    summary_written: int = 0
    summary_failures: int = 0
    summary_event_calls: int = 0  # the calls the context:summary events report
    summary_tokens: int = 0  # what the summarizer read and wrote (prompt, span, answer)

    @property
    def cache_share(self) -> float | None:
        return self.tokens_cached / self.tokens_sent if self.tokens_sent else None

    @property
    def facts_kept_share(self) -> float | None:
        return self.facts_kept / self.facts_needed if self.facts_needed else None


class MeteredSummarizer:
    """The scripted summarizer, metered as an adapter would send it: the summary prompt and
    the span as one transcript in, the summary out (o200k). Library use records no provider
    usage, and the summarizer's cost belongs in a ladder's totals."""

    def __init__(self) -> None:
        from contextfold.summaries import scripted_summarizer

        self._inner = scripted_summarizer()
        self.name = self._inner.name
        self.prompt = self._inner.prompt
        self.tokens = 0

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        from contextfold.summaries.transcript import render_transcript

        answer = await self._inner(messages, max_tokens)
        counter = self._inner.counter
        self.tokens += counter.count_text(self.prompt.text)
        self.tokens += counter.count_text(render_transcript(messages))
        self.tokens += counter.count_text(answer)
        return answer


def _provider_form(message: Mapping[str, Any]) -> dict[str, Any]:
    """A view message as a provider receives it: metadata is bookkeeping, never sent
    (provider-scripted drops it before counting and comparing)."""
    return {k: v for k, v in message.items() if k != "metadata"}


async def replay_ladder(
    conv: Conversation,
    ladder: Ladder,
    config: Mapping[str, Any],
    window: int,
    cap_bytes: int,
    tally: LadderTally,
) -> None:
    """Replay one conversation under one ladder, adding what it did to ``tally``.

    Cache share follows provider-scripted's prefix rule: the longest run of leading messages
    identical to the previous request's, costed message by message by exact o200k count.
    """
    from contextfold import ContextFold, ContextLengthError
    from contextfold.events import SUMMARY

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == SUMMARY:
            tally.summary_event_calls += int(data.get("calls", 0))

    summarizer = MeteredSummarizer() if ladder.summarizes else None
    ctx = ContextFold(
        {**config, "max_tool_result_bytes": cap_bytes, "strategies": list(ladder.strategies)},
        summarizer=summarizer,
        on_event=on_event,
    )
    count = _CountCache(ctx.counter)
    history_text: list[str] = []
    previous: list[dict[str, Any]] = []

    async def request(next_index: int) -> None:
        nonlocal previous
        nxt = conv.messages[next_index] if next_index < len(conv.messages) else None
        needed = facts_needed(nxt, "\n".join(history_text))
        tally.requests += 1
        tally.facts_needed += len(needed)
        try:
            view = await ctx.get_messages_for_request(token_budget=window)
        except ContextLengthError:
            tally.refused += 1
            previous = []  # nothing was sent: the next request finds no cached prefix
            return
        sent = [_provider_form(m) for m in view]
        costs = [count(m) for m in view]
        shared = _common_prefix(previous, sent)
        tally.tokens_sent += sum(costs)
        tally.tokens_cached += sum(costs[:shared])
        tally.over_budget += ctx.last_report.tokens_after > window
        tally.split_groups += bool(group_problems(view))
        tally.compactions += ctx.last_report.compacted
        text = "\n".join(_message_text(m) for m in view)
        tally.facts_kept += sum(1 for fact in needed if fact in text)
        previous = sent

    for index, message in enumerate(conv.messages):
        if message["role"] == "assistant" and index > 0:
            await request(index)
        await ctx.add_message(dict(message))
        history_text.append(_message_text(message))
    await request(len(conv.messages))
    stats = ctx.summary_stats
    tally.summary_calls += stats.calls
    tally.summary_reused += stats.reused
    tally.summary_written += stats.written
    tally.summary_failures += stats.failures
    tally.summary_tokens += summarizer.tokens if summarizer is not None else 0


async def compare_ladders(
    conversations: Sequence[Conversation],
    ladder_list: Sequence[Ladder],
    config: Mapping[str, Any],
    window: int,
    cap_bytes: int,
) -> dict[str, LadderTally]:
    """Every conversation under every ladder, side by side in one run."""
    tallies = {ladder.name: LadderTally(ladder.name) for ladder in ladder_list}
    for conv in conversations:
        for ladder in ladder_list:
            await replay_ladder(conv, ladder, config, window, cap_bytes, tallies[ladder.name])
    return tallies


def ladder_summary_line(
    tallies: Mapping[str, LadderTally],
    *,
    conversations: int,
    window: int,
    cap_bytes: int,
    chain: int = 1,
) -> str:
    def part(t: LadderTally) -> str:
        text = (
            f"{t.ladder} {t.tokens_sent:,} tokens sent, {_pct(t.cache_share)} from the cache, "
            f"{t.refused} refused, facts kept {_pct(t.facts_kept_share)}"
        )
        if t.summary_calls or t.summary_reused or t.summary_written:
            text += (
                f", summarizer calls/reused/written "
                f"{t.summary_calls}/{t.summary_reused}/{t.summary_written} "
                f"({t.summary_tokens:,} tokens)"
            )
        return text

    over = sum(t.over_budget for t in tallies.values())
    split = sum(t.split_groups for t in tallies.values())
    sessions = f" ({chain} chained per session)" if chain > 1 else ""
    return (
        f"BFCL long-context, {conversations} conversations{sessions}, {window:,}-token window, "
        f"tool results capped at {cap_bytes:,} bytes: "
        + "; ".join(part(t) for t in tallies.values())
        + f"; views over budget {over}, split groups {split}."
    )


def print_ladders(tallies: Mapping[str, LadderTally], summary_line: str, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title="Ladders side by side")
    table.add_column("metric")
    for name in tallies:
        table.add_column(name, justify="right")
    metrics = (
        ("requests", lambda t: f"{t.requests:,}"),
        ("refused", lambda t: str(t.refused)),
        ("tokens sent", lambda t: f"{t.tokens_sent:,}"),
        ("cache share", lambda t: _pct(t.cache_share)),
        ("tokens not from the cache", lambda t: f"{t.tokens_sent - t.tokens_cached:,}"),
        ("compactions", lambda t: str(t.compactions)),
        ("views over budget", lambda t: str(t.over_budget)),
        ("views splitting a call group", lambda t: str(t.split_groups)),
        ("summarizer calls / reused / written",
         lambda t: f"{t.summary_calls} / {t.summary_reused} / {t.summary_written}"),
        ("summarizer tokens (in + out)", lambda t: f"{t.summary_tokens:,}"),
        ("summaries failed", lambda t: str(t.summary_failures)),
        ("facts kept", lambda t: f"{_pct(t.facts_kept_share)} of {t.facts_needed:,}"),
    )  # fmt: skip
    for label, render in metrics:
        table.add_row(label, *(render(t) for t in tallies.values()))
    console.print(table)
    console.print(summary_line, highlight=False, soft_wrap=True)  # one line, quotable
    console.print(f"wall time {seconds:.1f} s", highlight=False)


def main_ladders(args: argparse.Namespace, config: dict[str, Any]) -> int:
    started = time.perf_counter()
    window = args.window or LADDER_WINDOW
    cap_bytes = args.cap_bytes
    chain = args.chain or 1
    conversations = build_corpus(args.category, args.limit).conversations
    sessions = chain_conversations(conversations, chain) if chain > 1 else conversations
    ladder_list = ladders(args.summary_tokens, args.summary_input_tokens)
    tallies = asyncio.run(compare_ladders(sessions, ladder_list, config, window, cap_bytes))
    line = ladder_summary_line(
        tallies,
        conversations=len(conversations),
        window=window,
        cap_bytes=cap_bytes,
        chain=chain,
    )
    print_ladders(tallies, line, time.perf_counter() - started)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "window": window,
            "cap_bytes": cap_bytes,
            "chain": chain,
            "summary_tokens": args.summary_tokens,
            "summary_input_tokens": args.summary_input_tokens,
            "summary": line,
            "ladders": {
                t.ladder: asdict(t)
                | {"cache_share": t.cache_share, "facts_kept_share": t.facts_kept_share}
                for t in tallies.values()
            },
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- main


async def run(
    conversations: list[Conversation], config: dict[str, Any], window: int, check: bool
) -> list[ConversationResult]:
    replay = _replay_function() if check else None
    results = []
    for conv in conversations:
        result = await replay_conversation(conv, config, window)
        if replay is not None:
            await cross_check(result, conv, config, window, replay)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--category", default="long_context", help="BFCL multi-turn category")
    parser.add_argument("--limit", type=int, default=None, help="replay at most N conversations")
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help=f"token budget ({DEFAULT_WINDOW:,}; {REFUSAL_WINDOW:,} with --refusals, "
        f"{LADDER_WINDOW:,} with --ladders)",
    )
    parser.add_argument(
        "--refusals",
        action="store_true",
        help="compare refusals with a naive drop-oldest policy, alone and chained",
    )
    parser.add_argument(
        "--ladders",
        action="store_true",
        help="compare three ladders side by side (defaults, +clear_tool_results, summarize)",
    )
    parser.add_argument(
        "--cap-bytes",
        type=int,
        default=REFUSAL_CAP_BYTES,
        help="with --refusals or --ladders: ingress cap on tool results in bytes",
    )
    parser.add_argument(
        "--summary-tokens",
        type=int,
        default=LADDER_SUMMARY_TOKENS,
        help="with --ladders: the summarize rung's max_output_tokens",
    )
    parser.add_argument(
        "--summary-input-tokens",
        type=int,
        default=LADDER_SUMMARY_INPUT_TOKENS,
        help="with --ladders: the summarize rung's max_input_tokens (also sets its block size)",
    )
    parser.add_argument(
        "--chain",
        type=int,
        default=None,
        help=f"conversations chained into one session (with --refusals: {REFUSAL_CHAIN}, run "
        "beside one per session; with --ladders: 1)",
    )
    parser.add_argument(
        "--config",
        default="{}",
        help="contextfold config as JSON, e.g. '{\"truncate_chars\": 500}'",
    )
    parser.add_argument("--show", type=int, default=20, help="conversations in the table (0: all)")
    parser.add_argument(
        "--no-check", action="store_true", help="skip the cross-check with replay_messages"
    )
    parser.add_argument("--json", type=Path, help="also write every request to this JSON file")
    args = parser.parse_args(argv)
    if args.window is not None and args.window < 1:
        parser.error("--window must be a positive number of tokens")
    if args.cap_bytes < 1024:
        parser.error("--cap-bytes must be at least 1024 (contextfold's minimum)")
    if args.chain is not None and args.chain < 1:
        parser.error("--chain must be at least 1")
    try:
        config = json.loads(args.config)
    except json.JSONDecodeError as exc:
        parser.error(f"--config is not valid JSON: {exc}")
    if not isinstance(config, dict):
        parser.error("--config must be a JSON object of contextfold settings")
    if args.refusals and args.ladders:
        parser.error("--refusals and --ladders are separate runs: choose one")
    if args.summary_tokens < 1:
        parser.error("--summary-tokens must be a positive number of tokens")
    if args.refusals:
        return main_refusals(args, config)
    if args.ladders:
        if "strategies" in config:
            parser.error("--ladders sets strategies itself; leave them out of --config")
        return main_ladders(args, config)
    args.window = args.window or DEFAULT_WINDOW

    started = time.perf_counter()
    try:
        corpus = build_corpus(args.category, args.limit)
    except ValueError as exc:
        parser.error(str(exc))
    if corpus.skipped:
        print(f"skipped {len(corpus.skipped)} conversations (simulator missing)", file=sys.stderr)
    results = asyncio.run(run(corpus.conversations, config, args.window, not args.no_check))
    summary = totals(results, args.window, args.category)
    print_report(results, summary, args.show, time.perf_counter() - started)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_json_report(results, summary), indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
