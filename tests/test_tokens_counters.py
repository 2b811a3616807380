"""Heuristic and exact counters: shapes, framing, media, tools, the factory, bad input."""

from __future__ import annotations

import base64
import copy
import logging
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.tokens import (
    COUNTER_KINDS,
    REPLY_PRIMING_TOKENS,
    CalibratedCounter,
    ExactCounter,
    HeuristicCounter,
    TokenCounter,
    build_counter,
    count_request,
    encoding_for_model,
    serialize_message,
)
from contextfold.tokens.media import (
    UNKNOWN_IMAGE_TOKENS,
    anthropic_image_tokens,
    openai_image_tokens,
    sniff_image_size,
)

HEURISTIC = HeuristicCounter()
EXACT = ExactCounter("o200k_base")
COUNTERS = [HEURISTIC, EXACT]
IDS = ["heuristic", "exact"]


# -- image fixtures: real headers, padded with payload ----------------------------------------


def png(width: int, height: int, payload: int = 2000) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\x00" * (4 + payload)
    return base64.b64encode(raw).decode()


def jpeg(width: int, height: int, exif: int = 3000) -> str:
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"E" * exif
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    raw = b"\xff\xd8" + app1 + sof0 + b"\xff\xda" + b"\x00" * 500
    return base64.b64encode(raw).decode()


def gif(width: int, height: int) -> str:
    return base64.b64encode(b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 50).decode()


def webp(width: int, height: int) -> str:
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    dims = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return base64.b64encode(b"RIFF" + b"\x00" * 4 + b"WEBP" + vp8x + dims + b"\x00" * 40).decode()


def anthropic_image(data: str) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


# -- every message shape we promise to count ------------------------------------------------

SHAPES: dict[str, dict] = {
    "plain": {"role": "user", "content": "Summarise the attached report, please."},
    "system": {"role": "system", "content": "You are a careful agent."},
    "text_blocks": {
        "role": "user",
        "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
    },
    "openai_image_url": {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png(64, 64)}"}},
        ],
    },
    "remote_image": {
        "role": "user",
        "content": [{"type": "image_url", "image_url": "https://example.com/cat.png"}],
    },
    "anthropic_image": {"role": "user", "content": [anthropic_image(png(800, 600))]},
    "amplifier_tool_call_block": {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Listing."},
            {"type": "tool_call", "id": "c1", "name": "ls", "input": {"path": "/tmp"}},
        ],
    },
    "amplifier_tool_calls": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "tool": "ls", "arguments": {"path": "/tmp"}}],
    },
    "openai_tool_calls": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"path":"/tmp"}'},
            }
        ],
    },
    "tool_message": {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"},
    "amplifier_tool_result_block": {
        "role": "tool",
        "content": [{"type": "tool_result", "tool_call_id": "c1", "output": {"files": ["a"]}}],
    },
    "anthropic_tool_use": {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "/"}}],
    },
    "anthropic_tool_result_str": {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b c"}],
    },
    "anthropic_tool_result_blocks": {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "chart:"}, anthropic_image(png(100, 100))],
                "is_error": False,
            }
        ],
    },
    "thinking": {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Check the folder first.", "signature": "S" * 400},
            {"type": "text", "text": "Done."},
        ],
    },
    "redacted_thinking": {
        "role": "assistant",
        "content": [{"type": "redacted_thinking", "data": "RW5jcnlwdGVk" * 100}],
    },
    "reasoning": {
        "role": "assistant",
        "content": [
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Looked at the files."}],
                "content": [],
                "encrypted_content": "ZW5j" * 50,
            }
        ],
    },
    "document_text": {
        "role": "user",
        "content": [
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "Grass is green."},
                "title": "Facts",
            }
        ],
    },
    "document_pdf": {
        "role": "user",
        "content": [
            {
                "type": "document",
                "source": {
                    "type": "base64",
                    "media_type": "application/pdf",
                    "data": base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >>\n").decode(),
                },
            }
        ],
    },
    "named": {"role": "user", "name": "alice", "content": "hi"},
    "hook_note": {"role": "user", "content": "reminder", "metadata": {"source": "hook"}},
    "unknown_block": {"role": "user", "content": [{"type": "future_block", "payload": [1, 2]}]},
    "empty": {"role": "assistant", "content": ""},
}


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_counts_to_a_positive_int(counter: TokenCounter, shape: str) -> None:
    message = SHAPES[shape]
    before = copy.deepcopy(message)
    tokens = counter.count_message(message)
    assert isinstance(tokens, int)
    assert tokens > 0
    assert message == before  # counting never edits


