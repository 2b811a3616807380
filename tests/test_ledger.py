"""The identifier ledger and checked summaries: what a pass takes out of the view (dropped
turns, shortened results, summarized spans) keeps its identifiers in view, each value once
after the recall id of its newest source, pages appended so the prefix stays byte-stable; a
summary missing values gets them appended verbatim; nothing is lost silently."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ConfigError, ContextFold
from contextfold.identifiers import held_values
from contextfold.ledger import Ledger
from contextfold.summaries import scripted_summarizer
from support import SYSTEM, assert_pairing, human, prose

# A recall id written out on its own; ranges (``r12-r15``) are blanked first: a range says
# only that one of its messages held something, not which one to recall.
WRITTEN_ID = re.compile(r"(?<![A-Za-z0-9_])r(0|[1-9][0-9]{0,11})(?![A-Za-z0-9_])")
ID_RANGE = re.compile(r"r[0-9]+\s*[-\u2013]\s*r[0-9]+")


def metadata(message: dict[str, Any]) -> dict[str, Any]:
    return message.get("metadata") or {}


def pages_of(view: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in view if metadata(m).get("ledger") is True]


def finding(n: int, *, filler: int = 1_500, noise: bool = False) -> list[dict[str, Any]]:
    """A lookup whose result holds an order id, an amount and a tracking code, then the
    agent's answer naming the order (so the result is one the agent drew from); with
    ``noise``, a line of look-alike references nothing ever points to, and a call naming
    no value."""
    refs = " ".join(f"REF-{n:03d}-{k:02d}" for k in range(8)) + "\n" if noise else ""
    # With noise the agent pages on without naming anything (no value in the call either).
    arguments = {"page": "next"} if noise else {"customer": f"C-{n:04d}"}
    call_id = f"call_{n}"
    order = f"ORD-{48_200 + n}"
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "tool": "search_orders", "arguments": arguments}],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": f"{order} customer C-{n:04d} amount {1000 + n}.25 tracking TRK{n:06d}X\n"
            + refs
            + prose(n, filler),
        },
        {"role": "assistant", "content": f"Found {order}, amount {1000 + n}.25."},
    ]


async def run(rounds: int, budget: int, **config: Any) -> tuple[ContextFold, list[list[dict]]]:
    config.setdefault("token_counter", "heuristic")
    context = ContextFold(config)
    await context.set_messages([SYSTEM, human("Look up every customer's order.")])
    views = []
    for n in range(rounds):
        for message in finding(n):
            await context.add_message(message)
        views.append(await context.get_messages_for_request(token_budget=budget))
    return context, views


def silently_lost(history: list[dict[str, Any]], view: list[dict[str, Any]]) -> list[Any]:
    """Values of history the view neither shows (in any message: the ledger and a summary
    are messages of the view) nor reaches by naming, on its own, the recall id of a message
    holding them (in contextfold's own messages, or a shortened message's recall hint)."""
    shown = "\n".join(json.dumps(m, ensure_ascii=False) for m in view)
    pointers = "\n".join(
        json.dumps(m, ensure_ascii=False)
        for m in view
        if metadata(m).get("source") == "context-fold" or "context_recall" in json.dumps(m)
    )
    named = {int(n) for n in WRITTEN_ID.findall(ID_RANGE.sub(" ", pointers))}
    holders: dict[str, set[int]] = {}
    values: list[tuple[int, str]] = []
    for index, message in enumerate(history):
        for row in held_values(message):
            for value in row:
                holders.setdefault(value, set()).add(index)
                values.append((index, value))
    return [(i, v) for i, v in values if v not in shown and not holders[v] & named]


async def test_the_ledger_lists_values_taken_out_once_after_their_newest_source() -> None:
    # The threshold planner takes a result and the answer naming its order out in one pass
    # (a cost pass takes the answer first, the result still showing the order, and lists
    # the order after the result when that goes).
    context, views = await run(24, 6_000, planner="threshold")
    view = views[-1]
    assert_pairing(view)
    history = await context.get_messages()
    pages = pages_of(view)
    assert pages, "a pass that removed turns keeps their values in a ledger page"
    text = "\n".join(page["content"] for page in pages)
    assert text.startswith("<context-ledger>\nValues taken out of this view")
    lines = re.findall(r"^ r(\d+): (.*)$", text, re.M)
    listed = [value for _source, values in lines for value in values.split("; ")]
    assert len(listed) == len(set(listed)), "each value is listed once"
    # A value the agent drew from, taken out of the view: listed after the id of the newest
    # message holding it (here the agent's answer naming it, after the lookup's result).
    order = "ORD-48203"
    rest = [m for m in view if metadata(m).get("source") != "context-fold"]
    assert order not in json.dumps(rest)
    newest = max(i for i, m in enumerate(history) if order in json.dumps(m))
    assert history[newest]["content"] == "Found ORD-48203, amount 1003.25."
    [(source, _values)] = [(s, v) for s, v in lines if order in v.split("; ")]
    assert int(source) == newest
    # The pages are contextfold's own messages, sent as the notice's role, before the notice.
    notice = next(m for m in view if metadata(m).get("compaction_notice"))
    assert all(page["role"] == "user" for page in pages)
    assert all(metadata(page)["source"] == "context-fold" for page in pages)
    assert view.index(pages[-1]) < view.index(notice)
    assert "The ledger above lists" in notice["content"]
    # History is untouched: the ledger is a view's message, never admitted.
    assert not any(metadata(m).get("ledger") for m in history)


async def test_pages_are_appended_and_the_prefix_stays_byte_stable_between_passes() -> None:
    _context, views = await run(26, 6_000)
    appended = 0
    for before, after in itertools.pairwise(views):
        old, new = pages_of(before), pages_of(after)
        if not old or len(new) <= len(old):
            continue
        appended += 1
        # An append: the earlier pages are byte-identical and at the same place, and all the
        # view before them too: the provider's prompt cache keeps the prefix.
        assert new[: len(old)] == old
        at = before.index(old[-1]) + 1
        assert json.dumps(after[:at]) == json.dumps(before[:at])
    assert appended >= 2


@pytest.mark.parametrize("planner", ["threshold", "cost"])
async def test_a_later_page_names_a_task_an_earlier_page_quotes_by_its_id_alone(
    planner: str,
) -> None:
    # The cost planner's first deep pass names the task's messages by id alone ("more
    # values in ..."), with no value of it: the task's line is quoted all the same.
    _context, views = await run(26, 6_000, planner=planner)
    pages = max((pages_of(view) for view in views), key=len)
    assert len(pages) >= 3
    quoted = re.compile(r'^task (r\d+) "Look up every customer.*":$', re.MULTILINE)
    by_id = re.compile(r"^task (r\d+):$", re.MULTILINE)
    first = quoted.findall(pages[0]["content"])
    assert len(first) == 1, pages[0]["content"]
    # The prompt's words are on the first page only: every later page of the same task
    # names it by its id (a small window carried the words once per page before).
    for page in pages[1:]:
        text = page["content"]
        assert not quoted.search(text), text
        assert by_id.findall(text) == first, text


async def test_the_ledger_can_be_turned_off() -> None:
    _context, views = await run(24, 6_000, ledger_share=0)
    assert not any(pages_of(view) for view in views)


async def test_nothing_taken_out_is_silently_lost() -> None:
    context, views = await run(40, 6_000)
    history = await context.get_messages()
    assert context.last_report.removed_total > 50
    assert silently_lost(history, views[-1]) == []


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rounds=st.integers(min_value=3, max_value=30),
    budget=st.integers(min_value=3_000, max_value=12_000),
    filler=st.integers(min_value=200, max_value=3_000),
    answer=st.booleans(),
)
def test_every_identifier_taken_out_stays_reachable(
    rounds: int, budget: int, filler: int, answer: bool
) -> None:
    """At every request, every identifier of every message is in the view (a message, the
    ledger, the notice) or the view names, on its own, the recall id of a message holding
    it."""
    import asyncio

    async def check() -> None:
        context = ContextFold(token_counter="heuristic")
        await context.set_messages([SYSTEM, human("Audit the orders.")])
        for n in range(rounds):
            messages = finding(n, filler=filler)
            for message in messages if answer else messages[:2]:
                await context.add_message(message)
            view = await context.get_messages_for_request(token_budget=budget)
            history = await context.get_messages()
            assert silently_lost(history, view) == []

    asyncio.run(check())


# -- checked summaries ----------------------------------------------------------------------

LADDER = [
    "strip_thinking",
    "truncate_tool_results",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "drop_oldest",
]


class Forgetful:
    """A model summarizer that writes a fluent summary naming no identifier at all."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls += 1
        return "The agent looked up several customers' orders and reported what it found."


