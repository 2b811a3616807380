"""context-fold as a drop-in for Amplifier's reference context module, context-simple.

Each test runs one behaviour the reference documents (its README, its mount() docstring,
its own tests in microsoft/amplifier-module-context-simple) against contextfold through
the public API: ``ContextFold``, ``contextfold.amplifier.mount`` with a plain coordinator
double, and the pure helpers in ``contextfold.conventions``. Where contextfold differs from
the reference on purpose, the test says so and checks contextfold's own promise instead.
"""

from __future__ import annotations

import asyncio
import copy
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from contextfold import ConfigError, ContextFold, ContextLengthError
from contextfold.amplifier import mount
from contextfold.conventions import (
    carries_loaded_tool_state,
    is_human_prompt,
    is_persisted_reminder,
    is_reference_only,
    is_reminder_envelope,
    normalize_retain_contents,
    reminder_source,
    replaced_by_system_prompt,
    request_form,
    resolve_system_prompt,
    stamp_timestamp,
)
from contextfold.messages import Kind
from support import human, prose, reply, tool_round

# The reference writes datetime.now(UTC).isoformat(timespec="milliseconds").
REFERENCE_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")

# The README's configuration example and every key its mount() reads, with valid values.
REFERENCE_CONFIG: dict[str, Any] = {
    "max_tokens": 500_000,
    "max_tokens_fallback": 200_000,
    "max_tool_result_bytes": 131_072,
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
    "token_meter": "actual",
}

# The reference's context:compaction and context:tool_result_ingress_truncated keys.
REFERENCE_COMPACTION_KEYS = {
    "messages_removed",
    "messages_truncated",
    "strategy_level",
    "target_tokens",
    "protected_recent",
    "protected_tool_results",
}
REFERENCE_INGRESS_KEYS = {
    "tool_name",
    "original_text_utf8_bytes",
    "stored_text_utf8_bytes",
    "max_tool_result_bytes",
    "content_kind",
}


# -- a host's coordinator, as the reference's own tests build one ---------------------------


class PlainHooks:
    """``register(event, handler, priority=, name=)`` returning an unregister callable,
    and ``emit(event, data)``: the hook surface a host offers, nothing more."""

    def __init__(self) -> None:
        self.registered: list[dict[str, Any]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def register(self, event: str, handler: Any, priority: int = 0, name: str | None = None):
        entry = {"event": event, "handler": handler, "priority": priority, "name": name}
        self.registered.append(entry)
        return lambda: self.registered.remove(entry)

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        self.events.append((event, copy.deepcopy(data)))

    def payloads(self, event: str) -> list[dict[str, Any]]:
        return [data for name, data in self.events if name == event]


class PlainCoordinator:
    """``mount(point, module)`` with no ``name`` keyword, ``hooks``, and (like the
    reference's retention test double) ``register_capability(name, capability)``."""

    def __init__(self) -> None:
        self.hooks = PlainHooks()
        self.mounted: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}

    async def mount(self, point: str, module: Any) -> None:
        self.mounted[point] = module

    def register_capability(self, name: str, capability: Any) -> None:
        self.capabilities[name] = capability


async def mounted(config: dict[str, Any]) -> tuple[PlainCoordinator, ContextFold, Any]:
    coordinator = PlainCoordinator()
    cleanup = await mount(coordinator, config)
    context = coordinator.mounted["context"]
    assert isinstance(context, ContextFold)
    return coordinator, context, cleanup


def reminder(body: str) -> dict[str, Any]:
    """A persisted reminder envelope, as the reference's retention tests build one."""
    return {"role": "user", "content": body, "metadata": {"ephemeral": True, "persisted": True}}


def contents(view: list[dict[str, Any]]) -> list[Any]:
    return [m.get("content") for m in view]


# -- configuration: the README's keys and examples -------------------------------------------


