"""The context's lock: one request or write at a time, never a task waiting for itself."""

from __future__ import annotations

import asyncio
from typing import Any, Literal


class ContextLock(asyncio.Lock):
    """An `asyncio.Lock` that can tell that no one holds it or waits for it, and refuses the
    task holding it (a summarizer or handler awaited inside a request) instead of letting it
    wait for itself."""

    _holder: asyncio.Task[Any] | None = None

    async def acquire(self) -> Literal[True]:
        task = asyncio.current_task()
        if task is not None and self._holder is task:
            raise RuntimeError(
                "context-fold: this call came from inside a request the same context is "
                "still serving (a summarizer, hook or event handler awaited during it) and "
                "would wait for itself. Reading is safe there (get_messages, recall); add "
                "messages or ask for another view after the request returns."
            )
        await super().acquire()
        self._holder = task
        return True

    def release(self) -> None:
        self._holder = None
        super().release()

    def idle(self) -> bool:
        # asyncio.Lock's own state (CPython 3.11-3.13); if a later version names it
        # otherwise, say "not idle" and every caller takes the lock as usual.
        waiters = getattr(self, "_waiters", ())
        return getattr(self, "_locked", True) is False and not waiters
