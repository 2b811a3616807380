"""Budget derivation and its provenance record (the ``context:budget`` payload).

Step 1 derives what the model offers, in priority order: an explicit ``token_budget``;
``provider.get_model_info()``; ``provider.get_info().defaults``; else
``max_tokens_fallback``. A window becomes a budget by
``context_window - output_reserve_fraction * max_output_tokens - safety_margin``.
Step 2 caps it: ``effective = min(derived, max_tokens)``. ``min`` can only lower a
budget, so a cap can make compaction fire earlier but can never overflow a request.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .config import ContextConfig

logger = logging.getLogger(__name__)

SOURCES = ("explicit", "provider_model_info", "provider_defaults", "max_tokens_fallback")


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

    def with_refit_cap(self, cap: int | None) -> BudgetDecision:
        """This decision under the cap a provider overflow taught (explicit budgets excepted)."""
        if cap is None or self.source == "explicit":
            return self
        return replace(
            self,
            refit_cap=cap,
            capped=self.capped or cap < self.effective_budget,
            effective_budget=min(self.effective_budget, cap),
        )

    def at_input_limit(self) -> BudgetDecision:
        """This decision without the safety margin: the provider's own input limit (its window
        less the whole output reserve), still under ``max_tokens``. The last resort before a
        session ends because its required core does not fit: the margin is there for the
        estimate's error, and refusing a request the provider may well accept helps no one
        (if it does not, the loop's refit learns by how much). Itself when there is no
        window to go by, the budget was explicit, or it would not be larger."""
        if self.source == "explicit" or self.context_window is None:
            return self
        limit = self.context_window - (self.max_output_tokens or 0)
        if self.max_tokens is not None:
            limit = min(limit, self.max_tokens)
        if self.refit_cap is not None:
            limit = min(limit, self.refit_cap)
        if limit <= self.effective_budget:
            return self
        return replace(self, effective_budget=limit, margin_waived=True)

    def to_event(self) -> dict[str, Any]:
        """The contract's ``context:budget`` payload (the model rides along as extra)."""
        return asdict(self)


async def derive_budget(
    config: ContextConfig, *, token_budget: int | None = None, provider: Any | None = None
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
            context_window, max_output, window_model = window
            reserved = int(config.output_reserve_fraction * max_output)
            derived = max(0, context_window - reserved - config.safety_margin)
            return _finish(
                config, source, context_window, max_output, reserved, derived, window_model or model
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
_last: tuple[ContextConfig, tuple[Any, ...], BudgetDecision] | None = None


def _finish(
    config: ContextConfig,
    source: str,
    context_window: int | None,
    max_output: int | None,
    reserved: int | None,
    derived: int,
    model: str | None,
) -> BudgetDecision:
    global _last
    figures = (source, context_window, max_output, reserved, derived, model)
    last = _last
    if last is not None and last[0] is config and last[1] == figures:
        return last[2]
    decision = _decide(config, *figures)
    _last = (config, figures, decision)
    return decision


def _decide(
    config: ContextConfig,
    source: str,
    context_window: int | None,
    max_output: int | None,
    reserved: int | None,
    derived: int,
    model: str | None,
) -> BudgetDecision:
    cap = config.max_tokens
    effective = derived if cap is None else min(derived, cap)
    return BudgetDecision(
        source=source,
        context_window=context_window,
        max_output_tokens=max_output,
        reserved_output=reserved,
        derived_budget=derived,
        max_tokens=cap,
        max_tokens_fallback=config.max_tokens_fallback,
        capped=cap is not None and cap < derived,
        effective_budget=effective,
        model=model,
    )


async def _window_from(provider: Any, method: str) -> tuple[int, int, str | None] | None:
    """(context_window, max_output_tokens, model) from one provider method, if it has one."""
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
    model = _field(info, "id") if method == "get_model_info" else _field(info, "model")
    return window, max_output, model if isinstance(model, str) else None


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
