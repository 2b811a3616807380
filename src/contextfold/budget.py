"""Budget derivation and its provenance record (the ``context:budget`` payload).

Step 1 derives what the model offers, in priority order: an explicit ``token_budget``;
``provider.get_model_info()``; ``provider.get_info().defaults``; else
``max_tokens_fallback``. A window becomes a budget by the main contract's formula,
``context_window - output_reserve_fraction * max_output_tokens - margin``, reported as
``derived_budget``.
Step 2 caps it: ``effective = min(derived, input_limit - margin, max_tokens)``. ``min`` can
only lower a budget, so a cap can make compaction fire earlier but can never overflow a
request.

Two departures from the contract, both about what the provider really accepts:

* The provider's **input limit** caps the budget. The contract's formula keeps only half of
  the output allowance out, but providers (Anthropic; ``provider-scripted``) refuse a request
  whose input is over ``context_window - max_output_tokens``: with 64,000 output tokens in a
  200,000 window the formula gives 163,904 against a limit of 136,000. The limit is the
  window less the whole output allowance, or the model info's own ``max_input_tokens`` when
  it states one (the lower of the two), and the margin is kept below it as below the window.
* The **margin**, left unset, is the contract's 4,096 but at most 1/32 of the window: 4,096
  is 2 % of a 200,000-token window, and in an 8,000-token one it would eat half of what the
  provider accepts. So the full margin holds from a 131,072-token window up, and a smaller
  window keeps the same share (250 tokens of 8,000). A configured ``safety_margin`` is used
  as given.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class BudgetSettings(Protocol):
    """The settings a budget is derived from (`BudgetSettings` has them): named here, below
    the config, so the budget reads its figures without importing the layer above."""

    @property
    def max_tokens(self) -> int | None: ...
    @property
    def max_tokens_fallback(self) -> int: ...
    @property
    def output_reserve_fraction(self) -> float: ...
    @property
    def safety_margin(self) -> int | None: ...


SOURCES = ("explicit", "provider_model_info", "provider_defaults", "max_tokens_fallback")
# Which bound decided the effective budget: the source's own figure (the contract's formula,
# an explicit budget, the fallback), the provider's input limit less the margin (or without
# it, when the margin was waived), max_tokens, or the cap a forced refit taught.
BOUNDS = ("derived", "input_limit", "max_tokens", "refit_cap")
# The contract's margin, and the share of the window it may take at most when the config
# leaves ``safety_margin`` unset (see the module docstring).
DEFAULT_SAFETY_MARGIN = 4096
MARGIN_WINDOW_SHARE = 32


def margin_for(safety_margin: int | None, context_window: int) -> int:
    """The margin kept below ``context_window``: ``safety_margin`` as configured, or unset,
    the contract's 4,096 at most 1/32 of the window (4,096 from a 131,072 window up)."""
    if safety_margin is not None:
        return safety_margin
    return min(DEFAULT_SAFETY_MARGIN, context_window // MARGIN_WINDOW_SHARE)


def input_limit_of(context_window: int, max_output: int, stated: int | None = None) -> int:
    """What the provider accepts as input: the window less the whole output allowance, or
    the limit the model info states, whichever is lower."""
    implied = max(0, context_window - max_output)
    return implied if stated is None else min(implied, stated)


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    """The effective budget of a request and where it came from."""

    source: str
    context_window: int | None
    max_output_tokens: int | None
    reserved_output: int | None
    derived_budget: int
    max_tokens: int | None
    max_tokens_fallback: int
    capped: bool
    effective_budget: int
    model: str | None = None
    # Set after a provider overflow: the budget of the forced refit (``hard_fit``) that
    # followed, kept as a cap on later requests so the same overflow does not repeat.
    refit_cap: int | None = None
    # True when the content a request cannot go without did not fit the budget with its
    # safety margin, and the request was fitted to the provider's own input limit instead.
    margin_waived: bool = False
    # What the provider accepts as input (see `input_limit_of`); None without a window.
    input_limit: int | None = None
    # The margin kept below the window and the input limit (see `margin_for`).
    safety_margin: int | None = None
    # Which of `BOUNDS` decided ``effective_budget``.
    bound: str = "derived"

    def with_refit_cap(self, cap: int | None) -> BudgetDecision:
        """This decision under the cap a provider overflow taught (explicit budgets excepted)."""
        if cap is None or self.source == "explicit":
            return self
        bites = cap < self.effective_budget
        return replace(
            self,
            refit_cap=cap,
            capped=self.capped or bites,
            effective_budget=min(self.effective_budget, cap),
            bound="refit_cap" if bites else self.bound,
        )

    def at_input_limit(self) -> BudgetDecision:
        """This decision without the safety margin: the provider's own input limit (its window
        less the whole output reserve, or the limit its model info states), still under
        ``max_tokens``. The last resort before a session ends because its required core does
        not fit: the margin is there for the estimate's error, and refusing a request the
        provider may well accept helps no one (if it does not, the loop's refit learns by
        how much). Itself when there is no window to go by, the budget was explicit, or it
        would not be larger."""
        if self.source == "explicit" or self.input_limit is None:
            return self
        limit, bound = self.input_limit, "input_limit"
        if self.max_tokens is not None and self.max_tokens < limit:
            limit, bound = self.max_tokens, "max_tokens"
        if self.refit_cap is not None and self.refit_cap < limit:
            limit, bound = self.refit_cap, "refit_cap"
        if limit <= self.effective_budget:
            return self
        return replace(self, effective_budget=limit, margin_waived=True, bound=bound)

    def to_event(self) -> dict[str, Any]:
        """The contract's ``context:budget`` payload (the model rides along as extra)."""
        return asdict(self)


async def derive_budget(
    config: BudgetSettings, *, token_budget: int | None = None, provider: Any | None = None
) -> BudgetDecision:
    """Derive the effective budget of one request (see the module docstring)."""
    model = _provider_model(provider)
    if token_budget is not None:
        if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget <= 0:
            raise ValueError(
                f"token_budget must be a positive whole number of tokens, got {token_budget!r}; "
                "pass None to derive the budget from the provider."
            )
        return _finish(config, "explicit", None, None, None, token_budget, model)

    if provider is not None:
        window = await _window_from(provider, "get_model_info")
        source = "provider_model_info"
        if window is None:
            window = await _window_from(provider, "get_info")
            source = "provider_defaults"
        if window is not None:
            context_window, max_output, stated_limit, window_model = window
            return _finish(
                config,
                source,
                context_window,
                max_output,
                stated_limit,
                None,
                window_model or model,
            )
        logger.warning(
            "context-fold: provider %r publishes no context window; using max_tokens_fallback=%d. "
            "The durable fix is for the provider to publish its window.",
            getattr(provider, "name", type(provider).__name__),
            config.max_tokens_fallback,
        )
    return _finish(
        config, "max_tokens_fallback", None, None, None, config.max_tokens_fallback, model
    )


# The last decision made, with the config and figures it was made from: a session asks with
# the same config and the same model info on every request, and building the record each
# time was a tenth of a steady request. Decisions are frozen, so sharing one is safe.
_last: tuple[BudgetSettings, tuple[Any, ...], BudgetDecision] | None = None


def _finish(
    config: BudgetSettings,
    source: str,
    context_window: int | None,
    max_output: int | None,
    stated_limit: int | None,
    budget: int | None,
    model: str | None,
) -> BudgetDecision:
    """The decision for these figures: ``budget`` is the source's own (explicit, fallback),
    None for a window, whose budget is derived here."""
    global _last
    figures = (source, context_window, max_output, stated_limit, budget, model)
    last = _last
    if last is not None and last[0] is config and last[1] == figures:
        return last[2]
    decision = _decide(config, *figures)
    _last = (config, figures, decision)
    return decision


def _decide(
    config: BudgetSettings,
    source: str,
    context_window: int | None,
    max_output: int | None,
    stated_limit: int | None,
    budget: int | None,
    model: str | None,
) -> BudgetDecision:
    reserved = limit = margin = None
    if context_window is None:
        assert budget is not None
        derived = uncapped = budget
        bound = "derived"
    else:
        output = max_output or 0
        margin = margin_for(config.safety_margin, context_window)
        reserved = int(config.output_reserve_fraction * output)
        derived = max(0, context_window - reserved - margin)
        limit = input_limit_of(context_window, output, stated_limit)
        under_limit = max(0, limit - margin)
        uncapped, bound = (
            (under_limit, "input_limit") if under_limit < derived else (derived, "derived")
        )
    cap = config.max_tokens
    effective = uncapped if cap is None else min(cap, uncapped)
    capped = effective < uncapped
    return BudgetDecision(
        source=source,
        context_window=context_window,
        max_output_tokens=max_output,
        reserved_output=reserved,
        derived_budget=derived,
        max_tokens=cap,
        max_tokens_fallback=config.max_tokens_fallback,
        capped=capped,
        effective_budget=effective,
        model=model,
        input_limit=limit,
        safety_margin=margin,
        bound="max_tokens" if capped else bound,
    )


async def _window_from(
    provider: Any, method: str
) -> tuple[int, int, int | None, str | None] | None:
    """(context_window, max_output_tokens, stated input limit, model) from one provider
    method, if it has one. The input limit is ``max_input_tokens`` on the info, or in a
    model info's ``defaults``; None when it states none."""
    getter = getattr(provider, method, None)
    if not callable(getter):
        return None
    try:
        info = getter()
        if _awaitable(info):
            info = await info
    except Exception:  # a provider bug must not break the request: fall to the next source
        logger.debug("context-fold: provider.%s() failed", method, exc_info=True)
        return None
    if info is None:
        return None
    if method == "get_info":
        info = _field(info, "defaults")
        if info is None:
            return None
    window = _positive_int(_field(info, "context_window"))
    if window is None:
        return None
    max_output = _positive_int(_field(info, "max_output_tokens")) or 0
    stated = _positive_int(_field(info, "max_input_tokens"))
    if stated is None and method == "get_model_info":
        defaults = _field(info, "defaults")
        if isinstance(defaults, Mapping):
            stated = _positive_int(defaults.get("max_input_tokens"))
    model = _field(info, "id") if method == "get_model_info" else _field(info, "model")
    return window, max_output, stated, model if isinstance(model, str) else None


def _provider_model(provider: Any) -> str | None:
    """The model name a provider will use, for per-model calibration; None if unknown."""
    if provider is None:
        return None
    for attr in ("default_model", "model"):
        value = getattr(provider, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def _awaitable(value: Any) -> bool:
    """`inspect.isawaitable` without its abstract-class check, which costs more than the
    rest of a steady request's budget derivation: the same three cases, by type."""
    kind = type(value)
    if kind is types.GeneratorType:
        return bool(value.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE)
    known = _AWAITABLE_TYPES.get(kind)
    if known is None:
        # Looked up in the class dictionaries: a model class's metaclass (pydantic's) makes
        # a failed class attribute lookup slow, and this runs on every request.
        known = _AWAITABLE_TYPES[kind] = kind is types.CoroutineType or any(
            "__await__" in vars(klass) for klass in kind.__mro__
        )
    return known


# Whether instances of a type are awaitable, by type (a handful of types per process).
_AWAITABLE_TYPES: dict[type, bool] = {}


_ABSENT: Any = object()


def _field(obj: Any, name: str) -> Any:
    if type(obj) is dict:
        return obj.get(name)
    value = getattr(obj, name, _ABSENT)  # a model object, the common case, first
    if value is not _ABSENT:
        return value
    return obj.get(name) if isinstance(obj, Mapping) else None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)