def test_counters_satisfy_the_protocol() -> None:
    for counter in (*COUNTERS, CalibratedCounter(HEURISTIC)):
        assert isinstance(counter, TokenCounter)
    assert HEURISTIC.name == "heuristic"
    assert EXACT.name == "exact:o200k_base"
    assert ExactCounter("cl100k_base").name == "exact:cl100k_base"


# -- exact framing ----------------------------------------------------------------------------


def test_exact_message_framing_follows_the_openai_cookbook() -> None:
    # 3 tokens of framing + "user" (1) + "hello world" (2).
    assert EXACT.count_message({"role": "user", "content": "hello world"}) == 6
    # A name costs its tokens plus one.
    named = {"role": "user", "name": "alice", "content": "hello world"}
    assert EXACT.count_message(named) == 6 + 1 + EXACT.count_text("alice")


def test_count_request_adds_tools_and_reply_priming() -> None:
    messages = [SHAPES["system"], SHAPES["plain"]]
    tools = [{"name": "ls", "description": "List files", "parameters": {"type": "object"}}]
    expected = sum(EXACT.count_message(m) for m in messages) + EXACT.count_tools(tools)
    assert count_request(EXACT, messages, tools) == expected + REPLY_PRIMING_TOKENS
    assert count_request(EXACT, []) == REPLY_PRIMING_TOKENS


def test_every_counter_names_its_per_request_overhead() -> None:
    # The reply priming is paid once per request; a budget that leaves it out is 3 tokens short.
    for counter in (*COUNTERS, CalibratedCounter(HEURISTIC), CalibratedCounter(EXACT)):
        assert counter.request_overhead == REPLY_PRIMING_TOKENS == 3
    messages = [SHAPES["system"], SHAPES["plain"]]
    tools = [{"name": "ls", "description": "List files", "parameters": {"type": "object"}}]
    assert EXACT.count_request(messages, tools) == count_request(EXACT, messages, tools)
    assert EXACT.count_request([]) == EXACT.request_overhead


def test_a_counter_without_request_overhead_is_not_a_token_counter() -> None:
    class Bare:
        name = "bare"

        def count_text(self, text: str) -> int:
            return len(text)

        def count_message(self, message: object) -> int:
            return 1

        def count_tools(self, tools: object) -> int:
            return 0

    assert not isinstance(Bare(), TokenCounter)
    with pytest.raises(TypeError, match="plain TokenCounter"):
        CalibratedCounter(Bare())  # type: ignore[arg-type]


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_metadata_is_not_counted(counter: TokenCounter) -> None:
    bare = {"role": "user", "content": "hello"}
    tagged = {**bare, "metadata": {"source": "user", "blob": "x" * 10_000}}
    assert counter.count_message(tagged) == counter.count_message(bare)


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_thinking_text_counts_but_its_signature_does_not(counter: TokenCounter) -> None:
    def thinking(text: str, signature: str) -> dict:
        block = {"type": "thinking", "thinking": text, "signature": signature}
        return {"role": "assistant", "content": [block]}

    short_sig = counter.count_message(thinking("Plan the next step.", "s"))
    long_sig = counter.count_message(thinking("Plan the next step.", "s" * 5000))
    longer_text = counter.count_message(thinking("Plan the next step. " * 50, "s"))
    assert short_sig == long_sig
    assert longer_text > short_sig + 50


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_openai_and_amplifier_tool_call_shapes_cost_the_same(counter: TokenCounter) -> None:
    assert counter.count_message(SHAPES["openai_tool_calls"]) == counter.count_message(
        SHAPES["amplifier_tool_calls"]
    )


# -- images and documents are priced, never read as text --------------------------------------


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_image_cost_does_not_grow_with_its_base64(counter: TokenCounter) -> None:
    small = {"role": "user", "content": [anthropic_image(png(800, 600, payload=1_000))]}
    huge = {"role": "user", "content": [anthropic_image(png(800, 600, payload=3_000_000))]}
    assert counter.count_message(small) == counter.count_message(huge)
    base64_chars = len(huge["content"][0]["source"]["data"])
    assert counter.count_message(huge) < base64_chars / 1000


def test_image_prices_follow_each_provider_formula() -> None:
    image = {"role": "user", "content": [anthropic_image(png(800, 600))]}
    framing = HEURISTIC.count_message({"role": "user", "content": []})
    assert HEURISTIC.count_message(image) - framing == 640  # ceil(800 * 600 / 750)
    framing = EXACT.count_message({"role": "user", "content": []})
    assert EXACT.count_message(image) - framing == 85 + 170 * 4  # 2x2 tiles of 512 px


