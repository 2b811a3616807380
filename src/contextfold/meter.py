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

    actual: int  # context occupancy: input_tokens + cache_write_tokens in Amplifier's terms
    cache_read_tokens: int
    cache_write_tokens: int
    model: str | None
    view_raw: int | None  # raw estimate of the view that request carried, if we delivered one


def read_usage(data: Mapping[str, Any]) -> tuple[int, int, int, str | None] | None:
    """(occupancy, cache_read, cache_write, model) from an ``llm:response`` payload, or None.

    Understands the usage shapes a caller may hold: Amplifier's ``Usage`` (``input_tokens``
    gross, ``cache_write_tokens`` apart), the OpenAI SDK's (``prompt_tokens``, cached tokens
    included) and the Anthropic SDK's (``input_tokens`` is the uncached part only, so
    ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` are added).
    """
    usage = data.get("usage")
    if usage is None:
        response = data.get("response")
        if isinstance(response, Mapping):
            usage = response.get("usage")
        elif response is not None:
            usage = getattr(response, "usage", None)
    if usage is None:
        return None
    get = usage.get if isinstance(usage, Mapping) else lambda key: getattr(usage, key, None)
    model = data.get("model")
    model = model if isinstance(model, str) and model else None
    prompt = _count(get("prompt_tokens"))
    if prompt is not None:  # OpenAI SDK
        details = get("prompt_tokens_details")
        cached = None
        if details is not None:
            cached = (
                details.get("cached_tokens")
                if isinstance(details, Mapping)
                else getattr(details, "cached_tokens", None)
            )
        return prompt, _count(cached) or 0, 0, model
    input_tokens = _count(get("input_tokens"))
    if input_tokens is None:
        return None
    creation = _count(get("cache_creation_input_tokens"))
    anthropic_read = _count(get("cache_read_input_tokens"))
    if creation is not None or anthropic_read is not None:  # Anthropic SDK
        read, write = anthropic_read or 0, creation or 0
        return input_tokens + read + write, read, write, model
    read = _count(get("cache_read_tokens")) or 0
    write = _count(get("cache_write_tokens")) or 0
    return input_tokens + write, read, write, model


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
