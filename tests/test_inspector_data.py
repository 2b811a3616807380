"""The inspector page's data, without a browser: chunks decode to the run's figures, the page
fits its size ceiling by shortening previews, and nothing a conversation holds can close a
script element or reach the network."""

from __future__ import annotations

import base64
import json
import re
import zlib
from typing import Any

import pytest
from tests.support import agent_run, human, reply

from contextfold.cli import inspector_page
from contextfold.cli.inspector_page import inspector_html, iter_chunk_names, replay_run
from contextfold.cli.replay import ReplayResult, replay_messages


def replayed(messages: list[dict[str, Any]]) -> ReplayResult:
    return replay_messages(messages, {}, 9000, max_output_tokens=1000, inspect=True)


def chunk(html: str, name: str) -> Any:
    match = re.search(rf'id="{re.escape(name)}">([^<]*)</script>', html)
    assert match, name
    return json.loads(zlib.decompress(base64.b64decode(match.group(1)), -15))


def page_data(html: str) -> dict[str, Any]:
    match = re.search(r'id="page-data">(.*?)</script>', html, re.S)
    assert match
    return json.loads(match.group(1))


def test_chunks_hold_every_request_message_and_pass() -> None:
    result = replayed(agent_run(30, result_chars=1500))
    inspection = result.inspection
    assert inspection is not None
    html = inspector_html("t", [replay_run(result, "t")])
    names = list(iter_chunk_names(html))
    assert names == ["r0-rows-0", "r0-msgs-0", "r0-passes-0"]
    rows = chunk(html, "r0-rows-0")
    assert rows["after"] == [row.tokens_after for row in result.rows]
    assert rows["messages"] == [row.history_messages for row in result.rows]
    assert rows["compacted"] == [int(row.compacted) for row in result.rows]
    assert set(rows["cost"]) == {priced.name for priced in result.costs}
    messages = chunk(html, "r0-msgs-0")
    assert len(messages["preview"]) == len(inspection.messages)
    assert messages["role"][0] == "s" and messages["tokens"][0] == inspection.messages[0].tokens
    passes = chunk(html, "r0-passes-0")
    assert [p["request"] for p in passes] == [p.request for p in inspection.passes]
    assert passes[0]["notice"] == inspection.passes[0].notice
    assert passes[0]["applied"] and passes[0]["before"] > passes[0]["after"]
    data = page_data(html)
    run = data["runs"][0]
    assert run["requests"] == len(result.rows) and run["passes"] == len(inspection.passes)
    assert run["passRequests"] == [p.request for p in inspection.passes]


def test_previews_shrink_until_the_page_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    result = replayed(agent_run(30, result_chars=1500))
    run = replay_run(result, "t")
    full = inspector_html("t", [run])
    assert page_data(full)["runs"][0]["previewChars"] == 160
    monkeypatch.setattr(inspector_page, "MAX_PAGE_BYTES", len(full.encode()) - 1)
    smaller = inspector_html("t", [run])
    chars = page_data(smaller)["runs"][0]["previewChars"]
    assert chars < 160 and len(smaller.encode()) < len(full.encode())
    assert all(len(p) <= chars for p in chunk(smaller, "r0-msgs-0")["preview"])


def test_what_a_conversation_says_cannot_close_the_script_or_fetch_anything() -> None:
    hostile = "</script><script>alert(1)</script><img src=https://example.com/x.png>"
    messages = [human(hostile), reply("ok " + hostile), human("again"), reply("fine")]
    result = replayed(messages)
    html = inspector_html(hostile, [replay_run(result, hostile)])
    assert "<script>alert" not in html
    assert "<title>&lt;/script&gt;&lt;script&gt;" in html  # the title is text, escaped
    assert page_data(html)["title"] == hostile
    assert not re.search(r"""<[a-zA-Z][^<>]*\s(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_a_page_needs_a_run() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        inspector_html("t", [])
