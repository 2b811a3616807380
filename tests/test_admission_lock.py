"""Admission skips the lock only when no one holds it: a message added while a request is
inside its pass (waiting on the summarizer) waits for that request, as before."""

from __future__ import annotations

import asyncio
from typing import Any

from contextfold import ContextFold
from contextfold.summaries import scripted_summarizer
from support import SYSTEM, human, tool_round

LADDER = [
    "strip_thinking",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "drop_oldest",
]


class Held:
    """A summarizer that waits until released, so a request stays inside its pass."""

    def __init__(self) -> None:
        self.inner = scripted_summarizer()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.entered.set()
        await self.release.wait()
        return await self.inner(messages, max_tokens)


async def test_a_message_added_during_a_pass_waits_for_the_request() -> None:
    summarizer = Held()
    context = ContextFold(
        {"token_counter": "heuristic", "strategies": LADDER}, summarizer=summarizer
    )
    await context.set_messages([SYSTEM, human("Look up every topic and compare.")])
    for n in range(30):
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
    request = asyncio.create_task(context.get_messages_for_request(token_budget=8_000))
    await asyncio.wait_for(summarizer.entered.wait(), 5)
    late = asyncio.create_task(context.add_message(human("And one more thing.")))
    await asyncio.sleep(0.05)
    assert not late.done()  # the request holds the lock across its summarizer call
    summarizer.release.set()
    view = await request
    await late
    assert all(m.get("content") != "And one more thing." for m in view)
    history = await context.get_messages()
    assert history[-1]["content"] == "And one more thing."


async def test_the_lock_is_idle_only_when_free_and_no_one_waits() -> None:
    from contextfold.context_lock import ContextLock as _Lock

    lock = _Lock()
    assert lock.idle()
    await lock.acquire()
    assert not lock.idle()
    waiter = asyncio.create_task(lock.acquire())
    await asyncio.sleep(0)
    lock.release()
    # Free, but promised to the waiter: an admission must queue behind it, not jump ahead.
    assert not lock.locked() and not lock.idle()
    await waiter
    lock.release()
    assert lock.idle()
