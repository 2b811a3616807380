"""What a sequence of requests costs under a provider's prices and prompt cache.

Pure arithmetic for reports and for a planner weighing a compaction pass: given `Prices`,
a cache lifetime and the requests (their input size, the tokens they share with the previous
request's input from the start, their output, their time), `session_cost` is the bill, and
`request_cost` is one request's given the one before it.

The rules, one per term of the bill (docs/pricing.md states them for users):

1. **Warm or cold.** The previous request's prefix is in the cache when there was a previous
   request, it was at least the provider's minimum cacheable length (shorter prompts are
   never cached), and no more than the cache lifetime has passed since it (a request without
   a time counts as within the lifetime: a replay or an eval has no clock).
2. **Reads.** On a warm cache, the shared prefix is read from it, when it is itself at least
   the minimum cacheable length; on a cold one nothing is read. This is the most a prefix
   cache can serve; Anthropic serves it when a breakpoint stands within 20 blocks after the
   point where the request departs from the previous one (``cache_breakpoints: anthropic``
   marks the newest turn), OpenAI and Gemini serve it on their own.
3. **Writes.** With explicit caching (Anthropic) the rest of the request, after the part
   read, is written to the cache at the write price of the lifetime (1.25x for five
   minutes, 2x for an hour), when the request is at least the minimum cacheable length:
   the breakpoint on the newest turn caches the whole request for the next one. Shorter
   requests are billed as fresh input. With automatic and implicit caching a write costs
   what fresh input costs, so the rest is billed as fresh input.
4. **Output** is billed at the output price.

`billed_cost` prices a usage the provider itself reported (reads and writes as billed, e.g.
a provider honouring ``cache_control`` breakpoints), where no rule is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .prices import Prices

PER_MILLION = 1_000_000


class PricedRequest(NamedTuple):
    """One request, as the cost model sees it.

    ``tokens`` is the whole input (tool schemas, system, messages); ``prefix_tokens`` the
    leading part identical to the previous request's input (0 for the first); ``at`` a time
    in seconds on any clock (None: within the lifetime of the previous request).
    """

    tokens: int
    prefix_tokens: int = 0
    output_tokens: int = 0
    at: float | None = None


@dataclass(frozen=True, slots=True)
class RequestCost:
    """One request's bill: where its input tokens went, and the dollars."""

    fresh_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    usd: float
    cold: bool  # nothing could be read: no previous request, or its cache had expired

    @property
    def input_tokens(self) -> int:
        return self.fresh_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True, slots=True)
