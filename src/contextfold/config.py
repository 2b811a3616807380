"""Configuration: every key of the main contract plus ours, validated once at mount.

Defaults follow the reference context module; keys of ours are documented beside them
in the README's configuration table. A bad key or value raises `ConfigError` naming the
key, the value and the accepted range, so a typo in a mount plan fails at start-up
instead of silently changing behaviour.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from .cache_marks import CACHE_BREAKPOINT_MODES
from .compaction.ladder import normalize_strategies
from .errors import ConfigError
from .prices import prices_for
from .shown import shown

# What the ``opentelemetry`` key accepts (see `telemetry`).
OPENTELEMETRY_MODES = ("auto", "off")

logger = logging.getLogger(__name__)

TOKEN_METER_MODES = ("estimate", "actual")
NOTICE_ROLES = ("user", "system")
# When context:report fires: for requests that changed something (a pass ran, the budget
# moved), or for every delivered view. Mounted in the kernel an emit costs about 0.1 ms, as
# much as the whole steady request, so per-request reports are opt-in.
REPORT_EVENT_MODES = ("changes", "every_request")
# The reference module's notice verbosities; its "verbose" renders what "normal" does here.
NOTICE_VERBOSITIES = ("normal", "minimal")
NOTICE_VERBOSITY_ALIASES = {"verbose": "normal"}

# When a pass runs: at the compaction trigger ("threshold"), or where the prompt cache's
# prices make it cheapest, the trigger still a hard bound ("cost", `compaction.cost_plan`).
PLANNERS = ("threshold", "cost")

DEFAULT_COMPACT_THRESHOLD = 0.92
DEFAULT_TARGET_USAGE = 0.50
# The identifier ledger's room (docs/configuration.md has the measurements behind it): a
# share of the budget, and at least a floor of tokens where that is at most a fifth of it.
# The floor decides a small window's ledger (`contextfold eval` at 4,000 tokens): at 750,
# long-horizon far facts in view or ledger 96 of 129 and BFCL tokens sent 3.84M (naive
# drop-oldest 3.86M); at 800 (capped at 775 there) 94 and 3.85M; at 700, 87 and 3.84M.
DEFAULT_LEDGER_SHARE = 0.12
DEFAULT_LEDGER_MIN_TOKENS = 750
MAX_LEDGER_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Validated settings of one context manager (see the README's configuration table)."""

    # Budget (main contract: "Where the compaction trigger comes from").
    max_tokens: int | None = None
    max_tokens_fallback: int = 200_000
    output_reserve_fraction: float = 0.5
    # Tokens kept free below the window and the input limit. None: the contract's 4096, at
    # most 1/32 of the window (see `budget.margin_for`); a number is used as given.
    safety_margin: int | None = None
    # Ingress cap on tool-result text.
    max_tool_result_bytes: int = 131_072
    # Compaction trigger and target, as fractions of the effective budget less the notice reserve.
    compact_threshold: float = DEFAULT_COMPACT_THRESHOLD
    target_usage: float = DEFAULT_TARGET_USAGE
    # Protection.
    protected_recent: float = 0.30
    protected_tool_results: int = 5
    # Rungs.
    truncate_chars: int = 250
    compaction_enabled: bool = True
    # The ladder, in order: rung names, {"name": ..., <settings>} mappings, or (library use)
    # rung objects. Checked and frozen as a tuple by `compaction.ladder`.
    strategies: tuple[Any, ...] = (
        "strip_thinking",
        "truncate_tool_results",
        "truncate_long_text",
        "drop_least_used",
    )
    # The compaction notice the model reads in place of what was compacted.
    compaction_notice_enabled: bool = True
    compaction_notice_token_reserve: int = 800
    compaction_notice_role: str = "user"
    compaction_notice_verbosity: str = "normal"
    # No notice for a pass whose level is below this (0 and 1: every pass has one).
    compaction_notice_min_level: int = 0
    # The identifier ledger's share of the budget (0: no ledger), and its floor in tokens
    # (never more than a fifth of the budget).
    ledger_share: float = DEFAULT_LEDGER_SHARE
    ledger_min_tokens: int = DEFAULT_LEDGER_MIN_TOKENS
    # A pass compacts the turns before the current human prompt first (compaction.planner).
    compact_older_tasks_first: bool = True
    # Token counting and the real-usage meter.
    token_meter: str = "estimate"
    token_counter: str = "calibrated"
    token_model: str | None = None
    # Events.
    report_events: str = "changes"
    # Prompt caching and prices: Anthropic breakpoints on delivered views ("off" or
    # "anthropic"), and the prices costs are computed with (a family or provider name, or a
    # mapping of figures; None: the table's entry for the model, where one is needed).
    cache_breakpoints: str = "off"
    prices: Any = None
    # OpenTelemetry spans of every request, admission, summary, recall, search and usage
    # reading: "auto" (when the opentelemetry package is installed) or "off".
    opentelemetry: str = "auto"
    # When compaction runs (see PLANNERS); "cost" prices with `prices`, else the model's.
    planner: str = "cost"

    def __post_init__(self) -> None:
        _check_optional_positive_int("max_tokens", self.max_tokens)
        _check_positive_int("max_tokens_fallback", self.max_tokens_fallback)
        _check_fraction("output_reserve_fraction", self.output_reserve_fraction, allow_zero=True)
        if self.safety_margin is not None:
            _check_int_at_least("safety_margin", self.safety_margin, 0)
        _check_int_at_least("max_tool_result_bytes", self.max_tool_result_bytes, 1024)
        _check_fraction("compact_threshold", self.compact_threshold, allow_zero=False)
        _check_fraction("target_usage", self.target_usage, allow_zero=False)
        if self.target_usage > self.compact_threshold:
            raise ConfigError(
                f"target_usage={self.target_usage} is above compact_threshold="
                f"{self.compact_threshold}: compaction would stop above the level that triggers "
                "it. Set target_usage below compact_threshold (defaults 0.50 and 0.92), or leave "
                "target_usage out and it follows the threshold."
            )
        _check_fraction("protected_recent", self.protected_recent, allow_zero=True)
        _check_int_at_least("protected_tool_results", self.protected_tool_results, 0)
        _check_int_at_least("truncate_chars", self.truncate_chars, 0)
        _check_bool("compaction_enabled", self.compaction_enabled)
        object.__setattr__(self, "strategies", normalize_strategies(self.strategies))
        _check_bool("compaction_notice_enabled", self.compaction_notice_enabled)
        _check_int_at_least(
            "compaction_notice_token_reserve", self.compaction_notice_token_reserve, 0
        )
        if (
            not _is_str(self.compaction_notice_role)
            or self.compaction_notice_role not in NOTICE_ROLES
        ):
            raise ConfigError(
                f"compaction_notice_role={shown(self.compaction_notice_role)} is not one of "
                f"{', '.join(NOTICE_ROLES)}."
            )
        if not _is_str(self.report_events) or self.report_events not in REPORT_EVENT_MODES:
            raise ConfigError(
                f"report_events={shown(self.report_events)} is not one of "
                f"{', '.join(REPORT_EVENT_MODES)} (default 'changes')."
            )
        verbosity = self.compaction_notice_verbosity
        if _is_str(verbosity) and verbosity in NOTICE_VERBOSITY_ALIASES:
            # Frozen: normalise through object.__setattr__ so every reader sees one spelling.
            object.__setattr__(
                self, "compaction_notice_verbosity", NOTICE_VERBOSITY_ALIASES[verbosity]
            )
        elif not _is_str(verbosity) or verbosity not in NOTICE_VERBOSITIES:
            raise ConfigError(
                f"compaction_notice_verbosity={shown(verbosity)} is not one of "
                f"{', '.join(NOTICE_VERBOSITIES)} ('verbose' is read as 'normal')."
            )
        _check_int_at_least("compaction_notice_min_level", self.compaction_notice_min_level, 0)
        _check_bool("compact_older_tasks_first", self.compact_older_tasks_first)
        _check_fraction("ledger_share", self.ledger_share, allow_zero=True)
        _check_int_at_least("ledger_min_tokens", self.ledger_min_tokens, 0)
        if self.ledger_share > MAX_LEDGER_SHARE:
            raise ConfigError(
                f"ledger_share={shown(self.ledger_share)} leaves too little of the budget for "
                f"the conversation: use at most {MAX_LEDGER_SHARE} (default "
                f"{DEFAULT_LEDGER_SHARE}; 0 turns the ledger off)."
            )
        if self.token_model is not None and not _is_str(self.token_model):
            raise ConfigError(
                f"token_model must be a model name string, got {shown(self.token_model)}."
            )
        if not _is_str(self.token_meter) or self.token_meter not in TOKEN_METER_MODES:
            # The contract: an unknown meter mode warns and falls back, it does not fail.
            logger.warning(
                "context-fold: token_meter=%s is not one of %s; falling back to 'estimate'",
                shown(self.token_meter),
                "/".join(TOKEN_METER_MODES),
            )
            object.__setattr__(self, "token_meter", "estimate")
        from .tokens import COUNTER_KINDS  # late: tokens imports nothing of ours

        if not _is_str(self.token_counter) or self.token_counter not in COUNTER_KINDS:
            raise ConfigError(
                f"token_counter={shown(self.token_counter)} is unknown; use one of "
                f"{', '.join(COUNTER_KINDS)} (default 'calibrated')."
            )

        if not _is_str(self.cache_breakpoints) or self.cache_breakpoints not in (
            CACHE_BREAKPOINT_MODES
        ):
            raise ConfigError(
                f"cache_breakpoints={shown(self.cache_breakpoints)} is not one of "
                f"{', '.join(CACHE_BREAKPOINT_MODES)} (default 'off'; 'anthropic' marks "
                "cache_control breakpoints on every delivered view)."
            )
        if not _is_str(self.opentelemetry) or self.opentelemetry not in OPENTELEMETRY_MODES:
            raise ConfigError(
                f"opentelemetry={shown(self.opentelemetry)} is not one of "
                f"{', '.join(OPENTELEMETRY_MODES)} (default 'auto': spans when the "
                "opentelemetry package is installed; 'off': none)."
            )
        if not _is_str(self.planner) or self.planner not in PLANNERS:
            raise ConfigError(
                f"planner={shown(self.planner)} is not one of {', '.join(PLANNERS)} (default "
                "'threshold' compacts at compact_threshold; 'cost' compacts where the prompt "
                "cache's prices make it cheapest, priced by the prices key)."
            )
        if self.prices is not None:
            # Frozen: the figures, checked once, replace the name or mapping given.
            object.__setattr__(self, "prices", prices_for(self.prices))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> ContextConfig:
        """Build from a module config dict; unknown keys are refused with a suggestion.

        A ``target_usage`` left out follows a ``compact_threshold`` set below the default
        (see :func:`default_target_usage`), with a log line; one given stays as given.
        """
        if mapping is None:
            return cls()
        if isinstance(mapping, ContextConfig):
            return mapping
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                f"context config must be a mapping of keys to values, got "
                f"{type(mapping).__name__}: {shown(mapping)}."
            )
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            if key not in known:
                raise ConfigError(_unknown_key_message(key, known))
            values[key] = value
        if "target_usage" not in values:
            threshold = values.get("compact_threshold", DEFAULT_COMPACT_THRESHOLD)
            target = default_target_usage(threshold)
            if target != DEFAULT_TARGET_USAGE:
                logger.info(
                    "context-fold: compact_threshold=%s without target_usage: target_usage "
                    "follows it to %s (the defaults' proportion, 0.50/0.92); set target_usage "
                    "to choose another",
                    threshold,
                    target,
                )
                values["target_usage"] = target
        return cls(**values)

    @classmethod
    def resolve(
        cls,
        config: ContextConfig | Mapping[str, Any] | None,
        settings: Mapping[str, Any] | None = None,
    ) -> ContextConfig:
        """The one entry point from ``ContextFold(config, **settings)`` to a valid config.

        ``config`` is a ``ContextConfig``, a mapping of keys or None; keyword ``settings``
        override it key by key. Anything else (a string, a number, a list of pairs) is a
        ``ConfigError`` saying what to pass. Over a ``ContextConfig``, a ``target_usage`` equal
        to what its threshold would give by default counts as not given, so it still follows a
        threshold the settings lower.
        """
        if settings is None:
            settings = {}
        if not isinstance(settings, Mapping):
            raise ConfigError(
                f"settings must be a mapping of config keys to values, got "
                f"{type(settings).__name__}: {shown(settings)}."
            )
        if isinstance(config, ContextConfig):
            if not settings:
                return config
            base = config.to_dict()
            if config.target_usage == default_target_usage(config.compact_threshold):
                del base["target_usage"]
        elif config is None:
            base = {}
        elif isinstance(config, Mapping):
            base = dict(config)
        else:
            raise ConfigError(
                f"config must be a mapping of config keys to values, a ContextConfig or None; "
                f"got {type(config).__name__}: {shown(config)}. Pass keys as a dict or as "
                "keywords, e.g. ContextFold({'max_tokens': 8000}) or ContextFold(max_tokens=8000)."
            )
        return cls.from_mapping({**base, **settings})

    def to_dict(self) -> dict[str, Any]:
        from .compaction.ladder import settings_copy

        values = asdict(self)
        # A rung object given in library use is passed on as itself (asdict would deep-copy
        # it, or take a dataclass rung apart into a mapping without its name).
        values["strategies"] = tuple(settings_copy(item) for item in self.strategies)
        return values

    @property
    def ladder(self) -> tuple[Any, ...]:
        """The rungs ``strategies`` names, built with their settings (see `compaction.ladder`)."""
        from .compaction.ladder import build_ladder

        return build_ladder(self.strategies)


