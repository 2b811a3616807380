"""The ladder as configuration (``strategies``), and the rungs' settings: the head_tail shape,
exempt tools and per-tool budgets of ``truncate_tool_results``, ``clear_tool_results`` with
``keep_last`` and ``clear_at_least``, and markers that name each message's recall id.

Rungs are run through the planner's real pass (`run_pass` with a ``ladder``) over a real
history, so these tests hold whatever the manager does around them.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from contextfold import ConfigError, ContextConfig, ContextFold
from contextfold.compaction.clear import ClearToolResults
from contextfold.compaction.ladder import DEFAULT_STRATEGIES, RUNGS
from contextfold.compaction.planner import PassPlan, PassSettings, assemble_view, run_pass
from contextfold.compaction.rungs import (
    DEFAULT_LADDER,
    DropOldest,
    StripEarlierThinking,
    TruncateLongText,
    TruncateToolResults,
)
from contextfold.compaction.truncate import shorten_text, shorten_tool_result
from contextfold.compaction.working import FoldState
from contextfold.history import History
from contextfold.tokens import build_counter
from support import SYSTEM, assert_pairing, human, prose, reply

COUNTER = build_counter("heuristic")


def history_of(messages: list[dict[str, Any]]) -> History:
    history = History(COUNTER, 1_000_000)
    history.extend(messages)
    return history


def compact(history: History, ladder: tuple, *, target_raw: int = 0, **settings: Any):
    """One pass of ``ladder`` toward ``target_raw``: the view it produces and the pass result.

    Soft protection is off unless asked for; the trigger is set at the history's size, so
    the planner never relaxes protection to reach the target (what protection holds, stays).
    """
    options: dict[str, Any] = {
        "protected_recent": 0.0,
        "protected_tool_results": 0,
        "truncate_chars": 250,
        "notice_enabled": False,
    } | settings
    reserve = options.pop("notice_reserve", 800)
    result = run_pass(
        history,
        FoldState(),
        COUNTER,
        PassSettings(**options),
        PassPlan(
            target_raw=target_raw,
            limit_raw=max(target_raw, history.raw_total),
            budget_raw=10**9,
            notice_reserve=reserve,
            ladder=ladder,
        ),
    )
    view = assemble_view(history, result.state, result.notice)
    assert_pairing(view)
    return view, result


def call(call_id: str, tool: str, shape: str = "amplifier") -> dict[str, Any]:
    if shape == "openai":
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": "{}"}}
            ],
        }
    if shape == "anthropic":
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": {}}],
        }
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "tool": tool, "arguments": {}}],
    }


def result(call_id: str, text: str, shape: str = "amplifier") -> dict[str, Any]:
    if shape == "anthropic":
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}],
        }
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def tool_session(tools: list[str], *, chars: int = 6_000, shape: str = "amplifier") -> list[dict]:
    """System, a prompt, then one call and result per tool name (in order), then a reply."""
    messages: list[dict[str, Any]] = [SYSTEM, human("Read everything and report.")]
    for n, tool in enumerate(tools):
        text = f"BEGIN {tool} {n} " + prose(n, chars) + f" END {tool} {n}"
        messages += [call(f"c{n}", tool, shape), result(f"c{n}", text, shape)]
    messages.append(reply("Done reading."))
    return messages


def result_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    [block] = content
    return block["content"] if isinstance(block["content"], str) else block["content"][0]["text"]


# -- strategies: the config key -------------------------------------------------------------------


def test_the_default_ladder_is_todays() -> None:
    config = ContextConfig()
    assert config.strategies == DEFAULT_STRATEGIES
    assert [type(r) for r in config.ladder] == [type(r) for r in DEFAULT_LADDER]
    assert [r.name for r in config.ladder] == [
        "strip_thinking",
        "truncate_tool_results",
        "truncate_long_text",
        "drop_least_used",
    ]


def test_strategies_names_and_settings_build_the_ladder_in_order() -> None:
    config = ContextConfig.from_mapping(
        {
            "strategies": [
                "strip_thinking",
                {
                    "name": "truncate_tool_results",
                    "shape": "head_tail",
                    "exempt_tools": ["load_skill"],
                    "tool_chars": {"read_file": 2000},
                },
                {"name": "clear_tool_results", "keep_last": 4, "clear_at_least": 5000},
                "drop_oldest",
            ]
        }
    )
    ladder = config.ladder
    assert [type(r) for r in ladder] == [
        StripEarlierThinking,
        TruncateToolResults,
        ClearToolResults,
        DropOldest,
    ]
    assert ladder[1] == TruncateToolResults(
        shape="head_tail", exempt_tools=["load_skill"], tool_chars={"read_file": 2000}
    )
    assert ladder[2] == ClearToolResults(keep_last=4, clear_at_least=5000)
    # The config keeps what it was given (plain data, so it serialises as given).
    assert config.to_dict()["strategies"][2] == {
        "name": "clear_tool_results",
        "keep_last": 4,
        "clear_at_least": 5000,
    }


def test_the_config_does_not_share_its_settings_with_the_caller() -> None:
    given = {"name": "truncate_tool_results", "tool_chars": {"read_file": 2000}}
    config = ContextConfig.from_mapping({"strategies": [given, "drop_oldest"]})
    given["tool_chars"]["read_file"] = -1  # the caller edits its own dicts afterwards
    assert config.ladder[0].tool_chars == {"read_file": 2000}
    config.to_dict()["strategies"][0]["tool_chars"]["read_file"] = -1
    assert config.ladder[0].tool_chars == {"read_file": 2000}


def test_every_rung_is_registered_by_its_name() -> None:
    assert set(RUNGS) == {
        "strip_thinking",
        "truncate_tool_results",
        "truncate_long_text",
        "clear_tool_results",
        "summarize",
        "drop_oldest",
        "drop_least_used",
    }
    for name, cls in RUNGS.items():
        assert cls().name == name


@pytest.mark.parametrize(
    ("strategies", "expected"),
    [
        ("drop_oldest", r"strategies must be a list"),
        ({"name": "drop_oldest"}, r"strategies must be a list"),
        (7, r"strategies must be a list"),
        ({"drop_oldest"}, r"ordered list"),
        ([], r"strategies is empty.*compaction_enabled: false"),
        (["drop_olddest"], r"strategies\[0\]: unknown rung 'drop_olddest'.*'drop_oldest'"),
        ([None], r"strategies\[0\] must be a rung name"),
        ([["drop_oldest"]], r"strategies\[0\] must be a rung name"),
        ([{"keep_last": 3}], r"strategies\[0\]: a rung with settings needs its 'name'"),
        ([{"name": 5}], r"strategies\[0\]: unknown rung 5"),
        (
            ["strip_thinking", {"name": "clear_tool_results", "keep": 3}],
            r"strategies\[1\]: clear_tool_results has no setting 'keep'.*'keep_last'",
        ),
        ([{"name": "drop_oldest", "keep_last": 3}], r"drop_oldest has no setting.*none"),
        (["drop_oldest", "drop_oldest"], r"strategies\[1\]: rung 'drop_oldest' is listed twice"),
    ],
)
def test_a_bad_ladder_is_refused_with_where_and_what(strategies: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ContextConfig.from_mapping({"strategies": strategies})


@pytest.mark.parametrize(
    ("rung", "setting", "value"),
    [
        ("truncate_tool_results", "chars", -1),
        ("truncate_tool_results", "chars", "250"),
        ("truncate_tool_results", "chars", True),
        ("truncate_tool_results", "chars", 2.5),
        ("truncate_tool_results", "shape", "middle"),
        ("truncate_tool_results", "shape", None),
        ("truncate_tool_results", "exempt_tools", "load_skill"),
        ("truncate_tool_results", "exempt_tools", [1]),
        ("truncate_tool_results", "exempt_tools", [""]),
        ("truncate_tool_results", "exempt_tools", {"load_skill": True}),
        ("truncate_tool_results", "tool_chars", ["read_file"]),
        ("truncate_tool_results", "tool_chars", {"read_file": -1}),
        ("truncate_tool_results", "tool_chars", {"read_file": 2.5}),
        ("truncate_tool_results", "tool_chars", {"read_file": False}),
        ("truncate_tool_results", "tool_chars", {"": 100}),
        ("truncate_tool_results", "tool_chars", {3: 100}),
        ("truncate_long_text", "chars", -5),
        ("clear_tool_results", "keep_last", -1),
        ("clear_tool_results", "keep_last", "3"),
        ("clear_tool_results", "keep_last", None),
        ("clear_tool_results", "clear_at_least", -100),
        ("clear_tool_results", "clear_at_least", 1.5),
        ("clear_tool_results", "exempt_tools", "read_file"),
    ],
)
def test_every_bad_setting_names_its_rung_and_setting(rung: str, setting: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        ContextConfig.from_mapping(
            {"strategies": ["strip_thinking", {"name": rung, setting: value}]}
        )
    text = str(caught.value)
    assert text.startswith(f"strategies[1]: {rung}: setting '{setting}'"), text
    assert len(text) < 400


def test_a_rung_built_in_code_checks_its_settings_too() -> None:
    with pytest.raises(ConfigError, match="truncate_tool_results: setting 'shape'"):
        TruncateToolResults(shape="tail")
    with pytest.raises(ConfigError, match="clear_tool_results: setting 'keep_last'"):
        ClearToolResults(keep_last=-2)


def test_a_bad_strategies_value_fails_the_mount_plan_and_the_library() -> None:
    with pytest.raises(ConfigError, match="strategies"):
        ContextFold({"strategies": ["truncate"]})
    with pytest.raises(ConfigError, match="strategies"):
        ContextFold(strategies=[{"name": "clear_tool_results", "keep_last": -1}])


# -- a rung of your own, in library use ------------------------------------------------------------


class ClearNotes:
    """A user's rung: hook notes older than the last two leave the view as a one-liner."""

    name = "clear_notes"
    level = 2

    def __init__(self) -> None:
        self.calls = 0

    def apply(self, work: Any, target_raw: int) -> None:
        self.calls += 1
        notes = [
            i
            for i, entry in enumerate(work.history.entries)
            if (entry.message.get("metadata") or {}).get("source") == "hook"
        ]
        for index in notes[:-2]:
            if work.raw_total <= target_raw:
                return
            if work.protection.entry_reason(index) or work.is_removed(index):
                continue
            short = {**work.current(index)[0], "content": "[note cleared]"}
            work.replace(index, short, work.counter.count_message(short), self.name)
            work.state.shortened.add(index)


