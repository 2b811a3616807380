"""A fast token estimate that needs no vocabulary.

The old estimator, ``len(str(message)) // 4``, read Python's ``repr`` of the dict (quotes,
escapes, key names, base64 images) and was far off real usage. This one reads the canonical
serialisation from :mod:`contextfold.tokens.serialize` and weighs its UTF-8 bytes by class,
because BPE tokenizers spend tokens very differently on them: a five-letter English word is one
token, ``3300.25`` is three, and JSON punctuation is often a token of its own.

The weights were fitted by ``uv run python bench/bench_tokens.py --fit`` (least squares, each
training corpus weighing the same) against exact ``o200k_base`` counts on data the benchmark
never measures: BFCL's ``miss_func``/``miss_param`` conversations and tool schemas, stdlib
sub-package sources and docstrings, and the CJK samples of the stdlib's ``test/cjkencodings``.
Counting classes is a handful of C-level passes over the bytes (encode, translate, count), so
it stays far cheaper than running BPE. What the weights cannot see (the vocabulary) is left
to calibration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.tokens.framing import (
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    tool_schema_tokens,
)
from contextfold.tokens.media import (
    Media,
    anthropic_image_tokens,
    document_tokens,
    opaque_tokens,
)
from contextfold.tokens.serialize import message_parts

__all__ = ["WEIGHTS", "HeuristicCounter", "character_classes", "estimate_text_tokens"]

# Tokens per byte of each class (see the module docstring for where they come from).
_PER_LETTER = 0.158  # ~6 letters per token: common words are one token with their space
_PER_DIGIT = 0.956  # numbers split into groups of at most 3 digits, often fewer
_PER_PUNCT = 0.494
_PER_SPACE = 0.351  # spaces, tabs, newlines (incl. the ones joining a message's pieces)
_PER_HIGH_BYTE = 0.268  # UTF-8 bytes >= 0x80: ~0.8 token per CJK character


def _class_table() -> bytes:
    table = bytearray(256)
    for byte in range(256):
        char = chr(byte)
        if byte >= 0x80:
            table[byte] = ord("u")
        elif char.isalpha():
            table[byte] = ord("a")
        elif char.isdigit():
            table[byte] = ord("d")
        elif char.isspace():
            table[byte] = ord("s")
        else:
            table[byte] = ord("p")
    return bytes(table)


_CLASSES = _class_table()


# The weights in the order character_classes() reports the counts.
WEIGHTS: tuple[float, float, float, float, float] = (
    _PER_LETTER,
    _PER_DIGIT,
    _PER_PUNCT,
    _PER_SPACE,
    _PER_HIGH_BYTE,
)


def character_classes(text: str) -> tuple[int, int, int, int, int]:
    """UTF-8 byte counts of (letters, digits, punctuation, whitespace, non-ASCII bytes)."""
    raw = text.encode("utf-8", "replace")
    classes = raw.translate(_CLASSES)
    digits = classes.count(b"d")
    punct = classes.count(b"p")
    space = classes.count(b"s")
    high = classes.count(b"u")
    return len(raw) - digits - punct - space - high, digits, punct, space, high


def estimate_text_tokens(text: str) -> float:
    """Unrounded token estimate: ``WEIGHTS`` dotted with ``character_classes(text)``.

    Written out rather than calling :func:`character_classes`: it runs once per message on the
    admission path, and skipping the non-ASCII pass for ASCII text is worth having.
    """
    if not text:
        return 0.0
    raw = text.encode("utf-8", "replace")
    classes = raw.translate(_CLASSES)
    digits = classes.count(b"d")
    punct = classes.count(b"p")
    space = classes.count(b"s")
    high = 0 if text.isascii() else classes.count(b"u")
    letters = len(raw) - digits - punct - space - high
    return (
        letters * _PER_LETTER
        + digits * _PER_DIGIT
        + punct * _PER_PUNCT
        + space * _PER_SPACE
        + high * _PER_HIGH_BYTE
    )


def _media_tokens(media: Sequence[Media]) -> int:
    total = 0
    for item in media:
        if item.kind == "image":
            total += anthropic_image_tokens(item.width, item.height)
        elif item.kind == "document":
            total += document_tokens(item.pages, item.nbytes)
        else:
            total += opaque_tokens(item.nbytes)
    return total


# Messages made only of these keys, all strings, skip the general walk (most of a history).
_PLAIN_KEYS = frozenset({"role", "content", "name", "tool_call_id", "metadata"})


def _plain_serialisation(message: dict[str, Any]) -> str | None:
    """``message_parts(message).serialised()`` for an all-string message, else None."""
    role = message.get("role", "")
    content = message.get("content")
    name = message.get("name")
    call_id = message.get("tool_call_id")
    if type(role) is not str or type(content) is not str:
        return None
    if (name is not None and type(name) is not str) or (
        call_id is not None and type(call_id) is not str
    ):
        return None
    pieces = [role] if name is None else [role, name]
    if call_id:
        pieces.append(call_id)
    if content:
        pieces.append(content)
    return "\n".join(pieces)


class HeuristicCounter:
    """Character-class estimate over the canonical serialisation; no vocabulary, no I/O.

    Images and documents are priced with Anthropic's published formulas (this counter is the
    one used for models without a public tokenizer), never as base64 text.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return "heuristic"

    @property
    def request_overhead(self) -> int:
        """The same reply priming as the exact counter: framing needs no vocabulary."""
        return REPLY_PRIMING_TOKENS

    def count_text(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"count_text expects a str, got {type(text).__name__}")
        return math.ceil(estimate_text_tokens(text))

    def count_message(self, message: Mapping[str, Any]) -> int:
        if type(message) is dict and _PLAIN_KEYS.issuperset(message):
            plain = _plain_serialisation(message)
            if plain is not None:
                named = message.get("name") is not None
                return (
                    TOKENS_PER_MESSAGE
                    + (TOKENS_PER_NAME if named else 0)
                    + math.ceil(estimate_text_tokens(plain))
                )
        parts = message_parts(message)
        tokens = TOKENS_PER_MESSAGE + TOKENS_PER_TOOL_CALL * parts.tool_calls
        if parts.name is not None:
            tokens += TOKENS_PER_NAME
        return (
            tokens
            + math.ceil(estimate_text_tokens(parts.serialised()))
            + _media_tokens(parts.media)
        )

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        return math.ceil(tool_schema_tokens(tools, estimate_text_tokens))

    def __repr__(self) -> str:
        return "HeuristicCounter()"
