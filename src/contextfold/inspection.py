"""What each request's view held: the data model of the inspector page.

The view changes only at compaction passes: between two passes it is the last pass's view
plus the messages admitted since (appended in place, see `compaction.sticky`). So a
`ViewRecorder` keeps, per committed pass, a reference to the sticky decisions it made (a
`FoldState` is never changed once committed; a later pass works on a copy) and how long
history was then: O(1) per request, nothing copied. `inspect_views` then turns those passes
into `PassView` records (each walks its own view's units, never history) and the admitted
messages into `MessageFacts`; `Inspection.view_of(request)` derives any request's view from
the last pass before it and the messages appended since.

What a view item says of a message: ``kept`` (sent as admitted), ``shortened``, ``cleared``
(a tool result replaced by its placeholder), ``thinking`` (earlier thinking left out); what
the pass took out is listed as ``dropped`` and ``summarized`` ranges of recall ids, beside
the notice and the summary as the view carries them (the identifier ledger's pages, which
stand right before the notice, included in its text).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compaction.planner import first_affected_unit
from .compaction.truncate import CLEARED
from .compaction.working import FoldState
from .context_state import ContextState
from .history import History
from .recall import recall_id

# What a view item says of its message (the page's legend uses the same words).
KEPT = "kept"
SHORTENED = "shortened"
CLEARED_STATUS = "cleared"
THINKING = "thinking"
NOTICE = "notice"
SUMMARY = "summary"
# A view's special items in a pass layout (entry runs are non-negative pairs).
NOTICE_SLOT = -1
SUMMARY_SLOT = -2
_CLEARED_HEAD = CLEARED.split("{", 1)[0]
PREVIEW_CHARS = 160


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One committed pass, as recorded when the request that made it was delivered."""

    request: int  # 1-based number of that request
    messages: int  # history length then: the pass decided about entries before it
    units: int
    state: FoldState  # the committed decisions (never changed after commit)
    notice: dict[str, Any] | None
    notice_cost: int
    # What the request's report said of its pass: sizes before and after (the context's
    # estimates), the level it reached and the rungs that changed something.
    tokens_before: int = 0
    tokens_after: int = 0
    level: int = 0
    applied: tuple[str, ...] = ()


class ViewRecorder:
    """Notes every committed pass of one context, request by request (O(1) each)."""

    def __init__(self, state: ContextState) -> None:
        self.state = state
        self._last = state.sticky.state
        self.passes: list[PassRecord] = []

    def after_request(self, request: int) -> None:
        """Call after request ``request`` (1-based) was delivered."""
        sticky = self.state.sticky
        if sticky.state is self._last:
            return
        self._last = sticky.state
        history, report = self.state.history, self.state.last_report
        self.passes.append(
            PassRecord(
                request,
                len(history.entries),
                len(history.units),
                sticky.state,
                sticky.notice,
                sticky.notice_cost,
                report.tokens_before if report is not None else 0,
                report.tokens_after if report is not None else 0,
                report.level if report is not None else 0,
                tuple(report.applied) if report is not None else (),
            )
        )


@dataclass(frozen=True, slots=True)
class MessageFacts:
    """One admitted message as the page lists it."""

    role: str
    unit: int
    tokens: int  # raw tokens as counted on admission (0: nothing sent)
    sent: bool  # an uncompacted view carries it
    preview: str


@dataclass(slots=True)
class PassView:
    """A pass's view: its layout in view order and what it took out.

    ``layout`` holds ``(start, end)`` runs of history indexes, and ``(NOTICE_SLOT, 0)`` /
    ``(SUMMARY_SLOT, 0)`` where the notice and the summary stand. ``changed`` maps the
    history index of each shortened, cleared or thinning message to ``(status, preview of
    what the view sends)``. ``dropped`` and ``summarized`` are ``(first, last)`` history
    index ranges (inclusive) of what left the view.
    """

    request: int
    messages: int
    layout: list[tuple[int, int]]
    changed: dict[int, tuple[str, str]]
    dropped: list[tuple[int, int]]
    summarized: list[tuple[int, int]]
    notice: str | None
    notice_tokens: int
    summary: str | None
    level: int  # the highest level the view has been through
    rungs: dict[str, int]  # rung name -> messages changed, all passes so far
    tokens_before: int = 0  # the request's size before this pass (the context's estimate)
    tokens_after: int = 0
    pass_level: int = 0  # the level this pass reached
    applied: tuple[str, ...] = ()  # the rungs that changed something in this pass