async def test_a_valid_reference_config_mounts_and_reads_back_as_attributes() -> None:
    _, context, cleanup = await mounted(dict(REFERENCE_CONFIG))
    # The effective settings are public attributes, as on the reference's mounted object.
    assert context.max_tokens == 500_000
    assert context.max_tokens_fallback == 200_000
    assert context.max_tool_result_bytes == 131_072
    assert context.compact_threshold == 0.92
    assert context.target_usage == 0.50
    assert context.protected_recent == 0.30
    assert context.protected_tool_results == 5
    assert context.truncate_chars == 250
    assert context.compaction_notice_enabled is True
    assert context.compaction_notice_token_reserve == 800
    assert context.compaction_notice_min_level == 1
    assert context.token_meter == "actual"
    assert context.compaction_notice_verbosity in ("verbose", "normal")  # verbose reads as normal
    await cleanup()


async def test_the_readme_cap_example_and_an_empty_config_mount() -> None:
    _, capped, cleanup = await mounted({"max_tokens": 500_000})
    assert capped.max_tokens == 500_000
    await cleanup()
    _, default, cleanup = await mounted({})
    assert default.max_tokens is None  # no cap: the model's whole window
    assert default.max_tokens_fallback == 200_000
    assert default.max_tool_result_bytes == 131_072
    await cleanup()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("compact_threshold", 1.5),
        ("target_usage", -0.1),
        ("protected_tool_results", "five"),
        ("max_tool_result_bytes", 0),
        ("compaction_notice_verbosity", "loud"),
        ("compaction_notice_min_level", "high"),
        ("max_tokens", -1),
    ],
)
async def test_an_invalid_reference_value_raises_config_error_naming_the_key(
    key: str, value: Any
) -> None:
    coordinator = PlainCoordinator()
    with pytest.raises(ConfigError, match=key):
        await mount(coordinator, {key: value})
    assert "context" not in coordinator.mounted


async def test_an_unknown_key_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="compact_treshold"):
        await mount(PlainCoordinator(), {"compact_treshold": 0.9})


# -- mount with a plain coordinator double ------------------------------------------------------


async def test_mount_with_a_plain_coordinator_registers_the_meter_and_cleans_up() -> None:
    coordinator, context, cleanup = await mounted({"token_counter": "heuristic"})
    assert coordinator.mounted == {"context": context}
    [meter] = coordinator.hooks.registered
    assert (meter["event"], meter["priority"], meter["name"]) == (
        "llm:response",
        50,
        "context-fold-meter",
    )
    await cleanup()
    assert coordinator.hooks.registered == []


async def test_request_retention_capability_is_callable_like_the_reference() -> None:
    """The reference registers its bound ``get_messages_for_request_retaining`` as
    ``context.request_retention``: an orchestrator calls it with ``retain_contents=``."""
    coordinator, context, cleanup = await mounted({"token_counter": "heuristic"})
    capability = coordinator.capabilities["context.request_retention"]
    assert callable(capability)
    await context.add_message(human("hello"))
    view = await capability(retain_contents=[])
    assert contents(view) == ["hello"]
    await cleanup()


# -- metadata.timestamp -------------------------------------------------------------------------


async def test_admission_stamps_a_reference_timestamp_without_touching_the_caller() -> None:
    context = ContextFold(token_counter="heuristic")
    message = {"role": "user", "content": "hello", "metadata": {"source": "user"}}
    snapshot = copy.deepcopy(message)
    before = datetime.now(UTC) - timedelta(seconds=1)
    await context.add_message(message)
    assert message == snapshot  # the caller's dict and its metadata are untouched
    [stored] = await context.get_messages()
    stamp = stored["metadata"]["timestamp"]
    assert REFERENCE_TIMESTAMP.match(stamp), stamp
    assert before <= datetime.fromisoformat(stamp) <= datetime.now(UTC) + timedelta(seconds=1)
    assert stored["metadata"]["source"] == "user"  # other metadata kept