def test_a_rung_object_is_accepted_as_is_and_anything_else_is_not() -> None:
    mine = ClearNotes()
    context = ContextFold(strategies=[mine, "drop_oldest"], token_counter="heuristic")
    assert context.config.ladder[0] is mine
    assert context.config.to_dict()["strategies"][0] is mine
    # The rung survives the config being resolved again with more settings.
    again = ContextConfig.resolve(context.config, {"max_tokens": 9000})
    assert again.ladder[0] is mine

    class NoApply:
        name = "broken"
        level = 1

    with pytest.raises(ConfigError, match=r"strategies\[0\] must be .* rung object"):
        ContextFold(strategies=[NoApply()])
    with pytest.raises(ConfigError, match="listed twice"):
        ContextFold(strategies=[ClearNotes(), ClearNotes()])


async def test_a_rung_of_your_own_runs_in_the_ladder() -> None:
    """Needs the manager to pass ``config.ladder`` to ``run_pass`` (see the report)."""
    mine = ClearNotes()
    context = ContextFold(
        strategies=[mine, "drop_oldest"], token_counter="heuristic", max_tokens=6_000
    )
    messages: list[dict[str, Any]] = [SYSTEM, human("Watch the notes.")]
    for n in range(12):
        messages.append(
            {"role": "user", "content": prose(n, 2_000), "metadata": {"source": "hook"}}
        )
        messages.append(reply(f"Noted {n}."))
    await context.set_messages(messages)
    view = await context.get_messages_for_request()
    assert mine.calls >= 1
    assert "clear_notes" in context.last_report.applied
    assert sum(m["content"] == "[note cleared]" for m in view) >= 1
    assert context.last_report.tokens_after <= 6_000
    assert len(await context.get_messages()) == len(messages)  # history keeps everything


