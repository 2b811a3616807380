"""Durable sessions through the public API: acknowledged messages survive, a resume counts
nothing again and delivers the view the last process would have delivered next, two workers
never interleave, and summaries are found again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ConfigError, ContextFold
from contextfold.store import ConcurrentUpdateError
from contextfold.summaries import scripted_summarizer
from contextfold.tokens import HeuristicCounter
from support import SYSTEM, hook_note, human, reply, tool_round
from test_properties import conversations, faulty_conversations

BUDGET = 8_000


class CountingCounter(HeuristicCounter):
    """The heuristic counter, counting how often a message is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.messages_counted = 0

    def count_message(self, message: Any) -> int:
        self.messages_counted += 1
        return super().count_message(message)


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agent.db'}"


async def run(context: ContextFold, rounds: range) -> list[dict[str, Any]]:
    view: list[dict[str, Any]] = []
    for n in rounds:
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=BUDGET)
    return view


async def test_a_resume_delivers_the_next_view_the_last_process_would_have(tmp_path: Path) -> None:
    store = url(tmp_path)
    first = ContextFold(store=store, session_id="s1", token_counter="heuristic")
    await first.set_messages([SYSTEM, human("Look up every topic.")])
    await run(first, range(25))
    assert first.last_report.removed_total > 0  # the sticky state is worth restoring
    extra = {"role": "user", "content": "And one more thing.", "metadata": {"source": "user"}}
    await first.add_message(extra)
    # Another process opens the same session (the first one crashed here, say).
    counter = CountingCounter()
    resumed = ContextFold(store=store, session_id="s1", counter=counter)
    assert await resumed.get_messages() == await first.get_messages()
    assert counter.messages_counted == 0  # costs come from the store
    expected = await first.get_messages_for_request(token_budget=BUDGET)
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == expected
    assert counter.messages_counted < 5  # a notice or stand-in at most, never the history


async def test_a_resume_keeps_the_ratio_of_the_model_last_heard_from(tmp_path: Path) -> None:
    # The provider bills 1.5x what the counter counts. Requests that name no model use the
    # ratio of the model heard from last, and so must a resumed process's first request:
    # with the prior (1.0) it would send a view a third too big for the window.
    store = url(tmp_path)
    first = ContextFold(store=store, session_id="s1", token_counter="calibrated")
    await first.set_messages([SYSTEM, human("Look up every topic.")])
    for n in range(12):
        for message in tool_round(n, result_chars=1_500):
            await first.add_message(message)
        await first.get_messages_for_request(token_budget=BUDGET)
        report = first.last_report
        billed = round(report.tokens_after / report.ratio * 1.5)
        await first.on_llm_response({"usage": {"input_tokens": billed}, "model": "model-x"})
    learned = first.counter.ratio("model-x")
    assert learned > 1.3 and first.counter.ratio(None) == learned
    for message in tool_round(12, result_chars=1_500):
        await first.add_message(message)

    resumed = ContextFold(store=store, session_id="s1", token_counter="calibrated")
    view = await resumed.get_messages_for_request(token_budget=BUDGET)
    assert resumed.counter.ratio(None) == learned
    assert view == await first.get_messages_for_request(token_budget=BUDGET)


async def test_two_workers_on_one_session_never_interleave(tmp_path: Path) -> None:
    store = url(tmp_path)
    a = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    b = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    await a.add_message(human("from a"))
    await b.get_messages()  # b loads: it has seen a's message
    await a.add_message(human("a again"))
    with pytest.raises(ConcurrentUpdateError):
        await b.add_message(human("from b"))  # b lost the race: told, not interleaved
    assert [m["content"] for m in await b.get_messages()] == ["from a"]  # b unchanged
    fresh = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    assert [m["content"] for m in await fresh.get_messages()] == ["from a", "a again"]


