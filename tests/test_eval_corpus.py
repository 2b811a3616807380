"""The long-horizon corpus: deterministic from its seed, shaped as promised, and hard in the
ways it claims (far facts never repeated in prompts, look-alike ids, windows overflowing)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from contextfold import ContextFold
from contextfold.evaluation import (
    CORPUS_NAME,
    CorpusSettings,
    EvalSettings,
    NaiveDropOldest,
    evaluate,
    find_steps,
    generate_corpus,
    generate_session,
)
from contextfold.evaluation.bfcl import bfcl_available, bfcl_sessions
from contextfold.tokens import ExactCounter
from support import assert_pairing

SETTINGS = CorpusSettings(seed=3, sessions=2)


@pytest.fixture(scope="module")
def corpus() -> list[Any]:
    return generate_corpus(SETTINGS)


def test_the_same_seed_gives_the_same_sessions_and_another_seed_others(corpus: list[Any]) -> None:
    again = generate_corpus(SETTINGS)
    assert [c.messages for c in again] == [c.messages for c in corpus]
    assert [c.id for c in corpus] == [f"{CORPUS_NAME}-3-0", f"{CORPUS_NAME}-3-1"]
    other = generate_session(CorpusSettings(seed=4, sessions=1), 0)
    assert other != corpus[0].messages
    # Sessions are independent streams: session 1 does not depend on how many come before.
    assert generate_session(SETTINGS, 1) == corpus[1].messages


def test_the_evals_figures_are_the_same_on_every_run(corpus: list[Any]) -> None:
    settings = EvalSettings(windows=(4_000,))
    first = evaluate(corpus[:1], [NaiveDropOldest()], settings)
    second = evaluate(generate_corpus(SETTINGS)[:1], [NaiveDropOldest()], settings)
    assert [r.to_dict() for r in first.runs] == [r.to_dict() for r in second.runs]


def test_sessions_have_the_promised_shape(corpus: list[Any]) -> None:
    for conv in corpus:
        messages = conv.messages
        prompts = [m for m in messages if m["role"] == "user"]
        turns = [m for m in messages if m["role"] == "assistant"]
        assert 8 <= len(prompts) <= 10
        assert 110 <= len(turns) <= 190
        assert messages[0]["role"] == "system"
        assert all(m["metadata"] == {"source": "user"} for m in prompts)
        assert_pairing(messages)
        json.dumps(messages)


def test_every_message_is_one_contextfold_admits(corpus: list[Any]) -> None:
    async def admit() -> int:
        context = ContextFold()
        for message in corpus[0].messages:
            await context.add_message(message)
        return context.message_count

    assert asyncio.run(admit()) == len(corpus[0].messages)


def test_far_facts_exist_and_no_prompt_ever_quotes_one(corpus: list[Any]) -> None:
    for conv in corpus:
        steps = find_steps(conv.messages)
        far = {f.value for s in steps for f in s.facts if not f.near}
        assert len(far) >= 8, conv.id
        prompts = " ".join(m["content"] for m in conv.messages if m["role"] == "user")
        assert not [value for value in far if value in prompts]


def test_ids_come_with_look_alikes(corpus: list[Any]) -> None:
    messages = corpus[0].messages
    text = "\n".join(m["content"] or "" for m in messages if isinstance(m.get("content"), str))
    ids = set(re.findall(r"\b(?:ORD|INC|INV-\d{4}|RF|ENG)-\d{4,6}\b", text))
    far = [f.value for s in find_steps(messages) for f in s.facts if not f.near]
    checked = 0
    for value in far:
        if value not in ids:
            continue
        checked += 1
        near_misses = [
            other
            for other in ids
            if other != value
            and len(other) == len(value)
            and sum(a != b for a, b in zip(other, value, strict=True)) <= 2
        ]
        assert len(near_misses) >= 3, value
    assert checked >= 2


def test_every_session_overflows_the_largest_default_window_many_times(corpus: list[Any]) -> None:
    counter = ExactCounter()
    for conv in corpus:
        total = sum(counter.count_message(m) for m in conv.messages)
        assert total > 2 * 16_000


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"sessions": 0}, "sessions must be at least 1"),
        ({"seed": "zero"}, "seed must be a whole number"),
        ({"min_tasks": 1}, "2 <= min_tasks"),
        ({"max_tasks": 11}, "max_tasks <= 10"),
        ({"min_turns": 20}, "min_turns"),
        ({"min_turns": 200}, "min_turns <= max_turns"),
        ({"sessions": True}, "sessions must be a whole number"),
    ],
)
def test_corpus_settings_refuse_what_cannot_be_generated(
    changes: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        CorpusSettings(**changes)


@pytest.mark.skipif(not bfcl_available(), reason="bfcl-eval is not installed")
def test_bfcl_sessions_chain_conversations_into_eval_sessions() -> None:
    sessions = bfcl_sessions(chain=5, limit=10)
    assert len(sessions) == 2
    assert {s.corpus for s in sessions} == {"bfcl-long-context"}
    first = sessions[0]
    assert first.id.count("+") == 4  # five conversations' ids
    assert sum(m["role"] == "system" for m in first.messages) == 1
    assert_pairing(first.messages)
    assert (
        bfcl_sessions(chain=3, limit=3)[0].messages == bfcl_sessions(chain=3, limit=3)[0].messages
    )