# -- truncate_tool_results: shape, exempt tools, per-tool budgets --------------------------------


def test_head_tail_keeps_both_ends_and_counts_the_middle_exactly() -> None:
    text = "".join(str(i % 10) for i in range(10_000))
    short = shorten_text(text, 400, index=41, shape="head_tail")
    assert short is not None
    head, rest = short.split("\n[... ", 1)
    omitted, tail = rest.split(" characters omitted from the middle; ", 1)
    assert head == text[:200]
    assert tail == 'context_recall("r41") returns it]\n' + text[-200:]
    assert int(omitted.replace(",", "")) == 10_000 - 400


def test_head_tail_with_nothing_to_keep_does_not_leak_the_whole_text() -> None:
    text = "X" * 5_000
    for keep in (0, 1):
        short = shorten_text(text, keep, index=3, shape="head_tail")
        assert short is not None and len(short) < 120, short


def test_a_short_text_is_left_alone_in_either_shape() -> None:
    assert shorten_text("y" * 300, 250, index=1, shape="head_tail") is None
    assert shorten_text("y" * 300, 250, index=1) is None


def test_head_tail_in_a_pass_keeps_each_results_ending() -> None:
    history = history_of(tool_session(["lookup"] * 6))
    view, outcome = compact(history, (TruncateToolResults(shape="head_tail"),))
    shortened = [
        m for m in view if m.get("role") == "tool" and "omitted from the middle" in m["content"]
    ]
    assert outcome.changed == {"truncate_tool_results": len(shortened)} and len(shortened) >= 5
    for message in shortened:
        n = int(message["tool_call_id"][1:])
        assert message["content"].endswith(f" END lookup {n}")
        assert message["content"].startswith(f"BEGIN lookup {n} ")