async def test_summaries_made_by_one_worker_are_reused_by_the_next(tmp_path: Path) -> None:
    ladder = [
        "strip_thinking",
        "truncate_tool_results",
        {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
        "drop_oldest",
    ]
    calls = {"n": 0}
    digest = scripted_summarizer()

    async def summarizer(messages: list[dict[str, Any]], max_tokens: int) -> str:
        calls["n"] += 1
        return await digest(messages, max_tokens)

    store = url(tmp_path)
    # The threshold planner: a cost pass goes deep and drops the turns after its one
    # summarized block, so the first worker would summarize once, and the second (one pass
    # the budget forces) the block the first dropped. No ledger: its pages grow pass by
    # pass in the worker that grew the history, and a worker that compacts the whole
    # transcript in one pass may shorten other results before summarizing (another span's
    # record). Reuse holds where the views match.
    first = ContextFold(
        store=store,
        session_id="s",
        summarizer=summarizer,
        strategies=ladder,
        token_counter="heuristic",
        ledger_share=0,
        planner="threshold",
    )
    await first.set_messages([SYSTEM, human("go")])
    await run(first, range(25))
    made = calls["n"]
    assert made >= 2
    # A new process with no sticky state of its own: set_messages of the same transcript
    # into another session of the same store finds every summary in the store.
    transcript = await first.get_messages()
    second = ContextFold(
        store=store,
        session_id="other",
        summarizer=summarizer,
        strategies=ladder,
        token_counter="heuristic",
        ledger_share=0,
        planner="threshold",
    )
    await second.set_messages(transcript)
    view = await second.get_messages_for_request(token_budget=BUDGET)
    assert calls["n"] == made  # no summarizer call: the records were found
    assert [m for m in view if (m.get("metadata") or {}).get("summary")]


def test_a_store_needs_a_session_id_and_a_known_url() -> None:
    with pytest.raises(ConfigError, match="session"):
        ContextFold(store="memory://")
    with pytest.raises(ConfigError):
        ContextFold(store="ftp://nowhere", session_id="s")
    with pytest.raises(ConfigError, match="store"):
        ContextFold(session_id="s")


WRITER = """
import asyncio, json, sys
from contextfold import ContextFold

async def main() -> None:
    context = ContextFold(store=sys.argv[1], session_id="killed", token_counter="heuristic")
    n = len(await context.get_messages())
    while True:
        await context.add_message({"role": "user", "content": f"message {n}"})
        print(n, flush=True)  # acknowledged: add_message returned
        n += 1

asyncio.run(main())
"""


@pytest.mark.slow
async def test_every_acknowledged_message_survives_kill_9(tmp_path: Path) -> None:
    store = url(tmp_path)
    rng = random.Random(7)
    acknowledged: list[int] = []
    for _ in range(5):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, store],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert writer.stdout is not None
        target = len(acknowledged) + rng.randint(3, 30)
        deadline = time.monotonic() + 60
        while len(acknowledged) < target and time.monotonic() < deadline:
            line = writer.stdout.readline()
            if not line:
                break
            acknowledged.append(int(line))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        # What it printed before the kill was acknowledged too, read or not.
        acknowledged.extend(int(line) for line in writer.stdout.read().split())
        stored = await ContextFold(store=store, session_id="killed").get_messages()
        contents = [m["content"] for m in stored]
        # Every acknowledged message is there exactly once, in order; at most the one
        # being written when the kill came may follow.
        assert contents[: len(acknowledged)] == [f"message {n}" for n in acknowledged]
        assert len(contents) - len(acknowledged) <= 1
        acknowledged = [int(c.split()[1]) for c in contents]
    assert len(acknowledged) >= 15
    assert json.dumps(acknowledged) == json.dumps(sorted(set(acknowledged)))


async def test_mounted_in_amplifier_the_session_id_comes_from_the_kernel(tmp_path: Path) -> None:
    from amplifier_core.testing import MockCoordinator

    from contextfold.amplifier import mount

    config = {"store": url(tmp_path), "token_counter": "heuristic"}
    first = MockCoordinator()
    await mount(first, dict(config))
    await first.get("context").add_message(human("kept across processes"))
    again = MockCoordinator()  # the same kernel session id, in a new process say
    await mount(again, dict(config))
    [stored] = await again.get("context").get_messages()
    assert stored["content"] == "kept across processes"
    assert first.session_id == again.session_id


# -- stored classifications: a resume inspects nothing again ---------------------------------

CALL = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
SIGNED = {"type": "thinking", "thinking": "Which file first?", "signature": "sig-1"}