class SessionCost:
    """A sequence of requests' bill: per request, and summed."""

    prices: Prices
    requests: tuple[RequestCost, ...]

    @property
    def usd(self) -> float:
        return sum(cost.usd for cost in self.requests)

    @property
    def fresh_tokens(self) -> int:
        return sum(cost.fresh_tokens for cost in self.requests)

    @property
    def cache_read_tokens(self) -> int:
        return sum(cost.cache_read_tokens for cost in self.requests)

    @property
    def cache_write_tokens(self) -> int:
        return sum(cost.cache_write_tokens for cost in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(cost.output_tokens for cost in self.requests)

    def to_dict(self) -> dict[str, object]:
        return {
            "prices": self.prices.name,
            "usd": round(self.usd, 6),
            "fresh_tokens": self.fresh_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
        }


def is_warm(
    prices: Prices, request: PricedRequest, previous: PricedRequest | None, lifetime: int
) -> bool:
    """Rule 1: whether ``previous``'s prefix is still in the cache when ``request`` is made."""
    if previous is None or previous.tokens < prices.min_cacheable_tokens:
        return False
    if request.at is None or previous.at is None:
        return True
    return 0 <= request.at - previous.at <= lifetime


def request_cost(
    prices: Prices,
    request: PricedRequest,
    previous: PricedRequest | None = None,
    *,
    lifetime: int | None = None,
) -> RequestCost:
    """What ``request`` costs after ``previous`` (None: the first request, or the cache is
    known to be empty). ``lifetime`` overrides the prices' cache lifetime (seconds)."""
    lifetime = prices.cache_lifetime if lifetime is None else lifetime
    tokens = max(0, int(request.tokens))
    warm = is_warm(prices, request, previous, lifetime)
    shared = min(max(0, int(request.prefix_tokens)), tokens)
    read = shared if warm and shared >= prices.min_cacheable_tokens else 0
    rest = tokens - read
    write = 0
    if prices.caching == "explicit" and tokens >= prices.min_cacheable_tokens:
        write = rest
    fresh = rest - write
    output = max(0, int(request.output_tokens))
    usd = billed_cost(prices, fresh=fresh, cache_read=read, cache_write=write, output=output)
    return RequestCost(fresh, read, write, output, usd, cold=not warm)


def session_cost(
    prices: Prices, requests: Iterable[PricedRequest], *, lifetime: int | None = None
) -> SessionCost:
    """Every request's cost in order, each after the one before (see the module's rules)."""
    costs: list[RequestCost] = []
    previous: PricedRequest | None = None
    for request in requests:
        costs.append(request_cost(prices, request, previous, lifetime=lifetime))
        previous = request
    return SessionCost(prices, tuple(costs))


@dataclass(frozen=True, slots=True)
class PricedColumns:
    """A long sequence's input priced (`price_columns`): USD per request, and the tokens
    billed as each kind in all."""

    usd: list[float]
    fresh_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def total_usd(self) -> float:
        return sum(self.usd)


def price_columns(
    prices: Prices,
    tokens: Sequence[int],
    prefix_tokens: Sequence[int],
    times: Sequence[float | None] | None = None,
    *,
    lifetime: int | None = None,
) -> PricedColumns:
    """`session_cost` of the requests ``(tokens[i], prefix_tokens[i], 0, times[i])``, input
    only, for sequences of hundreds of thousands of requests (a replay's): the same rules in
    one loop over plain columns of whole non-negative numbers, with no object per request."""
    lifetime = prices.cache_lifetime if lifetime is None else lifetime
    minimum = prices.min_cacheable_tokens
    explicit = prices.caching == "explicit"
    fresh_price = prices.input / PER_MILLION
    read_price = prices.cache_read / PER_MILLION
    write_price = prices.cache_write / PER_MILLION
    usd: list[float] = []
    append = usd.append
    fresh_total = read_total = write_total = 0
    previous_tokens = -1  # no previous request
    previous_at: float | None = None
    clock = times if times is not None else [None] * len(tokens)
    for size, shared, at in zip(tokens, prefix_tokens, clock, strict=True):
        warm = previous_tokens >= minimum and (
            at is None or previous_at is None or 0 <= at - previous_at <= lifetime
        )
        if shared > size:
            shared = size
        read = shared if warm and shared >= minimum else 0
        write = size - read if explicit and size >= minimum else 0
        fresh = size - read - write
        append(fresh * fresh_price + read * read_price + write * write_price)
        fresh_total += fresh
        read_total += read
        write_total += write
        previous_tokens, previous_at = size, at
    return PricedColumns(usd, fresh_total, read_total, write_total)


def billed_cost(
    prices: Prices,
    *,
    fresh: int,
    cache_read: int = 0,
    cache_write: int = 0,
    output: int = 0,
    cache_write_1h: int = 0,
) -> float:
    """Dollars for a usage as the provider billed it: ``fresh`` input, ``cache_read``,
    ``cache_write`` at the lifetime's write price, ``cache_write_1h`` at the one-hour price
    (Anthropic reports the two apart), and ``output``."""
    one_hour = prices.cache_write_1h if prices.cache_write_1h is not None else prices.cache_write
    total = (
        fresh * prices.input
        + cache_read * prices.cache_read
        + cache_write * prices.cache_write
        + cache_write_1h * one_hour
        + output * prices.output
    )
    return total / PER_MILLION


__all__ = [
    "PER_MILLION",
    "PricedColumns",
    "PricedRequest",
    "RequestCost",
    "SessionCost",
    "billed_cost",
    "is_warm",
    "price_columns",
    "request_cost",
    "session_cost",
]
