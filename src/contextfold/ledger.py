"""The identifier ledger: the values a compaction pass takes out of the view, kept in it.

A pass that drops a turn, clears or shortens a tool result, or summarizes a span takes text
out of the view, and with it ids, amounts, paths, URLs and emails the agent may need tasks
later ("refund the customer whose parcel went missing"). The ledger keeps them: the
identifier-like values (`contextfold.identifiers`, the same definition the eval's fact rule
uses) of every message taken out are extracted without a model call, ranked, and listed in
messages the view carries (``metadata.source == "context-fold"``, ``ledger: true``), each
value once, after the recall id of the message it was taken from, grouped by the task (the
human prompt) that message belongs to:

    <context-ledger>
    ...
    task r95 "Hana Whitfield from Vantor Tools wrote in: a parcel they ordered in…"
     r135: ORD-79347; 3564.94; TRK6UNA9I4JA

The ledger is a share of the budget (``ledger_share``). Its pages never change once made: a
pass appends a page, so the prefix up to it stays byte-stable and provider caches keep
hitting. When it is full, a pass whose new values rank above listed ones packs the best of
both into one page again; the values left out are counted in the compaction notice (recall
by id returns any message whole).

Every word of a page rides on each request until the next repack, so a page says each thing
once: a task's prompt words on the first page that names it (later pages name the task by
its id), a number in the form its message writes it (not ``22.5; 22.50``), ids named alone
a space apart, and no id the view already names (a shortened result's marker). Together
with a shorter head and compact notice, they took `contextfold eval`'s BFCL tokens sent at
4,000 tokens from 3.93M to 3.84M, and the long-horizon far facts in view or ledger from 79
to 96 of 129 (the floor then 750 tokens instead of 800).

Ranking, most likely needed first, from what the conversation itself shows (`ValueIndex`):
a value the user wrote; one an answer of the agent stated; one the agent wrote in a call
whose result it then acted on (a lead it followed); in a tool result, a value the agent
drew from later, or one on the same row as such a value (a row of at most
`ITEM_ROW_VALUES`); then any value not one of many look-alikes (an id among forty ids of
the same shape ranks low; one of more than `PER_MESSAGE` of its shape in a message is not
listed for being in what a task concluded on alone); newer before older. A result of
hundreds of look-alike numbers (a one-line JSON quote with its averages, BFCL's 20,000-token
results) filled the ledger with them: `contextfold eval`, BFCL tokens sent at 4k / 8k / 16k
4.09 / 7.17 / 9.60M with them listed, 4.04 / 7.08 / 9.36M without (far facts in view or
ledger 90 / 97 / 99% then, 89 / 96 / 97% now); the long-horizon figures are unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any, NamedTuple

from .history import History
from .identifiers import held_values, occurs
from .messages import NOTICE_SOURCE, Kind, content_text, well_formed_text
from .recall import ID_PREFIX, recall_id
from .tokens import TokenCounter

LEDGER_OPEN = "<context-ledger>"
LEDGER_CLOSE = "</context-ledger>"
FIRST_PAGE_HEAD = (
    "Values taken out of this view, by task, after the id of the message holding them "
    "(context_recall returns it whole)."
)
NEXT_PAGE_HEAD = "(continued)"
CHARS_PER_TOKEN = 2.5  # values are dense (ids, digits): fewer characters per token than prose
PROMPT_WORDS_CHARS = 72  # how much of a task's prompt names it
SEPARATOR = "; "
# A value held by more messages in the view than this is too common to say which one the
# agent drew from (a currency, a status word): it marks none of them used.
MAX_HOLDERS = 64
# The call groups before an answer whose messages count as what the task concluded on.
CONCLUDING_GROUPS = 2
# At most this many values of one message are candidates (its best): the rest of a long
# listing is look-alikes its recall id still reaches.
PER_MESSAGE = 48
# At most this many ranked values wait for a repack besides the listed ones.
POOL_SIZE = 512
# A repack fills the ledger to this share of its room, leaving room for later pages.
REPACK_FILL = 0.75
# The smallest page worth appending, in tokens (a header and a line or two).
MIN_PAGE_TOKENS = 24
# Values ranked below this (look-alikes nothing in the conversation points to) are not
# listed: their room is worth more to the values that come later.
MIN_SCORE = 2
MORE_LINE = " more values in "
# Between the ids a line names alone: a space costs a token less per id than ", " (a small
# window's page names dozens of messages by id: `contextfold eval`, long-horizon at 4,000
# tokens, a page of 74 ids took 221 tokens with commas, 148 without).
ID_SEPARATOR = " "
# Values the agent and the user wrote, kept to judge later messages: oldest forgotten first
# past this many (a long session's early values are in the ledger or out of reach by then).
MAX_REMEMBERED = 200_000

_RUN = re.compile(r"[A-Za-z0-9]+")
LOOKALIKES = 4  # this many values of one shape in a message make a list of look-alikes
# A row of more values than this is a listing of its own (a one-line JSON document, its
# arrays), not the row of one item: a value the agent drew from it lifts no other.
ITEM_ROW_VALUES = 8


def ledger_metadata() -> dict[str, Any]:
    return {"source": NOTICE_SOURCE, "ledger": True}


def is_ledger_page(message: Mapping[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("ledger") is True


# -- what the conversation shows about its values -------------------------------------------


@dataclass(slots=True)
class _Read:
    """One message as the index read it: its task and its values, row by row."""

    task: int | None
    rows: tuple[tuple[str, ...], ...]


class ValueIndex:
    """The values of a history's messages, read once each, and what the agent did with them.

    Read lazily (`catch_up`, at the start of a compaction pass), so admitting a message costs
    nothing more: each message is read once, when the first pass after its admission runs,
    and its values are kept while it is in the view (`forget` drops those a committed pass
    took out). It knows, per value, the newest message of the agent that wrote it, the newest
    human prompt that named it, and the newest answer (an assistant turn without calls) that
    stated it; per message in the view, the newest turn that drew a value from it
    (`last_use`: a tool result the agent copied an id from is in use, whatever its age).
    """

    def __init__(self) -> None:
        self._read: dict[int, _Read] = {}
        self._holders: dict[str, list[int]] = {}
        self._last_use: dict[int, int] = {}
        self._written: dict[str, int] = {}
        self._asked: dict[str, int] = {}
        self._answered: dict[str, int] = {}
        self._led: dict[str, int] = {}  # values the agent wrote in calls whose results it used
        # Messages of the last call groups before an answer (a turn without calls): the
        # results a task concluded on.
        self._concluding: set[int] = set()
        self._read_to = 0
        self._task: int | None = None

    # -- reading ---------------------------------------------------------------------------

    def catch_up(self, history: History, kept_units: Iterable[int]) -> None:
        """Read every message admitted since the last call. The first call on a history whose
        view already left messages out (a resumed session) reads the view's messages only."""
        entries = history.entries
        end = len(entries)
        if self._read_to >= end:
            return
        if self._read_to == 0 and history.units:
            kept = sorted(i for u in kept_units for i in history.units[u].entries)
            if len(kept) < end:
                for index in kept:
                    self._read_one(history, index)
                self._read_to = end
                return
        for index in range(self._read_to, end):
            self._read_one(history, index)
        self._read_to = end
        if len(self._written) + len(self._asked) + len(self._led) > MAX_REMEMBERED:
            for remembered in (self._written, self._asked, self._answered, self._led):
                _forget_oldest_half(remembered)

    def _read_one(self, history: History, index: int) -> None:
        entry = history.entries[index]
        kind = entry.info.kind
        if kind is Kind.HUMAN:
            self._task = index
        if entry.view is None:
            rows: tuple[tuple[str, ...], ...] = ()
        else:
            # What the view sends (lone surrogates made well formed), as the model reads it.
            rows = tuple(held_values(entry.view))
        self._read[index] = _Read(self._task, rows)
        if not rows:
            return
        values = [v for row in rows for v in row]
        if kind is Kind.ASSISTANT and not entry.info.call_ids:
            self._mark_concluding(history, entry.unit)
        if kind is Kind.ASSISTANT:
            answer = not entry.info.call_ids
            for value in values:
                self._written[value] = index
                if answer:
                    self._answered[value] = index
                self._echo(history, value, index)
        elif kind is Kind.HUMAN:
            for value in values:
                self._asked[value] = index
                self._echo(history, value, index)
        holders = self._holders
        for value in values:
            found = holders.get(value)
            if found is None:
                holders[value] = [index]
            elif len(found) <= MAX_HOLDERS:
                found.append(index)

    def _mark_concluding(self, history: History, unit: int) -> None:
        """The last `CONCLUDING_GROUPS` call groups before the answer at ``unit`` (within
        its task) hold what the task concluded on."""
        units = history.units
        groups = 0
        for before in range(unit - 1, max(-1, unit - 1 - 4 * CONCLUDING_GROUPS), -1):
            found = units[before]
            first = history.entries[found.start].info.kind
            if first is Kind.HUMAN or groups >= CONCLUDING_GROUPS:
                return
            if found.is_group:
                groups += 1
                self._concluding.update(i for i in found.entries if i in self._read)

    def _echo(self, history: History, value: str, index: int) -> None:
        """``value`` was written at ``index``: every earlier message in the view holding it
        was drawn from."""
        found = self._holders.get(value)
        if not found or len(found) > MAX_HOLDERS:
            return
        entries = history.entries
        for holder in found:
            if holder >= index or holder not in self._read:
                continue
            self._last_use[holder] = index
            if entries[holder].info.kind is Kind.TOOL_RESULT:
                # The result of a call was used: the call's own values were a lead followed.
                caller = history.units[entries[holder].unit].start
                read = self._read.get(caller)
                if read is not None and entries[caller].info.kind is Kind.ASSISTANT:
                    for row in read.rows:
                        for written in row:
                            self._led[written] = caller

    def forget(self, history: History, removed: Any) -> None:
        """Drop what is kept of messages whose unit is in ``removed`` (out of the view)."""
        entries = history.entries
        outside = getattr(removed, "outside", None)
        if outside is not None:
            # A set of the view's units answers faster than the removed runs, per message.
            in_view: set[int] = set(outside(len(history.units)))
            gone = [i for i in self._read if entries[i].unit not in in_view]
        else:
            gone = [i for i in self._read if entries[i].unit in removed]
        holders = self._holders
        for index in gone:
            read = self._read.pop(index)
            self._last_use.pop(index, None)
            self._concluding.discard(index)
            for row in read.rows:
                for value in row:
                    found = holders.get(value)
                    if found is None:
                        continue
                    kept = [h for h in found if h != index]
                    if kept:
                        holders[value] = kept
                    else:
                        del holders[value]

    # -- asking ----------------------------------------------------------------------------

    def last_use(self, index: int) -> int:
        """The newest message that drew a value from message ``index`` (itself if none)."""
        return self._last_use.get(index, index)

    def rows(self, index: int) -> tuple[tuple[str, ...], ...]:
        read = self._read.get(index)
        return read.rows if read is not None else ()

    def task_of(self, index: int) -> int | None:
        read = self._read.get(index)
        return read.task if read is not None else None

    def holders(self, value: str) -> list[int]:
        """Messages in the view (as of the last `forget`) holding ``value``; more than
        `MAX_HOLDERS` of them: a value too common to track (the list stops growing)."""
        return self._holders.get(value, [])

    def scored(
        self, source: int, kind: Kind, rows: tuple[tuple[str, ...], ...]
    ) -> list[tuple[str, int]]:
        """``(value, score)`` for each value of message ``source``: how likely it is needed
        again, higher first (see the module for the signals)."""
        asked, answered, led, written = self._asked, self._answered, self._led, self._written
        # Fewer values than make a list of look-alikes: none is one, no shape is needed.
        shapes: dict[str, int] | None = None
        if sum(len(row) for row in rows) >= LOOKALIKES:
            shapes = {}
            for row in rows:
                for value in row:
                    key = shape(value)
                    shapes[key] = shapes.get(key, 0) + 1
        used = kind is Kind.TOOL_RESULT and self.last_use(source) > source
        concluding = 2 if source in self._concluding else 0
        assistant = kind is Kind.ASSISTANT
        scored: list[tuple[str, int]] = []
        for row in rows:
            # A row of a listing the agent took a followed lead from (or the user named):
            # the row of the item chosen, not one more look-alike.
            row_used = False
            if not assistant and len(row) <= ITEM_ROW_VALUES:
                for v in row:
                    if (
                        asked.get(v, -1) > source
                        or answered.get(v, -1) > source
                        or (led.get(v, -1) > source and written.get(v, -1) > source)
                    ):
                        row_used = True
                        break
            for value in row:
                lookalike = (
                    shapes is not None and not row_used and shapes[shape(value)] >= LOOKALIKES
                )
                score = concluding if lookalike else concluding + 1
                if lookalike and shapes is not None and shapes[shape(value)] > PER_MESSAGE:
                    score = min(score, 1)  # one of hundreds: not listed for that alone
                if value in asked:
                    score += 4
                if value in answered:
                    score += 3
                if value in led:
                    score += 3
                elif value in written:
                    score += 1
                if used and not lookalike:
                    score += 2
                if row_used:
                    score += 2
                scored.append((value, score))
        return scored


