"""Identifier-like values: what an agent copies from one message into a later one.

One definition, read by the identifier ledger (`contextfold.ledger`, which keeps the values a
compaction pass takes out of the view) and by the eval's fact rule
(`contextfold.evaluation.facts`, which decides what a step needs), so the two never drift:

- `PATTERNS`: the identifier-like spans of a text: URLs, emails, paths, dates, amounts, ids
  and codes (letters and digits mixed, or five digits or more), quoted names;
- `whole_value`: a whole argument string that reads as one identifier (one line, at most
  `MAX_WHOLE_WORDS` words, holding a capital, a digit or one of ``._/@:#-``);
- `number_forms`: a number argument as the texts it may have been read from (at least four
  digits, or three and a decimal point; a float also with two decimals, as amounts are
  written);
- `occurs`: whether a value occurs in a text as a whole (no letter or digit joined to it:
  ``ORD-4821`` does not occur in ``ORD-48213``).

`call_values` is what an assistant message writes (its calls' arguments and its words);
`held_values` what any message holds, line by line (the ledger groups a table's row).
Values shorter than `MIN_VALUE_CHARS` are never values. Nothing here raises on a damaged
message: what cannot be read is left out.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from .readable import calls_of, content_texts, role_of, visible_text

MIN_VALUE_CHARS = 3
MAX_VALUE_CHARS = 300  # longer spans are prose, not values a step copies
MAX_WHOLE_WORDS = 8  # a whole argument string of more words is read for its spans only
# How much of one message `held_values` reads, and how many values it keeps of it.
MAX_READ_CHARS = 16_000
MAX_HELD_VALUES = 400
_CACHED_CHARS = 16_000  # texts up to this long have their values cached by content

# The identifier-like spans, in the order they are looked for; what one kind claims is not
# looked at again by the next (a URL's path is not also a path).
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("url", re.compile(r"\bhttps?://[^\s\"'<>(){}\[\]|\\^`]+")),
    ("email", re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")),
    (
        "path",
        re.compile(
            r"(?<![\w/.:-])(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*"
            r"|(?<![\w/.:-])[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}\b"
        ),
    ),
    (
        "date",
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"
            r"|\b\d{1,2}/\d{1,2}/\d{4}\b"
        ),
    ),
    (
        "amount",
        re.compile(r"(?<=[$€£¥])\s?\d[\d,]*(?:\.\d+)?|(?<![\w.])\d[\d,]*\.\d+(?!\w|\.\d)"),
    ),
    (
        "id",
        re.compile(
            r"(?<![\w:#-])(?=[\w:#-]*\d)(?=[\w:#-]*[A-Za-z])[A-Za-z0-9][\w:#-]*[A-Za-z0-9]"
            r"|(?<![\w.,-])\d{5,}(?![\w,-]|\.\d)"
        ),
    ),
    # A single quote between two letters is an apostrophe ("Let's check John's account"),
    # not a quote: a single-quoted value opens after no letter and closes before none.
    (
        "quoted",
        re.compile(
            r"\"([^\"\n]{3,80})\"|(?<![^\W\d_])'([^'\n]{3,80})'(?![^\W\d_])|“([^”\n]{3,80})”"
        ),
    ),
)
# A whole argument string is a value when it holds one of these (a plain lowercase word
# or phrase, "asc" or "documents", is an ordinary word, not an identifier).
_IDENTIFIER_MARK = re.compile(r"[A-Z0-9._/@:#-]")
_EDGE = r"[A-Za-z0-9]"
# A number standing alone in a text with as many digits as an argument's number must have
# to be a value (`number_forms`): a count, a size, a code a later call may carry.
_NUMBER = re.compile(r"(?<![\w.,-])\d{4,}(?![\w,-]|\.\d)")
# What every match of a pattern holds: one of these substrings or a match of this probe
# (neither given: no such condition), and an ASCII digit when marked. A text without them
# is not searched with the pattern: a substring test or a probe with a literal start costs
# a fraction of the pattern's scan, and most texts skip most patterns.
_GATES: dict[str, tuple[tuple[str, ...], re.Pattern[str] | None, bool]] = {
    "url": (("://",), None, False),
    "email": (("@",), None, False),
    "path": (("/",), None, False),
    "date": (("-", "/"), None, True),
    # A currency sign before the number, or a decimal point before a digit.
    "amount": (("$", "€", "£", "¥"), re.compile(r"\.\d"), True),
    "id": ((), None, True),
    "quoted": (('"', "'", "“"), None, False),
}
# The same patterns written to open with the characters a match can start with (what a
# lookbehind said before the first character is said just after it): the engine then skips
# every position that cannot start one instead of trying each, two to three times faster.
# `PATTERNS` stays the definition; tests/test_ledger_cost.py holds each pair to the same
# matches on random texts.
_FAST: dict[str, re.Pattern[str]] = {
    "url": re.compile(r"h(?<!\w.)ttps?://[^\s\"'<>(){}\[\]|\\^`]+"),
    "email": re.compile(
        r"[A-Za-z0-9._%+-](?<![\w.+-].)[A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
    ),
    "date": re.compile(
        r"\d(?<!\w.)"
        r"(?:\d{3}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        r"|\d?/\d{1,2}/\d{4}\b)"
    ),
    "amount": re.compile(
        r"[\s\d](?:(?<=[$€£¥]\s)\d[\d,]*(?:\.\d+)?|(?<=[$€£¥]\d)[\d,]*(?:\.\d+)?"
        r"|(?<=\d)(?<![\w.].)[\d,]*\.\d+(?!\w|\.\d))"
    ),
}
# A path starts where a run of path characters starts: most positions of a text are inside
# one. This says instead that a path follows a character its lookbehind allows (the path is
# group 1), searched in the text after a space (a character the lookbehind allows): the
# engine tries only the positions after a space or a punctuation mark. No path starts where
# another ends, so each search resumes where the original's would.
_PATH_AFTER_EDGE = re.compile(
    r"[^\w/.:-]((?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*|[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}\b)"
)
# An id is one of two things. Letters and digits mixed: a whole run of ``[\w:#-]`` (up to
# its last ASCII letter or digit) holding both, so it holds a digit beside a run character
# that is not a digit (`_ID_SEED`, rare in prose and in tables of numbers); it is matched
# at its run's start only. Or five digits or more (`_ID_DIGITS`, a digit first); where one
# lies inside a mixed id, the mixed id took it.
_ID_SEED = re.compile(r"\d(?:(?=[^\W\d]|[:#-])|(?<=[^\W\d]\d)|(?<=[:#-]\d))")
_ID_MIXED = re.compile(
    r"(?<![\w:#-])(?=[\w:#-]*\d)(?=[\w:#-]*[A-Za-z])[A-Za-z0-9][\w:#-]*[A-Za-z0-9]"
)
_ID_DIGITS = re.compile(r"\d(?<![\w.,-].)\d{4,}(?![\w,-]|\.\d)")
_RUN_REST = re.compile(r"[\w:#-]*")
_RUN_PUNCTUATION = frozenset("_:#-")


def _id_spans(text: str) -> list[tuple[int, int]]:
    """Where the ``id`` pattern of `PATTERNS` matches ``text``, in order."""
    mixed: list[tuple[int, int]] = []
    done = 0  # the end of the last run looked at: its seeds are spent
    for seed in _ID_SEED.finditer(text):
        at = seed.start()
        if at < done:
            continue
        start = at
        while start > done and (text[start - 1].isalnum() or text[start - 1] in _RUN_PUNCTUATION):
            start -= 1  # `\w` is what `str.isalnum` says, and the underscore
        done = _RUN_REST.match(text, at).end()  # type: ignore[union-attr]
        found = _ID_MIXED.match(text, start)
        if found is not None:
            mixed.append(found.span())
    digits = [match.span() for match in _ID_DIGITS.finditer(text)]
    if not mixed:
        return digits
    if not digits:
        return mixed
    spans: list[tuple[int, int]] = []
    i = 0
    for start, end in digits:
        while i < len(mixed) and mixed[i][1] <= start:
            spans.append(mixed[i])
            i += 1
        if i < len(mixed) and mixed[i][0] < end:
            continue  # inside the mixed id that took it
        spans.append((start, end))
    spans.extend(mixed[i:])
    return spans


def _path_spans(text: str) -> list[tuple[int, int]]:
    """Where the ``path`` pattern of `PATTERNS` matches ``text``, in order."""
    return [(m.start(1) - 1, m.end(1) - 1) for m in _PATH_AFTER_EDGE.finditer(" " + text)]


# How the reader finds a kind's spans where a pattern's own search is slow (see above):
# `_SEARCHED` names the pattern, the key to its finder.
_FINDERS: dict[re.Pattern[str], Callable[[str], list[tuple[int, int]]]] = {
    _ID_MIXED: _id_spans,
    _PATH_AFTER_EDGE: _path_spans,
}
# An amount after a currency sign needs one in the text: without, only the decimal form.
_AMOUNT_DECIMAL = re.compile(r"\d(?<![\w.].)[\d,]*\.\d+(?!\w|\.\d)")
_CURRENCY_SIGNS = ("$", "€", "£", "¥")


def _amount_spans(text: str) -> list[tuple[int, int]]:
    """Where the ``amount`` pattern of `PATTERNS` matches ``text``, in order."""
    signed = any(sign in text for sign in _CURRENCY_SIGNS)
    pattern = _FAST["amount"] if signed else _AMOUNT_DECIMAL
    return [match.span() for match in pattern.finditer(text)]


_FINDERS[_FAST["amount"]] = _amount_spans
_FAST.update(path=_PATH_AFTER_EDGE, id=_ID_MIXED)
_FAST_NUMBER = re.compile(r"\d(?<![\w.,-].)\d{3,}(?![\w,-]|\.\d)")
# What the reader searches, kind by kind: the pattern, the finder that stands for it (None:
# the pattern's own search), and the pattern's gate (`_GATES`).
_Search = tuple[
    str,
    re.Pattern[str],
    Callable[[str], list[tuple[int, int]]] | None,
    tuple[str, ...],
    re.Pattern[str] | None,
    bool,
]
_SEARCHED: tuple[_Search, ...] = tuple(
    (
        kind,
        _FAST.get(kind, pattern),
        _FINDERS.get(_FAST.get(kind, pattern)),
        *_GATES.get(kind, ((), None, False)),
    )
    for kind, pattern in PATTERNS
)
# A short text is searched with the patterns as defined: over a few dozen characters a
# rewrite saves less than its finder's own call costs.
_SEARCHED_SHORT: tuple[_Search, ...] = tuple(
    (kind, pattern, None, *_GATES.get(kind, ((), None, False))) for kind, pattern in PATTERNS
)
_ASCII_DIGIT = re.compile("[0-9]")
_MAX_DEPTH = 64  # a hostile nesting depth: what lies deeper is not read


def occurs(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole (no letter or digit joined to it)."""
    if value not in text:
        return False
    return _whole(value).search(text) is not None


