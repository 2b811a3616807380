"""One-shot fitting of a list of messages, for code that has no loop of its own to keep a
`ContextFold` in: `fit` from plain synchronous code (or from inside a running event
loop), `afit` from async code."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Mapping
from typing import Any

from .manager import ContextFold


async def afit(
    messages: Iterable[Mapping[str, Any]], token_budget: int, **settings: Any
) -> list[dict[str, Any]]:
    """The view of ``messages`` that fits ``token_budget`` tokens (async form of `fit`).

    For a loop that calls a model many times, keep a `ContextFold` instead: it counts each
    message once and keeps compaction sticky (prefix-cache friendly).
    """
    context = ContextFold(settings)
    await context.set_messages(list(messages))
    return await context.get_messages_for_request(token_budget=token_budget)


def fit(
    messages: Iterable[Mapping[str, Any]], token_budget: int, **settings: Any
) -> list[dict[str, Any]]:
    """One-shot: the view of ``messages`` that fits ``token_budget`` tokens.

    Works from synchronous code and from inside a running event loop (a notebook, an
    async web handler): there the work runs on a worker thread with its own loop while the
    caller waits, since fitting never waits on I/O. In async code prefer ``await afit(...)``,
    which does not block the loop.
    """
    messages = list(messages)  # read the caller's iterable on the caller's thread
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(afit(messages, token_budget, **settings))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, afit(messages, token_budget, **settings)).result()