async def summarized(
    summarizer: Any, *, noise: bool = False
) -> tuple[ContextFold, list[dict], list[dict]]:
    events: list[tuple[str, dict]] = []
    context = ContextFold(
        {"token_counter": "heuristic", "strategies": LADDER},
        summarizer=summarizer,
        on_event=lambda e, d: events.append((e, d)),
    )
    await context.set_messages([SYSTEM, human("Look up every customer's order.")])
    view: list[dict] = []
    for n in range(30):
        # With noise, no answers either: nothing points into the results.
        messages = finding(n, noise=noise)
        for message in messages[:2] if noise else messages:
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=8_000)
        if noise:
            assert silently_lost(await context.get_messages(), view) == []
    return context, view, [d for e, d in events if e == "context:summary"]


async def test_a_model_summary_missing_ids_gets_them_appended_with_recall_ids() -> None:
    summarizer = Forgetful()
    context, view, events = await summarized(summarizer)
    assert summarizer.calls >= 1
    ok = [d for d in events if "failure" not in d]
    assert ok and all(d["appended"] >= 0 for d in ok)
    assert sum(d["appended"] for d in ok) > 0, "the check appended what the summary left out"
    [summary] = [m for m in view if metadata(m).get("summary")]
    text = summary["content"]
    assert "The agent looked up several customers' orders" in text
    assert "the summary above leaves out" in text
    # Every value the agent drew from in the summarized span is in the summary (verbatim,
    # after the id of a message holding it) or in the ledger.
    appended = re.findall(r"^ r(\d+): (.*)$", text, re.M)
    assert appended
    history = await context.get_messages()
    for index, values in appended:
        for value in values.split("; "):
            assert value in json.dumps(history[int(index)], ensure_ascii=False)
    covered = re.search(r'covers="([^"]+)"', text)
    assert covered
    shown = "\n".join(json.dumps(m, ensure_ascii=False) for m in view)
    low = int(covered.group(1).split("-")[0].lstrip("r"))
    high = int(covered.group(1).split("-")[-1].lstrip("r"))
    for n in range(30):
        order = f"ORD-{48_200 + n}"
        holder = next(i for i, m in enumerate(history) if order in json.dumps(m))
        if low <= holder <= high:
            assert order in shown, order
    assert silently_lost(history, view) == []


