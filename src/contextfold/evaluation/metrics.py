"""The columns of the eval's tables and of its JSON totals: one small object each.

A column reads its value from a policy's `runner.Totals` over a corpus in a window. The
table, the chart's legend and the JSON all come from `COLUMNS`, so a new measure (a cost per
policy, say) is one more `Column` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .runner import PRICING_NAMES, Totals

Kind = Literal["share", "tokens", "count", "usd"]


@dataclass(frozen=True)
class Column:
    """One measure: its JSON key, its table header, how it is read and shown."""

    key: str
    header: str
    read: Callable[[Totals], float | int | None]
    kind: Kind = "share"

    def value(self, totals: Totals) -> float | int | None:
        return self.read(totals)

    def text(self, totals: Totals) -> str:
        return format_value(self.value(totals), self.kind)


def format_value(value: float | int | None, kind: Kind) -> str:
    if value is None:
        return "-"
    if kind == "share":
        return f"{value:.0%}"
    if kind == "tokens":
        return _tokens(int(value))
    if kind == "usd":
        return usd(value)
    return f"{int(value):,}"


def usd(value: float) -> str:
    """Dollars as a table shows them: cents from a dollar up, four places below."""
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def _tokens(tokens: int) -> str:
    if tokens >= 10_000_000:
        return f"{tokens / 1_000_000:.0f}M"
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f}M"
    if tokens >= 10_000:
        return f"{tokens / 1_000:.0f}k"
    return f"{tokens:,}"


def _share(scope: str, category: str) -> Callable[[Totals], float | None]:
    return lambda totals: totals.share(scope, category)


def _cost(pricing: str) -> Callable[[Totals], float | None]:
    return lambda totals: totals.cost(pricing)


def _answered_cost(pricing: str) -> Callable[[Totals], float | None]:
    return lambda totals: totals.answered_cost(pricing)


# The header of the measures taken on the requests every compared policy answered.
ANSWERED = "answered by all"


COLUMNS: tuple[Column, ...] = (
    Column("far_in_view", "far: in view", _share("far", "in_view")),
    Column("far_ledger_or_summary", "far: ledger/summary", _share("far", "ledger_or_summary")),
    Column("far_recoverable", "far: recoverable", _share("far", "recoverable")),
    Column("far_lost", "far: lost", _share("far", "lost")),
    Column("near_in_view", "near: in view", _share("near", "in_view")),
    Column("near_lost", "near: lost", _share("near", "lost")),
    Column("tokens_sent", "tokens sent", lambda t: t.tokens_sent, "tokens"),
    Column("cache_share", "cache share", lambda t: t.cache_share),
    Column("refusals", "refusals", lambda t: t.refused, "count"),
    Column("over_budget", "over budget", lambda t: t.over_budget, "count"),
    *(Column(f"cost_{name}_usd", f"cost: {name}", _cost(name), "usd") for name in PRICING_NAMES),
    # Beside the raw totals: the same measures on the requests every compared policy
    # answered (a policy that refuses a request sends nothing for it; these compare equals).
    Column("answered_tokens_sent", f"{ANSWERED}: tokens", lambda t: t.answered_tokens, "tokens"),
    *(
        Column(f"answered_cost_{name}_usd", f"{ANSWERED}: {name}", _answered_cost(name), "usd")
        for name in PRICING_NAMES
    ),
)
