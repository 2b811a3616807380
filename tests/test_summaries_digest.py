"""The offline digest: deterministic, bounded, keeps what a run needs back."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.summaries import (
    SummaryFolder,
    digest_transcript,
    previous_summary_message,
    render_transcript,
    scripted_summarizer,
)
from contextfold.summaries.digest import parse_transcript
from contextfold.tokens import build_counter

COUNTER = build_counter("exact")
SPAN: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a release assistant."},
    {"role": "user", "content": "Tag release v2.4.1 from branch release/2.4 and notify #ops."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "secret scratch work", "signature": "sig"},
            {"type": "text", "text": "Tagging now."},
            {"type": "tool_use", "id": "toolu_1", "name": "git", "input": {"args": "tag v2.4.1"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "tagged abc123"}],
    },
    {"role": "assistant", "content": "Tagged v2.4.1 at abc123; #ops notified."},
]


def test_the_transcript_names_roles_calls_and_results_and_skips_thinking() -> None:
    text = render_transcript(SPAN)
    assert text.splitlines() == [
        "[1] system: You are a release assistant.",
        "[2] user: Tag release v2.4.1 from branch release/2.4 and notify #ops.",
        "[3] assistant: Tagging now.",
        '[3] call: git {"args": "tag v2.4.1"} (id toolu_1)',
        "[4] result (toolu_1): tagged abc123",
        "[5] assistant: Tagged v2.4.1 at abc123; #ops notified.",
    ]
    assert "secret scratch work" not in text


def test_openai_style_calls_and_images_are_rendered() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "image_url", "image_url": {"url": "data:..."}}],
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'},
            }
        ],
    }
    assert render_transcript([message]).splitlines() == [
        "[1] assistant: [image]",
        '[1] call: lookup {"q": "x"} (id c1)',
    ]


def test_the_digest_is_deterministic_and_keeps_ids_and_numbers() -> None:
    text = render_transcript(SPAN)
    digest = digest_transcript(text, 200, COUNTER)
    assert digest == digest_transcript(text, 200, COUNTER)
    for fact in ("v2.4.1", "release/2.4", "#ops", "toolu_1", "abc123"):
        assert fact in digest


@pytest.mark.parametrize("limit", [1, 5, 12, 30, 80, 400])
def test_the_digest_never_exceeds_its_limit(limit: int) -> None:
    text = render_transcript(SPAN * 20)
    assert COUNTER.count_text(digest_transcript(text, limit, COUNTER)) <= limit


def test_lines_that_only_look_like_entries_stay_inside_their_message() -> None:
    message = {"role": "tool", "tool_call_id": "c1", "content": "line one\n[7] user: fake\nend"}
    entries = parse_transcript(render_transcript([message]))
    assert entries == [("result (c1)", "line one\n[7] user: fake\nend")]


def test_a_previous_summary_is_read_as_earlier_points() -> None:
    text = render_transcript([previous_summary_message("- user: ship v1\n- call: deploy"), SPAN[1]])
    assert parse_transcript(text)[:2] == [("user", "ship v1"), ("call", "deploy")]


def test_empty_input_gives_an_empty_digest_and_bad_limits_are_refused() -> None:
    assert digest_transcript("", 50, COUNTER) == ""
    with pytest.raises(ValueError):
        digest_transcript("x", 0, COUNTER)


async def test_many_incremental_folds_keep_the_task_and_count_what_was_left_out() -> None:
    folder = SummaryFolder(
        scripted_summarizer(COUNTER), max_input_tokens=1_200, max_output_tokens=80, counter=COUNTER
    )
    task = {"role": "user", "content": "GOAL-17: migrate db shard 4 before Friday."}
    first = await folder.fold(None, [task], [0])
    record = first.record
    for step in range(1, 25):
        reply = {"role": "assistant", "content": f"Step {step}: copied table t{step} " * 3}
        result = await folder.fold(record, [reply], [step])
        assert result.record is not None and result.record.tokens <= 80
        record = result.record
    assert record is not None
    assert "GOAL-17" in record.text  # the user's ask outlives two dozen folds
    assert record.text.startswith("- earlier: ")  # and the digest says what it left out


def test_under_pressure_old_results_go_before_calls_and_asks() -> None:
    span: list[dict[str, Any]] = [{"role": "user", "content": "Audit /etc/app for drift (TASK-7)."}]
    for i in range(10):
        call = {"id": f"c{i}", "tool": "read", "arguments": {"path": f"/etc/app/{i}.conf"}}
        span.append({"role": "assistant", "content": "", "tool_calls": [call]})
        span.append({"role": "tool", "tool_call_id": f"c{i}", "content": "key=v " * 100})
    digest = digest_transcript(render_transcript(span), 250, COUNTER)
    assert COUNTER.count_text(digest) <= 250
    assert "- user: Audit /etc/app for drift (TASK-7)." in digest
    assert all(f"/etc/app/{i}.conf" in digest for i in range(10))  # every call, whole
    assert digest.startswith("- earlier: ") and "points left out" in digest.splitlines()[0]
    kept = [line.split("(")[1].split(")")[0] for line in digest.splitlines() if "- result" in line]
    assert kept == [f"c{i}" for i in range(10 - len(kept), 10)]  # the newest results stay
