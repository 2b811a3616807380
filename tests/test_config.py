"""Configuration: contract defaults, and a clear error for every bad key or value."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import fields
from functools import partial

import pytest
import yaml

from contextfold import ConfigError, ContextConfig, ContextFold
from contextfold.config import default_target_usage


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


def test_unknown_meter_mode_warns_once_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ctx = ContextFold(token_meter="psychic")
    assert ctx.config.token_meter == "estimate"
    assert caplog.text.count("psychic") == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        direct = ContextConfig(token_meter="actaul")  # built directly, not from a mapping
    assert direct.token_meter == "estimate" and "actaul" in caplog.text


def test_settings_as_mapping_and_keywords() -> None:
    ctx = ContextFold({"max_tokens": 9000}, compact_threshold=0.8)
    assert ctx.config.max_tokens == 9000 and ctx.config.compact_threshold == 0.8
    with pytest.raises(ConfigError, match="mapping"):
        ContextConfig.from_mapping([("max_tokens", 1)])  # type: ignore[arg-type]


# -- values echoed in errors are bounded (issue 8: a YAML alias bomb took 1.2 GB to format) ----


def alias_bomb(levels: int = 6, width: int = 10) -> object:
    """A real YAML 'billion laughs', scaled down: width**levels leaves, a few hundred bytes."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    lines.append(f"value: *l{levels - 1}")
    return yaml.safe_load("\n".join(lines))["value"]


class Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


BOMB = alias_bomb()
CHECKED_KEYS = [f.name for f in fields(ContextConfig) if f.name != "token_meter"]


@pytest.mark.parametrize("key", CHECKED_KEYS)
def test_every_check_quotes_a_bounded_value(key: str) -> None:
    with pytest.raises(ConfigError, match=key) as caught:
        ContextConfig.from_mapping({key: BOMB})
    assert len(str(caught.value)) < 600
    assert "[[" in str(caught.value)  # the value is still shown, only cut


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-(10**5000), "<int of 16610 bits>"),  # repr() itself refuses past 4,300 digits
        ("x" * 1_000_000, "'xxxxxxxxxx"),
        (Hostile(), "<Hostile>"),
        (OrderedDict((str(i), i) for i in range(10_000)), "'0': 0"),
    ],
    ids=["huge-int", "long-string", "hostile-repr", "mapping-subclass"],
)
def test_odd_values_are_quoted_briefly(value: object, shown: str) -> None:
    with pytest.raises(ConfigError, match="max_tokens") as caught:
        ContextConfig.from_mapping({"max_tokens": value})
    assert shown in str(caught.value) and len(str(caught.value)) < 400


def test_an_unknown_key_is_quoted_briefly_and_hinted_only_when_short() -> None:
    with pytest.raises(ConfigError, match="unknown config key") as caught:
        ContextConfig.from_mapping({"k" * 1_000_000: 1})
    assert len(str(caught.value)) < 1_000
    with pytest.raises(ConfigError, match="Did you mean 'truncate_chars'"):
        ContextConfig.from_mapping({"truncate_char": 1})


def test_an_unknown_meter_mode_is_logged_briefly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = ContextConfig.from_mapping({"token_meter": BOMB})
    assert config.token_meter == "estimate"
    assert len(caplog.text) < 400 and "falling back" in caplog.text


# -- one entry point: resolve(config, settings) ---------------------------------------------------


@pytest.mark.parametrize("config", ["max_tokens=5", 5, [("max_tokens", 5)], b"max_tokens: 5"])
def test_resolve_refuses_what_is_not_a_config(config: object) -> None:
    with pytest.raises(ConfigError, match="Pass keys as a dict or as keywords"):
        ContextConfig.resolve(config)  # type: ignore[arg-type]


def test_resolve_refuses_settings_that_are_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="settings must be a mapping"):
        ContextConfig.resolve(None, ["max_tokens"])  # type: ignore[arg-type]


def test_resolve_merges_config_and_settings() -> None:
    assert ContextConfig.resolve(None) == ContextConfig()
    assert ContextConfig.resolve(None, {"max_tokens": 5}).max_tokens == 5
    merged = ContextConfig.resolve({"max_tokens": 9000, "truncate_chars": 10}, {"max_tokens": 7})
    assert (merged.max_tokens, merged.truncate_chars) == (7, 10)
    base = ContextConfig(max_tokens=9000, protected_recent=0.1)
    assert ContextConfig.resolve(base) is base
    assert ContextConfig.resolve(base, {}) is base
    over = ContextConfig.resolve(base, {"truncate_chars": 99})
    assert (over.max_tokens, over.protected_recent, over.truncate_chars) == (9000, 0.1, 99)
    with pytest.raises(ConfigError, match="Did you mean 'max_tokens'"):
        ContextConfig.resolve(base, {"max_token": 1})


@pytest.mark.parametrize("config", ["max_tokens=5", 5, ["max_tokens"]])
def test_context_fold_refuses_what_is_not_a_config(config: object) -> None:
    with pytest.raises(ConfigError, match="Pass keys as a dict or as keywords"):
        ContextFold(config)  # type: ignore[arg-type]


# -- a defaulted target follows a lower threshold (issue 7, item 8) --------------------------------


def test_a_defaulted_target_follows_a_lower_threshold(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="contextfold"):
        ctx = ContextFold(compact_threshold=0.45)
    assert ctx.config.compact_threshold == 0.45
    assert ctx.config.target_usage == round(0.45 * 0.50 / 0.92, 4) == 0.2446
    lines = [r for r in caplog.records if "target_usage follows" in r.getMessage()]
    assert len(lines) == 1 and "0.2446" in lines[0].getMessage()


