"""The real-usage token meter: what the provider billed for the request just answered.

It always listens (``llm:response``) and records ``input_tokens + cache_write_tokens``:
``input_tokens`` is the gross input including cache reads, and cache writes are billed
apart, so their sum is the context the request really occupied. With a calibrated
counter every reading also teaches the counter its per-model ratio. In
``token_meter: "actual"`` mode the trigger uses the last real figure plus the estimate
of what was added since (the meter describes the request just answered, not the one
being assembled).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class UsageReading:
    """One ``llm:response`` usage figure, matched to the view it answered."""

    actual: int  # input_tokens + cache_write_tokens
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model: str | None
    view_raw: int | None  # raw estimate of the view that request carried, if we delivered one


def read_usage(data: Mapping[str, Any]) -> tuple[int, int, int, str | None] | None:
    """(input, cache_read, cache_write, model) from an ``llm:response`` payload, or None."""
    usage = data.get("usage")
    if usage is None:
        response = data.get("response")
        usage = getattr(response, "usage", None) if response is not None else None
        if isinstance(response, Mapping):
            usage = response.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        usage = {
            key: getattr(usage, key, None)
            for key in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
        }
    input_tokens = _count(usage.get("input_tokens"))
    if input_tokens is None:
        return None
    model = data.get("model")
    return (
        input_tokens,
        _count(usage.get("cache_read_tokens")) or 0,
        _count(usage.get("cache_write_tokens")) or 0,
        model if isinstance(model, str) and model else None,
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class MeterStats:
    """What the meter knew when a view was delivered (``token_meter_stats``)."""

    mode: str
    source: str  # "actual" when the real figure drove the trigger, else "estimate"
    estimate: int  # calibrated estimate of the view before compaction
    raw_estimate: int
    measured: int | None  # the figure the trigger used in actual mode
    last_actual: int | None
    drift: float | None  # last_actual / raw estimate of the view it answered
    ratio: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
