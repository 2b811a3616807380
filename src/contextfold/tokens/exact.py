"""Exact BPE counts with tiktoken, framed the way OpenAI documents it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.tokens.encodings import SUPPORTED_ENCODINGS, load_encoding
from contextfold.tokens.framing import (
    GPT4_TOOLS,
    GPT4O_TOOLS,
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    tool_schema_tokens,
)
from contextfold.tokens.media import document_tokens, opaque_tokens, openai_image_tokens
from contextfold.tokens.serialize import MessageParts, message_parts

__all__ = ["ExactCounter"]

# Role names remembered per counter (a message's role is one of six once admitted; the
# bound only keeps odd input from growing the table).
_MAX_ROLES = 32
# The keys of a message `count_message` counts without walking it (metadata is never sent).
_TEXT_MESSAGE_KEYS = frozenset({"role", "content", "tool_call_id", "tool_calls", "metadata"})


class ExactCounter:
    """Counts with the model's own BPE vocabulary (``o200k_base`` or ``cl100k_base``).

    Text is encoded with ``encode_ordinary`` so a message that happens to contain
    ``<|endoftext|>`` is counted as the text it is instead of raising. Per-message framing,
    ``name``, tool calls and tool schemas follow :mod:`contextfold.tokens.framing`; images use
    OpenAI's tile formula and PDFs/encrypted reasoning the estimates in
    :mod:`contextfold.tokens.media`. The vocabulary is loaded (offline, hash-checked) when the
    counter is built, so a broken install fails here and not in the middle of a request.
    """

    __slots__ = ("_encode", "_encode_valid", "_role_tokens", "_tools_overhead", "encoding")

    def __init__(self, encoding: str = "o200k_base") -> None:
        if not isinstance(encoding, str):
            raise TypeError(f"encoding must be a str, got {type(encoding).__name__}")
        if encoding not in SUPPORTED_ENCODINGS:
            raise ValueError(
                f"unknown encoding {encoding!r} for ExactCounter; choose one of "
                f"{', '.join(SUPPORTED_ENCODINGS)}"
            )
        self.encoding = encoding
        loaded = load_encoding(encoding)
        self._encode = loaded.encode_ordinary
        # The Rust encoder itself, for text that is valid Unicode (nearly all): tiktoken's
        # wrapper only adds a retry for lone surrogates, which `_count_text` keeps.
        self._encode_valid = loaded._core_bpe.encode_ordinary
        # Tokens of each role name: a handful of roles, counted on every message.
        self._role_tokens: dict[str, int] = {}
        self._tools_overhead = GPT4O_TOOLS if encoding == "o200k_base" else GPT4_TOOLS

    @property
    def name(self) -> str:
        return f"exact:{self.encoding}"

    @property
    def request_overhead(self) -> int:
        """OpenAI's reply priming, ``<|start|>assistant<|message|>``: 3 tokens per request."""
        return REPLY_PRIMING_TOKENS

    def count_request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Tokens of a whole request as sent: its messages, tool schemas and reply priming."""
        total = sum(self.count_message(message) for message in messages)
        if tools:
            total += self.count_tools(tools)
        return total + self.request_overhead

    def count_text(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"count_text expects a str, got {type(text).__name__}")
        return len(self._encode(text)) if text else 0

    def count_message(self, message: Mapping[str, Any]) -> int:
        # Nearly every message is a role and one text (a tool's with its call id; an
        # assistant's with OpenAI-shape calls), plus the admission stamp, which is never
        # counted: counted directly, as its walked parts would be.
        if type(message) is dict and message.keys() <= _TEXT_MESSAGE_KEYS:
            try:
                tokens = self._count_text_message(message)
            except UnicodeEncodeError:  # a lone surrogate: the parts path retries it
                tokens = None
            if tokens is not None:
                return tokens
        return self._count_parts(message_parts(message))

    def _count_text_message(self, message: dict[str, Any]) -> int | None:
        """`count_message` of a message of plain strings; None for anything else."""
        role = message.get("role")
        content = message.get("content")
        call_id = message.get("tool_call_id")
        calls = message.get("tool_calls")
        if (
            type(role) is not str
            or (content is not None and type(content) is not str)
            or (call_id is not None and type(call_id) is not str)
            or (calls is not None and type(calls) is not list)
        ):
            return None
        encode = self._encode_valid
        tokens = TOKENS_PER_MESSAGE + (self._role_cost(role) if role else 0)
        if content:
            tokens += len(encode(content))
        if call_id:
            tokens += len(encode(call_id))
        for call in calls or ():
            function = call.get("function") if type(call) is dict else None
            if type(function) is not dict:
                return None  # the Amplifier shape, or not a call: walked
            texts = (call.get("id"), function.get("name"), function.get("arguments"))
            tokens += TOKENS_PER_TOOL_CALL
            for text in texts:
                if text is None:
                    continue
                if type(text) is not str:
                    return None
                if text:
                    tokens += len(encode(text))
        return tokens

    def _role_cost(self, role: str) -> int:
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = len(self._encode(role))
            if len(self._role_tokens) < _MAX_ROLES:
                self._role_tokens[role] = role_tokens
        return role_tokens

    def _count_parts(self, parts: MessageParts) -> int:
        """Tokens of a message walked into its parts (the general path)."""
        encode = self._encode_valid
        tokens = TOKENS_PER_MESSAGE + TOKENS_PER_TOOL_CALL * parts.tool_calls
        role = parts.role
        if role:
            tokens += self._role_cost(role)
        if parts.name is not None:
            tokens += TOKENS_PER_NAME + len(self._encode(parts.name))
        base = tokens
        try:
            for text in parts.texts:
                tokens += len(encode(text))
        except UnicodeEncodeError:  # a lone surrogate: tiktoken's wrapper retries it
            tokens = base + sum(len(self._encode(text)) for text in parts.texts)
        for item in parts.media:
            if item.kind == "image":
                tokens += openai_image_tokens(item.width, item.height, item.detail)
            elif item.kind == "document":
                tokens += document_tokens(item.pages, item.nbytes)
            else:
                tokens += opaque_tokens(item.nbytes)
        return tokens

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        return math.ceil(tool_schema_tokens(tools, self.count_text, self._tools_overhead))

    def __repr__(self) -> str:
        return f"ExactCounter({self.encoding!r})"
