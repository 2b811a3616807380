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

from .errors import ConfigError

logger = logging.getLogger(__name__)

TOKEN_METER_MODES = ("estimate", "actual")
NOTICE_ROLES = ("user", "system")


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Validated settings of one context manager (see the README's configuration table)."""

    # Budget (main contract: "Where the compaction trigger comes from").
    max_tokens: int | None = None
    max_tokens_fallback: int = 200_000
    output_reserve_fraction: float = 0.5
    safety_margin: int = 4096
    # Ingress cap on tool-result text.
    max_tool_result_bytes: int = 131_072
    # Compaction trigger and target, as fractions of the effective budget less the notice reserve.
    compact_threshold: float = 0.92
    target_usage: float = 0.50
    # Protection.
    protected_recent: float = 0.30
    protected_tool_results: int = 5
    # Rungs.
    truncate_chars: int = 250
    compaction_enabled: bool = True
    # The compaction notice the model reads in place of what was compacted.
    compaction_notice_enabled: bool = True
    compaction_notice_token_reserve: int = 800
    compaction_notice_role: str = "user"
    # Token counting and the real-usage meter.
    token_meter: str = "estimate"
    token_counter: str = "calibrated"
    token_model: str | None = None

    def __post_init__(self) -> None:
        _check_optional_positive_int("max_tokens", self.max_tokens)
        _check_positive_int("max_tokens_fallback", self.max_tokens_fallback)
        _check_fraction("output_reserve_fraction", self.output_reserve_fraction, allow_zero=True)
        _check_int_at_least("safety_margin", self.safety_margin, 0)
        _check_int_at_least("max_tool_result_bytes", self.max_tool_result_bytes, 1024)
        _check_fraction("compact_threshold", self.compact_threshold, allow_zero=False)
        _check_fraction("target_usage", self.target_usage, allow_zero=False)
        if self.target_usage > self.compact_threshold:
            raise ConfigError(
                f"target_usage={self.target_usage} is above compact_threshold="
                f"{self.compact_threshold}: compaction would stop above the level that triggers "
                "it. Set target_usage below compact_threshold (defaults 0.50 and 0.92)."
            )
        _check_fraction("protected_recent", self.protected_recent, allow_zero=True)
        _check_int_at_least("protected_tool_results", self.protected_tool_results, 0)
        _check_int_at_least("truncate_chars", self.truncate_chars, 0)
        _check_bool("compaction_enabled", self.compaction_enabled)
        _check_bool("compaction_notice_enabled", self.compaction_notice_enabled)
        _check_int_at_least(
            "compaction_notice_token_reserve", self.compaction_notice_token_reserve, 0
        )
        if self.compaction_notice_role not in NOTICE_ROLES:
            raise ConfigError(
                f"compaction_notice_role={self.compaction_notice_role!r} is not one of "
                f"{', '.join(NOTICE_ROLES)}."
            )
        if self.token_model is not None and not isinstance(self.token_model, str):
            raise ConfigError(f"token_model must be a model name string, got {self.token_model!r}.")
        from .tokens import COUNTER_KINDS  # late: tokens imports nothing of ours

        if self.token_counter not in COUNTER_KINDS:
            raise ConfigError(
                f"token_counter={self.token_counter!r} is unknown; use one of "
                f"{', '.join(COUNTER_KINDS)} (default 'calibrated')."
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> ContextConfig:
        """Build from a module config dict; unknown keys are refused with a suggestion."""
        if mapping is None:
            return cls()
        if isinstance(mapping, ContextConfig):
            return mapping
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                f"context config must be a mapping of keys to values, got {type(mapping).__name__}."
            )
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"unknown config key {key!r}.{hint} Known keys: {', '.join(sorted(known))}."
                )
            values[key] = value
        meter = values.get("token_meter", "estimate")
        if meter not in TOKEN_METER_MODES:
            # The contract: an unknown meter mode warns and falls back, it does not fail.
            logger.warning(
                "context-fold: token_meter=%r is not one of %s; falling back to 'estimate'",
                meter,
                "/".join(TOKEN_METER_MODES),
            )
            values["token_meter"] = "estimate"
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_positive_int(key: str, value: Any) -> None:
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{key} must be a positive whole number of tokens, got {value!r}.")


def _check_optional_positive_int(key: str, value: Any) -> None:
    if value is None:
        return
    if not _is_int(value) or value <= 0:
        raise ConfigError(
            f"{key} must be a positive whole number of tokens or unset (no cap), got {value!r}. "
            "Leave it unset to use the model's whole window."
        )


def _check_int_at_least(key: str, value: Any, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.")


def _check_fraction(key: str, value: Any, *, allow_zero: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    low_ok = ok and (value >= 0 if allow_zero else value > 0)
    if not (ok and low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ConfigError(f"{key} must be a fraction in {interval}, got {value!r}.")


def _check_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}.")