async def test_an_existing_timestamp_is_kept_and_a_message_without_metadata_gets_one() -> None:
    context = ContextFold(token_counter="heuristic")
    given = "2026-02-06T10:00:00.123+00:00"
    await context.add_message({"role": "user", "content": "a", "metadata": {"timestamp": given}})
    plain = {"role": "assistant", "content": "b"}
    await context.add_message(plain)
    first, second = await context.get_messages()
    assert first["metadata"]["timestamp"] == given
    assert REFERENCE_TIMESTAMP.match(second["metadata"]["timestamp"])
    assert "metadata" not in plain


async def test_resume_keeps_a_transcript_as_it_was() -> None:
    """The reference's set_messages restores a transcript as is; it does not stamp."""
    context = ContextFold(token_counter="heuristic")
    transcript = [human("first"), reply("answer")]
    await context.set_messages(copy.deepcopy(transcript))
    assert await context.get_messages() == transcript


def test_stamp_timestamp_builds_a_new_dict_only_when_it_stamps() -> None:
    message = {"role": "user", "content": "x", "metadata": None}
    now = datetime(2026, 2, 6, 11, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    stamped = stamp_timestamp(message, now=now)
    assert stamped is not message and message["metadata"] is None
    assert stamped["metadata"] == {"timestamp": "2026-02-06T10:00:00.123+00:00"}
    already = {"role": "user", "content": "x", "metadata": {"timestamp": None}}
    assert stamp_timestamp(already) is already  # the key's presence decides, as in the reference
    assert stamp_timestamp("not a message") == "not a message"  # validation refuses it later
    odd = {"role": "user", "content": "x", "metadata": ["not", "a", "dict"]}
    assert stamp_timestamp(odd) is odd
    with pytest.raises(ValueError, match="aware"):
        stamp_timestamp({"role": "user", "content": "x"}, now=datetime(2026, 1, 1))


# -- public history rows: reference-only and public-message metadata ---------------------------


async def test_a_reference_only_row_is_never_sent_counted_or_the_last_human_prompt() -> None:
    context = ContextFold(max_tokens=20_000, token_counter="heuristic")
    await context.add_message(human("Summarise the attached report."))
    await context.add_message(reply("Here is the summary."))
    huge = prose(7, 225_000)
    assert 70_000 < context.counter.count_text(huge) < 90_000  # about 80,000 tokens
    history_only = {
        "role": "user",
        "content": huge,
        "metadata": {"amplifier_public_reference_only": True, "source": "user"},
    }
    await context.add_message(history_only)
    view = await context.get_messages_for_request()
    assert huge not in contents(view)
    assert contents(view) == ["Summarise the attached report.", "Here is the summary."]
    assert context.last_report is not None and context.last_report.tokens_before < 1_000
    assert context.human_prompt_indices() == (0, 0)
    # History keeps the row exactly as admitted.
    assert (await context.get_messages())[2]["content"] == huge


async def test_public_message_metadata_is_stripped_from_the_view_and_kept_in_history() -> None:
    context = ContextFold(token_counter="heuristic")
    original = "PUBLIC_ORIGINAL " * 200
    row = {
        "role": "user",
        "content": "expanded execution",
        "metadata": {
            "amplifier_public_message": {"version": 1, "blocks": [original]},
            "amplifier_public_copy_source": {"source": original},
            "legacy": {"keep": "unrelated metadata"},
        },
    }
    await context.add_message(row)
    await context.add_message(reply("execution response"))
    view = await context.get_messages_for_request()
    assert "amplifier_public_" not in str(view) and original not in str(view)
    assert view[0]["metadata"]["legacy"] == {"keep": "unrelated metadata"}
    stored = (await context.get_messages())[0]["metadata"]
    assert stored["amplifier_public_message"] == {"version": 1, "blocks": [original]}
    assert stored["amplifier_public_copy_source"] == {"source": original}


def test_request_form_and_the_reference_only_flag() -> None:
    legacy = {"role": "user", "content": "plain", "metadata": {"unrelated": 7}}
    assert request_form(legacy) is legacy  # nothing to strip: the same object
    public = {"role": "user", "content": "c", "metadata": {"amplifier_public_message": {}, "k": 1}}
    stripped = request_form(public)
    assert stripped == {"role": "user", "content": "c", "metadata": {"k": 1}}
    assert "amplifier_public_message" in public["metadata"]
    assert is_reference_only(
        {"role": "user", "metadata": {"amplifier_public_reference_only": True}}
    )
    for value in (False, 1, "true", None):
        flagged = {"role": "user", "metadata": {"amplifier_public_reference_only": value}}
        assert not is_reference_only(flagged)


# -- roles and sources: hook, ephemeral, reminder envelopes, developer ---------------------------


async def test_ephemeral_and_enveloped_user_messages_are_not_human_prompts() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message(human("the real task"))
    await context.add_message(reply("working"))
    await context.add_message(reminder("<system-reminder>todo list</system-reminder>"))
    await context.add_message({"role": "user", "content": "note", "metadata": {"ephemeral": True}})
    await context.add_message(
        {"role": "user", "content": '<system-reminder source="context-summary">s</system-reminder>'}
    )
    await context.add_message(
        {"role": "user", "content": "hook says", "metadata": {"source": "hook"}}
    )
    assert context.human_prompt_indices() == (0, 0)
    assert context.kinds()[2:] == [Kind.USER] * 4


async def test_hook_system_messages_survive_the_system_prompt_factory() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message({"role": "system", "content": "stale static prompt"})
    await context.add_message({"role": "developer", "content": "developer notes"})
    await context.add_message(human("task"))
    hook = {"role": "system", "content": "hook context", "metadata": {"source": "hook"}}
    await context.add_message(hook)

    async def factory() -> str:
        return "fresh prompt"

    await context.set_system_prompt_factory(factory)
    view = await context.get_messages_for_request()
    assert contents(view) == ["fresh prompt", "developer notes", "task", "hook context"]
    assert view[0] == {"role": "system", "content": "fresh prompt"}


async def test_a_developer_message_is_protected_like_a_system_message() -> None:
    context = ContextFold(
        max_tokens=3_000, token_counter="heuristic", compaction_notice_enabled=False
    )
    await context.add_message({"role": "developer", "content": "Always answer in French."})
    await context.add_message(human("first task"))
    for n in range(30):
        await context.add_message(reply(f"step {n} " + prose(n, 1_200)))
    await context.add_message(human("latest task"))
    view = await context.get_messages_for_request()
    assert len(view) < 33  # compaction removed messages
    assert view[0] == {"role": "developer", "content": "Always answer in French.", **_meta(view[0])}
    assert context.kinds()[0] is Kind.SYSTEM


def _meta(message: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": message["metadata"]} if "metadata" in message else {}


def test_the_classifiers_follow_the_reference_predicates() -> None:
    # The reference's replay predicate cases: bare and attributed envelopes are not typed words.
    assert is_reminder_envelope("<system-reminder>bare</system-reminder>")
    assert is_reminder_envelope('  <system-reminder source="x">attr</system-reminder>')
    assert is_reminder_envelope([{"type": "text", "text": "<system-reminder>b</system-reminder>"}])
    assert not is_reminder_envelope("<system-reminders>plural is another tag</system-reminders>")
    assert not is_reminder_envelope("plain words quoting <system-reminder>x</system-reminder>")
    assert reminder_source('<system-reminder source="context-replay">x') == "context-replay"
    assert reminder_source("<system-reminder>x</system-reminder>") is None

    assert is_human_prompt({"role": "user", "content": "hello"})
    assert is_human_prompt({"role": "user", "content": "", "metadata": {"source": "human"}})
    assert is_human_prompt({"role": "user", "content": [{"type": "image", "source": {}}]})
    for not_typed in (
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "r", "tool_call_id": "call_1"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        {"role": "user", "content": '<system-reminder source="x">a</system-reminder>'},
        {"role": "user", "content": "x", "metadata": {"ephemeral": True}},
        {"role": "user", "content": "x", "metadata": {"source": "hook"}},
        {"role": "user", "content": "x", "metadata": {"amplifier_public_reference_only": True}},
    ):
        assert not is_human_prompt(not_typed), not_typed

    assert is_persisted_reminder(reminder("body"))
    assert not is_persisted_reminder({"role": "user", "content": "b", "metadata": {"ephemeral": 1}})
    assert not is_persisted_reminder({**reminder("body"), "role": "system"})

    assert replaced_by_system_prompt({"role": "system", "content": "static"})
    assert not replaced_by_system_prompt({"role": "system", "metadata": {"source": "hook"}})
    assert not replaced_by_system_prompt({"role": "developer", "content": "kept"})

    assert carries_loaded_tool_state({"metadata": {"openai:tool_search_items": []}})
    assert not carries_loaded_tool_state({"metadata": {"tool_search_items": [1]}})
    assert not carries_loaded_tool_state({"metadata": "odd"})


# -- loaded-tool state --------------------------------------------------------------------------

HOSTED_ITEMS = [
    {"type": "tool_search_call", "execution": "server", "call_id": None, "arguments": {}},
    {
        "type": "tool_search_output",
        "execution": "server",
        "call_id": None,
        "tools": [{"type": "function", "name": "glob", "namespace": "files"}],
    },
]


async def test_loaded_tool_state_survives_compaction_whole() -> None:
    context = ContextFold(
        max_tokens=4_000,
        token_counter="heuristic",
        compaction_notice_enabled=False,
        protected_recent=0.1,
        protected_tool_results=1,
    )
    await context.add_message(human("Find the config files."))
    carrier = {
        "role": "assistant",
        "content": "Loaded the files namespace.",
        "metadata": {"openai:tool_search_items": copy.deepcopy(HOSTED_ITEMS)},
    }
    await context.add_message(carrier)
    for n in range(12):
        for message in tool_round(n, result_chars=2_000):
            await context.add_message(message)
        await context.add_message(reply(f"Read part {n}."))
    await context.add_message(human("Now list what you found."))
    view = await context.get_messages_for_request()
    assert context.last_report is not None and context.last_report.compacted
    kept = [m for m in view if (m.get("metadata") or {}).get("openai:tool_search_items")]
    assert len(kept) == 1
    assert kept[0]["content"] == "Loaded the files namespace."
    assert kept[0]["metadata"]["openai:tool_search_items"] == HOSTED_ITEMS


# -- request retention --------------------------------------------------------------------------


async def pressured() -> tuple[ContextFold, str]:
    """The reference's retention fixture, in contextfold's units."""
    context = ContextFold(
        max_tokens=1_800, token_counter="heuristic", compaction_notice_enabled=False
    )
    await context.add_message({"role": "user", "content": "Original task " + "a" * 150})
    body = "<system-reminders>" + "policy " * 180 + " REQUIRED_FACT</system-reminders>"
    await context.add_message(reminder(body))
    for i in range(40):
        await context.add_message({"role": "assistant", "content": f"Output {i} " + "x" * 1200})
    await context.add_message({"role": "user", "content": "Current correction " + "b" * 150})
    return context, body


async def test_retaining_keeps_the_newest_reminder_once_per_request() -> None:
    context, body = await pressured()
    canonical = await context.get_messages()
    ordinary = await context.get_messages_for_request()
    assert body not in contents(ordinary)

    retained = await context.get_messages_for_request_retaining(retain_contents=[body])
    assert contents(retained).count(body) == 1
    assert context.last_report is not None and context.last_report.tokens_after <= 1_800
    assert await context.get_messages() == canonical
    assert await context.get_messages_for_request_retaining(retain_contents=[body]) == retained

    # Retention is per request, not a pin.
    released = await context.get_messages_for_request_retaining(retain_contents=[])
    assert body not in contents(released)


async def test_retaining_matches_required_reminders() -> None:
    context, body = await pressured()
    by_keyword = await context.get_messages_for_request(required_reminders=[body])
    assert contents(by_keyword).count(body) == 1


async def test_only_the_newest_matching_copy_is_retained() -> None:
    context, body = await pressured()
    await context.add_message(reminder(body))
    view = await context.get_messages_for_request_retaining(retain_contents=[body])
    assert contents(view).count(body) == 1
    assert contents(await context.get_messages()).count(body) == 2


async def test_retention_survives_a_transcript_round_trip() -> None:
    context, body = await pressured()
    resumed = ContextFold(
        max_tokens=1_800, token_counter="heuristic", compaction_notice_enabled=False
    )
    await resumed.set_messages(await context.get_messages())
    view = await resumed.get_messages_for_request_retaining(retain_contents=[body])
    assert body in contents(view)


async def test_a_body_never_admitted_is_a_value_error_naming_it() -> None:
    context, body = await pressured()
    with pytest.raises(ValueError, match="not in admitted history"):
        await context.get_messages_for_request_retaining(retain_contents=["not admitted"])
    assert body not in contents(await context.get_messages_for_request())


async def test_an_impossible_requirement_fails_closed_and_leaves_history_whole() -> None:
    context, body = await pressured()
    huge = "<system-reminders>" + "x" * 12_000 + "</system-reminders>"
    await context.add_message(reminder(huge))
    with pytest.raises(ContextLengthError):
        await context.get_messages_for_request_retaining(retain_contents=[huge])
    assert huge in contents(await context.get_messages())
    # Once the withdrawn reminder is no longer the newest message, it is compactable again
    # and a feasible requirement recovers normally.
    for i in range(30):
        await context.add_message({"role": "assistant", "content": f"Later work {i} " + "x" * 200})
    view = await context.get_messages_for_request_retaining(retain_contents=[body])
    assert body in contents(view)
    assert context.last_report is not None and context.last_report.tokens_after <= 1_800


async def test_hard_fit_targets_the_forced_budget_itself() -> None:
    context, body = await pressured()
    forced = await context.get_messages_for_request_retaining(
        retain_contents=[body], token_budget=1_500, hard_fit=True
    )
    report = context.last_report
    assert report is not None and report.hard_fit and report.compacted
    assert report.target == 1_500 and report.tokens_after <= 1_500
    assert body in contents(forced)

    ordinary, ordinary_body = await pressured()
    await ordinary.get_messages_for_request_retaining(
        retain_contents=[ordinary_body], token_budget=1_500
    )
    assert ordinary.last_report is not None and ordinary.last_report.target < 1_500


async def test_retaining_takes_keywords_only_and_refuses_a_bare_string() -> None:
    context, body = await pressured()
    with pytest.raises(TypeError):
        await context.get_messages_for_request_retaining([body])  # type: ignore[misc]
    with pytest.raises(TypeError, match="list"):
        await context.get_messages_for_request_retaining(retain_contents=body)
    plain = await context.get_messages_for_request()
    assert await context.get_messages_for_request_retaining(retain_contents=[]) == plain


def test_normalize_retain_contents_refuses_bad_shapes() -> None:
    assert normalize_retain_contents(["a", "b", "a"]) == ("a", "b")
    assert normalize_retain_contents(()) == ()
    for bad in ("a body", b"bytes", {"a": 1}, 7, None):
        with pytest.raises(TypeError, match="retain_contents"):
            normalize_retain_contents(bad)
    with pytest.raises(TypeError, match=r"retain_contents\[1\]"):
        normalize_retain_contents(["ok", 3])


# -- set_system_prompt_factory ------------------------------------------------------------------


async def test_the_factory_is_called_per_request_and_never_stored() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message(human("task"))
    prompts = iter(["AGENTS.md v1", "AGENTS.md v2"])
    calls: list[str] = []

    async def factory() -> str:
        calls.append("called")
        return next(prompts)

    await context.set_system_prompt_factory(factory)
    first = await context.get_messages_for_request()
    assert first[0] == {"role": "system", "content": "AGENTS.md v1"}
    second = await context.get_messages_for_request_retaining(retain_contents=[])
    assert second[0] == {"role": "system", "content": "AGENTS.md v2"}
    assert len(calls) == 2
    assert contents(await context.get_messages()) == ["task"]


async def test_the_factory_text_is_counted_in_the_view() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message(human("task"))
    await context.get_messages_for_request()
    assert context.last_report is not None
    without = context.last_report.tokens_before

    async def factory() -> str:
        return prose(3, 4_000)

    await context.set_system_prompt_factory(factory)
    await context.get_messages_for_request()
    assert context.last_report.tokens_before > without + 500


async def test_a_failing_factory_fails_the_request_and_changes_nothing() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message(human("task"))

    async def broken() -> str:
        raise RuntimeError("AGENTS.md unreadable")

    await context.set_system_prompt_factory(broken)
    with pytest.raises(RuntimeError, match=r"AGENTS\.md unreadable"):
        await context.get_messages_for_request()
    assert contents(await context.get_messages()) == ["task"]


async def test_resolve_system_prompt() -> None:
    async def async_factory() -> str:
        return "async text"

    assert await resolve_system_prompt(None) is None
    assert await resolve_system_prompt(async_factory) == "async text"
    assert await resolve_system_prompt(lambda: "sync text") == "sync text"
    with pytest.raises(TypeError, match="str"):
        await resolve_system_prompt(lambda: None)
    with pytest.raises(TypeError, match="callable"):
        await resolve_system_prompt("not a factory")  # type: ignore[arg-type]

    async def failing() -> str:
        await asyncio.sleep(0)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        await resolve_system_prompt(failing)


# -- events: the reference's payload keys ---------------------------------------------------------


async def test_the_compaction_event_carries_the_reference_keys() -> None:
    coordinator, context, cleanup = await mounted(
        {"max_tokens": 4_000, "token_counter": "heuristic", "protected_tool_results": 2}
    )
    await context.add_message(human("Read every chapter."))
    for n in range(10):
        for message in tool_round(n, result_chars=2_000):
            await context.add_message(message)
    await context.get_messages_for_request()
    [event] = coordinator.hooks.payloads("context:compaction")
    assert set(event) >= REFERENCE_COMPACTION_KEYS
    assert event["protected_recent"] == 0.30 and event["protected_tool_results"] == 2
    assert event["strategy_level"] >= 1
    assert event["messages_removed"] + event["messages_truncated"] > 0
    assert isinstance(event["target_tokens"], int) and 0 < event["target_tokens"] < 4_000
    await cleanup()


async def test_the_ingress_event_carries_the_reference_keys() -> None:
    coordinator, context, cleanup = await mounted(
        {"max_tool_result_bytes": 4_096, "token_counter": "heuristic"}
    )
    await context.add_message(human("Fetch it."))
    await context.add_message(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "tool": "fetch", "arguments": {}}],
        }
    )
    await context.add_message(
        {"role": "tool", "tool_call_id": "call_1", "name": "fetch", "content": "é" * 10_000}
    )
    [event] = coordinator.hooks.payloads("context:tool_result_ingress_truncated")
    assert set(event) >= REFERENCE_INGRESS_KEYS
    stored = (await context.get_messages())[-1]["content"]
    assert event["original_text_utf8_bytes"] == 20_000
    assert event["stored_text_utf8_bytes"] == len(stored.encode("utf-8"))  # marker included
    assert event["max_tool_result_bytes"] == 4_096
    assert event["stored_text_utf8_bytes"] <= 4_096
    assert event["tool_name"] == "fetch"
    assert isinstance(event["content_kind"], str) and event["content_kind"]
    await cleanup()
