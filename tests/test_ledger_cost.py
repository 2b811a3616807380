"""The identifier ledger's shortcuts change nothing it decides: a pattern skipped in a text
without what its matches must hold, patterns searched as rewrites that open with what a
match starts with (ids found from a digit beside a letter, paths after an edge, amounts
without a currency sign in their decimal form), a short text without anything a value holds
read with one search, a text's values cut into lines in one pass, string content read
without walking blocks, a page's estimate that stops when nothing more fits or measures a
task's line only when it might fit (and once per entry), a page wanted whole that is not
weighed when the room cannot hold every id, whether the view shows a value asked once per
value. Each is held against the straightforward way, alone and through whole sessions."""

from __future__ import annotations

import asyncio
import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold, ContextLengthError, identifiers, ledger
from contextfold.compaction import planner
from contextfold.conventions import stamp_timestamp
from contextfold.history import History
from contextfold.ledger import (
    CHARS_PER_TOKEN,
    LEDGER_CLOSE,
    LEDGER_OPEN,
    MIN_SCORE,
    MORE_LINE,
    SEPARATOR,
    LedgerEntry,
)
from contextfold.recall import recall_id
from contextfold.tokens import HeuristicCounter

MOMENT = datetime(2026, 12, 1, tzinfo=UTC)

# Texts dense in what the gates look for: digits (ASCII and not), signs, separators.
ALPHABET = "aZ09 7.,-/:@#$€'\"“”_\n٣x"
texts = st.text(alphabet=ALPHABET, max_size=60) | st.sampled_from(
    [
        "What is item 4999?",
        "Item 4999 is ok.",
        "paid $1,250.00 on 2026-03-04 to ops@example.com via https://x.io/a?b=1",
        'see /srv/a/b.csv and "North Wind" and ORD-48213, 12345678',
        "v1.٣ and 1.٣ and 3/4/2026",
    ]
)


# What each pattern needed before the gates: one character test each (dates, amounts and
# ids an ASCII digit anywhere), numbers of four digits none.
FIRST_GATES = {
    "url": (("://",), False),
    "email": (("@",), False),
    "path": (("/",), False),
    "date": ((), True),
    "amount": ((), True),
    "id": ((), True),
    "quoted": (('"', "'", "“"), False),
}


def ungated(patch: pytest.MonkeyPatch) -> None:
    """Every pattern, as defined, searched where it was before the gates, in short texts
    and long ones."""
    searched = tuple(
        (kind, pattern, None, FIRST_GATES[kind][0], None, FIRST_GATES[kind][1])
        for kind, pattern in identifiers.PATTERNS
    )
    patch.setattr(identifiers, "_SEARCHED", searched)
    patch.setattr(identifiers, "_SEARCHED_SHORT", searched)
    patch.setattr(identifiers, "_may_hold_number", lambda text, digits: True)
    patch.setattr(identifiers, "_FAST_NUMBER", identifiers._NUMBER)
    patch.setattr(identifiers, "_holds_none", lambda text: False)


def read_ungated(text: str) -> tuple[dict[str, str], dict[str, int], object]:
    """What the reader finds in ``text`` (values, where each starts, its lines) with every
    shortcut undone: the straightforward reading the shortcuts are held to."""
    found: dict[str, str] = {}
    positions: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        ungated(patch)
        identifiers.spans(text, found, positions)
        return found, positions, identifiers._text_rows(text)


# Pieces of what the patterns look for, and of what sits at their edges, to join at random:
# ids, amounts, dates, paths, URLs, emails, quoted names, Unicode letters and digits.
PIECES = [
    *"aZ09 7.,-/:@#$€£¥'\"“”_\n٣x~%+hH\tTé",
    "http",
    "https://",
    "://",
    "2026-01-02",
    "12/3/2026",
    "T10:00:00Z",
    "+02:00",
    "ORD-",
    "..",
    "./",
    "~/",
    "x.csv",
    "12345",
    "1,250.00",
    ".5",
    "a@b.co",
    "call_1",
    "/srv/a",
    "٣٣٣٣٣",
    "a:1",
    "#12",
    "Ünïcødé",
]
joined = st.lists(st.sampled_from(PIECES), max_size=24).map("".join)