@dataclass(frozen=True, slots=True)
class ViewItem:
    """One item of a request's view."""

    status: str  # KEPT, SHORTENED, CLEARED_STATUS, THINKING, NOTICE or SUMMARY
    index: int | None = None  # history index (None for the notice and the summary)
    text: str | None = None  # the shortened form, the notice's or the summary's text

    @property
    def recall_id(self) -> str | None:
        return recall_id(self.index) if self.index is not None else None


@dataclass
class Inspection:
    """The admitted messages, the passes, and each request's history length."""

    messages: list[MessageFacts]
    passes: list[PassView]
    request_messages: list[int]  # per request (0-based list), history length then
    _pass_requests: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._pass_requests = [p.request for p in self.passes]

    def pass_of(self, request: int) -> PassView | None:
        """The last pass made at or before request ``request`` (1-based)."""
        position = bisect.bisect_right(self._pass_requests, request) - 1
        return self.passes[position] if position >= 0 else None

    def view_of(self, request: int) -> list[ViewItem]:
        """Request ``request``'s view (1-based), derived from its pass and what came after."""
        if not 1 <= request <= len(self.request_messages):
            raise ValueError(f"request {request} is not in 1..{len(self.request_messages)}")
        count = self.request_messages[request - 1]
        found = self.pass_of(request)
        items: list[ViewItem] = []
        start = 0
        if found is not None:
            items.extend(_layout_items(found))
            start = found.messages
        messages = self.messages
        appended = sorted((messages[i].unit, i) for i in range(start, count) if messages[i].sent)
        items.extend(ViewItem(KEPT, i) for _, i in appended)
        return items


def _layout_items(view: PassView) -> Iterator[ViewItem]:
    changed = view.changed
    for start, end in view.layout:
        if start == NOTICE_SLOT:
            yield ViewItem(NOTICE, text=view.notice)
        elif start == SUMMARY_SLOT:
            yield ViewItem(SUMMARY, text=view.summary)
        else:
            for index in range(start, end):
                status = changed.get(index)
                if status is None:
                    yield ViewItem(KEPT, index)
                else:
                    yield ViewItem(status[0], index, status[1])


def inspect_views(
    history: History,
    passes: Sequence[PassRecord],
    request_messages: Sequence[int],
    *,
    preview_chars: int = PREVIEW_CHARS,
) -> Inspection:
    """The inspection of a finished run: every message, every pass's view, and each
    request's history length (``request_messages``, in request order)."""
    messages = [
        MessageFacts(
            entry.message.get("role", "?") if isinstance(entry.message, Mapping) else "?",
            entry.unit,
            entry.cost,
            entry.view is not None,
            preview(entry.message, preview_chars),
        )
        for entry in history.entries
    ]
    views = [pass_view(history, record, preview_chars) for record in passes]
    return Inspection(messages, views, list(request_messages))


def pass_view(history: History, record: PassRecord, preview_chars: int = PREVIEW_CHARS) -> PassView:
    """One pass's layout, walking the units its view kept (as `assemble_view` does)."""
    state, limit = record.state, record.messages
    units = history.units
    anchor = first_affected_unit(history, state)
    summary_at = state.summarized_units.first() if state.summary is not None else None
    layout: list[tuple[int, int]] = []
    # The ledger's pages stand right before the notice (`assemble_view`): one slot for both.
    pages = state.ledger.pages
    placed = record.notice is None and not pages

    def add(index: int) -> None:
        if layout and layout[-1][1] == index and layout[-1][0] >= 0:
            layout[-1] = (layout[-1][0], index + 1)
        else:
            layout.append((index, index + 1))

    for unit_index in state.kept_units(record.units):
        if summary_at is not None and unit_index > summary_at:
            layout.append((SUMMARY_SLOT, 0))
            summary_at = None
        if not placed and unit_index >= anchor:
            layout.append((NOTICE_SLOT, 0))
            placed = True
        for index in units[unit_index].entries:
            if index < limit and (
                index in state.truncated or history.entries[index].view is not None
            ):
                add(index)
    if summary_at is not None:
        layout.append((SUMMARY_SLOT, 0))
    if not placed:
        layout.append((NOTICE_SLOT, 0))
    changed = {
        index: (_status(index, swap, state), preview(swap, preview_chars))
        for index, (swap, _cost) in state.truncated.items()
    }
    removed_runs, summarized_runs = state.removed_units.runs(), state.summarized_units.runs()
    return PassView(
        request=record.request,
        messages=record.messages,
        layout=layout,
        changed=changed,
        dropped=_entry_ranges(history, _runs_without(removed_runs, summarized_runs)),
        summarized=_entry_ranges(history, summarized_runs),
        notice="\n".join(
            [
                *(_full_text(page) for page in pages),
                *([_full_text(record.notice)] if record.notice else []),
            ]
        ),
        notice_tokens=record.notice_cost + state.ledger.cost,
        summary=_full_text(state.summary),
        level=state.level,
        rungs=dict(state.rungs_used),
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        pass_level=record.level,
        applied=record.applied,
    )