def results_of(messages: list[dict[str, Any]]) -> list[str]:
    """The text of every tool result, in order (role tool, or user with result blocks)."""
    return [
        result_text(m)
        for m in messages
        if m.get("role") == "tool"
        or (m.get("role") == "user" and isinstance(m.get("content"), list))
    ]


@pytest.mark.parametrize("shape", ["amplifier", "openai", "anthropic"])
def test_exempt_tools_are_never_shortened_and_tool_chars_set_a_budget(shape: str) -> None:
    tools = ["load_skill", "read_file", "lookup", "read_file", "lookup", "load_skill"]
    messages = tool_session(tools, chars=8_000, shape=shape)
    rung = TruncateToolResults(exempt_tools=["load_skill"], tool_chars={"read_file": 2_000})
    view, outcome = compact(history_of(messages), (rung,))
    assert outcome.changed == {"truncate_tool_results": 4}
    for tool, original, text in zip(tools, results_of(messages), results_of(view), strict=True):
        if tool == "load_skill":
            assert text == original
        elif tool == "read_file":
            assert text.startswith(original[:2_000]) and text[2_000:].startswith("\n[... ")
        else:
            assert text.startswith(original[:250]) and text[250:].startswith("\n[... ")


def test_a_result_naming_its_own_tool_is_matched_too() -> None:
    messages = tool_session(["lookup", "lookup"], chars=4_000)
    messages[3] = {**messages[3], "name": "load_skill"}
    messages[5] = {**messages[5], "metadata": {"tool_name": "load_skill"}}
    view, outcome = compact(
        history_of(messages), (TruncateToolResults(exempt_tools=["load_skill"]),)
    )
    assert outcome.changed == {}
    assert [m["content"] for m in view if m.get("role") == "tool"] == [
        messages[3]["content"],
        messages[5]["content"],
    ]


def test_the_rungs_own_chars_beats_truncate_chars() -> None:
    history = history_of(tool_session(["lookup"] * 3, chars=5_000))
    view, _ = compact(history, (TruncateToolResults(chars=1_000),), truncate_chars=50)
    tool_texts = [m["content"] for m in view if m.get("role") == "tool"]
    assert all(len(t.split("\n[... ")[0]) == 1_000 for t in tool_texts)


def test_truncate_long_text_takes_its_own_chars() -> None:
    messages = [SYSTEM, human("Go."), reply(prose(1, 6_000)), reply(prose(2, 6_000)), reply("ok")]
    view, _ = compact(history_of(messages), (TruncateLongText(chars=600),))
    assert view[2]["content"].startswith(prose(1, 600) + "\n[... ")
    assert 'context_recall("r2")' in view[2]["content"]


# -- clear_tool_results -----------------------------------------------------------------------


CLEARED = re.compile(r'^\[\.\.\. ([\d,]+) tokens cleared; context_recall\("r(\d+)"\) returns it\]$')


def test_clear_replaces_old_results_and_keeps_the_calls() -> None:
    messages = tool_session(["lookup"] * 8, chars=3_000)
    history = history_of(messages)
    view, outcome = compact(history, (ClearToolResults(keep_last=3),))
    tools = [(i, m) for i, m in enumerate(messages) if m.get("role") == "tool"]
    sent = {m["tool_call_id"]: m for m in view if m.get("role") == "tool"}
    assert len(sent) == 8  # every call keeps its answer
    for index, original in tools[:-3]:
        cleared = sent[original["tool_call_id"]]
        match = CLEARED.match(cleared["content"])
        assert match, cleared["content"]
        assert int(match.group(2)) == index  # the placeholder names this message's id
        assert int(match.group(1).replace(",", "")) == history.entries[index].cost
        assert cleared["tool_call_id"] == original["tool_call_id"]
    for _index, original in tools[-3:]:  # keep_last
        assert sent[original["tool_call_id"]] == original
    assert outcome.changed == {"clear_tool_results": 5}
    calls = [m for m in view if m.get("tool_calls")]
    assert calls == [m for m in messages if m.get("tool_calls")]