# Every kind of message and sequence fault the classification tells apart.
VARIED: list[dict[str, Any]] = [
    SYSTEM,
    {"role": "developer", "content": "Answer in English."},
    {"role": "system", "content": "A hook's note.", "metadata": {"source": "hook"}},
    human("Find the failing deploy."),
    {"role": "user", "content": "typed at the prompt", "metadata": {"source": "cli"}},
    {"role": "user", "content": "from another bot", "metadata": {"source": "bot"}},
    # OpenAI shape: a call, a hook note while it waits, its result.
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    hook_note("tool:pre fired"),
    {"role": "tool", "tool_call_id": "c1", "content": "deploy.log: exit 1"},
    # Amplifier shape, a dict result, and an oversized one (clipped at ingress).
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c2", "tool": "read", "arguments": {"path": "a"}},
            {"id": "c3", "tool": "read", "arguments": {"path": "b"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": {"ok": True, "lines": [1, 2]}},
    {"role": "tool", "tool_call_id": "c3", "content": "x" * 5_000},
    # Anthropic: signed thinking, a tool_use, results of which one answers nothing.
    {
        "role": "assistant",
        "content": [
            SIGNED,
            {"type": "text", "text": "Reading two files."},
            {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "c"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "c's text"},
            {"type": "tool_result", "tool_use_id": "ghost", "content": "nobody asked"},
        ],
    },
    {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "text", "text": "hm"},
        ],
    },
    {"role": "assistant", "content": "kept aside", "thinking_block": SIGNED},
    {"role": "assistant", "content": "from a transcript", "thinking_text": "why"},
    # Orphans: a result for a call nobody made, one naming no call.
    {"role": "tool", "tool_call_id": "late", "content": "too late"},
    {"role": "tool", "content": "no id at all"},
    # A call left unanswered, closed by the next turn; a reused call id.
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c4"}]},
    reply("Moving on without it."),
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "again"},
    # Reminders, envelopes, history-only rows, loaded tool state, an empty message.
    {
        "role": "user",
        "content": "<system-reminder>todo: 3</system-reminder>",
        "metadata": {"ephemeral": True, "persisted": True},
    },
    {"role": "user", "content": '  <system-reminder source="hook">x</system-reminder>'},
    {
        "role": "user",
        "content": "a public copy",
        "metadata": {"amplifier_public_reference_only": True},
    },
    {
        "role": "assistant",
        "content": "tools loaded",
        "metadata": {"openai:tool_search_items": [{"type": "tool_search_call"}]},
    },
    {"role": "user", "content": None},
    human("Thanks, that was it."),
]


def varied_context(store: Any) -> ContextFold:
    return ContextFold(
        store=store, session_id="varied", token_counter="heuristic", max_tool_result_bytes=1024
    )


def history_facts(context: ContextFold) -> Any:
    """Everything history derived from its messages, for comparing two histories."""
    history = context._state.history
    return (
        [(e.message, e.info, e.cost, e.unit, e.view, e.inspected) for e in history.entries],
        [(u.entries, u.calls, u.pending, u.closed, u.synthetic) for u in history.units],
        (history.open_unit, history.issued, history.first_human, history.last_human),
        (history.raw_total, history.repairs, history.system_prompts, history.system_prompt_raw),
    )


