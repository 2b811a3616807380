"""Event names and a sink that never lets observability break a request."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from .errors import ConfigError

logger = logging.getLogger(__name__)

BUDGET = "context:budget"
COMPACTION = "context:compaction"
REPORT = "context:report"
INGRESS_TRUNCATED = "context:tool_result_ingress_truncated"
CALIBRATION = "context:calibration"
REPAIRED = "context:repaired"  # a sequence fault admitted to history and mended in the view
SUMMARY = "context:summary"  # a pass summarized turns (or its summarizer failed)

ALL_EVENTS = (BUDGET, COMPACTION, REPORT, INGRESS_TRUNCATED, CALIBRATION, REPAIRED, SUMMARY)

EventCallback = Callable[[str, dict[str, Any]], Awaitable[Any] | Any]


class Reportable(Protocol):
    """What admission reports (an ingress clip, a repair): its event payload."""

    def to_event(self) -> dict[str, Any]: ...


class EventSink:
    """Delivers events to a sync or async callback; a failing callback is logged and swallowed."""

    def __init__(self, callback: EventCallback | None = None) -> None:
        _check_callback(callback)
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

    async def emit_admission(
        self, clips: Iterable[Reportable], repairs: Iterable[Reportable]
    ) -> None:
        """An admission's reports: each tool result cut to size, then each repaired fault."""
        for clip in clips:
            await self.emit(INGRESS_TRUNCATED, clip.to_event())
        for repair in repairs:
            await self.emit(REPAIRED, repair.to_event())


def _check_callback(callback: Any) -> None:
    """Refuse at construction what would fail on every emit (and be swallowed each time)."""
    if callback is None:
        return
    if not callable(callback):
        raise ConfigError(
            f"on_event must be a function called as on_event(event, data), sync or async, "
            f"or None; got {type(callback).__name__}."
        )
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):
        return  # some builtins have no introspectable signature: give them the benefit
    try:
        signature.bind("context:report", {})
    except TypeError:
        raise ConfigError(
            f"on_event must accept two arguments, on_event(event, data); "
            f"{getattr(callback, '__qualname__', type(callback).__name__)}{signature} does not."
        ) from None