def test_image_formulas() -> None:
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(4000, 3000) == 1600  # downscaled, capped
    assert anthropic_image_tokens(None, None) == UNKNOWN_IMAGE_TOKENS
    assert openai_image_tokens(1024, 1024, "high") == 765  # the OpenAI docs' worked example
    assert openai_image_tokens(2048, 4096, None) == 1105  # docs: 2048x4096 -> 6 tiles
    assert openai_image_tokens(4096, 8192, "low") == 85
    assert openai_image_tokens(None, None, "auto") == UNKNOWN_IMAGE_TOKENS


def test_image_sizes_are_read_from_headers() -> None:
    assert sniff_image_size(png(640, 480)) == (640, 480)
    assert sniff_image_size(jpeg(1920, 1080, exif=40_000)) == (1920, 1080)
    assert sniff_image_size(gif(32, 16)) == (32, 16)
    assert sniff_image_size(webp(300, 200)) == (300, 200)
    assert sniff_image_size("bm90IGFuIGltYWdl") is None  # "not an image"
    assert sniff_image_size("%%%not base64%%%") is None
    assert sniff_image_size("") is None


def test_unknown_image_gets_the_flat_estimate() -> None:
    framing = HEURISTIC.count_message({"role": "user", "content": []})
    assert HEURISTIC.count_message(SHAPES["remote_image"]) - framing == UNKNOWN_IMAGE_TOKENS


def test_pdf_pages_are_priced_per_page() -> None:
    one_page = EXACT.count_message(SHAPES["document_pdf"])
    raw = b"%PDF-1.4\n" + b"1 0 obj << /Type /Page >>\n" * 3 + b"2 0 obj << /Type /Pages >>\n"
    three = copy.deepcopy(SHAPES["document_pdf"])
    three["content"][0]["source"]["data"] = base64.b64encode(raw).decode()
    assert EXACT.count_message(three) - one_page == 2 * 3000


# -- tools ------------------------------------------------------------------------------------

OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "description": "Unit", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_tool_schema_shapes_cost_the_same(counter: TokenCounter) -> None:
    function = OPENAI_TOOL["function"]
    anthropic = {
        "name": function["name"],
        "description": function["description"],
        "input_schema": function["parameters"],
    }
    amplifier = {
        "name": function["name"],
        "description": function["description"],
        "parameters": function["parameters"],
    }
    cost = counter.count_tools([OPENAI_TOOL])
    assert cost > 0
    assert counter.count_tools([anthropic]) == cost
    assert counter.count_tools([amplifier]) == cost
    assert counter.count_tools([]) == 0


def test_exact_tool_cost_follows_the_cookbook_formula() -> None:
    count = EXACT.count_text
    expected = (
        12  # end of the functions block
        + 7  # per function (gpt-4o family)
        + count("get_weather:Get the weather for a city")  # trailing period dropped
        + 3  # properties open
        + 3
        + count("city:string:City name")
        + 3
        + count("unit:string:Unit")
        - 3  # enum open
        + 3
        + count("c")
        + 3
        + count("f")
    )
    assert EXACT.count_tools([OPENAI_TOOL]) == expected


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_nested_tool_properties_are_counted(counter: TokenCounter) -> None:
    nested = copy.deepcopy(OPENAI_TOOL)
    nested["function"]["parameters"]["properties"]["where"] = {
        "type": "object",
        "description": "Location",
        "properties": {"lat": {"type": "number", "description": "Latitude in degrees"}},
    }
    assert counter.count_tools([nested]) > counter.count_tools([OPENAI_TOOL]) + 10


# -- canonical serialisation ------------------------------------------------------------------


def test_serialisation_ignores_key_order_everywhere() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"b": 1, "a": [2]}}],
        "extra": {"y": 1, "x": 2},
    }
    reordered = {
        "extra": {"x": 2, "y": 1},
        "content": [{"input": {"a": [2], "b": 1}, "name": "f", "id": "t", "type": "tool_use"}],
        "role": "assistant",
    }
    assert serialize_message(message) == serialize_message(reordered)
    assert '{"a":[2],"b":1}' in serialize_message(message)


def test_serialisation_keeps_text_as_written() -> None:
    text = 'line one\nline "two"\tend'
    assert serialize_message({"role": "user", "content": text}) == f"user\n{text}"


# -- heuristic sanity -------------------------------------------------------------------------