def test_clear_stops_at_target_oldest_first() -> None:
    messages = tool_session(["lookup"] * 8, chars=3_000)
    history = history_of(messages)
    one_result = history.entries[3].cost
    target = history.raw_total - one_result - one_result // 2  # two clears reach it
    view, outcome = compact(history, (ClearToolResults(keep_last=0),), target_raw=target)
    assert outcome.changed == {"clear_tool_results": 2}
    cleared = [
        m["tool_call_id"] for m in view if m.get("role") == "tool" and CLEARED.match(m["content"])
    ]
    assert cleared == ["c0", "c1"]


def test_clear_at_least_skips_a_clear_that_frees_too_little() -> None:
    messages = tool_session(["lookup"] * 4, chars=1_200)
    history = history_of(messages)
    freed_by_all = sum(history.entries[i].cost for i in (3, 5, 7, 9)) - 4 * 30
    view, outcome = compact(
        history, (ClearToolResults(keep_last=0, clear_at_least=freed_by_all * 2),)
    )
    assert outcome.changed == {} and outcome.state.truncated == {}
    assert view == messages  # the prefix is untouched: nothing worth a cache miss
    # The same pass with a reachable floor clears.
    _, outcome = compact(history, (ClearToolResults(keep_last=0, clear_at_least=100),))
    assert outcome.changed == {"clear_tool_results": 4}


