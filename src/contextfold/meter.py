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
from typing import Any, SupportsFloat, cast

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
    gross, ``cache_read_tokens`` inside it, ``cache_write_tokens`` apart); the OpenAI SDK's
    (``prompt_tokens``, cached and written tokens included, read from
    ``prompt_tokens_details.cached_tokens`` and ``cache_write_tokens``; the Responses API's
    ``input_tokens`` with ``input_tokens_details`` alike); the Anthropic SDK's
    (``input_tokens`` is the uncached part only, so ``cache_creation_input_tokens`` and
    ``cache_read_input_tokens`` are added; when only the split by lifetime is reported,
    ``cache_creation.ephemeral_5m_input_tokens`` and ``ephemeral_1h_input_tokens`` are the
    writes); and LangChain's ``usage_metadata`` (``input_tokens`` gross, with
    ``input_token_details.cache_read`` and ``cache_creation`` inside it).
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
    get: Callable[[str], Any] = (
        usage.get if isinstance(usage, Mapping) else lambda key: getattr(usage, key, None)
    )
    model = data.get("model")
    model = model if isinstance(model, str) and model else None
    field = _FieldReader(get)
    prompt = field("prompt_tokens")
    if prompt is not None:  # OpenAI SDK
        details = get("prompt_tokens_details")
        cached = written = None
        if details is not None:
            detail = _details_reader(details, "usage.prompt_tokens_details.")
            cached, written = detail("cached_tokens"), detail("cache_write_tokens")
        return prompt, cached or 0, written or 0, model
    input_tokens = field("input_tokens")
    if input_tokens is None:
        return None
    creation = field("cache_creation_input_tokens")
    if creation is None:  # only the split by lifetime (``cache_creation``) was reported
        creation = _creation_split(get("cache_creation"))
    anthropic_read = field("cache_read_input_tokens")
    if creation is not None or anthropic_read is not None:  # Anthropic SDK
        read, write = anthropic_read or 0, creation or 0
        return input_tokens + read + write, read, write, model
    details = get("input_token_details")
    if details is not None:  # LangChain's usage_metadata: input_tokens counts both already
        detail = _details_reader(details, "usage.input_token_details.")
        return input_tokens, detail("cache_read") or 0, detail("cache_creation") or 0, model
    details = get("input_tokens_details")
    if (
        details is not None
        and get("cache_read_tokens") is None
        and get("cache_write_tokens") is None
    ):
        # The OpenAI Responses API: input_tokens counts the cached and written parts already.
        detail = _details_reader(details, "usage.input_tokens_details.")
        read, write = detail("cached_tokens") or 0, detail("cache_write_tokens") or 0
        return input_tokens, read, write, model
    read = field("cache_read_tokens") or 0
    write = field("cache_write_tokens") or 0
    return input_tokens + write, read, write, model


def _details_reader(details: Any, prefix: str) -> _FieldReader:
    """Reads the token counts of a nested usage record (a mapping or an SDK object)."""
    get: Callable[[str], Any] = (
        details.get if isinstance(details, Mapping) else lambda key: getattr(details, key, None)
    )
    return _FieldReader(get, prefix=prefix)


def _creation_split(split: Any) -> int | None:
    """Anthropic's cache writes by lifetime (``cache_creation.ephemeral_5m_input_tokens``
    and ``ephemeral_1h_input_tokens``), summed; None when neither is reported."""
    if split is None:
        return None
    detail = _details_reader(split, "usage.cache_creation.")
    parts = [detail("ephemeral_5m_input_tokens"), detail("ephemeral_1h_input_tokens")]
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


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
            # Not every Number converts (a complex does not): TypeError, caught here.
            number = float(cast("SupportsFloat", value))
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
