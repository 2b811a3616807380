"""Property tests: key order never changes a count, and no valid-shaped message raises."""

from __future__ import annotations

import random
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.tokens import ExactCounter, HeuristicCounter, serialize_message
from contextfold.tokens.heuristic import WEIGHTS, character_classes, estimate_text_tokens

HEURISTIC = HeuristicCounter()
EXACT = ExactCounter()

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)

BLOCK_TYPES = [
    "text", "image", "image_url", "document", "tool_call", "tool_use", "tool_result",
    "thinking", "redacted_thinking", "reasoning", "input_text", "mystery",
]  # fmt: skip
BLOCK_KEYS = [
    "text", "source", "image_url", "id", "name", "input", "arguments", "tool_use_id",
    "tool_call_id", "content", "output", "thinking", "signature", "data", "summary", "title",
    "detail", "cache_control",
]  # fmt: skip

blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(BLOCK_TYPES)},
    optional={key: json_values for key in BLOCK_KEYS[:6]}
    | {key: st.one_of(st.text(max_size=20), json_scalars) for key in BLOCK_KEYS[6:]},
)
tool_calls = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"id": st.text(max_size=6), "tool": st.text(max_size=6), "arguments": json_values}
        ),
        st.fixed_dictionaries(
            {
                "id": st.text(max_size=6),
                "type": st.just("function"),
                "function": st.fixed_dictionaries(
                    {"name": st.text(max_size=6), "arguments": st.text()}
                ),
            }
        ),
    ),
    max_size=3,
)
messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]),
        "content": st.one_of(st.none(), st.text(), st.lists(blocks, max_size=4)),
    },
    optional={
        "tool_calls": tool_calls,
        "tool_call_id": st.text(max_size=8),
        "name": st.text(max_size=8),
        "metadata": json_values,
        "extra_field": json_values,
    },
)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same value with every dict rebuilt in a random key order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@settings(max_examples=100, deadline=None)
@given(messages, st.integers(0, 2**32))
def test_counts_ignore_key_order(message: dict[str, Any], seed: int) -> None:
    reordered = shuffled(message, random.Random(seed))
    assert serialize_message(reordered) == serialize_message(message)
    assert HEURISTIC.count_message(reordered) == HEURISTIC.count_message(message)
    assert EXACT.count_message(reordered) == EXACT.count_message(message)


@settings(max_examples=150, deadline=None)
@given(messages)
def test_valid_shaped_messages_never_raise(message: dict[str, Any]) -> None:
    for counter in (HEURISTIC, EXACT):
        tokens = counter.count_message(message)
        assert isinstance(tokens, int)
        assert tokens >= 3  # the framing alone


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text())
def test_heuristic_text_count_is_monotone_under_concatenation(a: str, b: str) -> None:
    assert HEURISTIC.count_text(a + b) >= max(HEURISTIC.count_text(a), HEURISTIC.count_text(b))


plain_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.text()},
    optional={
        "name": st.text(max_size=8),
        "tool_call_id": st.text(max_size=8),
        "metadata": json_values,
    },
)


@settings(max_examples=100, deadline=None)
@given(plain_messages)
def test_heuristic_fast_path_agrees_with_the_general_walk(message: dict[str, Any]) -> None:
    # A read-only mapping is not a dict, so it takes the general path.
    assert HEURISTIC.count_message(message) == HEURISTIC.count_message(MappingProxyType(message))


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_heuristic_estimate_is_the_weighted_class_count(text: str) -> None:
    expected = sum(w * n for w, n in zip(WEIGHTS, character_classes(text), strict=True))
    assert estimate_text_tokens(text) == pytest.approx(expected)
    assert sum(character_classes(text)) == len(text.encode("utf-8", "replace"))