def spans_as_defined(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [match.span() for match in pattern.finditer(text)]


def spans_as_searched(kind: str, text: str) -> list[tuple[int, int]]:
    """Where the reader finds a kind's matches: its rewritten pattern, or its finder."""
    searched = {k: (pattern, finder) for k, pattern, finder, *_gate in identifiers._SEARCHED}
    pattern, finder = searched[kind]
    return finder(text) if finder is not None else spans_as_defined(pattern, text)


@settings(max_examples=600, deadline=None)
@given(text=joined | texts)
def test_each_rewritten_pattern_matches_where_its_definition_does(text: str) -> None:
    for kind, pattern in identifiers.PATTERNS:
        assert spans_as_searched(kind, text) == spans_as_defined(pattern, text), kind
    assert spans_as_defined(identifiers._FAST_NUMBER, text) == spans_as_defined(
        identifiers._NUMBER, text
    )


def straightforward_line_values(text: str) -> list[list[str]]:
    """Each line's values as first written: the patterns as defined, every number looked
    for, each value's line found by a binary search of the line breaks."""
    found: dict[str, str] = {}
    positions: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        ungated(patch)
        taken = identifiers.spans(text, found, positions)
    for match in identifiers._NUMBER.finditer(text):
        start, end = match.span()
        if not taken.overlaps(start, end) and match.group() not in found:
            found[match.group()] = "number"
            positions[match.group()] = start
    breaks = [at for at, character in enumerate(text) if character == "\n"]
    lines: dict[int, list[tuple[int, str]]] = {}
    for value, start in positions.items():
        lines.setdefault(bisect_right(breaks, start), []).append((start, value))
    return [[value for _start, value in sorted(lines[line])] for line in sorted(lines)]


@settings(max_examples=400, deadline=None)
@given(text=joined | texts)
# An amount may start at a line break (after its currency sign): it is on the next line.
@example(text="ORD-12345 paid $\n125 on\n\n2026-01-02 and $ 7.50\nhere")
def test_values_are_cut_into_the_lines_they_start_on(text: str) -> None:
    assert identifiers._line_values(text) == straightforward_line_values(text)


# Short texts of what sits near values without being one: most hold none, some barely one.
near_values = st.text(alphabet="aZx09٣ _:#-.,\n", max_size=40) | st.lists(
    st.sampled_from(["item", " ", "7", "42", "٣", "-", ":", "x1", "a_", "#", "\n", ".", ","]),
    max_size=12,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=near_values | joined)
def test_a_short_text_without_what_a_value_holds_is_read_as_holding_none(text: str) -> None:
    assert identifiers._line_values(text) == straightforward_line_values(text)
    found: dict[str, str] = {}
    identifiers.spans(text, found)
    assert found == read_ungated(text)[0]


@settings(max_examples=300, deadline=None)
@given(text=joined, short=st.sampled_from([identifiers.SHORT_TEXT_CHARS, 0]))
def test_the_reader_reads_what_the_defined_patterns_read(text: str, short: int) -> None:
    found: dict[str, str] = {}
    positions: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        # Short: the texts drawn here are read as long ones are (the rewrites and finders).
        patch.setattr(identifiers, "SHORT_TEXT_CHARS", short)
        identifiers.spans(text, found, positions)
        rows = identifiers._text_rows(text)
    assert (found, positions, rows) == read_ungated(text)


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_a_gated_search_finds_what_every_pattern_finds(text: str) -> None:
    found: dict[str, str] = {}
    positions: dict[str, int] = {}
    identifiers.spans(text, found, positions)
    rows = identifiers._text_rows(text)
    assert (found, positions, rows) == read_ungated(text)


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_string_content_holds_what_one_text_block_holds(text: str) -> None:
    as_string = {"role": "tool", "tool_call_id": "c1", "content": text}
    as_block = {"role": "user", "content": [{"type": "text", "text": text}]}
    assert identifiers.held_values(as_string) == identifiers.held_values(as_block)


def straightforward_chosen(
    history: History,
    candidates: Sequence[LedgerEntry],
    room: int,
    before: ledger.PagesBefore,
    whole: bool = False,
) -> tuple[list[LedgerEntry], list[tuple[int, int | None]]]:
    """The page's estimate as first written: every candidate weighed, every task line
    measured before anything is compared (``whole`` changes nothing)."""
    head = ledger.FIRST_PAGE_HEAD if before.first else ledger.NEXT_PAGE_HEAD
    budget = room * CHARS_PER_TOKEN - len(head) - len(LEDGER_OPEN) - len(LEDGER_CLOSE) - 8
    already = before.sources

    def task_cost(task: int | None) -> int:
        return len(ledger._task_line(history, task, before.tasks)) + 1

    name_cost: dict[int, int] = {}
    for entry in candidates:
        if entry.source not in already and entry.source not in name_cost:
            name_cost[entry.source] = len(recall_id(entry.source)) + len(ledger.ID_SEPARATOR)
    reserve = sum(name_cost.values())
    # The line of ids whose tasks' lines do not fit, under no task.
    other_room = len(MORE_LINE) + task_cost(ledger.OTHER_TASKS) if name_cost else 0
    reserve += other_room
    tasks: set[int | None] = set()
    sources: set[int] = set()
    chosen: list[LedgerEntry] = []
    for entry in candidates:
        if entry.score < MIN_SCORE:
            break
        cost = len(entry.value) + len(SEPARATOR)
        if entry.task not in tasks:
            cost += task_cost(entry.task)
        own = 0
        if entry.source not in sources:
            cost += len(recall_id(entry.source)) + 4
            own = name_cost.get(entry.source, 0)
        if cost <= budget - (reserve - own):
            budget -= cost
            reserve -= own
            chosen.append(entry)
            sources.add(entry.source)
            tasks.add(entry.task)
    named: list[tuple[int, int | None]] = []
    named_tasks: set[int | None] = set()
    for entry in candidates:
        if entry.source in sources or entry.source in already:
            continue
        task = entry.task

        def lines(task: int | None) -> int:
            return (0 if task in tasks else task_cost(task)) + (
                0 if task in named_tasks else len(MORE_LINE)
            )

        cost = name_cost[entry.source]
        if lines(task) > budget - reserve:
            task = ledger.OTHER_TASKS
        extra = lines(task)
        if cost + extra <= budget:
            budget -= cost + extra
            reserve -= cost + (other_room if task == ledger.OTHER_TASKS and extra else 0)
            named.append((entry.source, task))
            sources.add(entry.source)
            tasks.add(task)
            named_tasks.add(task)
    return chosen, named


def prompts_history(prompts: list[str]) -> History:
    history = History(HeuristicCounter(), 100_000)
    for text in prompts:
        history.append(history.prepare({"role": "user", "content": text}))
    return history


entries = st.lists(
    st.builds(
        LedgerEntry,
        value=st.text(alphabet="AB12-", min_size=0, max_size=12),
        source=st.integers(0, 2_000),
        task=st.none() | st.integers(0, 5),
        score=st.integers(0, 9),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(
    candidates=entries,
    room=st.integers(0, 400),
    first=st.booleans(),
    already=st.frozensets(st.integers(0, 2_000), max_size=20),
    quoted=st.frozensets(st.none() | st.integers(0, 5), max_size=4),
    prompts=st.lists(st.text(max_size=120), min_size=6, max_size=6),
)
def test_the_estimate_stops_early_and_chooses_the_same(
    candidates: list[LedgerEntry],
    room: int,
    first: bool,
    already: frozenset[int],
    quoted: frozenset[int | None],
    prompts: list[str],
) -> None:
    history = prompts_history(prompts)
    ranked = ledger.ranked(candidates)
    before = ledger.PagesBefore(first, already, quoted)
    expected = straightforward_chosen(history, ranked, room, before)
    assert ledger._chosen(history, ranked, room, before) == expected
    whole = ledger._chosen(history, ranked, room, before, True)
    if whole is None:
        # Left unweighed only when there would be no page, or it could not have named
        # every message.
        chosen, named = expected
        covered = already | {e.source for e in chosen} | {source for source, _ in named}
        assert not (chosen or named) or not covered >= {e.source for e in ranked}
    else:
        assert whole == expected


def test_ranking_is_score_then_newer_source_ties_in_order() -> None:
    items = [LedgerEntry(f"v{i}", i % 3, None, i % 2) for i in range(12)]
    assert ledger.ranked(items) == sorted(items, key=lambda e: (-e.score, -e.source))


# -- whole sessions -----------------------------------------------------------------------


@st.composite
def valued_sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Tool-using sessions whose messages hold ids, amounts, dates and paths, some shared
    between the call, its result and the answer (so values are used and ranked)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(draw(st.integers(4, 30))):
        step = draw(st.sampled_from(["task", "tools", "tools", "answer"]))
        number = draw(st.integers(0, 99_999))
        value = draw(
            st.sampled_from(
                [
                    f"ORD-{number}",
                    f"{number}.25",
                    f"/srv/{number}/a.csv",
                    f"2026-01-{1 + number % 28:02d}",
                ]
            )
        )
        if step == "task":
            prompt = f"Task {n}: look into {value} " + "and more " * draw(st.integers(0, 30))
            messages.append({"role": "user", "content": prompt, "metadata": {"source": "user"}})
        elif step == "answer":
            messages.append({"role": "assistant", "content": f"Found {value}, item {number}."})
        else:
            call = f"c{n}"
            rows = "\n".join(
                f"{value}-{k} {number + k} amount {k}.50 {'x' * draw(st.integers(0, 60))}"
                for k in range(draw(st.integers(1, 12)))
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": call, "tool": "lookup", "arguments": {"q": value, "n": number}}
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call, "content": rows})
    return messages


async def views(messages: list[dict[str, Any]], budgets: list[int]) -> list[Any]:
    context = ContextFold({"token_counter": "heuristic"})
    seen: list[Any] = []
    for message, budget in zip(messages, budgets * len(messages), strict=False):
        await context.add_message(stamp_timestamp(message, now=MOMENT))
        try:
            view = await context.get_messages_for_request(token_budget=budget)
        except ContextLengthError as error:
            view = [{"refused": error.required_tokens}]
        seen.append(json.dumps(view, sort_keys=True))
        seen.append(json.dumps(context._state.sticky.state.ledger.to_dict(), sort_keys=True))
    return seen


def straightforward_shown_by(work: Any) -> Any:
    """Whether the view shows a value, as first written: asked afresh each time, the
    holders oldest first."""
    uses, state, entries = work.uses, work.state, work.history.entries

    def shows(value: str) -> bool:
        holders = uses.holders(value)
        if len(holders) > ledger.MAX_HOLDERS:
            return True
        for holder in holders:
            if entries[holder].unit in state.removed_units:
                continue
            swap = state.truncated.get(holder)
            if swap is None or holder not in state.shortened:
                return True
            if value in planner._text_of(swap[0]):
                return True
        return False

    return shows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=valued_sessions(),
    budgets=st.lists(st.integers(500, 4_000), min_size=1, max_size=4),
)
def test_sessions_get_the_same_views_and_ledgers_without_the_shortcuts(
    messages: list[dict[str, Any]], budgets: list[int]
) -> None:
    fast = asyncio.run(views(messages, budgets))
    original_page = ledger._fitted_page

    def page_without_cover(*args: Any) -> Any:
        return original_page(*args[:6])  # the page always weighed and rendered

    with pytest.MonkeyPatch.context() as patch:
        ungated(patch)
        patch.setattr(identifiers, "_cached_rows", identifiers._text_rows)
        patch.setattr(ledger, "_chosen", straightforward_chosen)
        patch.setattr(ledger, "_fitted_page", page_without_cover)
        patch.setattr(planner, "_shown_by", straightforward_shown_by)
        slow = asyncio.run(views(messages, budgets))
    assert fast == slow