def _forget_oldest_half(remembered: dict[str, int]) -> None:
    if not remembered:
        return
    cut = sorted(remembered.values())[len(remembered) // 2]
    for value in [v for v, i in remembered.items() if i < cut]:
        del remembered[value]


@lru_cache(maxsize=65_536)
def shape(value: str) -> str:
    """A value's shape: each run of letters and digits as one mark, ``A`` capitals, ``a``
    small letters, ``9`` digits, ``x`` a mix (``ORD-48213`` and ``INV-55`` are both
    ``A-9``; ``evt-d2a04c86`` and ``evt-5f6e9047`` both ``a-x``)."""
    return _RUN.sub(_run_mark, value)


def _run_mark(match: re.Match[str]) -> str:
    run = match.group()
    if run.isdigit():
        return "9"
    if run.isalpha():
        return "A" if run.isupper() else "a" if run.islower() else "x"
    return "x"


# -- the ledger ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One value, the message it was taken from, that message's task, and its rank."""

    value: str
    source: int
    task: int | None
    score: int

    def to_list(self) -> list[Any]:
        return [self.value, self.source, self.task, self.score]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> LedgerEntry:
        value, source, task, score = item
        if not isinstance(value, str) or not isinstance(source, int):
            raise ValueError(f"a ledger entry is [value, source, task, score], got {item!r}")
        return cls(value, source, task if isinstance(task, int) else None, int(score))


@dataclass(frozen=True, slots=True)
class Ledger:
    """The ledger a view carries: its pages (immutable once made) and their entries.

    ``entries`` are the listed values, page after page; ``costs`` each page's raw tokens;
    ``pool`` the best values taken out that no page lists (for a later repack);
    ``unlisted`` how many values taken out are not listed (the pool and those past it).
    """

    pages: tuple[dict[str, Any], ...] = ()
    costs: tuple[int, ...] = ()
    entries: tuple[LedgerEntry, ...] = ()
    pool: tuple[LedgerEntry, ...] = ()
    unlisted: int = 0
    # Values the view's summary carries (in its text or appended to it by the check):
    # checked again at every fold, so a later summary that drops one gets it back.
    carried: tuple[LedgerEntry, ...] = ()
    # Messages a page names by id alone (their values did not all fit): recall returns them.
    named: frozenset[int] = frozenset()
    # Tasks a page has a line of (its values, or ids named alone): their prompt's words are
    # quoted there, and a later page names them by id.
    tasks: frozenset[int | None] = frozenset()
    listed: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        if not self.listed and (self.entries or self.carried):
            listed = frozenset(e.value for e in (*self.entries, *self.carried))
            object.__setattr__(self, "listed", listed)

    @property
    def cost(self) -> int:
        return sum(self.costs)

    @property
    def sources(self) -> frozenset[int]:
        """Every message a page names on its own: a line of its values, or by id alone."""
        return self.named | {e.source for e in self.entries}

    def to_dict(self) -> dict[str, Any]:
        return {
            "pages": list(self.pages),
            "costs": list(self.costs),
            "entries": [e.to_list() for e in self.entries],
            "pool": [e.to_list() for e in self.pool],
            "unlisted": self.unlisted,
            "carried": [e.to_list() for e in self.carried],
            "named": sorted(self.named),
            "tasks": sorted(task for task in self.tasks if task is not None),
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Ledger:
        entries = tuple(LedgerEntry.from_list(e) for e in document["entries"])
        pages = tuple(document["pages"])
        costs = tuple(int(c) for c in document["costs"])
        if len(pages) != len(costs) or not all(isinstance(p, Mapping) for p in pages):
            raise ValueError("a stored ledger needs one cost per page")
        return cls(
            pages=tuple(dict(p) for p in pages),
            costs=costs,
            entries=entries,
            pool=tuple(LedgerEntry.from_list(e) for e in document.get("pool", ())),
            unlisted=int(document.get("unlisted", 0)),
            carried=tuple(LedgerEntry.from_list(e) for e in document.get("carried", ())),
            named=frozenset(int(i) for i in document.get("named", ())),
            tasks=_stored_tasks(document, entries),
        )


def _stored_tasks(
    document: Mapping[str, Any], entries: Sequence[LedgerEntry]
) -> frozenset[int | None]:
    """The tasks a stored ledger's pages have lines of; a ledger stored before they were
    kept has them from its values (a task named by ids alone is quoted once more)."""
    stored = document.get("tasks")
    if stored is None:
        return frozenset(e.task for e in entries)
    if not isinstance(stored, list) or not all(type(task) is int for task in stored):
        raise ValueError(f"a stored ledger's tasks are message indexes, got {stored!r}")
    return frozenset(stored)


EMPTY = Ledger()


@dataclass(frozen=True, slots=True)
class PagesBefore:
    """What the view already says, which a new page need not repeat: whether the ledger
    has pages (the first carries the head explaining the ledger), the messages named (by
    its pages, or by the view itself: a shortened result's marker names its id), and the
    tasks whose prompt words a line of its pages quotes (a later page names such a task by
    its id alone). The default is a first page, with nothing named before it."""

    first: bool = True
    sources: frozenset[int] = frozenset()
    tasks: frozenset[int | None] = frozenset()

    @classmethod
    def of(cls, ledger: Ledger, shown: frozenset[int] = frozenset()) -> PagesBefore:
        """What the pages of ``ledger`` say, and ``shown``: messages the view names."""
        return cls(first=not ledger.pages, sources=ledger.sources | shown, tasks=ledger.tasks)


@dataclass(frozen=True, slots=True)
class LedgerPlan:
    """What one pass gives the ledger: its room in raw tokens (``capacity``: the whole
    ledger; ``allowance``: what this pass may add) and the role its pages are sent as."""

    capacity: int
    allowance: int
    role: str = "user"
    # Messages the view itself names by recall id (a shortened result's marker says
    # `context_recall("r56") returns it`): a page lists their values if they rank, but
    # need not name them. A page naming only such an id cost a small window 26 tokens on
    # every later request.
    shown: frozenset[int] = frozenset()


def taken_values(
    index: ValueIndex,
    history: History,
    taken: Sequence[int],
    in_view: Callable[[str], bool],
    listed: frozenset[str],
) -> list[LedgerEntry]:
    """The values of the messages ``taken`` out of the view that the view no longer shows
    and the ledger does not list, ranked best first (each value once, after the newest
    message holding it, ranked where it ranks best; at most `PER_MESSAGE` of one message,
    its best)."""
    found: dict[str, LedgerEntry] = {}
    entries = history.entries
    for source in sorted(taken, reverse=True):
        rows = index.rows(source)
        if not rows:
            continue
        task = index.task_of(source)
        scored = index.scored(source, entries[source].info.kind, rows)
        if len(scored) > PER_MESSAGE:
            scored.sort(key=lambda item: -item[1])
        kept = 0
        for value, score in scored:
            known = found.get(value)
            if known is not None:
                if score > known.score:  # ranks better in an older message: kept at the newest
                    found[value] = LedgerEntry(value, known.source, known.task, score)
                continue
            if value in listed or in_view(value):
                continue
            found[value] = LedgerEntry(value, source, task, score)
            kept += 1
            if kept >= PER_MESSAGE:
                break
    return ranked(found.values())


@dataclass(frozen=True, slots=True)
class SummaryCheck:
    """A summary checked against the values of the span it stands for: the appendix to
    put after its text, the ledger that now knows what the summary carries, how many
    values were appended, and how many went to the ledger's pool instead (no room)."""

    appendix: str
    ledger: Ledger
    appended: int
    to_ledger: int


APPENDIX_HEAD = (
    "Values of the summarized messages the summary above leaves out, after the id of a "
    "message holding them:"
)


def check_summary(
    index: ValueIndex | None,
    history: History,
    text: str,
    span: Sequence[int],
    ledger: Ledger,
    room: int,
) -> SummaryCheck:
    """Check a summary's ``text`` against its span: the values it must carry are those of
    the messages ``span`` newly summarized (ranked as the ledger ranks them, look-alikes
    nothing points to left out) and those earlier summaries carried; each missing from
    ``text`` is appended verbatim after the id of a message holding it, best first, within
    ``room`` tokens (by estimate); the rest go to the ledger's pool, to be listed when
    they rank."""
    required: dict[str, LedgerEntry] = {e.value: e for e in ledger.carried}
    # Messages of the span holding values the summary leaves out that are not worth a line
    # (look-alikes nothing points to): named by id, so none is lost silently.
    unnamed: set[int] = set()
    if index is not None:
        entries = history.entries
        for source in sorted(span, reverse=True):
            rows = index.rows(source)
            if not rows:
                continue
            task = index.task_of(source)
            for value, score in index.scored(source, entries[source].info.kind, rows):
                known = required.get(value)
                if value in ledger.listed and known is None:
                    continue
                if score < MIN_SCORE:
                    if source not in unnamed and not occurs(value, text):
                        unnamed.add(source)
                    continue
                if known is None or score > known.score:
                    required[value] = LedgerEntry(value, source, task, score)
    carried: list[LedgerEntry] = []
    missing: list[LedgerEntry] = []
    for entry in ranked(required.values()):
        (carried if occurs(entry.value, text) else missing).append(entry)
    budget = room * CHARS_PER_TOKEN - len(APPENDIX_HEAD) - len(MORE_LINE)
    # Room for the id of every message holding a value left out comes first.
    name_cost = {
        source: len(recall_id(source)) + len(ID_SEPARATOR)
        for source in unnamed | {e.source for e in missing}
    }
    reserve = sum(name_cost.values())
    appended: list[LedgerEntry] = []
    overflow: list[LedgerEntry] = []
    sources: set[int] = set()
    for entry in missing:
        cost = len(entry.value) + len(SEPARATOR)
        own = 0
        if entry.source not in sources:
            cost += len(recall_id(entry.source)) + 4
            own = name_cost[entry.source]
        if cost <= budget - (reserve - own):
            budget -= cost
            reserve -= own
            appended.append(entry)
            sources.add(entry.source)
        else:
            overflow.append(entry)
    named: list[int] = []
    for source in sorted(unnamed | {e.source for e in overflow}):
        if source not in sources and name_cost[source] <= budget:
            budget -= name_cost[source]
            named.append(source)
    appendix = ""
    if appended or named:
        by_source: dict[int, list[str]] = {}
        for entry in appended:
            by_source.setdefault(entry.source, []).append(entry.value)
        lines = [APPENDIX_HEAD]
        lines.extend(
            f" {recall_id(source)}: {SEPARATOR.join(values)}"
            for source, values in sorted(by_source.items())
        )
        if named:
            lines.append(MORE_LINE + ID_SEPARATOR.join(recall_id(i) for i in named))
        appendix = "\n".join(lines)
    pool = _merged_pool(ledger.pool, overflow, ledger.listed - {e.value for e in overflow})
    checked = Ledger(
        ledger.pages,
        ledger.costs,
        ledger.entries,
        pool,
        ledger.unlisted + len(overflow),
        carried=(*carried, *appended),
        named=ledger.named,
        tasks=ledger.tasks,
    )
    return SummaryCheck(appendix, checked, len(appended), len(overflow))


def ranked(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """Best first: higher score, then newer source."""
    # Descending by (score, source): a stable sort keeps ties in their order either way.
    return sorted(entries, key=_RANK, reverse=True)


_RANK = attrgetter("score", "source")
_VALUE = attrgetter("value")
_SOURCE = attrgetter("source")


def extend(
    ledger: Ledger,
    history: History,
    fresh: list[LedgerEntry],
    plan: LedgerPlan,
    counter: TokenCounter,
) -> Ledger:
    """The ledger with ``fresh`` values (ranked) added: a page appended with the best that
    fit the room, or, when the room is taken by values ranked below them, one page of the
    best of all (a repack). Never larger than ``plan.capacity`` raw tokens."""
    pool = _merged_pool(ledger.pool, fresh, ledger.listed)
    known = set(map(_VALUE, ledger.pool))
    unlisted = ledger.unlisted + sum(
        1 for e in fresh if e.value not in known and e.value not in ledger.listed
    )
    if not pool:
        return ledger if unlisted == ledger.unlisted else _with(ledger, pool, unlisted)
    room = min(plan.capacity - ledger.cost, plan.allowance)
    pool_sources = frozenset(map(_SOURCE, pool)) - plan.shown
    if room >= MIN_PAGE_TOKENS:
        before = PagesBefore.of(ledger, plan.shown)
        page = _fitted_page(history, pool, room, before, plan.role, counter, pool_sources)
        page_sources = ledger.sources | (page[3] if page else frozenset())
        if page is not None and ({e.source for e in page[2]} | page_sources >= pool_sources):
            message, cost, chosen, named, tasks = page
            taken = {e.value for e in chosen}
            rest = tuple(e for e in pool if e.value not in taken)
            return Ledger(
                pages=(*ledger.pages, message),
                costs=(*ledger.costs, cost),
                entries=(*ledger.entries, *chosen),
                pool=rest,
                unlisted=unlisted - len(chosen),
                carried=ledger.carried,
                named=ledger.named | named,
                tasks=ledger.tasks | tasks,
            )
    worst = min((e.score for e in ledger.entries), default=None)
    silent = not pool_sources <= ledger.sources
    if not silent and (worst is None or pool[0].score <= worst):
        return _with(ledger, pool, unlisted)
    # The room is taken by values ranked below new ones, or a message taken out would go
    # unnamed (nothing may be lost silently): pack the best of both into one page.
    budget = min(int(plan.capacity * REPACK_FILL), ledger.cost + plan.allowance)
    return repacked(ledger, history, pool, budget, plan.role, counter, unlisted, plan.shown)


def repacked(
    ledger: Ledger,
    history: History,
    pool: Sequence[LedgerEntry],
    budget: int,
    role: str,
    counter: TokenCounter,
    unlisted: int | None = None,
    shown: frozenset[int] = frozenset(),
) -> Ledger:
    """One page of the best of the listed values and ``pool`` within ``budget`` raw tokens
    (an empty ledger when nothing fits); the rest go back to the pool. ``shown``: messages
    the view names itself, which the page need not name."""
    both = (*pool, *ledger.entries)
    everything = ranked(dict(zip(map(_VALUE, both), both, strict=True)).values())
    total = (ledger.unlisted if unlisted is None else unlisted) + len(ledger.entries)
    page = _fitted_page(history, everything, budget, PagesBefore(sources=shown), role, counter)
    if page is None:
        return Ledger(pool=tuple(everything[:POOL_SIZE]), unlisted=total, carried=ledger.carried)
    message, cost, chosen, named, tasks = page
    taken = {e.value for e in chosen}
    rest = tuple(e for e in everything if e.value not in taken)[:POOL_SIZE]
    return Ledger(
        pages=(message,),
        costs=(cost,),
        entries=tuple(chosen),
        pool=rest,
        unlisted=total - len(chosen),
        carried=ledger.carried,
        named=named,
        tasks=tasks,
    )


def shrunk(
    ledger: Ledger, history: History, budget: int, role: str, counter: TokenCounter
) -> Ledger:
    """The ledger within ``budget`` raw tokens: as it is if it fits, else repacked."""
    if ledger.cost <= budget:
        return ledger
    return repacked(ledger, history, ledger.pool, budget, role, counter)


def _with(ledger: Ledger, pool: tuple[LedgerEntry, ...], unlisted: int) -> Ledger:
    return Ledger(
        ledger.pages,
        ledger.costs,
        ledger.entries,
        pool,
        unlisted,
        ledger.carried,
        ledger.named,
        ledger.tasks,
        ledger.listed,
    )


def _merged_pool(
    pool: tuple[LedgerEntry, ...], fresh: list[LedgerEntry], listed: frozenset[str]
) -> tuple[LedgerEntry, ...]:
    """The pool with ``fresh`` values in, each value once (its better-ranked entry: taken out
    again from a newer message, a value may now rank higher), the best `POOL_SIZE`."""
    if not fresh:
        return pool
    best = dict(zip(map(_VALUE, pool), pool, strict=True))
    for entry in fresh:
        if entry.value in listed:
            continue
        known = best.get(entry.value)
        if known is None or (entry.score, entry.source) > (known.score, known.source):
            best[entry.value] = entry
    return tuple(ranked(best.values())[:POOL_SIZE])


class _FittedPage(NamedTuple):
    message: dict[str, Any]
    cost: int  # its real count
    chosen: list[LedgerEntry]  # the values it lists
    named: frozenset[int]  # the messages it names by id alone
    tasks: frozenset[int | None]  # the tasks it has lines of


def _fitted_page(
    history: History,
    candidates: Sequence[LedgerEntry],
    room: int,
    before: PagesBefore,
    role: str,
    counter: TokenCounter,
    cover: frozenset[int] | None = None,
) -> _FittedPage | None:
    """The page of the best ``candidates`` whose real count fits ``room`` tokens, the
    entries it lists, the messages it names by id alone and the tasks it has lines of
    (`OTHER_TASKS` is none): chosen by an estimate of their
    characters, then cut by a quarter until the counter agrees. With ``cover``, None as
    well when the page with the pages ``before`` it cannot name every message of it."""
    found = _chosen(history, candidates, room, before, cover is not None)
    if found is None:
        return None
    chosen, named = found
    already = before.sources
    if cover is not None and not (
        already | {e.source for e in chosen} | {source for source, _task in named} >= cover
    ):
        # Cutting the page to fit only moves a message from a line of values to the ids
        # named alone, or leaves it out: what the estimate does not name, no page names.
        return None
    while chosen or named:
        message = render_page(history, chosen, before, role, named)
        cost = counter.count_message(message)
        if cost <= room:
            tasks = {e.task for e in chosen} | {task for _source, task in named}
            tasks.discard(OTHER_TASKS)
            named_alone = frozenset(source for source, _task in named)
            return _FittedPage(message, cost, chosen, named_alone, frozenset(tasks))
        # Values leave first, their messages then named by id alone; ids last.
        if chosen:
            cut = chosen[len(chosen) * 3 // 4 :]
            chosen = chosen[: len(chosen) * 3 // 4]
            kept = {e.source for e in chosen} | {source for source, _task in named}
            for entry in cut:
                if entry.source not in kept and entry.source not in already:
                    named.append((entry.source, entry.task))
                    kept.add(entry.source)
        else:
            named = named[: len(named) * 3 // 4]
    return None


def _chosen(
    history: History,
    candidates: Sequence[LedgerEntry],
    room: int,
    before: PagesBefore,
    whole: bool = False,
) -> tuple[list[LedgerEntry], list[tuple[int, int | None]]] | None:
    """The best candidates whose rendered lines fit ``room`` tokens by estimate, and the
    messages named by id alone whose values do not all fit (recall returns a message
    whole). Naming every message taken out comes first (nothing is lost silently): room is
    kept for the ids of the messages no line names yet; the values fill the rest, best
    first. With ``whole``, None when the room cannot even hold the id of every candidate's
    message (only a page naming them all is wanted)."""
    head = len(_head(before.first)) + len(LEDGER_OPEN) + len(LEDGER_CLOSE) + 8
    budget = room * CHARS_PER_TOKEN - head
    already = before.sources
    task_lines: dict[int | None, int] = {}

    def task_cost(task: int | None) -> int:
        line = task_lines.get(task)
        if line is None:
            line = task_lines[task] = _task_line_cost(history, task, before.tasks)
        return line

    # The messages no page names yet, each named for its id and a separator at least
    # (`recall_id` is the prefix and the index's digits: counted without writing ids).
    unnamed = set(map(_SOURCE, candidates)) - already
    reserve = sum(map(len, map(str, unnamed))) + (len(ID_PREFIX) + len(ID_SEPARATOR)) * len(unnamed)
    # The lines the ids go on when their tasks' lines do not fit (`OTHER_TASKS`).
    other_room = len(MORE_LINE) + len(OTHER_TASKS_LINE) + 1 if unnamed else 0
    if whole and reserve > budget:
        # A message is named for at least its id, on a line of its values or alone.
        return None
    reserve += other_room
    tasks: set[int | None] = set()
    sources: set[int] = set()
    chosen: list[LedgerEntry] = []
    # A value's line costs at least its separator more than the room it frees (`own`): with
    # less slack than that, no later candidate fits and the values are done.
    least = len(SEPARATOR)
    for entry in candidates:
        if entry.score < MIN_SCORE or budget - reserve < least:
            break  # ranked: a look-alike nothing points to is not worth a line (named below)
        cost = len(entry.value) + len(SEPARATOR)
        own = 0
        if entry.source not in sources:
            id_chars = len(recall_id(entry.source))
            cost += id_chars + 4
            if entry.source in unnamed:
                own = id_chars + len(ID_SEPARATOR)
        left = budget - (reserve - own)
        if entry.task not in tasks:
            if cost + TASK_LINE_FLOOR > left:
                continue  # its task's line would not fit either
            cost += task_cost(entry.task)
        if cost <= left:
            budget -= cost
            reserve -= own
            chosen.append(entry)
            sources.add(entry.source)
            tasks.add(entry.task)
    named: list[tuple[int, int | None]] = []
    named_tasks: set[int | None] = set()
    # No message is named for less than the cheapest id.
    id_extra = len(ID_PREFIX) + len(ID_SEPARATOR)
    cheapest = min(map(len, map(str, unnamed)), default=0) + id_extra
    for entry in candidates:
        if budget < cheapest:
            break
        source = entry.source
        if source in sources or source in already:
            continue
        task = entry.task
        cost = len(str(source)) + id_extra
        lines = _lines_cost(task, tasks, named_tasks, task_cost)
        if lines > budget - reserve:
            # Its task's lines would take the room kept for the other ids: the id goes on
            # the page's last line, under no task (a name costs its id, not a prompt).
            task = OTHER_TASKS
            lines = _lines_cost(task, tasks, named_tasks, task_cost)
        if cost + lines <= budget:
            budget -= cost + lines
            reserve -= cost + (other_room if task == OTHER_TASKS and lines else 0)
            named.append((source, task))
            sources.add(source)
            tasks.add(task)
            named_tasks.add(task)
    return chosen, named


def _lines_cost(
    task: int | None,
    tasks: set[int | None],
    named_tasks: set[int | None],
    task_cost: Callable[[int | None], int],
) -> int:
    """What naming one more message of ``task`` adds beside its id: the task's line if
    the page has none yet, and its line of ids if it has none yet."""
    return (0 if task in named_tasks else len(MORE_LINE)) + (
        0 if task in tasks else task_cost(task)
    )


def render_page(
    history: History,
    entries: Sequence[LedgerEntry],
    before: PagesBefore,
    role: str,
    named: Sequence[tuple[int, int | None]] = (),
) -> dict[str, Any]:
    """A page: its values by task, then by the message they came from, in history order;
    after a task's values, the other messages of it holding values, by id. A task an
    earlier page quotes is named by its id alone."""
    by_task: dict[int | None, dict[int, list[str]]] = {}
    for entry in entries:
        by_task.setdefault(entry.task, {}).setdefault(entry.source, []).append(entry.value)
    more: dict[int | None, list[int]] = {}
    for source, task in named:
        more.setdefault(task, []).append(source)
    lines = [LEDGER_OPEN, _head(before.first)]
    for task in sorted(set(by_task) | set(more), key=_task_order):
        lines.append(_task_line(history, task, before.tasks))
        for source in sorted(by_task.get(task, {})):
            lines.append(f" {recall_id(source)}: {SEPARATOR.join(by_task[task][source])}")
        if task in more:
            lines.append(MORE_LINE + ID_SEPARATOR.join(recall_id(i) for i in sorted(more[task])))
    lines.append(LEDGER_CLOSE)
    return {
        "role": role,
        # Values quote history, which may hold lone surrogates: the view cannot.
        "content": well_formed_text("\n".join(lines)),
        "metadata": ledger_metadata(),
    }


def _head(first: bool) -> str:
    return FIRST_PAGE_HEAD if first else NEXT_PAGE_HEAD


def _task_order(task: int | None) -> int | float:
    """Where a task's lines go on a page: before the first task, the tasks in order, then
    the messages named under no task (`OTHER_TASKS`)."""
    if task is None:
        return -1
    return math.inf if task == OTHER_TASKS else task


def _task_line(history: History, task: int | None, quoted: frozenset[int | None]) -> str:
    if task is None:
        return NO_TASK_LINE
    if task == OTHER_TASKS:
        return OTHER_TASKS_LINE
    if task in quoted:
        return _task_by_id(task)
    return _named_task(task, _prompt_text(history.entries[task].message))


def _task_line_cost(history: History, task: int | None, quoted: frozenset[int | None]) -> int:
    """Characters a task's line takes on a page, its newline included."""
    if task is None:
        return len(NO_TASK_LINE) + 1
    if task == OTHER_TASKS:
        return len(OTHER_TASKS_LINE) + 1
    if task in quoted:
        return len(_task_by_id(task)) + 1
    known = history.task_line_costs.get(task)
    if known is None:
        message = history.entries[task].message
        known = history.task_line_costs[task] = len(_named_task(task, _prompt_text(message))) + 1
    return known


NO_TASK_LINE = "before the first task:"
# Messages a page names by id alone when their task's line does not fit: under this line,
# last (no message index is negative, so the mark is no task's).
OTHER_TASKS = -1
OTHER_TASKS_LINE = "other tasks:"
# The fewest characters a task's line takes on a page (an empty prompt, a one-digit id).
TASK_LINE_FLOOR = min(len(f"task {recall_id(0)}:"), len(NO_TASK_LINE)) + 1


@lru_cache(maxsize=4096)
def _named_task(task: int, prompt: str) -> str:
    """A task's line, kept for the tasks seen last: every page of every pass that weighs
    a value of the task measures it (a string prompt's hash is kept by the string)."""
    words = " ".join(prompt.split())
    if len(words) > PROMPT_WORDS_CHARS:
        words = words[: PROMPT_WORDS_CHARS - 1] + "…"
    return f'task {recall_id(task)} "{words}":'


def _task_by_id(task: int) -> str:
    """A task's line on a page after one that quotes its prompt: the words are above,
    and repeating them on every page a pass appends cost a small window a tenth of its
    ledger (`contextfold eval`, BFCL at 4,000 tokens: 30k tokens in 1,436 such lines)."""
    return f"task {recall_id(task)}:"


def _prompt_text(message: Mapping[str, Any]) -> str:
    return content_text(message.get("content"), " ")
