"""The tool-result ingress cap, exactly as the contract states it."""

from __future__ import annotations

import pytest

from contextfold import ContextFold
from contextfold.ingress import MARKER_TEMPLATE, cap_tool_result, clip_text
from support import SYSTEM, human

LIMIT = 4096


def call(cid: str = "c1") -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "tool": "read"}]}


async def admit(result: dict, limit: int = LIMIT) -> tuple[ContextFold, list]:
    events: list = []
    ctx = ContextFold(
        max_tool_result_bytes=limit,
        token_counter="heuristic",
        on_event=lambda e, d: events.append((e, d)),
    )
    for m in (SYSTEM, human("read it"), call()):
        await ctx.add_message(m)
    await ctx.add_message(result)
    return ctx, events


async def test_default_is_128_kib_and_under_cap_is_untouched() -> None:
    ctx = ContextFold()
    assert ctx.config.max_tool_result_bytes == 131_072
    text = "é" * 60_000  # 120,000 bytes: under the default cap
    ctx2, events = await admit({"role": "tool", "tool_call_id": "c1", "content": text}, 131_072)
    assert (await ctx2.get_messages())[-1]["content"] == text
    assert events == []


async def test_oversized_text_keeps_utf8_prefix_and_one_marker() -> None:
    text = "日本語テキスト" * 2000  # 3 bytes per char: split points fall inside characters
    ctx, events = await admit({"role": "tool", "tool_call_id": "c1", "content": text})
    stored = (await ctx.get_messages())[-1]["content"]
    encoded = stored.encode("utf-8")
    assert len(encoded) <= LIMIT
    assert stored.count("[contextfold: tool output truncated at ingress") == 1
    prefix = stored.split("\n\n[contextfold:")[0]
    assert text.startswith(prefix) and len(prefix) > 1000
    assert f"of {len(text.encode()):,} bytes" in stored
    [(name, data)] = events
    assert name == "context:tool_result_ingress_truncated"
    assert data == {
        # ours
        "tool_call_id": "c1",
        "original_bytes": len(text.encode()),
        "kept_bytes": len(prefix.encode()),
        "limit": LIMIT,
        # the reference module's
        "tool_name": None,  # the message does not name its tool
        "original_text_utf8_bytes": len(text.encode()),
        "stored_text_utf8_bytes": len(encoded),  # marker included
        "max_tool_result_bytes": LIMIT,
        "content_kind": "string",
    }
    assert data["stored_text_utf8_bytes"] > data["kept_bytes"]


async def test_json_output_is_capped_as_its_json_text() -> None:
    output = {"rows": ["x" * 100] * 100}
    ctx, _events = await admit({"role": "tool", "tool_call_id": "c1", "content": output})
    stored = (await ctx.get_messages())[-1]["content"]
    assert isinstance(stored, str) and len(stored.encode()) <= LIMIT
    assert stored.startswith('{"rows":["xxx')
    small = {"ok": True}
    ctx2, events2 = await admit({"role": "tool", "tool_call_id": "c1", "content": small})
    assert (await ctx2.get_messages())[-1]["content"] == small and events2 == []


async def test_only_direct_text_blocks_are_capped() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 50_000},
    }
    blocks = [
        {"type": "text", "text": "a" * 3000},
        image,
        {"type": "text", "text": "b" * 3000},
        {"type": "text", "text": "c" * 3000},
    ]
    ctx, events = await admit({"role": "tool", "tool_call_id": "c1", "content": blocks})
    stored = (await ctx.get_messages())[-1]["content"]
    assert image in stored  # not read, not sliced
    texts = [b["text"] for b in stored if b["type"] == "text"]
    assert sum(len(t.encode()) for t in texts) <= LIMIT
    assert sum(t.count("[contextfold: tool output truncated") for t in texts) == 1
    assert texts[0] == "a" * 3000
    assert events[0][1]["original_bytes"] == 9000


async def test_anthropic_tool_result_blocks_are_capped() -> None:
    ctx = ContextFold(max_tool_result_bytes=LIMIT, token_counter="heuristic")
    await ctx.add_message(human("go"))
    await ctx.add_message(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu1", "name": "read", "input": {}}],
        }
    )
    await ctx.add_message(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "z" * 10_000}],
        }
    )
    block = (await ctx.get_messages())[-1]["content"][0]
    assert block["tool_use_id"] == "tu1" and len(block["content"].encode()) <= LIMIT


