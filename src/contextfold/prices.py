"""What model requests cost: a price table per provider and model family, and its lookup.

Every figure is a list price in US dollars per million tokens: fresh (uncached) input, a
cache read, a cache write for each lifetime the provider sells, and output. Beside them:
how the provider caches (``explicit`` breakpoints, Anthropic; ``automatic`` prefix caching,
OpenAI; ``implicit`` caching, Gemini), the cache lifetime a cost is computed with, and the
shortest prompt the provider caches at all.

The table (`PRICE_TABLE`) is what contextfold ships; `PRICE_TABLE_DATE` and
`PRICE_TABLE_SOURCES` say where its figures come from. Prices change: a config's ``prices``
key names a family or gives the figures (`prices_for`), and docs/pricing.md says how.

Pure data and arithmetic over it: nothing here imports from a higher layer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .errors import ConfigError
from .shown import shown

FIVE_MINUTES = 300
ONE_HOUR = 3_600
ONE_DAY = 86_400
CACHING_KINDS = ("explicit", "automatic", "implicit")
PROVIDERS = ("anthropic", "openai", "google")

# When the table was compiled, and from what. The figures are the providers' published list
# prices (standard tier, prompts under any long-context surcharge); they were not checked
# against the live pages on this date: docs/pricing.md says how to override them.
PRICE_TABLE_DATE = "2026-12-01"
PRICE_TABLE_SOURCES = {
    "anthropic": "Anthropic's prompt-caching documentation, its price table per model (the "
    "Opus 4.6 edition): reads at 0.1x the input price, 5-minute writes at 1.25x, 1-hour "
    "writes at 2x; minimum cacheable prompt lengths from the same page",
    "openai": "OpenAI's API pricing page (GPT-5, GPT-4.1, GPT-4o and o-series list prices, "
    "2025): cached input at 0.1x-0.5x by model, no charge to write; prompt caching from "
    "1,024 tokens",
    "google": "Google's Gemini API pricing page (Gemini 2.5, 2025): implicit caching bills "
    "cached input at 0.25x, no charge to write and no storage charge; minimum lengths from "
    "the implicit-caching announcement (May 2025)",
}


@dataclass(frozen=True, slots=True)
class Prices:
    """The prices of one model family, in USD per million tokens, and how it caches.

    ``cache_write_1h`` is None where the provider sells no one-hour cache. Providers that
    cache without a surcharge (OpenAI, Gemini) have ``cache_write_5m`` equal to ``input``:
    the first request that sends a prefix pays it as fresh input.
    """

    name: str
    provider: str
    input: float
    output: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float | None = None
    cache_lifetime: int = FIVE_MINUTES  # seconds a cached prefix stays readable
    caching: str = "automatic"
    min_cacheable_tokens: int = 1_024

    def __post_init__(self) -> None:
        for key in ("input", "output", "cache_read", "cache_write_5m"):
            _check_price(key, getattr(self, key))
        if self.cache_write_1h is not None:
            _check_price("cache_write_1h", self.cache_write_1h)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"prices: name must be a non-empty string, got {shown(self.name)}.")
        if not isinstance(self.provider, str) or not self.provider:
            raise ConfigError(
                f"prices: provider must be a non-empty string, got {shown(self.provider)}."
            )
        if not isinstance(self.caching, str) or self.caching not in CACHING_KINDS:
            raise ConfigError(
                f"prices: caching={shown(self.caching)} is not one of "
                f"{', '.join(CACHING_KINDS)} (explicit: Anthropic's breakpoints; automatic: "
                "OpenAI's prefix cache; implicit: Gemini's)."
            )
        lifetime = self.cache_lifetime
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime <= 0:
            raise ConfigError(
                f"prices: cache_lifetime must be a positive number of seconds, got "
                f"{shown(lifetime)}."
            )
        if lifetime > ONE_DAY:
            raise ConfigError(
                f"prices: cache_lifetime={shown(lifetime)} s is over a day; no provider keeps "
                "a prompt cache that long. Give '5m', '1h' or seconds."
            )
        if lifetime > ONE_HOUR and self.caching == "explicit":
            raise ConfigError(
                f"prices: cache_lifetime={lifetime} s is over an hour; explicit (Anthropic) "
                "caches live 5 minutes or 1 hour. Give '5m' or '1h'."
            )
        if lifetime > FIVE_MINUTES and self.caching == "explicit" and self.cache_write_1h is None:
            raise ConfigError(
                f"prices {self.name!r}: cache_lifetime={lifetime} s needs the one-hour write "
                "price (cache_write_1h), and none is given."
            )
        minimum = self.min_cacheable_tokens
        if (
            isinstance(minimum, bool)
            or not isinstance(minimum, int)
            or not 0 <= minimum <= MAX_MIN_CACHEABLE
        ):
            raise ConfigError(
                f"prices: min_cacheable_tokens must be a whole number from 0 to "
                f"{MAX_MIN_CACHEABLE:,}, got {shown(minimum)}."
            )

    @property
    def cache_write(self) -> float:
        """What a cache write costs at ``cache_lifetime``: the one-hour price beyond five
        minutes (where there is one), else the five-minute price."""
        if self.cache_lifetime > FIVE_MINUTES and self.cache_write_1h is not None:
            return self.cache_write_1h
        return self.cache_write_5m

    def with_lifetime(self, lifetime: int | str) -> Prices:
        """These prices with another cache lifetime ('5m', '1h' or seconds)."""
        return replace(self, cache_lifetime=parse_lifetime(lifetime))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# No model lists prices or minimum lengths anywhere near these: beyond them a figure is a typo.
MAX_PRICE = 100_000.0  # USD per million tokens
MAX_MIN_CACHEABLE = 10_000_000  # tokens


def _check_price(key: str, value: Any) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_PRICE  # NaN fails both comparisons; a huge int compares fine
    ):
        raise ConfigError(
            f"prices: {key} must be a price in USD per million tokens (a number from 0 to "
            f"{MAX_PRICE:,.0f}), got {shown(value)}."
        )


def _anthropic(
    name: str,
    input: float,
    output: float,
    *,
    min_cacheable: int = 1_024,
    listed: tuple[float, float] | None = None,
) -> Prices:
    """Anthropic's published multipliers: read 0.1x, 5-minute write 1.25x, 1-hour write 2x
    (``listed``: the read and 5-minute write prices where its table rounds them)."""
    read, write = listed if listed is not None else (input * 0.1, input * 1.25)
    return Prices(
        name=name,
        provider="anthropic",
        input=input,
        output=output,
        cache_read=round(read, 6),
        cache_write_5m=round(write, 6),
        cache_write_1h=round(input * 2, 6),
        caching="explicit",
        min_cacheable_tokens=min_cacheable,
    )


def _openai(name: str, input: float, cached: float, output: float) -> Prices:
    """OpenAI: automatic prefix caching from 1,024 tokens, writes at the input price."""
    return Prices(
        name=name,
        provider="openai",
        input=input,
        output=output,
        cache_read=cached,
        cache_write_5m=input,
        caching="automatic",
        min_cacheable_tokens=1_024,
    )


def _gemini(name: str, input: float, output: float, *, min_cacheable: int) -> Prices:
    """Gemini 2.5: implicit caching, cached input at 0.25x, writes at the input price."""
    return Prices(
        name=name,
        provider="google",
        input=input,
        output=output,
        cache_read=round(input * 0.25, 6),
        cache_write_5m=input,
        caching="implicit",
        min_cacheable_tokens=min_cacheable,
    )


# Families, by the model-name stem they answer to (see `find_prices`). USD per million.
PRICE_TABLE: tuple[Prices, ...] = (
    # Anthropic
    _anthropic("claude-opus-4-6", 5.0, 25.0, min_cacheable=4_096),
    _anthropic("claude-opus-4-5", 5.0, 25.0, min_cacheable=4_096),
    _anthropic("claude-opus-4-1", 15.0, 75.0),
    _anthropic("claude-opus-4", 15.0, 75.0),
    _anthropic("claude-sonnet-4-5", 3.0, 15.0),
    _anthropic("claude-sonnet-4", 3.0, 15.0),
    _anthropic("claude-3-7-sonnet", 3.0, 15.0),
    _anthropic("claude-3-5-sonnet", 3.0, 15.0),
    _anthropic("claude-haiku-4-5", 1.0, 5.0, min_cacheable=4_096),
    _anthropic("claude-3-5-haiku", 0.8, 4.0, min_cacheable=2_048),
    _anthropic("claude-3-opus", 15.0, 75.0),
    _anthropic("claude-3-haiku", 0.25, 1.25, min_cacheable=2_048, listed=(0.03, 0.30)),
    # OpenAI
    _openai("gpt-5.1", 1.25, 0.125, 10.0),
    _openai("gpt-5", 1.25, 0.125, 10.0),
    _openai("gpt-5-mini", 0.25, 0.025, 2.0),
    _openai("gpt-5-nano", 0.05, 0.005, 0.40),
    _openai("gpt-4.1", 2.0, 0.50, 8.0),
    _openai("gpt-4.1-mini", 0.40, 0.10, 1.60),
    _openai("gpt-4.1-nano", 0.10, 0.025, 0.40),
    _openai("gpt-4o", 2.50, 1.25, 10.0),
    _openai("gpt-4o-mini", 0.15, 0.075, 0.60),
    _openai("o3", 2.0, 0.50, 8.0),
    _openai("o3-mini", 1.10, 0.55, 4.40),
    _openai("o4-mini", 1.10, 0.275, 4.40),
    _openai("o1", 15.0, 7.50, 60.0),
    # Google
    _gemini("gemini-2.5-pro", 1.25, 10.0, min_cacheable=2_048),
    _gemini("gemini-2.5-flash", 0.30, 2.50, min_cacheable=1_024),
    _gemini("gemini-2.5-flash-lite", 0.10, 0.40, min_cacheable=1_024),
)
_BY_NAME = {prices.name: prices for prices in PRICE_TABLE}
# What a provider's bare name stands for in ``prices: anthropic``, and the pair every cost
# report shows side by side (Anthropic's multipliers, then OpenAI's).
PROVIDER_DEFAULTS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-5",
    "google": "gemini-2.5-flash",
}
REFERENCE_PRICING: tuple[str, ...] = ("anthropic", "openai")
PROVIDER_LABELS = {"anthropic": "Anthropic", "openai": "OpenAI", "google": "Google"}

# What may follow a family's stem in a model id: a snapshot date, an alias, a Vertex or
# Bedrock version. Anything else is another model (``gpt-5.4`` is not ``gpt-5``).
_SNAPSHOT = re.compile(
    r"(?:-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|-preview(?:-[\w.-]*)?|-exp(?:-[\w.-]*)?)?"
    r"(?:@[\w.-]+|-v\d+(?::\d+)?)?"
)
_PROVIDER_PREFIX = re.compile(r"^(?:[\w.-]+/)+|^(?:[a-z]{2}\.)?anthropic\.")


def find_prices(model: str) -> Prices | None:
    """The family a model id belongs to, or None when the table does not know it.

    ``claude-sonnet-4-5-20250929``, ``anthropic/claude-sonnet-4-5``,
    ``claude-sonnet-4@20250514``, ``models/gemini-2.5-pro`` and ``gpt-4o-2024-08-06`` find
    their family; the longest stem wins (``gpt-4o-mini`` over ``gpt-4o``); a name the table
    does not list (``gpt-5.4``) finds nothing rather than a neighbour's prices.
    """
    if not isinstance(model, str):
        return None
    name = _PROVIDER_PREFIX.sub("", model.strip().lower())
    best: Prices | None = None
    for prices in PRICE_TABLE:
        stem = prices.name
        if not name.startswith(stem) or (best is not None and len(best.name) >= len(stem)):
            continue
        if _SNAPSHOT.fullmatch(name[len(stem) :]):
            best = prices
    return best


def reference_prices() -> tuple[Prices, ...]:
    """The pricings every cost report shows side by side: Anthropic's, then OpenAI's."""
    return tuple(_BY_NAME[PROVIDER_DEFAULTS[provider]] for provider in REFERENCE_PRICING)


# The keys a ``prices`` mapping may hold: every figure, and ``model`` to start from a family.
_MAPPING_KEYS = frozenset({"model", *(f.name for f in fields(Prices))})


def prices_for(value: Any) -> Prices:
    """The ``prices`` config value as prices, or a `ConfigError` saying what to give.

    A string names a provider (``anthropic``, ``openai``, ``google``: its family in
    `PROVIDER_DEFAULTS`) or a model (``claude-sonnet-4-5-20250929``). A mapping gives the
    figures: ``model`` (optional) is the family to start from, the other keys are `Prices`
    fields overriding it (``cache_lifetime`` as ``"5m"``, ``"1h"`` or seconds). Without a
    ``model``, ``input`` and ``output`` are required; a cache read and a write then cost as
    fresh input unless given.
    """
    if isinstance(value, Prices):
        return value
    if isinstance(value, str):
        return _named(value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"prices must be a provider or model name (e.g. 'anthropic', 'gpt-4.1') or a "
            f"mapping of prices in USD per million tokens, got {type(value).__name__}: "
            f"{shown(value)}."
        )
    unknown = [key for key in value if key not in _MAPPING_KEYS]
    if unknown:
        key = unknown[0]
        close = (
            difflib.get_close_matches(key, sorted(_MAPPING_KEYS), n=1)
            if isinstance(key, str) and len(key) <= 100
            else []
        )
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"prices: unknown key {shown(key)}.{hint} Known keys: "
            f"{', '.join(sorted(_MAPPING_KEYS))}."
        )
    figures = dict(value)
    model = figures.pop("model", None)
    if "cache_lifetime" in figures:
        figures["cache_lifetime"] = parse_lifetime(figures["cache_lifetime"])
    if model is not None:
        base = _named(model) if isinstance(model, str) else None
        if base is None:
            raise ConfigError(
                f"prices: model must be a model or provider name, got {shown(model)}."
            )
        return replace(base, **figures)
    missing = [key for key in ("input", "output") if key not in figures]
    if missing:
        raise ConfigError(
            f"prices: {' and '.join(missing)} missing; give the prices in USD per million "
            "tokens (input, output, and cache_read / cache_write_5m / cache_write_1h where "
            "they differ from input), or name a family with 'model'."
        )
    for key in ("input", "output"):
        _check_price(key, figures[key])
    figures.setdefault("name", "custom")
    figures.setdefault("provider", "custom")
    figures.setdefault("cache_read", figures["input"])
    figures.setdefault("cache_write_5m", figures["input"])
    return Prices(**figures)


def _named(name: str) -> Prices:
    key = name.strip().lower()
    if key in PROVIDER_DEFAULTS:
        return _BY_NAME[PROVIDER_DEFAULTS[key]]
    found = find_prices(key)
    if found is not None:
        return found
    close = difflib.get_close_matches(key, sorted(_BY_NAME), n=1) if len(key) <= 100 else []
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"prices: no prices known for {shown(name)}.{hint} Name a provider "
        f"({', '.join(PROVIDER_DEFAULTS)}) or a family ({', '.join(_BY_NAME)}), or give the "
        "figures as a mapping (input, output, cache_read, cache_write_5m, ...)."
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3_600}


def parse_lifetime(value: Any) -> int:
    """A cache lifetime in whole seconds: an int, or text such as ``"5m"``, ``"1h"``, ``"90s"``."""
    if isinstance(value, bool):
        raise ConfigError(f"prices: cache_lifetime must be '5m', '1h' or seconds, got {value}.")
    if isinstance(value, int):
        return value  # checked with the other figures
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is not None:
            unit = match.group(2).lower() if match.group(2) else None
            return round(float(match.group(1)) * _UNIT_SECONDS[unit])
    raise ConfigError(
        f"prices: cache_lifetime must be '5m', '1h' or a whole number of seconds, got "
        f"{shown(value)}."
    )


__all__ = [
    "CACHING_KINDS",
    "FIVE_MINUTES",
    "ONE_HOUR",
    "PRICE_TABLE",
    "PRICE_TABLE_DATE",
    "PRICE_TABLE_SOURCES",
    "PROVIDER_DEFAULTS",
    "PROVIDER_LABELS",
    "REFERENCE_PRICING",
    "Prices",
    "find_prices",
    "parse_lifetime",
    "prices_for",
    "reference_prices",
]