def default_target_usage(compact_threshold: Any) -> Any:
    """The target a config gets when it names none: 0.50, or less under a lower threshold.

    ``min(0.50, compact_threshold * 0.50 / 0.92)``, rounded to 4 places: the defaults'
    proportion between target and trigger is kept, so lowering only the threshold never
    leaves a target above it (a refused config) or so close under it that every pass ends
    a step from the next trigger. A threshold that is not a number is returned as the
    default for ``__post_init__`` to refuse by name.
    """
    if not _is_fraction(compact_threshold) or compact_threshold <= 0:
        return DEFAULT_TARGET_USAGE
    followed = compact_threshold * DEFAULT_TARGET_USAGE / DEFAULT_COMPACT_THRESHOLD
    if followed >= DEFAULT_TARGET_USAGE:
        return DEFAULT_TARGET_USAGE
    return round(followed, 4) or followed


def _unknown_key_message(key: Any, known: set[str]) -> str:
    hint = ""
    if _is_str(key) and len(key) <= 100:  # difflib is quadratic in the key's length
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown config key {shown(key)}.{hint} Known keys: {', '.join(sorted(known))}."


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_fraction(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_positive_int(key: str, value: Any) -> None:
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{key} must be a positive whole number of tokens, got {shown(value)}.")


def _check_optional_positive_int(key: str, value: Any) -> None:
    if value is None:
        return
    if not _is_int(value) or value <= 0:
        raise ConfigError(
            f"{key} must be a positive whole number of tokens or unset (no cap), got "
            f"{shown(value)}. "
            "Leave it unset to use the model's whole window."
        )


def _check_int_at_least(key: str, value: Any, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ConfigError(f"{key} must be a whole number >= {minimum}, got {shown(value)}.")


def _check_fraction(key: str, value: Any, *, allow_zero: bool) -> None:
    ok = _is_fraction(value)
    low_ok = ok and (value >= 0 if allow_zero else value > 0)
    if not (ok and low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ConfigError(f"{key} must be a fraction in {interval}, got {shown(value)}.")


def _check_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {shown(value)}.")
