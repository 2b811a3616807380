"""Event names and a sink that never lets observability break a request."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

BUDGET = "context:budget"
COMPACTION = "context:compaction"
REPORT = "context:report"
INGRESS_TRUNCATED = "context:tool_result_ingress_truncated"
CALIBRATION = "context:calibration"

ALL_EVENTS = (BUDGET, COMPACTION, REPORT, INGRESS_TRUNCATED, CALIBRATION)

EventCallback = Callable[[str, dict[str, Any]], Awaitable[Any] | Any]


class EventSink:
    """Delivers events to a sync or async callback; a failing callback is logged and swallowed."""

    def __init__(self, callback: EventCallback | None = None) -> None:
        self._callback = callback

    @property
    def connected(self) -> bool:
        return self._callback is not None

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        if self._callback is None:
            return
        try:
            result = self._callback(event, data)
            if inspect.isawaitable(result):
                await result
        except Exception:
            # Invariant: observability never breaks a request.
            logger.warning("context-fold: handler for %s failed; ignored", event, exc_info=True)