def _status(index: int, swap: Mapping[str, Any], state: FoldState) -> str:
    if index in state.stripped and index not in state.shortened:
        return THINKING
    if _full_text(swap, limit=len(_CLEARED_HEAD) + 1).startswith(_CLEARED_HEAD):
        return CLEARED_STATUS
    return SHORTENED


def _runs_without(
    runs: list[tuple[int, int]], taken: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """``runs`` (half-open unit ranges) less ``taken``: a walk of the runs, never of units."""
    out: list[tuple[int, int]] = []
    k = 0
    for start, end in runs:
        while k < len(taken) and taken[k][1] <= start:
            k += 1
        position, j = start, k
        while j < len(taken) and taken[j][0] < end:
            if taken[j][0] > position:
                out.append((position, taken[j][0]))
            position = max(position, taken[j][1])
            j += 1
        if position < end:
            out.append((position, end))
    return out


def _entry_ranges(history: History, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive history-index ranges of the entries of the units in ``runs`` (half-open
    unit ranges), coalesced: each run costs its two end units, not its length."""
    ranges: list[tuple[int, int]] = []
    units = history.units
    for start, end in runs:
        low, high = min(units[start].entries), max(units[end - 1].entries)
        if ranges and ranges[-1][1] + 1 >= low:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], high))
        else:
            ranges.append((low, high))
    return ranges


def preview(message: Any, chars: int = PREVIEW_CHARS) -> str:
    """The start of what a message says: its text, else its calls, else its blocks."""
    text = _full_text(message, limit=chars + 1)
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def _full_text(message: Any, limit: int | None = None) -> str:
    """A message's words in one string (text, tool calls, tool results), up to ``limit``."""
    if message is None:
        return ""
    if not isinstance(message, Mapping):
        return str(message)[:limit]
    parts: list[str] = []
    size = 0
    for part in _parts(message):
        parts.append(part)
        size += len(part) + 1
        if limit is not None and size >= limit:
            break
    text = " ".join(parts)
    return text if limit is None else text[:limit]


def _parts(message: Mapping[str, Any]) -> Iterator[str]:
    content = message.get("content")
    if isinstance(content, str):
        if content:
            yield content
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text":
                yield str(block.get("text", ""))
            elif kind == "tool_use":
                yield f"{block.get('name')}({_compact(block.get('input'))})"
            elif kind == "tool_result":
                inner = block.get("content")
                yield inner if isinstance(inner, str) else _full_text({"content": inner})
            elif kind in ("thinking", "redacted_thinking"):
                yield "[thinking]"
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        raw_function = call.get("function")
        function = raw_function if isinstance(raw_function, Mapping) else {}
        name = call.get("tool") or call.get("name") or function.get("name")
        yield f"{name}({_compact(call.get('arguments', function.get('arguments')))})"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


__all__ = [
    "CLEARED_STATUS",
    "KEPT",
    "NOTICE",
    "SHORTENED",
    "SUMMARY",
    "THINKING",
    "Inspection",
    "MessageFacts",
    "PassRecord",
    "PassView",
    "ViewItem",
    "ViewRecorder",
    "inspect_views",
    "pass_view",
    "preview",
]
