"""What a message is searched by: its words, in a form every backend indexes alike.

`terms` turns text into index terms (lowercased words and numbers less stopwords, lightly
stemmed, each identifier whole and in parts); `search_document` gives a message's terms
and its kind (a human prompt, the agent's answer or calls, a tool result) for the ranking
(`ranking`). The memory index and the SQLite and PostgreSQL stores all index exactly these
terms, so the same history ranks the same everywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from ..conventions import is_hook_injection, is_human_prompt
from ..messages import well_formed_text

SNIPPET_CHARS = 240
QUERY_CHARS = 4_000  # of a query, what a search and a snippet read
_SNIPPET_PLACES = 20  # occurrences of each query word a snippet considers
_SNIPPET_WORDS = 64  # query words a snippet looks for
MAX_LIMIT = 50
# A message is indexed by its first this many characters of text (a tool result is capped at
# admission anyway; this bounds what one message costs every backend to index).
MAX_INDEXED_CHARS = 64_000
# An identifier longer than this is indexed by its parts only (a long URL or a base64 run is
# never typed whole into a query, and PostgreSQL refuses a lexeme over 2 KB).
MAX_TERM_CHARS = 100

# Words and numbers; an identifier such as ``ORD-4471`` gives ``ord`` and ``4471``, and the
# whole form too (see `terms`), so a search for either finds it.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+(?:[-_./:#][^\W_]+)*", re.UNICODE)
STOPWORDS = frozenset(
    (
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "earlier",
        "previous",
        "previously",
        "found",
        "find",
        "look",
        "looked",
        "please",
        "also",
        "get",
        "got",
    )
)


def _stem(word: str) -> str:
    """A light suffix strip, so that "invoices" finds "invoice" and "shipped" finds "ship":
    enough for descriptions against tool output, without a language-specific stemmer."""
    if len(word) <= 4 or word.isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + keep
    return word


def terms(text: str, stems: dict[str, str] | None = None) -> list[str]:
    """The index terms of a text: lowercased words and numbers less stopwords, lightly
    stemmed, plus each identifier whole (``ord-4471`` gives ``ord-4471``, ``ord`` and
    ``4471``). ``stems`` memoises the stemming (the words of a conversation repeat)."""
    memo = {} if stems is None else stems
    found: list[str] = []
    for token in _TOKEN.findall(text.lower()):
        if token.isalnum():
            words: tuple[str, ...] | list[str] = (token,)
        else:  # an identifier: itself, then its parts
            if len(token) <= MAX_TERM_CHARS:
                found.append(token)
            words = _WORD.findall(token)
        for word in words:
            stem = memo.get(word)
            if stem is None:
                stem = memo[word] = "" if word in STOPWORDS else _stem(word)
            if stem and len(stem) <= MAX_TERM_CHARS:
                found.append(stem)
    return found


class DocKind(IntEnum):
    """What a message is to the ranking: a task's prompt, the agent's words or calls, a tool
    result, or anything else (a hook's note, a reminder)."""

    OTHER = 0
    PROMPT = 1  # words a person typed: it opens a task
    ANSWER = 2  # the agent's text without a call: a task's last one is its closing answer
    CALL = 3  # the agent's turn that calls tools (its text, the calls' names and arguments)
    RESULT = 4  # a tool's output


@dataclass(frozen=True, slots=True)
class SearchDocument:
    """A message as every backend indexes it: its terms, repeats kept, and its kind."""

    terms: tuple[str, ...]
    kind: DocKind


def search_document(
    message: Mapping[str, Any], stems: dict[str, str] | None = None
) -> SearchDocument:
    """The terms and kind of ``message``. System and developer messages (the system prompt,
    always in the view) have no terms; a hook's note is searched as any other message. The
    text is taken in its well-formed form (a lone surrogate as U+FFFD), as the view carries it
    and as every store reads it back."""
    role = message.get("role")
    if role in ("system", "developer") and not is_hook_injection(message):
        return SearchDocument((), DocKind.OTHER)
    text = well_formed_text(searchable_text(message)[:MAX_INDEXED_CHARS])
    return SearchDocument(tuple(terms(text, stems)), _kind(message, role))


def _kind(message: Mapping[str, Any], role: Any) -> DocKind:
    if role == "assistant":
        content = message.get("content")
        calls = bool(message.get("tool_calls")) or (
            isinstance(content, list)
            and any(
                isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_call")
                for b in content
            )
        )
        return DocKind.CALL if calls else DocKind.ANSWER
    if role == "tool":
        return DocKind.RESULT
    if role == "user":
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
        ):
            return DocKind.RESULT
        if is_human_prompt(message):
            return DocKind.PROMPT
    return DocKind.OTHER


def searchable_text(message: Mapping[str, Any]) -> str:
    """What a message is searched by: its text (a tool result's content text), its thinking
    left out, and an assistant's calls as their names and arguments."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        _block_texts(content, parts)
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            name = call.get("tool") or call.get("name") or function.get("name")
            arguments = call.get("arguments", function.get("arguments"))
            parts.append(f"{name} {_as_text(arguments)}")
    return "\n".join(p for p in parts if p)


def _block_texts(blocks: list[Any], parts: list[str]) -> None:
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                parts.append(inner)
            elif isinstance(inner, list):
                _block_texts(inner, parts)
        elif kind in ("tool_use", "tool_call"):
            parts.append(
                f"{block.get('name')} {_as_text(block.get('input', block.get('arguments')))}"
            )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure cannot come from JSON: nothing to search
        return ""


def snippet(text: str, query: str, chars: int = SNIPPET_CHARS) -> str:
    """About ``chars`` characters of ``text``, on one line, where the most distinct words of
    ``query`` meet (the earliest such place; its start when it holds none): the part of a
    long tool output the model asked about, not its header."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    lowered = flat.lower()
    words = [
        w for w in dict.fromkeys(_WORD.findall(query.lower())) if w not in STOPWORDS and len(w) > 2
    ]
    found, span = 0, 0
    if words:
        occurrences: list[tuple[int, int]] = []  # (position, which word)
        for k, word in enumerate(words):
            at = lowered.find(word)
            count = 0
            while at >= 0 and count < _SNIPPET_PLACES:
                occurrences.append((at, k))
                at = lowered.find(word, at + 1)
                count += 1
        occurrences.sort()
        best = -1
        for i, (at, _) in enumerate(occurrences):
            # The distinct words within the window this occurrence would start.
            inside = [(p, k) for p, k in occurrences[i:] if p < at + chars * 2 // 3]
            seen = {k for _, k in inside}
            if len(seen) > best:
                last, word = inside[-1]
                best, found, span = len(seen), at, last + len(words[word]) - at
    # The matched words centred in the window.
    start = max(0, min(found - max(0, chars - span) // 2, len(flat) - chars))
    piece = flat[start : start + chars]
    return ("..." if start else "") + piece + ("..." if start + chars < len(flat) else "")


def check_query(query: Any, limit: Any) -> tuple[str, int]:
    """A search's arguments, or a ValueError saying what to pass instead."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(
            "search takes a query: a few words describing what to find, e.g. "
            "'invoice total for the Berlin office'"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not terms(query[:QUERY_CHARS]):
        where = f" in its first {QUERY_CHARS:,} characters" if len(query) > QUERY_CHARS else ""
        raise ValueError(
            f"the query {query[:60]!r} has no word to search by{where} (only stopwords or "
            "punctuation): describe what to find"
        )
    return query, limit