@pytest.fixture(params=["sqlite", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    from contextfold.store import MemoryStore

    return url(tmp_path) if request.param == "sqlite" else MemoryStore()


async def stored_rows(store: Any) -> Any:
    from contextfold.store import open_store

    opened = await open_store(store) if isinstance(store, str) else store
    rows = (await opened.open_session("varied")).messages
    if isinstance(store, str):
        await opened.close()
    return rows


async def test_the_stored_classification_is_what_inspecting_the_stored_message_says(
    any_store: Any,
) -> None:
    from contextfold.messages import info_from_json, inspect_message

    context = varied_context(any_store)
    for message in VARIED:
        await context.add_message(message)
    assert len(context._state.history.repairs) >= 5  # the faults above were all admitted
    # add_message (one append each), then set_messages (one replacement) write the same.
    for _ in range(2):
        rows = await stored_rows(any_store)
        assert len(rows) == len(VARIED)
        for row in rows:
            assert row.info_json is not None
            fresh = inspect_message(row.message, index=None)
            assert info_from_json(row.info_json) == fresh, row.message
        await context.set_messages(await context.get_messages())


async def test_a_resume_rebuilds_history_exactly_without_inspecting_anything(
    any_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextfold.admission

    context = varied_context(any_store)
    for message in VARIED:
        await context.add_message(message)
    expected_view = await context.get_messages_for_request(token_budget=BUDGET)
    inspected: list[Any] = []
    real = contextfold.admission.inspect_message

    def counting(message: Any, *, index: int | None) -> Any:
        inspected.append(message)
        return real(message, index=index)

    monkeypatch.setattr(contextfold.admission, "inspect_message", counting)
    counter = CountingCounter()
    resumed = ContextFold(
        store=any_store, session_id="varied", counter=counter, max_tool_result_bytes=1024
    )
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == expected_view
    assert inspected == [] and counter.messages_counted < 5
    assert history_facts(resumed) == history_facts(context)
    assert await resumed.get_messages() == await context.get_messages()


@pytest.mark.parametrize("stored", [None, "[99]", '[1,"no-such-kind",[],[],0]', "[1,"])
async def test_rows_without_a_usable_classification_are_inspected_as_before(
    tmp_path: Path, stored: str | None
) -> None:
    """Rows written before classifications were stored (NULL), by a later classification
    version, or damaged: the message is the record, so it is inspected again."""
    import sqlite3

    store = url(tmp_path)
    context = varied_context(store)
    for message in VARIED:
        await context.add_message(message)
    expected_view = await context.get_messages_for_request(token_budget=BUDGET)
    with sqlite3.connect(tmp_path / "agent.db") as raw:
        raw.execute("UPDATE cf_messages SET info_json = ? WHERE seq % 2 = 0", (stored,))
    resumed = varied_context(store)
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == expected_view
    assert history_facts(resumed) == history_facts(context)


def test_a_classification_round_trips_through_its_stored_form() -> None:
    from contextfold.messages import (
        INFO_FORM_VERSION,
        Kind,
        MessageInfo,
        info_from_json,
        info_to_json,
    )

    flags = [False] * 6
    for kind in Kind:
        for bit in range(7):
            values = [i == bit for i in range(6)] if bit < 6 else [True] * 6
            info = MessageInfo(kind, ("a", 'b\u00e9"{'), ("", "c"), *values)
            assert info_from_json(info_to_json(info)) == info
    info = MessageInfo(Kind.USER, (), (), *flags)
    assert info_to_json(info) == f'[{INFO_FORM_VERSION},"user",[],[],0]'
    assert info_from_json(f"[{INFO_FORM_VERSION + 1},{{}}]") is None  # a later form: inspect
    for bad in ("", "{}", "[1]", '[1,"user",[1],[],0]', '[1,"user",[],[],64]', "[true]"):
        with pytest.raises(ValueError):
            info_from_json(bad)


def history_of(messages: list[dict[str, Any]]) -> Any:
    from contextfold.history import History

    history = History(HeuristicCounter(), 1024)
    for message in messages:
        history.append(history.prepare(message))
    return history


def facts(history: Any) -> Any:
    return (
        [(e.message, e.info, e.cost, e.unit, e.view, e.inspected) for e in history.entries],
        [(u.entries, u.calls, u.pending, u.closed, u.synthetic) for u in history.units],
        (history.open_unit, history.issued, history.first_human, history.last_human),
        (history.raw_total, history.repairs, history.system_prompts, history.system_prompt_raw),
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.one_of(conversations(), faulty_conversations()),
    dropped=st.lists(st.booleans(), max_size=80),
    foreign=st.lists(st.sampled_from([None, "ours", "another"]), max_size=80),
)
def test_a_restored_history_is_the_admitted_one_whatever_the_conversation(
    messages: list[dict[str, Any]], dropped: list[bool], foreign: list[str | None]
) -> None:
    """Restoring takes shortcuts for the common shapes (History.restore): on random
    conversations, faulty ones included, with some classifications missing (inspected
    instead) and some costs made by another counter or an unknown one (counted again, the
    stored figure being wrong), it must rebuild exactly the history admission built."""
    from contextfold.history import History
    from contextfold.messages import canonical_json, info_to_json
    from contextfold.store import StoredMessage, StoredSession
    from contextfold.store.link import _rebuild
    from contextfold.tokens import cost_identity

    ours = cost_identity(HeuristicCounter())
    admitted = history_of(messages + VARIED)
    rows = []
    for n, entry in enumerate(admitted.entries):
        made_by = foreign[n] if n < len(foreign) else "ours"
        rows.append(
            StoredMessage(
                n + 1,
                canonical_json(entry.message),
                entry.cost if made_by == "ours" else entry.cost * 3 + 7,
                None if n < len(dropped) and dropped[n] else info_to_json(entry.inspected),
                ours if made_by == "ours" else made_by,
            )
        )
    stored = StoredSession("s", len(rows), 0, tuple(rows), None, None, None)
    restored = History(HeuristicCounter(), 1024)
    recounted = _rebuild(stored, restored, ours)
    assert facts(restored) == facts(admitted)
    assert recounted == sum(row.cost_counter != ours for row in rows)
