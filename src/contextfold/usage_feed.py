"""What a provider's reported usage teaches a context: the meter's reading of the request it
answered, and the calibrated counter's update (see `meter` and `tokens.calibrated`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context_state import ContextState
from .meter import UsageReading, read_usage
from .tokens import CalibratedCounter, CalibrationUpdate, TokenCounter


def usage_reading(state: ContextState, data: Mapping[str, Any]) -> UsageReading | None:
    """The reading an ``llm:response`` payload (or an SDK's usage, in library use) gives,
    tied to the view it answered; None for a summarizer's own call or no usage at all."""
    if isinstance(data, Mapping) and data.get("purpose") == "summary":
        return None  # a summarizer's own call: not a request this context estimated
    parsed = read_usage(data)
    if parsed is None:
        return None
    actual, cache_read, cache_write, model = parsed
    # Before any view was delivered (a loop that sent the history itself), the reading
    # describes the history as it stands: it still drives the trigger.
    view_raw = state.last_delivered_raw
    if view_raw is None:
        view_raw = state.sticky.raw + state.sticky.notice_cost
    return UsageReading(
        actual=actual,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        model=model or state.model,
        view_raw=view_raw,
    )


def calibrate(counter: TokenCounter, reading: UsageReading) -> CalibrationUpdate | None:
    """Teach a calibrating counter what ``reading`` billed for the view it estimated."""
    # A zero reading (an error response, a cached no-op) teaches nothing about the ratio.
    if isinstance(counter, CalibratedCounter) and reading.view_raw and reading.actual > 0:
        return counter.observe(reading.model, reading.view_raw, reading.actual)
    return None