async def test_an_offline_summary_is_checked_too_and_reports_what_it_appended() -> None:
    context, view, events = await summarized(scripted_summarizer())
    ok = [d for d in events if "failure" not in d]
    assert ok and all(isinstance(d["appended"], int) for d in ok)
    history = await context.get_messages()
    assert silently_lost(history, view) == []


async def test_the_offline_summary_keeps_call_arguments_whole() -> None:
    from contextfold.summaries import digest_transcript, render_transcript
    from contextfold.tokens import build_counter

    path = "/srv/exports/2026/finance/quarterly-reconciliation/batch-0042/ledger-final.csv"
    span = [{"role": "user", "content": "Reconcile the export."}]
    for n in range(12):
        span.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "tool": "read_file",
                        "arguments": {"path": path, "note": " ".join(["word"] * 40) + f" {n}"},
                    }
                ],
            }
        )
        span.append({"role": "tool", "tool_call_id": f"c{n}", "content": prose(n, 800)})
    digest = digest_transcript(render_transcript(span), 300, build_counter("exact"))
    calls = [line for line in digest.splitlines() if "call:" in line]
    assert calls, digest
    # A call line is whole or left out (counted), never cut inside an argument.
    for line in calls:
        n = int(line.rsplit("(id c", 1)[1].rstrip(")"))
        note = " ".join(["word"] * 40) + f" {n}"
        arguments = json.dumps({"path": path, "note": note}, sort_keys=True)
        assert line == f"- call: read_file {arguments} (id c{n})", line


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"ledger_share": 0.6}, "ledger_share=0.6 leaves too little"),
        ({"ledger_share": -0.1}, "ledger_share"),
        ({"ledger_share": "lots"}, "ledger_share"),
        ({"ledger_min_tokens": -1}, "ledger_min_tokens"),
        ({"ledger_min_tokens": 1.5}, "ledger_min_tokens"),
        ({"compact_older_tasks_first": "yes"}, "compact_older_tasks_first"),
    ],
)
def test_bad_ledger_settings_are_config_errors(settings_: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ContextFold(settings_)


def test_ledger_settings_are_read() -> None:
    config = ContextFold({"ledger_share": 0.2, "ledger_min_tokens": 300}).config
    assert config.ledger_share == 0.2 and config.ledger_min_tokens == 300
    assert ContextFold().config.ledger_share == 0.12


async def test_a_summary_names_the_messages_of_look_alikes_it_leaves_out() -> None:
    # Each result carries eight references nothing points to, and no answer draws from it:
    # not worth a line each, but the summary's check names their messages by id, at every
    # request.
    _context, view, events = await summarized(Forgetful(), noise=True)
    assert [d for d in events if "failure" not in d]
    [summary] = [m for m in view if metadata(m).get("summary")]
    assert re.search(r"^ more values in r\d+", summary["content"], re.M)


async def test_a_pass_that_only_gives_the_ledgers_room_back_is_delivered() -> None:
    """A new task's result leaves room for the view only if the ledger's pages give way:
    the pass that shrinks them is committed, never a view over the budget (it was sent at
    603 tokens of 600, the ledger's change not counted as a change)."""
    context = ContextFold({"max_tokens": 600, "token_counter": "exact"})

    def lookup(n: int, calls: int, chars: int) -> list[dict[str, Any]]:
        ids = [f"g{n}_{k}" for k in range(calls)]
        text = " ".join(f"w{n}x{i}" for i in range(chars // 6))[:chars]
        call = [{"id": i, "tool": "f", "arguments": {"n": n}} for i in ids]
        results = [{"role": "tool", "tool_call_id": i, "content": text} for i in ids]
        return [{"role": "assistant", "content": "", "tool_calls": call}, *results]

    messages = [SYSTEM, human("Go."), *lookup(0, 1, 666), human("Next task 1.")]
    messages += [*lookup(1, 2, 294), human("Next task 2."), *lookup(2, 1, 678)]
    messages.append({"role": "assistant", "content": "Done."})
    counter = context.counter
    sizes = []
    for message in messages:
        if message["role"] == "assistant" and len(await context.get_messages()) > 1:
            view = await context.get_messages_for_request()
            assert_pairing(view)
            sizes.append(sum(counter.count_message(m) for m in view) + counter.request_overhead)
            assert context.last_report.tokens_after <= 600
        await context.add_message(message)
    assert len(sizes) == 4 and max(sizes) <= 600, sizes


async def test_a_result_larger_than_the_window_leaves_the_ledger_a_page_naming_what_went() -> None:
    """The newest result must be shortened to fit anyway: it gives way a little further so
    the view keeps a ledger page, and nothing taken out is lost silently, at this request
    and at the next ones (which wait for the budget before another pass)."""
    budget = 6_000
    context, views = await run(24, budget)
    assert pages_of(views[-1])
    big = " ".join(f"row {k} status ok" for k in range(6_000))  # far over the window alone
    await context.add_message(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_big", "tool": "export_rows", "arguments": {}}],
        }
    )
    await context.add_message({"role": "tool", "tool_call_id": "call_big", "content": big})
    view = await context.get_messages_for_request(token_budget=budget)
    report = context.last_report
    assert report is not None and "newest_results_shortened" in report.relaxed
    for follow_up in ("Exported the rows.", "Anything else?"):
        assert report.tokens_after <= budget
        assert pages_of(view), "the ledger keeps a page while the result fills the window"
        assert silently_lost(await context.get_messages(), view) == []
        await context.add_message({"role": "assistant", "content": follow_up})
        view = await context.get_messages_for_request(token_budget=budget)
        report = context.last_report
        assert report is not None


def test_a_page_too_small_for_every_tasks_line_still_names_every_message_taken_out() -> None:
    """Naming a message costs its id: where its task's line (a piece of the prompt) does
    not fit, the id goes on the page's last line, under no task."""
    from contextfold.history import History
    from contextfold.ledger import EMPTY, OTHER_TASKS_LINE, LedgerEntry, repacked
    from contextfold.tokens import HeuristicCounter

    counter = HeuristicCounter()
    history = History(counter, 100_000)
    entries: list[LedgerEntry] = []
    for task in range(12):
        prompt = f"Task {task}: " + "please look into the matter described here " * 4
        history.append(history.prepare({"role": "user", "content": prompt}))
        for k in range(3):
            history.append(history.prepare({"role": "assistant", "content": f"step {k}"}))
            # Look-alikes nothing points to (below the listing score): named, not listed.
            entries.append(LedgerEntry(f"REF-{task:02d}-{k}", len(history) - 1, task * 4, 1))
    page = repacked(EMPTY, history, entries, 240, "user", counter)
    text = page.pages[0]["content"]
    assert page.cost <= 240 and OTHER_TASKS_LINE in text
    sources = {entry.source for entry in entries}
    assert page.named == sources
    named = {int(n) for n in WRITTEN_ID.findall(ID_RANGE.sub(" ", text))}
    assert sources <= named
    # A room too small for every id still names what fits, and never more than the room.
    small = repacked(EMPTY, history, entries, 40, "user", counter)
    assert small.cost <= 40 and small.named < sources


async def test_a_stored_ledger_keeps_the_tasks_its_pages_quote() -> None:
    context, _views = await run(26, 6_000, planner="cost")
    ledger = context._state.sticky.state.ledger
    assert ledger.tasks and ledger.pages
    document = json.loads(json.dumps(ledger.to_dict()))
    assert Ledger.from_dict(document) == ledger
    # A ledger stored before the tasks were kept has those of its values: one named by
    # ids alone is quoted once more on the next page, nothing worse.
    del document["tasks"]
    older = Ledger.from_dict(document)
    assert older.tasks == {e.task for e in ledger.entries} <= ledger.tasks
    # A foreign or damaged document is refused (a stored session then plans afresh).
    for bad in ("r1", [1, "2"], [True], {"1": 1}):
        with pytest.raises(ValueError, match="tasks are message indexes"):
            Ledger.from_dict({**document, "tasks": bad})


# -- a page's density: each word rides on every request until the next pass -------------


@pytest.mark.parametrize(
    ("document", "held", "not_held"),
    [
        ('{"total": 22.5}', ["22.5"], ["22.50"]),
        ('{"total": 22.50}', ["22.50"], ["22.5"]),
        ('{"distance": 1000.0}', ["1000", "1000.0"], ["1000.00"]),
        ('{"mass": 1.5e3}', ["1.5e3"], ["1500", "1500.0"]),
        ('{"count": 12345}', ["12345"], []),
        ('{"ratio": 0.5}', [], ["0.5", "0.50"]),  # too short to be a value, as before
    ],
)
def test_a_documents_number_is_held_as_the_document_writes_it(
    document: str, held: list[str], not_held: list[str]
) -> None:
    """A JSON number is held in the forms its text shows: the ledger listed ``22.5; 22.50``
    for one number (a tenth of its values at BFCL's 4,000-token window), and ``22.50`` is no
    text of ``{"total": 22.5}``. ``1000.0`` shows ``1000`` as a whole too (a call writing
    1000 drew on it); a number written in no plain form is held as written."""
    values = [v for row in held_values({"role": "tool", "content": document}) for v in row]
    assert all(value in values for value in held), values
    assert not any(value in values for value in not_held), values


def test_a_pages_ids_named_alone_are_one_token_apart() -> None:
    """``more values in r3 r5 r7``: a space between ids, where ", " cost a token per id (a
    4,000-token window's page names dozens); each id still reads on its own."""
    from contextfold.evaluation.fold_policy import _MarkCache
    from contextfold.history import History
    from contextfold.ledger import EMPTY, LedgerEntry, repacked
    from contextfold.tokens import HeuristicCounter

    counter = HeuristicCounter()
    history = History(counter, 100_000)
    history.append(history.prepare({"role": "user", "content": "Audit the orders."}))
    entries = []
    for k in range(6):
        history.append(history.prepare({"role": "assistant", "content": f"step {k}"}))
        entries.append(LedgerEntry(f"REF-{k:02d}", len(history) - 1, 0, 1))  # named only
    page = repacked(EMPTY, history, entries, 200, "user", counter).pages[0]
    line = next(x for x in page["content"].splitlines() if x.startswith(" more values in "))
    assert line == " more values in r1 r2 r3 r4 r5 r6", line
    # The task's line names r0; the line of ids, each message.
    assert _MarkCache().of(page) == (True, frozenset(range(7)))


async def test_a_shortened_result_its_marker_names_is_named_alone_by_no_page() -> None:
    """A result shortened in the view carries ``context_recall("r7") returns it``: the view
    names it already, and a page naming it alone ("more values in r7") cost a small window
    a message on every later request. Once it leaves the view a page names it, as any
    message taken out (nothing is lost silently at any request)."""
    context = ContextFold({"token_counter": "heuristic", "planner": "threshold"})
    await context.set_messages([SYSTEM, human("Look up every customer's order.")])
    hint = re.compile(r'context_recall\("r(\d+)"\) returns it')
    shortened_seen = 0
    for n in range(30):
        for message in finding(n, filler=2_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=6_000)
        assert silently_lost(await context.get_messages(), view) == []
        marked = {
            int(i)
            for m in view
            if metadata(m).get("source") != "context-fold" and isinstance(m.get("content"), str)
            for i in hint.findall(m["content"])
        }
        shortened_seen += len(marked)
        alone = {
            int(i)
            for page in pages_of(view)
            for line in page["content"].splitlines()
            if line.startswith(" more values in ")
            for i in WRITTEN_ID.findall(line)
        }
        assert not marked & alone, (marked, alone)
    assert shortened_seen
