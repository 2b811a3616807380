"""The compaction notice where its reserve holds no line of the digest (a small window): one
short paragraph with the counts, the removed ids as a range and the way back, instead of
the full form's header around an elided digest; the full form wherever a line fits."""

from __future__ import annotations

import re
from typing import Any

from contextfold import ContextFold
from contextfold.messages import NOTICE_SOURCE
from support import SYSTEM, human, tool_round


def notice_of(view: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        m
        for m in view
        if (m.get("metadata") or {}).get("compaction_notice")
        and m["metadata"]["source"] == NOTICE_SOURCE
    )


async def grown(budget: int, rounds: int) -> tuple[ContextFold, list[dict[str, Any]]]:
    context = ContextFold({"token_counter": "exact"})
    await context.set_messages([SYSTEM, human("Research every topic, one at a time.")])
    view: list[dict[str, Any]] = []
    for n in range(rounds):
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=budget)
    return context, view


async def test_a_small_window_gets_the_compact_notice_naming_the_removed_ids() -> None:
    context, view = await grown(4_000, 30)
    report = context.last_report
    assert report is not None and report.removed_total > 0
    notice = notice_of(view)
    text = notice["content"]
    assert "Removed, in order:" not in text and "more item(s)" not in text
    # The counts, the removed ids as a range, and both ways back.
    found = re.search(r"(\d+) earlier message\(s\) \((r\d+)-(r\d+)\) left this view", text)
    assert found, text
    assert int(found.group(1)) == report.removed_total
    assert 'context_recall("<id>") returns one whole' in text
    assert 'context_recall(query="...") searches them' in text
    # Each end of the range is a message the view left out, and recall returns it.
    shown = {m["content"] for m in view if isinstance(m.get("content"), str)}
    for recall_id in (found.group(2), found.group(3)):
        whole = await context.recall(recall_id)
        assert whole and whole not in shown
    # The full form's header alone came to about twice that.
    assert context.counter.count_message(notice) <= 90


async def test_a_window_with_room_keeps_the_full_notice_and_its_digest() -> None:
    _, view = await grown(16_000, 60)
    text = notice_of(view)["content"]
    assert "were removed from this view" in text
    assert re.search(r"Removed, in order:\n- r\d+,r\d+: assistant called lookup", text), text
