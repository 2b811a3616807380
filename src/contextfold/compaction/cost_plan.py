"""When to compact, and how deep, by what the next requests will cost (``planner: cost``).

A provider's prompt cache bills a request's repeated prefix at a fraction of fresh input
(Anthropic reads at 0.1x; OpenAI's cached input 0.1x-0.5x), and a compaction pass rewrites
everything after its first change: the view it leaves is sent again in full, at the write
price (Anthropic 1.25x) or as fresh input. So a pass is an investment: it costs the rewrite
of the view it leaves, and saves the reads of what it took out on every later request.

With the view growing by ``growth`` tokens a request and each pass bringing it down to
``floor``, a cycle from ``floor`` to ``peak`` costs its reads, ``read x (floor + peak) / 2``
a request, plus one rewrite of what the pass changed, ``(rewrite - read) x (floor - head)``
(the view's first ``head`` tokens, the system prompt and the task, stay cached across it),
over ``(peak - floor) / growth`` requests. The peak that minimises the cost per request is

    peak* = floor + sqrt(2 x (rewrite - read) / read x (floor - head) x growth)

(Anthropic: ``floor + sqrt(23 x (floor - head) x growth)``): compacting earlier rewrites too
often, later reads too much. When the cache has gone cold (the lifetime passed since the last
request, or the provider read nothing from it) the next request is sent in full anyway: a
pass then costs no rewrite, and is the time to compact as deep as protection allows.

The configured thresholds stay hard bounds: a pass never waits past the trigger, and the
budget is never exceeded; the cost model decides inside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..prices import Prices


@dataclass(frozen=True, slots=True)
class CostDecision:
    """Whether this request should compact, and why."""

    compact: bool
    reason: str  # "trigger", "cold_cache", "optimal_peak" or "wait"


def rewrite_price(prices: Prices) -> float:
    """What a token of the view costs on the request after a pass: the cache write with
    explicit caching (Anthropic), fresh input where caching is automatic or implicit."""
    return prices.cache_write if prices.caching == "explicit" else prices.input


def optimal_peak(prices: Prices, floor: int, growth: float, head: int = 0) -> float:
    """The view size at which compacting back to ``floor`` is cheapest per request, when a
    pass leaves the view's first ``head`` tokens as they were (the system prompt and the
    task, which stay cached across a pass) and rewrites the rest."""
    read = prices.cache_read
    extra = rewrite_price(prices) - read
    rewritten = max(0, floor - head)
    if growth <= 0 or rewritten <= 0 or extra <= 0:
        return math.inf  # nothing grows, or a rewrite costs nothing more: never worth it
    if read <= 0:
        return float(floor)  # reads are free to skip, rewrites are not: any growth pays
    return floor + math.sqrt(2 * extra / read * rewritten * growth)


def decide(
    prices: Prices,
    *,
    size: int,
    growth: float,
    after: int,
    head: int,
    trigger: int,
    warm: bool,
) -> CostDecision:
    """The cost model's decision for a view of ``size`` tokens now.

    ``growth`` is what a request adds, as seen since the last pass; ``after`` what a pass is
    expected to leave (the larger of its target and what the last pass could reach: the
    target bounds how deep a pass may go, protection how deep it can); ``trigger`` the
    configured hard bound (a view over it compacts whatever the cost); ``warm`` whether the
    provider still holds the last request's prefix; ``head`` the view's leading tokens a pass
    leaves as they are.
    """
    if size > trigger:
        return CostDecision(True, "trigger")
    if size <= after:
        return CostDecision(False, "wait")  # a pass could not take anything out
    if not warm:
        # A cold cache re-sends the whole view anyway: compacting now rewrites nothing that
        # would have been read.
        return CostDecision(True, "cold_cache")
    if size >= optimal_peak(prices, after, growth, head):
        return CostDecision(True, "optimal_peak")
    return CostDecision(False, "wait")