@pytest.mark.parametrize(
    ("threshold", "target"), [(0.92, 0.5), (1.0, 0.5), (0.8, 0.4348), (0.1, 0.0543)]
)
def test_the_followed_target_keeps_the_defaults_proportion(threshold: float, target: float) -> None:
    config = ContextConfig.from_mapping({"compact_threshold": threshold})
    assert config.target_usage == target
    assert default_target_usage(threshold) == target


def test_the_default_threshold_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="contextfold"):
        ContextConfig.from_mapping({"compact_threshold": 0.92, "max_tokens": 5000})
    assert "target_usage follows" not in caplog.text


def test_an_explicit_conflicting_pair_stays_an_error() -> None:
    with pytest.raises(ConfigError, match="above compact_threshold"):
        ContextConfig.from_mapping({"compact_threshold": 0.45, "target_usage": 0.5})
    explicit = ContextConfig.from_mapping({"compact_threshold": 0.45, "target_usage": 0.4})
    assert explicit.target_usage == 0.4


def test_resolve_lets_a_defaulted_target_follow_and_keeps_a_chosen_one() -> None:
    followed = ContextConfig.resolve(ContextConfig.from_mapping({"compact_threshold": 0.45}))
    lowered = ContextConfig.resolve(followed, {"compact_threshold": 0.3})
    assert lowered.target_usage == default_target_usage(0.3) == 0.163
    assert (
        ContextConfig.resolve(ContextConfig(), {"compact_threshold": 0.45}).target_usage == 0.2446
    )
    with pytest.raises(ConfigError, match="above compact_threshold"):
        ContextConfig.resolve(ContextConfig(target_usage=0.4), {"compact_threshold": 0.3})
    # A bad threshold is refused by name, not hidden by the following rule.
    with pytest.raises(ConfigError, match="compact_threshold must be a fraction"):
        ContextConfig.from_mapping({"compact_threshold": "low"})


# -- the reference module's notice keys (issue 9) ------------------------------------------------


@pytest.mark.parametrize(
    ("given", "kept"), [("normal", "normal"), ("minimal", "minimal"), ("verbose", "normal")]
)
def test_notice_verbosity_values(given: str, kept: str) -> None:
    assert ContextFold(compaction_notice_verbosity=given).config.compaction_notice_verbosity == kept
    assert ContextConfig(compaction_notice_verbosity=given).compaction_notice_verbosity == kept


@pytest.mark.parametrize("bad", ["loud", "Normal", "", 2, None, ["minimal"]])
def test_bad_notice_verbosity_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"compaction_notice_verbosity=.* is not one of normal"):
        ContextConfig.from_mapping({"compaction_notice_verbosity": bad})


def test_notice_min_level_values() -> None:
    assert ContextConfig().compaction_notice_min_level == 0
    assert (
        ContextConfig.from_mapping({"compaction_notice_min_level": 3}).compaction_notice_min_level
        == 3
    )
    for bad in (-1, 1.5, True, "2", None):
        with pytest.raises(ConfigError, match="compaction_notice_min_level must be a whole number"):
            ContextConfig.from_mapping({"compaction_notice_min_level": bad})


def test_a_reference_module_config_is_accepted() -> None:
    # The keys and values of context-simple's README table, as a bundle would carry them.
    reference = {
        "max_tokens": 200_000,
        "compact_threshold": 0.92,
        "target_usage": 0.50,
        "protected_recent": 0.30,
        "protected_tool_results": 5,
        "truncate_chars": 250,
        "compaction_notice_enabled": True,
        "compaction_notice_token_reserve": 800,
        "compaction_notice_verbosity": "verbose",
        "compaction_notice_min_level": 1,
        "output_reserve_fraction": 0.5,
    }
    config = ContextConfig.from_mapping(reference)
    assert config.compaction_notice_min_level == 1
    assert config.compaction_notice_verbosity == "normal"


# -- on_event is checked at construction (issue 8) -------------------------------------------


@pytest.mark.parametrize("bad", [42, "print", ["cb"]])
def test_on_event_that_is_not_callable_is_refused(bad: object) -> None:
    with pytest.raises(
        ConfigError, match=r"on_event must be a function called as on_event\(event, data\)"
    ):
        ContextFold(on_event=bad)  # type: ignore[arg-type]


def test_on_event_with_the_wrong_arity_is_refused() -> None:
    with pytest.raises(ConfigError, match="on_event must accept two arguments"):
        ContextFold(on_event=lambda event: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_event must accept two arguments"):
        ContextFold(on_event=lambda event, data, extra: None)  # type: ignore[arg-type]


async def test_every_kind_of_good_callback_is_accepted_and_called() -> None:
    seen: list[str] = []

    class Recorder:
        def __call__(self, event: str, data: dict) -> None:
            seen.append(f"object:{event}")

        def method(self, event: str, data: dict) -> None:
            seen.append(f"method:{event}")

    async def coroutine(event: str, data: dict) -> None:
        seen.append(f"async:{event}")

    def with_default(event: str, data: dict, extra: int = 0) -> None:
        seen.append(f"default:{event}")

    callbacks = [
        Recorder(),
        Recorder().method,
        coroutine,
        with_default,
        lambda *args: seen.append("varargs"),
        partial(lambda tag, event, data: seen.append(tag), "partial"),
        print,
        None,
    ]
    for callback in callbacks:
        ctx = ContextFold(on_event=callback, token_counter="heuristic")
        await ctx.add_message({"role": "user", "content": "hello"})
        await ctx.get_messages_for_request(token_budget=10_000)
    assert {s.split(":")[0] for s in seen} >= {"object", "method", "async", "default"}
    assert "varargs" in seen and "partial" in seen