def test_a_skipped_clear_leaves_the_work_to_the_next_rung() -> None:
    history = history_of(tool_session(["lookup"] * 6, chars=1_200))
    ladder = (ClearToolResults(keep_last=0, clear_at_least=10**6), DropOldest())
    _, outcome = compact(history, ladder, target_raw=history.raw_total // 2)
    assert "clear_tool_results" not in outcome.changed and outcome.changed["drop_oldest"] > 0


def test_clear_honours_protection_and_exempt_tools() -> None:
    tools = ["lookup", "load_skill", "lookup", "lookup", "lookup", "lookup"]
    messages = tool_session(tools, chars=3_000)
    view, _ = compact(
        history_of(messages),
        (ClearToolResults(keep_last=0, exempt_tools=["load_skill"]),),
        protected_tool_results=2,
    )
    sent = {m["tool_call_id"]: m["content"] for m in view if m.get("role") == "tool"}
    assert sent["c1"] == messages[5]["content"]  # exempt
    assert sent["c4"] == messages[11]["content"] and sent["c5"] == messages[13]["content"]
    assert all(CLEARED.match(sent[c]) for c in ("c0", "c2", "c3"))


def test_clear_handles_anthropic_result_blocks() -> None:
    messages = tool_session(["lookup"] * 4, chars=3_000, shape="anthropic")
    view, outcome = compact(history_of(messages), (ClearToolResults(keep_last=1),))
    assert outcome.changed == {"clear_tool_results": 3}
    blocks = [
        m["content"][0] for m in view if m.get("role") == "user" and isinstance(m["content"], list)
    ]
    assert [b["tool_use_id"] for b in blocks] == ["c0", "c1", "c2", "c3"]
    assert all(CLEARED.match(b["content"]) for b in blocks[:3])
    assert blocks[3]["content"] == messages[9]["content"][0]["content"]


def test_a_cleared_result_is_not_cleared_again() -> None:
    history = history_of(tool_session(["lookup"] * 5, chars=3_000))
    _, first = compact(history, (ClearToolResults(keep_last=1),))
    second = run_pass(
        history,
        first.state,
        COUNTER,
        PassSettings(
            protected_recent=0.0, protected_tool_results=0, truncate_chars=250, notice_enabled=False
        ),
        PassPlan(
            target_raw=0, limit_raw=0, budget_raw=10**9, ladder=(ClearToolResults(keep_last=1),)
        ),
    )
    assert second.changed == {} and second.state.truncated == first.state.truncated


# -- ids in markers and in the notice -------------------------------------------------------------


def test_truncation_markers_name_the_message_id() -> None:
    messages = tool_session(["lookup"] * 5, chars=3_000)
    view, _ = compact(history_of(messages), DEFAULT_LADDER[:2])
    for index, original in enumerate(messages):
        if original.get("role") != "tool":
            continue
        [sent] = [m for m in view if m.get("tool_call_id") == original["tool_call_id"]]
        assert f'context_recall("r{index}") returns it]' in sent["content"]
        assert "omitted from this view" in sent["content"]


def test_a_marker_without_an_id_says_where_the_text_is() -> None:
    short = shorten_tool_result({"role": "tool", "tool_call_id": "x", "content": "z" * 2_000}, 100)
    assert short is not None and short["content"].endswith("the full text is in the history]")


def test_the_notice_names_the_ids_of_removed_messages() -> None:
    messages = tool_session(["lookup"] * 6, chars=2_000)
    history = history_of(messages)
    _, outcome = compact(
        history,
        (DropOldest(),),
        target_raw=history.raw_total // 3,
        notice_enabled=True,
        notice_reserve=2_000,
    )
    notice = outcome.notice["content"]
    removed = sorted(i for u in outcome.state.removed_units for i in history.units[u].entries)
    assert removed, "the pass must remove something"
    # Each removed call group is one line naming its ids, each on its own (a range would
    # not say which message to recall): assistant, result.
    for unit in sorted(outcome.state.removed_units):
        entries = history.units[unit].entries
        ids = ",".join(f"r{i}" for i in entries)
        assert f"- {ids}: assistant called lookup(" in notice


def test_an_elided_digest_still_names_the_ids_it_leaves_out() -> None:
    messages = [SYSTEM, human("Go.")]
    for n in range(40):
        messages += [call(f"c{n}", "lookup"), result(f"c{n}", prose(n, 400))]
    messages.append(reply("done"))
    history = history_of(messages)
    _, outcome = compact(
        history,
        (DropOldest(),),
        target_raw=history.raw_total // 10,
        notice_enabled=True,
        notice_reserve=300,
    )
    notice = outcome.notice["content"]
    elision = re.search(r"- \.\.\. (\d+) more item\(s\) \(r(\d+)-r(\d+)\) \.\.\.", notice)
    assert elision, notice
    shown = {int(n) for n in re.findall(r"^- r(\d+),r\d+:", notice, flags=re.M)}
    low, high = int(elision.group(2)), int(elision.group(3))
    assert shown and all(n < low or n > high for n in shown)


# -- the configured ladder in a whole request ------------------------------------------------------


async def test_a_configured_ladder_shapes_the_view_a_request_gets() -> None:
    context = ContextFold(
        token_counter="heuristic",
        max_tokens=9_000,
        protected_tool_results=2,
        strategies=[
            {"name": "truncate_tool_results", "shape": "head_tail", "exempt_tools": ["load_skill"]},
            # exempt_tools is a setting of each rung: the skill must be exempt from both.
            {"name": "clear_tool_results", "keep_last": 2, "exempt_tools": ["load_skill"]},
            "drop_oldest",
        ],
    )
    tools = ["load_skill"] + ["lookup"] * 11
    messages = tool_session(tools, chars=3_000)
    await context.set_messages(messages)
    view = await context.get_messages_for_request()
    assert_pairing(view)
    report = context.last_report
    assert report.compacted and report.tokens_after <= 9_000
    # Truncation alone could not reach the target: clearing went on, oldest first, through
    # results truncation had already shortened; nothing was removed.
    assert report.applied == ["truncate_tool_results", "clear_tool_results"]
    contents = [m["content"] for m in view if m.get("role") == "tool"]
    assert sum(bool(CLEARED.match(c)) for c in contents) >= 5
    sent = {m["tool_call_id"]: m["content"] for m in view if m.get("role") == "tool"}
    assert sent["c0"] == messages[3]["content"]  # the exempt skill stays whole
    for n in range(1, 10):
        index = 3 + 2 * n
        if sent[f"c{n}"] == messages[index]["content"]:
            continue
        assert f'context_recall("r{index}")' in sent[f"c{n}"]  # every change names its id
        if "omitted from the middle" in sent[f"c{n}"]:
            assert sent[f"c{n}"].endswith(f" END lookup {n}")  # head_tail kept the ending
    assert await context.recall("r5") == messages[5]["content"]
