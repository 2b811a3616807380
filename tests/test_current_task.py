"""What the current task is still using stays in the view: a listing the agent is copying
ids out of, one call after another, is neither shortened nor removed while the view is under
the trigger, however many pages it never used came after it (naive drop-oldest, filling the
whole window, keeps it too). What the task never drew from still goes first."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import ContextFold
from support import SYSTEM, assert_pairing, human, prose

WINDOW = 8_000
PATHS = [
    f"/srv/exports/eu-west-2/2024-04-{day:02d}/orders-{100 + 7 * day}.csv" for day in range(1, 29)
]
WANTED = PATHS[14]  # the one the task comes back for, never named before


def call(n: int, tool: str, arguments: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": f"call_{n}", "tool": tool, "arguments": arguments}],
    }


def result(n: int, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": content}


def earlier_task() -> list[dict[str, Any]]:
    """A finished task: a few lookups and an answer, all before the current prompt."""
    messages: list[dict[str, Any]] = [human("Summarise last week's shipping incidents.")]
    for n in range(6):
        messages += [
            call(100 + n, "read_incident", {"incident_id": f"INC-{30_000 + n}"}),
            result(100 + n, f"incident INC-{30_000 + n}\n" + prose(n, 1_400)),
        ]
    messages.append({"role": "assistant", "content": "Six incidents, all closed."})
    return messages


def current_task(*, drawn_from: bool, pages: int, padding: int = 0) -> list[dict[str, Any]]:
    """The listing (with ``padding`` more rows of other files), then checks of files in it
    (copying each path out of the listing when ``drawn_from``, else naming files that are
    not in it), then activity pages nothing ever points to."""
    rows = [f"{p}  {900 + i} KB" for i, p in enumerate(PATHS)]
    rows += [f"/srv/exports/eu-west-2/2023-{k:04d}/orders-{k}.csv  {k} KB" for k in range(padding)]
    listing = f"{len(rows)} files\n" + "\n".join(rows)
    messages: list[dict[str, Any]] = [
        human("Find the EU-WEST-2 export for 2024-04-15 and check how many rows it has."),
        call(1, "list_directory", {"directory": "/srv/exports/eu-west-2"}),
        result(1, listing),
    ]
    for k in range(8):
        path = PATHS[k] if drawn_from else f"/srv/archive/other-{k}.csv"
        messages += [
            call(10 + k, "file_info", {"path": path}, f"Checking {path}."),
            result(10 + k, f"path: {path}\nchecksum: sha256:{k:064x}\nrows: {1000 + k}"),
        ]
    for k in range(pages):
        messages += [
            call(40 + k, "activity_feed", {"page": k + 2}),
            result(40 + k, f"activity, page {k + 2}\n" + prose(50 + k, 1_800)),
        ]
    return messages


async def replayed(
    messages: list[dict[str, Any]], **config: Any
) -> tuple[ContextFold, list[dict[str, Any]]]:
    """Every message admitted, a request before each assistant message as a loop makes
    them; returns the context and the view of the request that would precede the call for
    `WANTED`."""
    context = ContextFold({"max_tokens": WINDOW, "token_counter": "exact", **config})
    await context.add_message(SYSTEM)
    for message in messages:
        if message["role"] == "assistant":
            await context.get_messages_for_request()
        await context.add_message(message)
    return context, await context.get_messages_for_request()


def own(message: dict[str, Any]) -> bool:
    return (message.get("metadata") or {}).get("source") == "context-fold"


def whole_in_view(view: list[dict[str, Any]], value: str) -> bool:
    """``value`` is in a message of the conversation the view sends (not in contextfold's
    notice or ledger, which name it without its context)."""
    return any(value in json.dumps(m, ensure_ascii=False) for m in view if not own(m))


@pytest.mark.parametrize("pages", [9, 12, 16])
async def test_a_listing_the_current_task_draws_from_stays_in_view(pages: int) -> None:
    messages = earlier_task() + current_task(drawn_from=True, pages=pages)
    context, view = await replayed(messages)
    assert whole_in_view(view, WANTED)
    listing = messages[len(earlier_task()) + 2]["content"]
    assert any(m.get("content") == listing for m in view)  # whole, not shortened
    assert_pairing(view)
    # Passes did compact (what the task never drew from went instead).
    report = context.last_report
    assert report is not None and report.removed_total + report.truncated_total > 0


async def test_a_listing_nothing_drew_from_still_gives_way() -> None:
    # The same shape, but no later call names a path of the listing: the listing is one
    # more old result, shortened or removed like any other.
    messages = earlier_task() + current_task(drawn_from=False, pages=12)
    # The threshold planner's pass: a cost pass holds the whole current task while it fits
    # under the middle of the band (`PassPlan.hold_raw`), the listing with it.
    _, view = await replayed(messages, planner="threshold")
    assert not whole_in_view(view, WANTED)
    assert_pairing(view)


async def test_what_the_task_draws_from_yields_when_it_cannot_stay_under_the_trigger() -> None:
    # A listing of about 3,000 tokens in an 8,000-token window, pages piling up after it:
    # once the view cannot stay under the trigger otherwise, the listing leaves too, and no
    # request goes over the window.
    messages = earlier_task() + current_task(drawn_from=True, pages=20, padding=100)
    context = ContextFold({"max_tokens": WINDOW, "token_counter": "exact"})
    await context.add_message(SYSTEM)
    sizes = []
    for message in messages:
        if message["role"] == "assistant":
            view = await context.get_messages_for_request()
            assert_pairing(view)
            assert context.last_report is not None
            sizes.append(context.last_report.tokens_after)
        await context.add_message(message)
    view = await context.get_messages_for_request()
    listing = messages[len(earlier_task()) + 2]["content"]
    assert not any(m.get("content") == listing for m in view)
    assert max(sizes) <= WINDOW