_WHOLE_CACHE: dict[str, re.Pattern[str]] = {}


def _whole(value: str) -> re.Pattern[str]:
    pattern = _WHOLE_CACHE.get(value)
    if pattern is None:
        if len(_WHOLE_CACHE) > 50_000:
            _WHOLE_CACHE.clear()
        pattern = _WHOLE_CACHE[value] = re.compile(f"(?<!{_EDGE}){re.escape(value)}(?!{_EDGE})")
    return pattern


def whole_value(text: str) -> bool:
    """Whether an argument string is itself one identifier-like value: one line, at most
    `MAX_WHOLE_WORDS` words, holding a capital, a digit or one of ``._/@:#-``."""
    stripped = text.strip()
    return (
        MIN_VALUE_CHARS <= len(stripped) <= MAX_VALUE_CHARS
        and "\n" not in stripped
        and len(stripped.split()) <= MAX_WHOLE_WORDS
        and _IDENTIFIER_MARK.search(stripped) is not None
    )


def call_values(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(value, kind)`` an assistant message writes, first seen first, each value once:
    every argument of its tool calls at any depth (a string taken whole when it reads as
    one identifier, `whole_value`; a number by `number_forms`), and the identifier-like
    spans of every argument string and of its own text (never its thinking)."""
    found: dict[str, str] = {}
    for _name, arguments, raw in calls_of(message):
        if arguments is None and raw:
            spans(raw, found)  # arguments that are not JSON: read as text
            continue
        for leaf, kind in argument_leaves(arguments):
            if kind == "number":
                for text in number_forms(leaf):
                    found.setdefault(text, "amount" if "." in text else "id")
                continue
            if whole_value(leaf):
                found.setdefault(leaf.strip(), "argument")
            spans(leaf, found)
    spans(visible_text(message), found)
    return [(v, kind) for v, kind in found.items() if MIN_VALUE_CHARS <= len(v) <= MAX_VALUE_CHARS]


def held_values(message: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The values a message holds, row by row, each value once in the message.

    An assistant message is one row: what it writes (`call_values`). Any other message is
    read in the text of its content (`readable.content_texts`; the call id it answers is
    bookkeeping, not a value): each line is a row of its identifier-like spans and of the
    numbers standing alone with four digits or more (what a later call may carry as a
    number); a text that is a JSON document is also read value by value, each object's
    scalar values one row, its strings taken whole where they read as one identifier.
    At most `MAX_READ_CHARS` characters of a message are read and `MAX_HELD_VALUES` values
    kept: the rest of a huge output is look-alikes its recall id still reaches."""
    if role_of(message) == "assistant":
        row = tuple(value for value, _kind in call_values(message))
        return [row] if row else []
    content = message.get("content")
    if isinstance(content, str):
        # The common shape, read without walking blocks (`content_texts` yields it alone).
        seen: set[str] = set()
        return _add_new_rows(_read_rows(content[:MAX_READ_CHARS]), seen, [])
    seen = set()
    rows: list[tuple[str, ...]] = []
    left = MAX_READ_CHARS
    for leaf in content_texts(message):
        if left <= 0 or len(seen) >= MAX_HELD_VALUES:
            break
        text = leaf if len(leaf) <= left else leaf[:left]
        left -= len(text)
        _add_new_rows(_read_rows(text), seen, rows)
    return rows


def _add_new_rows(
    found: Sequence[Sequence[str]], seen: set[str], rows: list[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """Append to ``rows`` the rows of ``found`` with each value once (not in ``seen``, which
    it joins) and of a value's length; returns ``rows``."""
    for values in found:
        kept: list[str] = []
        for value in values:
            if value not in seen and MIN_VALUE_CHARS <= len(value) <= MAX_VALUE_CHARS:
                seen.add(value)
                kept.append(value)
        if kept:
            rows.append(tuple(kept))
    return rows


def _read_rows(text: str) -> Sequence[Sequence[str]]:
    """`_text_rows` of ``text``, through the cache of recent texts when it is short enough."""
    return _cached_rows(text) if len(text) <= _CACHED_CHARS else _text_rows(text)


@lru_cache(maxsize=1024)
def _cached_rows(text: str) -> tuple[tuple[str, ...], ...]:
    """`_text_rows` of a text, kept for the texts seen last: the same result is read again
    by every context that holds it (a replay, a retried request, a resumed worker)."""
    return tuple(tuple(row) for row in _text_rows(text))


def _text_rows(text: str) -> list[list[str]]:
    """The rows of one text: a JSON document's value by value (`_json_rows`), any other
    text's line by line (`_line_values`)."""
    rows = _json_rows(text)
    return _line_values(text) if rows is None else rows


def line_values(text: str) -> list[str]:
    """The identifier-like spans of one line of text, and its numbers of four digits or more,
    in order of appearance."""
    return [value for line in _line_values(text) for value in line]


def _line_values(text: str) -> list[list[str]]:
    """`line_values` of each line of ``text`` that has any, the patterns run once over the
    whole text (a line at a time would run each pattern once per line)."""
    if _holds_none(text):
        return []
    found: dict[str, str] = {}
    digits = _ASCII_DIGIT.search(text) is not None
    taken = _spans(text, found, positions := {}, digits)
    if _may_hold_number(text, digits):
        number = _FAST_NUMBER if len(text) > SHORT_TEXT_CHARS else _NUMBER
        for match in number.finditer(text):
            start, end = match.span()
            if not taken.overlaps(start, end):
                value = match.group()
                if value not in found:
                    found[value] = "number"
                    positions[value] = start
    if not found:
        return []
    # Values by where they start (no two start at one place: their ranges would overlap),
    # cut into rows where the lines break, lines without a value skipped.
    ordered = sorted(zip(positions.values(), positions, strict=True))
    if "\n" not in text:
        return [[value for _start, value in ordered]]
    rows: list[list[str]] = []
    row: list[str] = []
    next_break = text.find("\n")
    for start, value in ordered:
        if next_break != -1 and start >= next_break:
            if row:
                rows.append(row)
            row = []
            # A value belongs to the line after every break at or before its start.
            next_break = text.find("\n", start + 1)
        row.append(value)
    rows.append(row)
    return rows


# What any value holds, one search for all: ``://``, ``@``, ``/`` (URLs, emails, paths and
# slashed dates), a currency sign or a decimal point before a digit (amounts), a quote, four
# digits in a row (numbers, ids of digits, dated days), a letter and a digit in one run of
# ``[\w:#-]`` (ids of letters and digits). A short text without any holds no value: a
# chat's short messages ("What is item 7?") are read with this one search instead of a
# search per pattern. Longer texts nearly always hold one of these: they skip the question.
_ANY_VALUE = re.compile(r"://|[@/$€£¥\"'“]|\.\d|\d{4}|[A-Za-z][\w:#-]*\d|\d[\w:#-]*[A-Za-z]")
SHORT_TEXT_CHARS = 200


def _holds_none(text: str) -> bool:
    """Whether a short ``text`` surely holds no value (a longer one is not asked)."""
    return len(text) <= SHORT_TEXT_CHARS and _ANY_VALUE.search(text) is None


def _may_hold_number(text: str, digits: bool) -> bool:
    """Whether `_NUMBER` can match ``text`` (``digits``: it holds an ASCII digit). Its
    digits are any Unicode digits: only an ASCII text without one is skipped."""
    return digits or not text.isascii()


def _json_rows(text: str) -> list[list[str]] | None:
    """Rows of values of ``text`` when it is a JSON object or array (None otherwise): each
    object's (or array's) scalar children, strings whole where they read as one identifier,
    longer strings by their spans."""
    if not text or (text[0] not in "{[" and not text[0].isspace()):
        return None  # what `lstrip` would leave does not open a document (no copy made)
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "{[" or len(text) > MAX_READ_CHARS:
        return None
    try:
        document = json.loads(text, parse_float=_FloatText)
    except (ValueError, RecursionError):
        return None
    rows: list[list[str]] = []
    _rows_of(document, 0, rows)
    return rows


def _rows_of(value: Any, depth: int, rows: list[list[str]]) -> None:
    if depth > _MAX_DEPTH:
        return
    children = (
        value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    )
    row: list[str] = []
    at = len(rows)  # this object's row goes before its children's
    for child in children:
        if isinstance(child, _FloatText):
            row.extend(child.forms())
        elif isinstance(child, str):
            if whole_value(child):
                row.append(child.strip())
            elif len(child) > MIN_VALUE_CHARS:
                rows.extend(_line_values(child))
        elif isinstance(child, bool) or child is None:
            continue
        elif isinstance(child, int | float):
            row.extend(number_forms(child))
        else:
            _rows_of(child, depth + 1, rows)
    if row:
        rows.insert(at, row)


class _FloatText(str):
    """A JSON document's number with a fraction or an exponent, as its text reads."""

    __slots__ = ()

    def forms(self) -> list[str]:
        """The `number_forms` the document itself shows: ``22.5`` is not also held as
        ``22.50`` (a ledger listing both for one number spent a tenth of its values on such
        twins: `contextfold eval`, BFCL at 4,000 tokens), while ``1000.0`` holds ``1000``
        (the agent's call may write either). A form the text does not show is no value of
        it; a number written in none of them (``1.5e3``) is held as written."""
        text = str(self)
        forms = number_forms(float(text))
        shown = [form for form in forms if form == text or text.startswith(form + ".")]
        return shown if shown or not forms else [text]


def argument_leaves(value: Any, depth: int = 0) -> Iterator[tuple[Any, str]]:
    """The strings and numbers inside an argument value, at any depth, with their kind
    (``"string"`` or ``"number"``; booleans and null are not values)."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, str):
        yield value, "string"
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield value, "number"
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from argument_leaves(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from argument_leaves(item, depth + 1)


def number_forms(number: int | float) -> list[str]:
    """A number argument as the texts it may have been read from; none when too short to
    be anything but a count or a flag."""
    if isinstance(number, float):
        if number != number or number in (float("inf"), float("-inf")):
            return []
        text = repr(number)
        digits = sum(c.isdigit() for c in text)
        if number.is_integer() and digits - 1 >= 4:
            return [str(int(number)), text]
        if digits < 3:
            return []
        return list(dict.fromkeys([text, f"{number:.2f}"]))
    text = str(number)
    if type(number) is int:
        # An int's text is its ASCII digits, after a minus sign when negative.
        return [text] if len(text) - (number < 0) >= 4 else []
    return [text] if sum(c.isdigit() for c in text) >= 4 else []


class _Taken:
    """Disjoint character ranges already claimed by a pattern, sorted: an overlap test is a
    binary search (a long tool result has thousands of spans). One pattern's matches never
    overlap each other and come in order, so they are collected apart and merged in once
    the pattern is done (`settle`): inserting each into the sorted lists would move every
    later range, quadratic in a text with thousands of them."""

    __slots__ = ("ends", "new_ends", "new_starts", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.new_starts: list[int] = []
        self.new_ends: list[int] = []

    def overlaps(self, start: int, end: int) -> bool:
        """Whether ``start..end`` overlaps a range of an earlier pattern."""
        i = bisect_right(self.starts, start) - 1
        if i >= 0 and self.ends[i] > start:
            return True
        return i + 1 < len(self.starts) and self.starts[i + 1] < end

    def add(self, start: int, end: int) -> None:
        """Claim ``start..end`` for the pattern being run (after its earlier matches)."""
        self.new_starts.append(start)
        self.new_ends.append(end)

    def settle(self) -> None:
        """Merge the pattern's ranges into the sorted ones."""
        if not self.new_starts:
            return
        if not self.starts or self.starts[-1] < self.new_starts[0]:
            self.starts += self.new_starts
            self.ends += self.new_ends
        else:
            pairs = sorted(
                zip(self.starts + self.new_starts, self.ends + self.new_ends, strict=True)
            )
            self.starts = [start for start, _end in pairs]
            self.ends = [end for _start, end in pairs]
        self.new_starts, self.new_ends = [], []


def spans(text: str, found: dict[str, str], positions: dict[str, int] | None = None) -> _Taken:
    """Add the identifier-like spans of ``text`` to ``found`` (value -> kind, first kind
    kept) and, when given, where each new value first starts to ``positions``; returns the
    character ranges they took."""
    if not text or _holds_none(text):
        return _Taken()
    return _spans(text, found, positions, _ASCII_DIGIT.search(text) is not None)


def _quoted_hits(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int, str]]:
    """Each quoted value's span and value: a quote whose inside is a value."""
    for match in pattern.finditer(text):
        # One group matched: the quotes' inside. Without a capital, a digit or one of
        # ``._/@:#-`` it is no value (`whole_value`), whatever it overlaps.
        inner = match[match.lastindex or 0]
        if _IDENTIFIER_MARK.search(inner) is None:
            continue
        value = inner.strip()
        if whole_value(value):
            start, end = match.span()
            yield start, end, value


def _plain_hits(
    text: str,
    kind: str,
    finder: Callable[[str], list[tuple[int, int]]] | None,
    pattern: re.Pattern[str],
) -> Iterator[tuple[int, int, str]]:
    """Each match's span and value, from the kind's finder when it has one (`_SEARCHED`)."""
    found_spans = finder(text) if finder is not None else (m.span() for m in pattern.finditer(text))
    for start, end in found_spans:
        # An amount's match may open with a space after its currency sign.
        value = text[start:end].strip().rstrip(".,;:!?")
        yield start, end, value.strip() if kind == "amount" else value


def _spans(
    text: str, found: dict[str, str], positions: dict[str, int] | None, digits: bool
) -> _Taken:
    """`spans`, told whether ``text`` holds an ASCII digit."""
    taken = _Taken()
    if not text:
        return taken
    searched = _SEARCHED if len(text) > SHORT_TEXT_CHARS else _SEARCHED_SHORT
    for kind, pattern, finder, marks, probe, numeric in searched:
        # The pattern cannot match without what its gate names (`_GATES`).
        if numeric and not digits:
            continue
        if marks or probe is not None:
            for mark in marks:
                if mark in text:
                    break
            else:
                if probe is None or probe.search(text) is None:
                    continue
        # What the first pattern run finds overlaps nothing: no range is taken yet.
        overlaps = taken.overlaps if taken.starts else None
        add = taken.add
        hits = (
            _quoted_hits(pattern, text)
            if kind == "quoted"
            else _plain_hits(text, kind, finder, pattern)
        )
        for start, end, value in hits:
            if overlaps is not None and overlaps(start, end):
                continue
            add(start, end)
            if value not in found:
                found[value] = kind
                if positions is not None:
                    positions[value] = start
        taken.settle()
    return taken
