"""Read recorded conversations from disk into a list of chat messages.

Three shapes are accepted, detected by content (the extension is only a tie-breaker):

- ``json``: a JSON list of chat messages (OpenAI/Amplifier shape), or an OpenAI-style request
  body ``{"messages": [...], ...}``;
- ``anthropic``: an Anthropic Messages request body ``{"system": ..., "messages": [...]}``; the
  system prompt becomes a leading system message, content blocks pass through untouched;
- ``jsonl``: one message per line (the transcript format Amplifier writes), where a line may
  also wrap the message as ``{"message": {...}}``.

Every problem is raised as :class:`InputError`, which names the file, the place (line number or
message index) and what is wrong, so the CLI can print one line instead of a traceback. That
includes what a hostile file can do to a JSON parser: only regular files up to a size cap are
read (see ``files.read_regular_file``), and a number too long to convert (Python refuses
integers of more than 4,300 digits) or nesting too deep to parse is a bad file, not a crash.
This module checks the file's shape only. Checking the messages (fields, roles, tool results
that answer no call) is the context manager's job, done once by ``ContextFold.add_message``;
``places`` lets the caller name the line or index of a message it refuses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold.cli.errors import InputError
from contextfold.cli.files import DEFAULT_MAX_INPUT_BYTES, display_path, read_regular_file

FORMATS = ("auto", "json", "anthropic", "jsonl")

# Block types that only exist in Anthropic's message shape: their presence picks the format.
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


@dataclass(frozen=True)
class Conversation:
    """Messages read from a file, with where each one came from (for error messages)."""

    source: str
    format: str
    messages: list[dict[str, Any]]
    places: list[str]


def read_conversation(
    path: str | Path, fmt: str = "auto", *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES
) -> Conversation:
    """Read ``path`` as ``fmt`` (or detect it); messages are checked later, on admission.

    Only a regular file of at most ``max_bytes`` is read (a symlink to one is fine).
    """
    path = Path(path)
    source = display_path(path)
    if fmt not in FORMATS:
        raise InputError(source, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    raw = read_regular_file(path, max_bytes, what="conversation file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(source, f"not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text or text.isspace():  # as `not text.strip()`, without copying the text
        raise InputError(source, "the file is empty; expected a conversation (JSON or JSONL)")

    document: Any = _UNPARSED
    lines: list[str] | None = None
    if fmt == "auto":
        fmt, document, lines = _detect(text, path)
    if fmt == "jsonl":
        messages, places = _from_jsonl(text if lines is None else lines, source)
    else:
        if document is _UNPARSED:
            document = _parse_json(text, source)
        if fmt == "anthropic":
            messages, places = _from_anthropic(document, source)
        else:
            messages, places = _from_json(document, source)
    if not messages:
        raise InputError(source, "the conversation holds no messages")
    return Conversation(source=source, format=fmt, messages=messages, places=places)


# A document not parsed yet (``None`` is a JSON value).
_UNPARSED: Any = object()


def _detect(text: str, path: Path) -> tuple[str, Any, list[str] | None]:
    """Pick a format from the content: a whole JSON document, else one JSON value per line.

    Returns the format with what was parsed on the way, so nothing is parsed twice: the
    document when the whole text is one (else ``_UNPARSED``), and the text's lines when they
    were split to look at the first one (else ``None``).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        lines = text.splitlines()
        first = next(line for line in lines if line.strip())
        # A first line that parses on its own means JSON Lines; otherwise report it as JSON
        # (or JSONL when the extension says so) so the error points at the right place.
        try:
            json.loads(first)
        except (ValueError, RecursionError):
            jsonl = path.suffix.lower() in {".jsonl", ".ndjson"}
            return ("jsonl" if jsonl else "json"), _UNPARSED, lines
        return "jsonl", _UNPARSED, lines
    except (ValueError, RecursionError):
        return "json", _UNPARSED, None  # parsed again as JSON, which reports the problem
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return ("anthropic" if _looks_anthropic(document) else "json"), document, None
    if isinstance(document, dict) and ("role" in document or "message" in document):
        return "jsonl", _UNPARSED, None  # a one-line transcript
    return "json", document, None


def _looks_anthropic(document: Mapping[str, Any]) -> bool:
    if "system" in document:
        return True
    for message in document["messages"]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS for block in content
        ):
            return True
    return False


