"""Configuration: contract defaults, and a clear error for every bad key or value."""

from __future__ import annotations

import logging

import pytest

from contextfold import ConfigError, ContextConfig, ContextFold


def test_contract_defaults() -> None:
    c = ContextConfig()
    assert c.max_tokens is None
    assert c.max_tokens_fallback == 200_000
    assert c.max_tool_result_bytes == 131_072
    assert c.compact_threshold == 0.92
    assert c.target_usage == 0.50
    assert c.protected_tool_results == 5
    assert c.compaction_notice_token_reserve == 800
    assert c.token_meter == "estimate"
    assert c.token_counter == "calibrated"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_tokens": 1000.5}, "max_tokens"),
        ({"max_tokens": "8000"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens_fallback": 0}, "max_tokens_fallback"),
        ({"compact_threshold": 0}, "compact_threshold"),
        ({"compact_threshold": 1.2}, "compact_threshold"),
        ({"target_usage": 0.95}, "above compact_threshold"),
        ({"target_usage": -0.1}, "target_usage"),
        ({"protected_recent": 1.5}, "protected_recent"),
        ({"protected_tool_results": -1}, "protected_tool_results"),
        ({"truncate_chars": -3}, "truncate_chars"),
        ({"max_tool_result_bytes": 10}, "max_tool_result_bytes"),
        ({"compaction_notice_token_reserve": -1}, "compaction_notice_token_reserve"),
        ({"compaction_notice_role": "assistant"}, "compaction_notice_role"),
        ({"compaction_enabled": "yes"}, "compaction_enabled"),
        ({"token_counter": "magic"}, "token_counter"),
        ({"max_token": 8000}, "Did you mean 'max_tokens'"),
    ],
)
def test_bad_values_fail_at_construction(settings: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ContextFold(settings)
    assert issubclass(ConfigError, ValueError)


def test_unknown_meter_mode_warns_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ctx = ContextFold(token_meter="psychic")
    assert ctx.config.token_meter == "estimate"
    assert "psychic" in caplog.text


def test_settings_as_mapping_and_keywords() -> None:
    ctx = ContextFold({"max_tokens": 9000}, compact_threshold=0.8)
    assert ctx.config.max_tokens == 9000 and ctx.config.compact_threshold == 0.8
    with pytest.raises(ConfigError, match="mapping"):
        ContextConfig.from_mapping([("max_tokens", 1)])  # type: ignore[arg-type]