def test_lone_surrogates() -> None:
    under = "ok \ud800 fine"
    assert clip_text(under, LIMIT) is None  # under cap: unchanged, even ill-formed
    over = "x\udfff" * 3000
    clipped, original, kept = clip_text(over, LIMIT)  # type: ignore[misc]
    clipped.encode("utf-8")  # valid UTF-8: would raise on a surrogate
    assert original == 6000 and kept <= LIMIT
    assert "\udfff" not in clipped


def test_non_tool_messages_are_never_capped() -> None:
    big = {"role": "user", "content": "q" * 200_000}
    capped, clips = cap_tool_result(big, LIMIT)
    assert capped == big and clips == []


@pytest.mark.parametrize("limit", [1024, 1500, 4096, 131_072])
def test_marker_always_fits(limit: int) -> None:
    clipped, original, kept = clip_text("€" * limit, limit)  # type: ignore[misc]
    assert len(clipped.encode()) <= limit
    assert MARKER_TEMPLATE.format(kept=kept, original=original, limit=limit) in clipped


async def test_event_names_the_tool_from_the_message_or_its_metadata() -> None:
    text = "secret tool output " * 1000
    _ctx, named = await admit(
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": text}
    )
    _ctx, by_metadata = await admit(
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": text,
            "metadata": {"tool_name": "grep"},
        }
    )
    _ctx, unnamed = await admit({"role": "tool", "tool_call_id": "c1", "content": text})
    assert named[0][1]["tool_name"] == "read_file"
    assert by_metadata[0][1]["tool_name"] == "grep"
    assert unnamed[0][1]["tool_name"] is None
    for events in (named, by_metadata, unnamed):
        # sizes and names only: the payload never carries the tool's text
        assert "secret" not in repr(events[0][1])


async def test_event_sizes_for_text_blocks_count_everything_stored() -> None:
    blocks = [
        {"type": "text", "text": "a" * 3000},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A"}},
        {"type": "text", "text": "b" * 3000},
        {"type": "text", "text": "never admitted"},
    ]
    ctx, [(_name, data)] = await admit({"role": "tool", "tool_call_id": "c1", "content": blocks})
    stored = (await ctx.get_messages())[-1]["content"]
    stored_text = sum(len(b["text"].encode()) for b in stored if b["type"] == "text")
    assert data["content_kind"] == "text_blocks"
    assert data["original_text_utf8_bytes"] == 6000 + len("never admitted")
    assert data["stored_text_utf8_bytes"] == stored_text <= LIMIT
    assert data["kept_bytes"] < data["stored_text_utf8_bytes"]
    assert data["max_tool_result_bytes"] == LIMIT


async def test_event_for_json_output_and_anthropic_results() -> None:
    output = {"rows": ["x" * 100] * 100}
    ctx, [(_name, data)] = await admit({"role": "tool", "tool_call_id": "c1", "content": output})
    stored = (await ctx.get_messages())[-1]["content"]
    assert data["content_kind"] == "json"
    assert data["stored_text_utf8_bytes"] == len(stored.encode())

    events: list = []
    anthropic = ContextFold(
        max_tool_result_bytes=LIMIT,
        token_counter="heuristic",
        on_event=lambda e, d: events.append((e, d)),
    )
    await anthropic.add_message(human("go"))
    await anthropic.add_message(
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu1", "name": "read"}]}
    )
    blocks = [{"type": "text", "text": "z" * 10_000}]
    await anthropic.add_message(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": blocks}],
        }
    )
    [(_name, data)] = events
    assert data["tool_call_id"] == "tu1" and data["tool_name"] is None
    assert data["content_kind"] == "text_blocks" and data["original_text_utf8_bytes"] == 10_000


async def test_under_cap_and_non_text_content_emit_nothing() -> None:
    image_only = [{"type": "image", "source": {"type": "base64", "data": "x" * (LIMIT * 4)}}]
    unknown = [{"type": "vendor_extension", "payload": "y" * LIMIT * 2}]
    for content in (image_only, unknown, "short", {"ok": True}):
        ctx, events = await admit({"role": "tool", "tool_call_id": "c1", "content": content})
        assert events == []
        assert (await ctx.get_messages())[-1]["content"] == content
