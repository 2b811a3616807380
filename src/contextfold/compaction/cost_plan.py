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

How deep: at the optimal peak a cycle's reads and rewrite come to ``read x peak`` a request,
which grows with the floor, so a cost pass goes as deep as protection lets it
(`COST_PASS_TARGET`, run to protection's fixed point): the protected recent messages and
tool results, the head, the notice and the current task's working set are what it leaves
(what a later turn of the task drew on, and the whole task while it fits under the middle of
the configured band: a pass that saves reads by taking out the result the task reads next
is no saving). A pass the budget forces (or a retained reminder) is the threshold planner's,
rules and depth alike, and so is a pass where passes come every few requests anyway (the
window small beside what a request adds: see `cadence`), unless the cache is cold. A deep
pass also holds, against the same middle of the band, the earlier messages a later one drew
a value from (`rungs.DropLeastUsed`): the ids the conversation keeps coming back to. A cost
pass that ends above its (zero) target has missed only above that middle (`reached_below`):
then the next pass waits for the budget, as after any pass protection held up.

Which pass: a pass rewrites everything after its first change, so one that edits only what
was admitted since the last pass (the newest results, the ledger and the notice left as they
were) keeps the cached prefix. `cycle_cost` prices the cycle each option starts, its reads
and its rewrite (what it leaves past what it keeps of the view as last sent), and
`cheapest_option` takes the cheaper one within the trigger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..meter import UsageReading
from ..prices import Prices, find_prices, reference_prices
from .cadence import MIN_REQUESTS_BETWEEN_PASSES


class CostDecision(NamedTuple):
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
    reason = PeakRule(prices).reason(size, growth, after, head, trigger, warm)
    return CostDecision(bool(reason), reason or "wait")


class PeakRule:
    """`decide` for one set of prices, their figures looked up once: it runs on every
    request the cost planner does not compact, so it must cost next to nothing."""

    __slots__ = ("extra", "read")

    def __init__(self, prices: Prices) -> None:
        self.read = prices.cache_read
        self.extra = rewrite_price(prices) - self.read

    def reason(
        self, size: int, growth: float, after: int, head: int, trigger: int, warm: bool
    ) -> str:
        """Why a view of ``size`` tokens compacts now (see `decide`), or "" to wait."""
        if size > trigger:
            return "trigger"
        if size <= after:
            return ""  # a pass could not take anything out
        if not warm:
            # A cold cache re-sends the whole view anyway: compacting now rewrites nothing
            # that would have been read.
            return "cold_cache"
        # `optimal_peak`, written out (the same arithmetic, so the same answer).
        read, extra, rewritten = self.read, self.extra, max(0, after - head)
        if growth <= 0 or rewritten <= 0 or extra <= 0:
            return ""
        if read <= 0 or size >= after + math.sqrt(2 * extra / read * rewritten * growth):
            return "optimal_peak"
        return ""


# A cost pass is asked for nothing: the ladder runs until protection holds it (the newest
# messages, the newest tool results, the head), which is the cheapest floor (see above).
COST_PASS_TARGET = 0


@dataclass(slots=True)
class CacheWatch:
    """What the planner knows of the provider's cache between requests: when the last view
    went out, whether a pass made it, and what the usage readings said."""

    last_at: float | None = None  # wall-clock time the last view was delivered
    last_passed: bool = False  # that view came from a committed pass
    seen_reads: bool = False  # some reading reported cache reads: the provider caches
    reading: UsageReading | None = None  # the last reading looked at
    cold_reading: bool = False  # that reading read nothing where a steady request would
    # What a pass the peak rule fired reached when it did not pay there (`still_pays`), in
    # tokens of the view's messages: the floor protection allows, which the rule expects
    # from then on, until a pass is committed (it does not fire again on every request).
    floor: int | None = None

    def delivered(self, at: float, passed: bool) -> None:
        """A view went out at ``at``; ``passed`` when a pass made it."""
        self.last_at, self.last_passed = at, passed
        if passed:
            self.floor = None

    def warm(self, lifetime: int, now: float, reading: UsageReading | None) -> bool:
        """Whether the provider still holds the last request's prefix: not when the cache
        lifetime has passed since it, nor when its reading read nothing from a cache the
        provider had been reading (a reading of the request after a pass reads nothing
        anyway, and a provider that never reported a read tells nothing)."""
        if reading is not None and reading is not self.reading:
            self.reading = reading
            reads = reading.cache_read_tokens or 0
            self.cold_reading = reads <= 0 and self.seen_reads and not self.last_passed
            self.seen_reads = self.seen_reads or reads > 0
        if self.cold_reading:
            return False
        return self.last_at is None or now - self.last_at <= lifetime


class RequestSizes(NamedTuple):
    """One request's sizes as the request path measured them, in tokens of the view's
    messages (the notice apart, which rides on its own reserve)."""

    size: int  # the view now
    trigger: int  # the hard bound a view over compacts at whatever the cost
    target: int  # the configured target: what a first pass is expected to leave
    head: int  # the leading system messages and first prompt, which a pass leaves as they are
    last_after: int | None  # what the last committed pass left, None before the first
    requests_since: int  # requests delivered since then (or since the start)
    floor: int | None = None  # what a pass since then reached and did not commit


def request_growth(sizes: RequestSizes) -> float:
    """What a request added to the view, on average, since the last pass (or the start:
    from the head)."""
    base = sizes.head if sizes.last_after is None else sizes.last_after
    return max(0, sizes.size - base) / (sizes.requests_since + 1)


def plan_request(rule: PeakRule, sizes: RequestSizes, warm: bool) -> str:
    """The cost model's decision for this request: the growth per request seen since the
    last pass (or the start), and the floor a pass is expected to reach (what the last one
    reached). Returns why to compact now, or "" to wait."""
    size, last_after = sizes.size, sizes.last_after
    growth = request_growth(sizes)
    # Before any pass, the floor is unknown: expect the configured target (a pass later
    # rather than sooner), unless the cache is cold, when a pass rewrites nothing it would
    # have read and whatever it takes out is saved.
    after = last_after if last_after is not None else sizes.target if warm else sizes.head
    if sizes.floor is not None:
        # A pass since the last one found it could not go below this (`still_pays`).
        after = max(after, sizes.floor)
    return rule.reason(size, growth, after, sizes.head, sizes.trigger, warm)


def still_pays(rule: PeakRule, sizes: RequestSizes, reached: int) -> bool:
    """Whether a pass the peak rule fired before the trigger ("optimal_peak") still pays,
    with the floor it actually ``reached`` (tokens of the view's messages it leaves;
    ``sizes.head``: what it left as it was from the start) in place of the floor the rule
    expected (what the last pass reached).

    The rule fires on the growth it has seen: a request that brought one large result makes
    the view look as if it grew fast, and the peak for the last floor comes early. But what
    a pass can take out is only what protection lets go: the large result, newest, stays,
    and the pass lands far above the floor expected. Priced at that floor, the rewrite such a
    pass starts costs more than the reads it saves before the trigger would have come, and it
    had taken out the messages the task was using (`contextfold eval`, BFCL at 8,000
    tokens: a pass at 6,600 tokens of a 7,065 trigger that left 4,700 and took the listing
    the next step read). Such a pass is not committed: the view waits, as the rule would have
    had it known the floor. A pass the trigger or a cold cache fired is not asked."""
    growth = request_growth(sizes)
    reason = rule.reason(sizes.size, growth, reached, sizes.head, sizes.trigger, True)
    return reason == "optimal_peak"


def reached_below(target: int, trigger: int, growth: float, ledger: int = 0) -> int:
    """The view size, in tokens, up to which a cost pass counts as having reached its
    target: the middle of the band between the configured ``target`` and ``trigger``, with
    half the ``ledger`` the view carries on top (the hold a deep pass weighs the view
    against, see `planner.run_pass`: a pass that stopped at its hold has not missed), as far
    as that leaves `MIN_REQUESTS_BETWEEN_PASSES` requests of ``growth`` under the trigger
    (never below the target itself).

    A pass that ends above this makes the next one wait for the budget (protection held it
    up: a pass at the trigger would find the same floor). A deep pass judged against the
    configured target instead would miss it on most passes of a long task (its working set
    is held against the band's middle), and every later pass would be one the budget
    forces: the threshold planner's, rules and depth alike, and a view parked near the
    budget (`contextfold eval`, long-horizon at 16,000 tokens: $7.80 against $7.14)."""
    middle = (target + trigger) // 2 + max(0, ledger) // 2
    return max(target, min(middle, trigger - math.ceil(MIN_REQUESTS_BETWEEN_PASSES * growth)))


class PassOption(NamedTuple):
    """One way a pass could leave the view, in tokens: what it leaves (``after``), and how
    much of the view as last sent it leaves as it was, from the start (``kept``: the next
    request reads that from the cache and pays the rewrite price for the rest)."""

    name: str
    after: int
    kept: int


def cycle_cost(prices: Prices, option: PassOption, growth: float, trigger: int) -> float:
    """What the requests of the cycle a pass starts cost on average, in the prices' units
    per token (input price x tokens, per request): the reads of the view as it grows from
    ``after`` to the next pass, plus the rewrite of what the pass changed (``after - kept``
    at the rewrite price less the read it replaces), spread over the cycle's requests.

    The next pass comes at the optimal peak for this floor and rewrite (see `optimal_peak`),
    or at the ``trigger`` if that comes first; a view the pass leaves over the trigger would
    compact again at once (infinite: never chosen). Without growth the rewrite is spread
    over a cycle that never ends: only the reads count."""
    if option.after > trigger:
        return math.inf
    read = prices.cache_read
    extra = max(0.0, rewrite_price(prices) - read)
    rewritten = max(0, option.after - max(0, option.kept))
    if growth <= 0:
        return read * option.after
    room = max(0.0, float(trigger - option.after))
    # Free reads: wait for the trigger; else the peak for this rewrite (none: compact at
    # once, the cycle is its floor's reads).
    span = room if read <= 0 else min(room, math.sqrt(2 * extra / read * rewritten * growth))
    # At least one request before the next pass, whatever the room.
    requests = max(1.0, span / growth)
    return read * (option.after + span / 2) + extra * rewritten / requests


def cheapest_option(
    prices: Prices, options: Sequence[PassOption], growth: float, trigger: int
) -> PassOption:
    """The option whose cycle costs least (`cycle_cost`); the first of equals (callers list
    the deepest first: at equal cost, the one that leaves the most room). Every option over
    the trigger is refused, and the first option stands when every one is."""
    if not options:
        raise ValueError("cheapest_option needs at least one option")
    best, best_cost = options[0], cycle_cost(prices, options[0], growth, trigger)
    for option in options[1:]:
        cost = cycle_cost(prices, option, growth, trigger)
        if cost < best_cost:
            best, best_cost = option, cost
    return best


def planner_prices(configured: Prices | None, model: str | None) -> Prices:
    """What the cost planner prices with: the configured prices, else the model's family in
    the table, else Anthropic's reference model (its multipliers: the dearest rewrite)."""
    if configured is not None:
        return configured
    found = find_prices(model) if model else None
    return found if found is not None else reference_prices()[0]