def test_heuristic_is_close_to_exact_on_prose_and_code() -> None:
    prose = (
        "The manager counts each message once, when it is admitted, and keeps the integer. "
        "Before every model call it hands the provider a fitted view of the conversation. "
    ) * 20
    code = "def fold(view, budget):\n    for rung in ladder:\n        view = rung(view)\n" * 20
    for text in (prose, code):
        exact = EXACT.count_text(text)
        assert abs(HEURISTIC.count_text(text) - exact) / exact < 0.25
    assert HEURISTIC.count_text("") == 0


def test_heuristic_counts_cjk_far_above_chars_over_four() -> None:
    text = "東京都の天気は晴れです。" * 20
    assert HEURISTIC.count_text(text) > len(text) / 2


# -- the factory ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4.1", "o200k_base"),
        ("GPT-5", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-oss-120b", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("claude-sonnet-4-5", None),
        ("gemini-2.5-pro", None),
        ("text-davinci-003", None),  # p50k_base: not shipped
        ("", None),
        (None, None),
    ],
)
def test_encoding_for_model(model: str | None, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


def test_build_counter_kinds() -> None:
    assert COUNTER_KINDS == ("heuristic", "exact", "calibrated")
    assert isinstance(build_counter("heuristic"), HeuristicCounter)
    assert build_counter("exact").name == "exact:o200k_base"
    assert build_counter("exact", model="gpt-4").name == "exact:cl100k_base"
    calibrated = build_counter()
    assert isinstance(calibrated, CalibratedCounter)
    assert calibrated.name == "calibrated:exact:o200k_base"
    assert build_counter("calibrated", model="gpt-4-turbo").base.name == "exact:cl100k_base"


def test_unknown_model_falls_back_to_the_heuristic_with_a_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="contextfold.tokens"):
        counter = build_counter("exact", model="claude-opus-4-1")
    assert isinstance(counter, HeuristicCounter)
    assert "claude-opus-4-1" in caplog.text
    assert "heuristic" in caplog.text
    assert build_counter("calibrated", model="claude-opus-4-1").name == "calibrated:heuristic"


# -- bad input --------------------------------------------------------------------------------


def test_unknown_counter_kind_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"'fast'.*heuristic, exact, calibrated"):
        build_counter("fast")


@pytest.mark.parametrize("counter", COUNTERS, ids=IDS)
def test_bad_input_gets_clear_errors(counter: TokenCounter) -> None:
    with pytest.raises(TypeError, match="message must be a dict"):
        counter.count_message("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="count_text expects a str"):
        counter.count_text(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of tool schemas"):
        counter.count_tools(OPENAI_TOOL)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tool schema must be a dict"):
        counter.count_tools(["ls"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="model must be a str"):
        encoding_for_model(4)  # type: ignore[arg-type]


def test_special_token_text_is_counted_not_refused() -> None:
    assert EXACT.count_text("<|endoftext|>") > 1


_TEXTS = st.one_of(st.text(max_size=30), st.sampled_from(["", "bad \ud800", "héllo wörld"]))


@pytest.mark.slow
@given(
    role=st.one_of(st.sampled_from(["user", "assistant", "tool", "system", ""]), st.none()),
    content=st.one_of(_TEXTS, st.none(), st.just([{"type": "text", "text": "hi"}])),
    call_id=st.one_of(st.none(), _TEXTS, st.just(7)),
    extra=st.sampled_from([None, "metadata", "name", "tool_calls"]),
    calls=st.one_of(
        st.none(),
        st.just("not a list"),
        st.lists(
            st.one_of(
                st.fixed_dictionaries(
                    {"id": st.one_of(_TEXTS, st.none(), st.just(3)), "type": st.just("function")},
                    optional={
                        "function": st.one_of(
                            st.fixed_dictionaries(
                                {},
                                optional={
                                    "name": st.one_of(_TEXTS, st.none()),
                                    "arguments": st.one_of(_TEXTS, st.none(), st.just({"a": 1})),
                                },
                            ),
                            st.just("lookup"),
                        )
                    },
                ),
                st.just({"id": "c1", "tool": "lookup", "arguments": {"q": 1}}),
                st.just("not a call"),
            ),
            max_size=3,
        ),
    ),
)
@settings(max_examples=300, deadline=None)
def test_a_text_message_counts_as_its_parts(role, content, call_id, extra, calls) -> None:
    """The direct count of a role-and-text message is the count of its walked parts."""
    from contextfold.tokens.serialize import message_parts

    counter = ExactCounter()
    message: dict = {"role": role, "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    if extra == "metadata":
        message["metadata"] = {"timestamp": "2026-12-01T00:00:00.000+00:00"}
    elif extra is not None:
        message[extra] = "x" if extra == "name" else []
    if calls is not None:
        message["tool_calls"] = calls
    assert counter.count_message(message) == counter._count_parts(message_parts(message))
