"""The real-usage token meter: what the provider billed for the request just answered.

It always listens (``llm:response``) and records ``input_tokens + cache_write_tokens``:
``input_tokens`` is the gross input including cache reads, and cache writes are billed
apart, so their sum is the context the request really occupied. With a calibrated
counter every reading also teaches the counter its per-model ratio. In
``token_meter: "actual"`` mode the trigger uses the last real figure plus the estimate
of what was added since (the meter describes the request just answered, not the one
being assembled).

A usage figure that is not a finite token count (NaN, infinity, a string, a negative number)
is no reading at all: it is ignored with one warning naming the field, never raised, because a
provider's odd payload must not end the session it describes.
"""

from __future__ import annotations

import logging
import math
import numbers
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)

# No context is within orders of magnitude of this; beyond it a figure is garbage, and ratios of
# such integers stop fitting a float.
MAX_PLAUSIBLE_TOKENS = 2**53


@dataclass(frozen=True, slots=True)
class UsageReading:
    """One ``llm:response`` usage figure, matched to the view it answered."""

    actual: int  # context occupancy: input_tokens + cache_write_tokens in Amplifier's terms
    cache_read_tokens: int
    cache_write_tokens: int
    model: str | None
    view_raw: int | None  # raw estimate of the view that request carried, if we delivered one


def readings_agree(
    earlier: UsageReading | None, later: UsageReading, tolerance: float = 0.1
) -> bool:
    """Whether two readings say the same about the views they answered: billed over raw
    estimate within ``tolerance`` of each other. A lone reading agrees with nothing."""
    if earlier is None or not earlier.view_raw or not later.view_raw:
        return False
    first = earlier.actual / earlier.view_raw
    second = later.actual / later.view_raw
    return max(first, second) <= min(first, second) * (1.0 + tolerance)


def read_usage(data: Mapping[str, Any]) -> tuple[int, int, int, str | None] | None:
    """(occupancy, cache_read, cache_write, model) from an ``llm:response`` payload, or None.

    Understands the usage shapes a caller may hold: Amplifier's ``Usage`` (``input_tokens``
    gross, ``cache_write_tokens`` apart), the OpenAI SDK's (``prompt_tokens``, cached tokens
    included) and the Anthropic SDK's (``input_tokens`` is the uncached part only, so
    ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` are added).
    """
    if not isinstance(data, Mapping):
        logger.warning(
            "context-fold: ignoring an llm:response payload that is not a mapping: %s",
            _shown(data),
        )
        return None
    usage = data.get("usage")
    if usage is None:
        response = data.get("response")
        if isinstance(response, Mapping):
            usage = response.get("usage")
        elif response is not None:
            usage = getattr(response, "usage", None)
    if usage is None:
        return None
    if isinstance(usage, str | bytes | numbers.Number):
        logger.warning(
            "context-fold: ignoring usage=%s in llm:response: not a usage mapping or object",
            _shown(usage),
        )
        return None
    get = usage.get if isinstance(usage, Mapping) else lambda key: getattr(usage, key, None)
    model = data.get("model")
    model = model if isinstance(model, str) and model else None
    field = _FieldReader(get)
    prompt = field("prompt_tokens")
    if prompt is not None:  # OpenAI SDK
        details = get("prompt_tokens_details")
        cached = None
        if details is not None:
            cached = _FieldReader(
                details.get
                if isinstance(details, Mapping)
                else lambda key: getattr(details, key, None),
                prefix="usage.prompt_tokens_details.",
            )("cached_tokens")
        return prompt, cached or 0, 0, model
    input_tokens = field("input_tokens")
    if input_tokens is None:
        return None
    creation = field("cache_creation_input_tokens")
    anthropic_read = field("cache_read_input_tokens")
    if creation is not None or anthropic_read is not None:  # Anthropic SDK
        read, write = anthropic_read or 0, creation or 0
        return input_tokens + read + write, read, write, model
    read = field("cache_read_tokens") or 0
    write = field("cache_write_tokens") or 0
    return input_tokens + write, read, write, model


class _FieldReader:
    """Reads one usage field as a token count; a bad value is logged once and read as None."""

    __slots__ = ("_get", "_prefix")

    def __init__(self, get: Callable[[str], Any], prefix: str = "usage.") -> None:
        self._get = get
        self._prefix = prefix

    def __call__(self, key: str) -> int | None:
        value = self._get(key)
        if value is None:
            return None
        count = _count(value)
        if count is None:
            logger.warning(
                "context-fold: ignoring %s%s=%s in llm:response: not a plausible token count",
                self._prefix,
                key,
                _shown(value),
            )
        return count


def _count(value: Any) -> int | None:
    """A whole token count in [0, MAX_PLAUSIBLE_TOKENS], or None for anything else (bools,
    NaN, inf, text, negative or absurd figures)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif isinstance(value, numbers.Number):  # float, Decimal, Fraction, numpy scalars
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return None
        if not math.isfinite(number):
            return None
        count = int(number)
    else:
        return None
    return count if 0 <= count <= MAX_PLAUSIBLE_TOKENS else None


def _shown(value: Any) -> str:
    """A short repr for a log line, whatever the payload holds."""
    try:
        return reprlib.repr(value)
    except Exception:  # a hostile __repr__ must not turn a log line into a crash
        return f"<{type(value).__name__}>"


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
