"""Text with lone surrogates (a tool that decoded bytes with ``surrogateescape``) is admitted
unchanged, as the main contract says: counted and capped with UTF-8 replacement, kept exactly
in history and in every store, and sent with U+FFFD in place of each lone surrogate, so a
provider's JSON encoder never meets one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.cli import main
from contextfold.summaries import scripted_summarizer
from store_support import PostgresServer
from support import SYSTEM, human, prose, unstamped

# What a tool gets from os.fsdecode, or bytes.decode("utf-8", "surrogateescape"): the bytes
# that are not UTF-8 become U+DC80..U+DCFF.
RAW = b"header \xff\xfe body \xc3\x28 tail".decode("utf-8", "surrogateescape")
SENT = "header \ufffd\ufffd body \ufffd( tail"  # the same text as a provider receives it
LADDER = [
    "truncate_tool_results",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "drop_oldest",
]


def ill_formed_round(n: int) -> list[dict[str, Any]]:
    """A call whose argument and result hold lone surrogates, in the Amplifier shape."""
    call = {"id": f"call_{n}", "tool": "read", "arguments": {"path": f"/data/f{n}\udcff.bin"}}
    return [
        {"role": "assistant", "content": f"Reading file {n}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": f"{RAW} {prose(n, 1_200)}"},
    ]


def anthropic_round() -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_1", "name": "ls", "input": {"d": "\udc80"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": RAW}],
        },
    ]


def well_formed_json(messages: list[dict[str, Any]]) -> str:
    """What an HTTP client sends: UTF-8 JSON (raises on a lone surrogate)."""
    text = json.dumps(messages, ensure_ascii=False)
    text.encode("utf-8")
    return text


@pytest.mark.parametrize("counter", ["heuristic", "exact"])
async def test_admitted_unchanged_counted_and_sent_with_replacement(counter: str) -> None:
    given_messages = [
        SYSTEM,
        human("List /data and read what is there; a lone \ud800 high surrogate too."),
        *ill_formed_round(0),
        *anthropic_round(),
    ]
    context = ContextFold(token_counter=counter)
    for message in given_messages:
        await context.add_message(message)
    # History is the record: exactly what was admitted, surrogates and all.
    assert unstamped(await context.get_messages()) == given_messages
    view = await context.get_messages_for_request(token_budget=100_000)
    text = well_formed_json(view)
    assert "\ufffd" in text and view[3]["content"].startswith(SENT)
    assert view[2]["tool_calls"][0]["arguments"]["path"] == "/data/f0\ufffd.bin"
    assert view[5]["content"][0]["content"] == SENT
    # Counted as sent: the same estimate as for the text with the replacement in it.
    replaced = ContextFold(token_counter=counter)
    for message in view:
        await replaced.add_message(message)
    await replaced.get_messages_for_request(token_budget=100_000)
    assert context.last_report.tokens_before == replaced.last_report.tokens_before


async def test_an_unanswered_call_with_such_an_id_gets_a_well_formed_stand_in() -> None:
    context = ContextFold(token_counter="heuristic")
    await context.add_message(human("go"))
    call = {"id": "call_\udcff", "tool": "read", "arguments": {}}
    await context.add_message({"role": "assistant", "content": "", "tool_calls": [call]})
    await context.add_message(human("never mind"))  # the call stays unanswered
    view = await context.get_messages_for_request(token_budget=50_000)
    well_formed_json(view)
    assert view[1]["tool_calls"][0]["id"] == view[2]["tool_call_id"] == "call_\ufffd"
    assert context.repairs and context.repairs[0].call_ids == ("call_\udcff",)


async def test_a_tool_result_over_the_cap_keeps_a_valid_utf8_prefix() -> None:
    context = ContextFold(token_counter="heuristic", max_tool_result_bytes=1_024)
    await context.add_message(human("read"))
    await context.add_message(ill_formed_round(0)[0])
    await context.add_message({"role": "tool", "tool_call_id": "call_0", "content": RAW * 200})
    stored = (await context.get_messages())[-1]["content"]
    stored.encode("utf-8")  # the clipped prefix is valid UTF-8
    assert len(stored.encode()) <= 1_024 + 200  # prefix plus the retrieval marker
    well_formed_json(await context.get_messages_for_request(token_budget=50_000))


@pytest.fixture(scope="module")
def postgres(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


# A real PostgreSQL server takes seconds to start: that case runs with the slow tests.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'agent.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.fresh_database(f"surrogates_{tmp_path.name[-24:].lower()}")


class Recording:
    """The offline digest summarizer, keeping what it was asked to read."""

    def __init__(self) -> None:
        self.inner = scripted_summarizer()
        self.requests: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.requests.append(messages)
        return await self.inner(messages, max_tokens)


async def test_a_durable_session_keeps_them_exactly_and_summarizes_over_them(
    store_url: str,
) -> None:
    summarizer = Recording()
    first = ContextFold(
        store=store_url,
        session_id="s\u00e9",
        token_counter="heuristic",
        strategies=LADDER,
        summarizer=summarizer,
    )
    admitted = [SYSTEM, human("Read every file under /data.")]
    await first.set_messages(admitted)
    for n in range(30):
        for message in ill_formed_round(n):
            admitted.append(message)
            await first.add_message(message)
        view = await first.get_messages_for_request(token_budget=8_000)
        well_formed_json(view)
    assert first.summary_stats.calls >= 1 and first.summary_stats.failures == 0
    # The summarizer read the replacement form too (its client sends JSON as well).
    for request in summarizer.requests:
        well_formed_json(request)
    assert unstamped(await first.get_messages()) == admitted

    resumed = ContextFold(
        store=store_url,
        session_id="s\u00e9",
        token_counter="heuristic",
        strategies=LADDER,
        summarizer=summarizer,
    )
    assert await resumed.get_messages() == await first.get_messages()
    assert await resumed.get_messages_for_request(token_budget=8_000) == view
    assert await resumed.recall("r3") == admitted[3]["content"]  # as admitted


async def test_rows_without_a_stored_classification_still_send_them_well_formed(
    tmp_path: Path,
) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    first = ContextFold(store=url, session_id="s1", token_counter="heuristic")
    await first.set_messages([SYSTEM, human("go"), *ill_formed_round(0), *anthropic_round()])
    view = await first.get_messages_for_request(token_budget=50_000)
    with sqlite3.connect(tmp_path / "agent.db") as raw:  # as rows written by another writer
        raw.execute("UPDATE cf_messages SET info_json = NULL")
    resumed = ContextFold(store=url, session_id="s1", token_counter="heuristic")
    assert await resumed.get_messages() == await first.get_messages()
    assert await resumed.get_messages_for_request(token_budget=50_000) == view
    well_formed_json(view)


def test_sessions_export_writes_them_as_escapes_that_replay_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    admitted = [SYSTEM, human("go"), *ill_formed_round(0), *anthropic_round()]

    async def write() -> None:
        context = ContextFold(store=url, session_id="s1", token_counter="heuristic")
        await context.set_messages(admitted[:2])
        for message in admitted[2:]:
            await context.add_message(message)

    asyncio.run(write())
    out = tmp_path / "s1.jsonl"
    assert main(["sessions", "export", url, "s1", "--out", str(out)]) == 0
    capsys.readouterr()
    lines = out.read_text(encoding="utf-8").splitlines()  # valid UTF-8
    assert unstamped([json.loads(line) for line in lines]) == admitted
    assert main(["sessions", "export", url, "s1"]) == 0  # to stdout as well
    printed = capsys.readouterr().out.splitlines()
    assert unstamped([json.loads(line) for line in printed]) == admitted
    replayed = tmp_path / "replay"
    assert main(["replay", str(out), "--quiet", "--no-chart", "--out", str(replayed)]) == 0
    assert json.loads((replayed / "replay.json").read_text(encoding="utf-8"))


# Text of any code points, lone surrogates included.
ill_formed_text = st.text(
    st.one_of(st.characters(codec=None), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(ill_formed_text, min_size=1, max_size=4))
@example(texts=["\udcff", "a\ud800\ud800b", "\udfff\ud800", "pair \ud83d\ude00 split"])
async def test_any_text_is_admitted_exactly_and_sent_well_formed(texts: list[str]) -> None:
    context = ContextFold(token_counter="exact")
    given_messages: list[dict[str, Any]] = [human("go")]
    for n, text in enumerate(texts):
        given_messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [{"id": f"c{n}", "tool": "t", "arguments": {text: text}}],
            }
        )
        given_messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": text})
    for message in given_messages:
        await context.add_message(message)
    # Exactly the JSON value of what was given (admission keeps a plain JSON copy): lone
    # surrogates as they are; a high surrogate followed by a low one, which JSON reads as
    # the one character they encode, as that character.
    assert unstamped(await context.get_messages()) == json.loads(json.dumps(given_messages))
    well_formed_json(await context.get_messages_for_request(token_budget=100_000))