def _parse_json(text: str, source: str, place: str | None = None) -> Any:
    """``json.loads`` with every way it can fail on hostile input turned into InputError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = place or f"line {exc.lineno}"
        raise InputError(source, f"not valid JSON: {exc.msg} (column {exc.colno})", where) from None
    except RecursionError:
        raise InputError(
            source, "JSON nested too deeply to read (a chat message is a few levels deep)", place
        ) from None
    except ValueError:
        # The only other ValueError json raises: Python refuses to convert an integer of more
        # than sys.get_int_max_str_digits() digits (a guard against quadratic-time parsing).
        raise InputError(
            source,
            f"a number too long to read (more than {sys.get_int_max_str_digits():,} digits)",
            place,
        ) from None


def _from_json(document: Any, source: str) -> tuple[list[dict[str, Any]], list[str]]:
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        items = document["messages"]
    elif isinstance(document, list):
        items = document
    else:
        raise InputError(
            source,
            f"expected a JSON list of chat messages or an object with a 'messages' list, "
            f"found {_kind(document)}",
        )
    places = [f"message {index}" for index in range(len(items))]
    return _require_objects(items, places, source), places


def _from_anthropic(document: Any, source: str) -> tuple[list[dict[str, Any]], list[str]]:
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise InputError(
            source,
            "expected an Anthropic Messages request body: an object with a 'messages' list "
            f"(and optionally 'system'), found {_kind(document)}",
        )
    items: list[Any] = []
    places: list[str] = []
    system = document.get("system")
    if system is not None:
        if not isinstance(system, str | list):
            raise InputError(
                source, f"'system' must be a string or a list of blocks, not {_kind(system)}"
            )
        if system:  # an empty system prompt is the same as none
            items.append({"role": "system", "content": system})
            places.append("system")
    items.extend(document["messages"])
    places.extend(f"message {index}" for index in range(len(document["messages"])))
    return _require_objects(items, places, source), places


# json's own C scanner: what ``json.loads`` runs on a line, without its per-call wrapping.
# (set by JSONDecoder.__init__, an attribute typeshed does not declare)
_scan_value = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _from_jsonl(text: str | list[str], source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One message per non-blank line (``text``, or its lines already split).

    A line that is exactly one JSON object with a ``role`` (what a transcript holds) is read
    with json's C scanner alone; any other line takes the path of ``json.loads``, so every
    value, refusal and error message is that path's: the scanner accepts a line only when
    ``json.loads`` would return the very same value (no surrounding whitespace, nothing after
    the value).
    """
    lines = text.splitlines() if isinstance(text, str) else text
    scan = _scan_value
    messages: list[dict[str, Any]] = []
    append = messages.append
    blank: list[int] = []  # numbers of the blank lines skipped (rare)
    for number, line in enumerate(lines, start=1):
        try:
            value, end = scan(line, 0)
        except (StopIteration, ValueError, RecursionError):
            end = -1  # not a bare value: blank, surrounded by whitespace, or bad
        if end == len(line) and type(value) is dict and "role" in value:
            append(value)
            continue
        if not line.strip():
            blank.append(number)
            continue
        append(_jsonl_message(line, source, f"line {number}"))
    if blank:
        skipped = set(blank)
        numbers: Iterable[int] = (n for n in range(1, len(lines) + 1) if n not in skipped)
    else:
        numbers = range(1, len(lines) + 1)
    return messages, [f"line {number}" for number in numbers]


def _jsonl_message(line: str, source: str, place: str) -> dict[str, Any]:
    """A JSONL line that is not simply a message object: parsed by ``json.loads``, unwrapped
    from ``{"message": {...}}``, or refused."""
    value = _parse_json(line, source, place)
    # Transcript writers often wrap each message with bookkeeping: {"message": {...}, ...}.
    if isinstance(value, dict) and "role" not in value and isinstance(value.get("message"), dict):
        value = value["message"]
    if not isinstance(value, dict) or "role" not in value:
        raise InputError(
            source,
            "expected one chat message per line (an object with 'role', or one wrapping it "
            f"under 'message'), found {_kind(value)}",
            place,
        )
    return value


def _require_objects(items: list[Any], places: list[str], source: str) -> list[dict[str, Any]]:
    for item, place in zip(items, places, strict=True):
        if not isinstance(item, dict):
            raise InputError(source, f"expected a chat message object, found {_kind(item)}", place)
    return items


def _kind(value: Any) -> str:
    """Name a JSON value's type the way a user who wrote the file would."""
    if value is None:
        return "null"
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
