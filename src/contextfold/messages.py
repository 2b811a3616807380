"""The message shapes contextfold accepts, their validation and their classification.

Accepted shapes (one history may mix them):
- Amplifier/OpenAI chat dicts: ``role``, ``content`` (str, None or a list of blocks),
  ``tool_calls`` (OpenAI ``{"id", "type": "function", "function": {"name", "arguments"}}``
  or Amplifier ``{"id", "tool", "arguments"}``), ``tool_call_id``, ``name``, ``metadata``;
- Anthropic content blocks: ``tool_use`` in assistant content, ``tool_result`` in user
  content, ``thinking`` (with ``signature``) and ``redacted_thinking``.

Validation happens once, at admission, and is all-or-nothing: a refused message raises
`MessageValidationError` naming the field and the fix, and nothing is stored. Only *shape*
errors are refused here (no provider could accept the message whatever came before it).
Sequence faults that real runs produce (an orphan result, an unanswered call, a reused call
id) are a fact of the record: `history` admits them and `repair` mends them in the view.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from . import conventions
from .errors import MessageValidationError

ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# Which metadata sources name a person (`conventions.is_human_prompt`).
HUMAN_SOURCES = conventions.HUMAN_SOURCES
NOTICE_SOURCE = "context-fold"


class Kind(StrEnum):
    """What a message is, for protection and compaction."""

    SYSTEM = "system"
    HUMAN = "human"  # a prompt typed by a person
    USER = "user"  # user-role but not human: hook injection, reminder, other
    ASSISTANT = "assistant"
    TOOL_RESULT = "tool_result"  # role tool, or a user message carrying tool_result blocks


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """Facts about one admitted message, computed once."""

    kind: Kind
    call_ids: tuple[str, ...]  # tool calls this message makes
    result_ids: tuple[str, ...]  # calls this message says it answers ("" where no id is given)
    signed_thinking: bool  # carries a thinking block with a signature (or redacted thinking)
    thinking: bool  # carries thinking or redacted_thinking blocks (strippable from old turns)
    loaded_tool_state: bool  # metadata records loaded-tool state: never compacted
    reminder: bool  # an ephemeral+persisted user-role reminder envelope
    reference_only: bool = False  # metadata.amplifier_public_reference_only: history only
    # Holds a lone surrogate (kept as admitted): its view carries U+FFFD in its place.
    ill_formed: bool = False


# The stored form of a MessageInfo (kept beside a message's cost in a durable session, so a
# resume rebuilds history without classifying every message again). Bump the version
# whenever what `inspect_message` concludes could change for a message already stored: a
# stored form of another version is ignored and the message inspected again.
INFO_FORM_VERSION = 1
_INFO_FLAGS = (
    "signed_thinking",
    "thinking",
    "loaded_tool_state",
    "reminder",
    "reference_only",
    "ill_formed",
)
_KINDS = {kind.value: kind for kind in Kind}
# The flags follow call_ids and result_ids in MessageInfo's field order (positional below).
assert tuple(f.name for f in fields(MessageInfo))[3:] == _INFO_FLAGS


# json.loads's C scanner called directly (json.loads costs as much again around it).
# typeshed types its argument as a scanner; it reads the decoder's settings from any object.
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def info_to_json(info: MessageInfo) -> str:
    """``info`` as compact JSON text: ``[version, kind, call_ids, result_ids, flags]``."""
    flags = 0
    for bit, name in enumerate(_INFO_FLAGS):
        if getattr(info, name):
            flags |= 1 << bit
    form = [INFO_FORM_VERSION, info.kind.value, list(info.call_ids), list(info.result_ids), flags]
    return json.dumps(form, ensure_ascii=False, separators=(",", ":"))


def info_from_json(text: str) -> MessageInfo | None:
    """The inverse of `info_to_json`; None for another version's form (inspect again).

    Raises ValueError for text that is not such a form. A MessageInfo is immutable, so a
    reader may share one among the messages of the same form (most carry no ids). Read
    once per stored message on a resume, so it checks with plain type tests.
    """
    try:
        form, end = _scan_json(text, 0)
    except (StopIteration, TypeError, ValueError):
        end = -1
    if end != len(text) or type(form) is not list or not form or type(form[0]) is not int:
        raise ValueError(f"a stored classification is not one: {text!r:.80}")
    if form[0] != INFO_FORM_VERSION:
        return None
    if len(form) == 5:
        _, kind, call_ids, result_ids, flags = form
        kind = _KINDS.get(kind) if type(kind) is str else None
        if (
            kind is not None
            and type(call_ids) is list
            and type(result_ids) is list
            and type(flags) is int
            and 0 <= flags < len(_FLAG_VALUES)
            and all(type(item) is str for item in call_ids + result_ids)
        ):
            return MessageInfo(kind, tuple(call_ids), tuple(result_ids), *_FLAG_VALUES[flags])
    raise ValueError(f"a stored classification has an unknown shape: {text!r:.80}")


# The flags' values for each bit pattern, indexed by the stored integer. (A form with the
# ill_formed bit, added later, is refused by an older reader, which then inspects the message
# again; a form without it was written when lone surrogates were refused.)
_FLAG_VALUES = tuple(
    tuple(bool(bits & (1 << bit)) for bit in range(len(_INFO_FLAGS)))
    for bits in range(1 << len(_INFO_FLAGS))
)


def _fail(problem: str, field: str, fix: str, index: int | None) -> MessageValidationError:
    return MessageValidationError(problem, field=field, fix=fix, index=index)


def canonical_json(message: Mapping[str, Any], *, index: int | None = None) -> str:
    """Compact JSON of a message; refuses what a provider request could not carry."""
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise _fail(
            "is nested too deeply to serialise",
            "content",
            "Flatten the structure (a provider request carries a few levels of nesting), or "
            "pass deep data as a JSON string",
            index,
        ) from None
    except (TypeError, ValueError) as exc:
        raise _fail(
            f"not JSON-serialisable ({exc})",
            _find_bad_field(message) or "content",
            "Convert it to plain JSON types (str, int, float, bool, None, list, dict with "
            "str keys) before adding it, e.g. str() a Pydantic model's output or use "
            "model_dump(mode='json')",
            index,
        ) from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (a tool that decoded bytes with surrogateescape): admitted as they
        # are, and written as JSON escapes, so the text is UTF-8 and reads back the same.
        return escape_surrogates(text)
    return text


# Code points U+D800-U+DFFF: in a Python str, a surrogate alone (UTF-8 cannot encode it).
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(json_text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with every lone surrogate written
    as its ``\\uXXXX`` escape: valid UTF-8 that ``json.loads`` reads back to the same
    string. A surrogate can only sit inside a JSON string, where the escape means it."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", json_text)


def well_formed_text(text: str) -> str:
    """``text`` as a provider's request can carry it: each lone surrogate replaced by U+FFFD
    (a high surrogate followed by a low one joined into the character they encode), which
    is also how tiktoken counts it; ``text`` itself when it has none (nearly always)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def well_formed(value: Any) -> Any:
    """``value`` (a message, or any JSON value) with `well_formed_text` applied to every
    string, keys included: a new container where something changed, else ``value`` itself."""
    kind = type(value)
    if kind is str:
        return well_formed_text(value)
    if kind is dict:
        changed = None
        for key, item in value.items():
            new_key, new_item = well_formed(key), well_formed(item)
            if new_key is not key or new_item is not item:
                changed = changed if changed is not None else {}
                changed[key] = (new_key, new_item)
        if changed is None:
            return value
        return dict(changed.get(k, (k, v)) for k, v in value.items())
    if kind is list:
        items = [well_formed(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    return value


def private_copy(message: Mapping[str, Any], *, index: int | None = None) -> dict[str, Any]:
    """A private copy of a message made of plain JSON types: what ``json.loads`` of its
    `canonical_json` gives, with the same refusals (see `canonical_json`).

    A message already made of plain types (dicts with string keys, lists, strings, finite
    floats, ints, bools, None) is copied directly, strings shared: the same value as the
    round trip at a third of its cost. Anything else (a tuple, a str or int subclass, a
    non-string key, NaN, a lone surrogate, a cycle, deep nesting) takes the round trip,
    which converts it or raises the usual error.
    """
    return admitted_copy(message, index=index)[0]


def admitted_copy(
    message: Mapping[str, Any], *, index: int | None = None
) -> tuple[dict[str, Any], bool]:
    """`private_copy`, and whether the copy holds a lone surrogate: only a copy that took
    the round trip can (the direct copy leaves every such string to it), so the common
    case costs no extra look."""
    if type(message) is dict:
        try:
            return _plain_copy(message, 0), False
        except _NotPlain:
            pass
    copied: dict[str, Any] = json.loads(canonical_json(message, index=index))
    return copied, holds_lone_surrogate(copied)


class _NotPlain(Exception):
    """A value `_plain_copy` leaves to the JSON round trip."""


def _plain_text(text: str) -> None:
    """Refuse (to the round trip) a string with a lone surrogate: UTF-8 cannot carry it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _NotPlain from None


def _plain_copy(value: dict[str, Any], depth: int) -> dict[str, Any]:
    """A copy of a dict of plain JSON types; raises `_NotPlain` for anything else.

    Only containers are copied; every leaf is checked, since the copy must be exactly what
    the JSON round trip would have stored, and the round trip's refusals must still happen.
    ``depth`` counts the containers above: deep nesting is left to the round trip, whose
    encoder refuses it ("nested too deeply") at a depth of its own.
    """
    if depth > _MAX_PLAIN_DEPTH:
        raise _NotPlain
    depth += 1
    out = value.copy()
    for key, item in out.items():
        if type(key) is not str:
            raise _NotPlain  # json.dumps would turn it into a string
        if not key.isascii():
            _plain_text(key)
        kind = type(item)
        if kind is str:
            if not item.isascii():  # ASCII (nearly all) cannot hold a surrogate
                _plain_text(item)
        elif kind is dict:
            out[key] = _plain_copy(item, depth)
        elif kind is list:
            out[key] = _plain_list(item, depth)
        elif not _plain_scalar(kind, item):
            raise _NotPlain
    return out


def _plain_list(value: list[Any], depth: int) -> list[Any]:
    """`_plain_copy` for a list."""
    if depth > _MAX_PLAIN_DEPTH:
        raise _NotPlain
    depth += 1
    out = value.copy()
    for index, item in enumerate(out):
        kind = type(item)
        if kind is str:
            if not item.isascii():
                _plain_text(item)
        elif kind is dict:
            out[index] = _plain_copy(item, depth)
        elif kind is list:
            out[index] = _plain_list(item, depth)
        elif not _plain_scalar(kind, item):
            raise _NotPlain
    return out


def _plain_scalar(kind: type, item: Any) -> bool:
    """Whether a non-string leaf is stored by the round trip as it is."""
    if kind is int:
        number: int = item
        return -_INT_LIMIT <= number <= _INT_LIMIT  # a huge int: json has a digit limit
    if kind is float:
        real: float = item
        return real - real == 0.0  # not inf or nan, which allow_nan=False refuses
    return kind is bool or item is None


# Containers nested deeper than this take the round trip, so that only json.dumps decides
# what is nested too deeply (it refuses from a few hundred levels, by the stack it has left).
_MAX_PLAIN_DEPTH = 64
_INT_LIMIT = 2**63  # beyond it, leave the int to the round trip (and its digit limit)


def _find_bad_field(value: Any, path: str = "") -> str | None:
    """Dotted path of the first value json.dumps would refuse, for a precise error."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}.{key!r}" if path else repr(key)
            found = _find_bad_field(item, f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _find_bad_field(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
        return path or "value"
    if value is None or isinstance(value, str | int | float | bool):
        return None
    return path or "value"


def to_plain(message: Any) -> Any:
    """``message`` with Pydantic models (Amplifier's ``Message``, ``TextBlock``, ``ToolCall``,
    ...) turned into their JSON form, so a loop that hands over typed objects is served.

    Only the places such objects occur are looked at: the message itself, its content
    blocks and its tool calls. Anything else is left for validation to judge.
    """
    message = _dumped(message)
    if not isinstance(message, Mapping):
        return message
    content: Any = message.get("content")
    tool_calls: Any = message.get("tool_calls")
    typed_content = isinstance(content, list) and any(_is_model(b) for b in content)
    typed_calls = isinstance(tool_calls, list) and any(_is_model(c) for c in tool_calls)
    if not (typed_content or typed_calls):
        return message
    plain = dict(message)
    if typed_content:
        plain["content"] = [_dumped(b) for b in content]
    if typed_calls:
        plain["tool_calls"] = [_dumped(c) for c in tool_calls]
    return plain


def _is_model(value: Any) -> bool:
    if type(value) is dict:  # the usual case, without the ABC check
        return False
    return not isinstance(value, Mapping) and callable(getattr(value, "model_dump", None))


def _dumped(value: Any) -> Any:
    if not _is_model(value):
        return value
    try:
        return value.model_dump(mode="json", exclude_none=True)
    except Exception:  # a model that cannot dump itself is judged as the object it is
        return value


def inspect_message(message: Any, *, index: int | None) -> MessageInfo:
    """Check the shape of one message and classify it, independently of what came before.

    Which results answer which calls is history's business (`history`), so a result with
    no matching call is not an error here.
    """
    if type(message) is not dict and not isinstance(message, Mapping):
        raise _fail(
            f"expected a dict with 'role' and 'content', got {type(message).__name__}",
            "message",
            "Pass each message as a dict such as {'role': 'user', 'content': 'hi'}",
            index,
        )
    role = message.get("role")
    if role is None:
        raise _fail(
            "is missing",
            "role",
            f"Every message needs a role, one of: {', '.join(ROLES)}",
            index,
        )
    if role not in ROLES:
        raise _fail(
            f"unknown role {role!r}",
            "role",
            f"Use one of: {', '.join(ROLES)} (Anthropic tool results go in a 'user' message "
            "as tool_result blocks)",
            index,
        )
    metadata = message.get("metadata")
    if metadata is not None and type(metadata) is not dict and not isinstance(metadata, Mapping):
        raise _fail(
            f"must be a dict, got {type(metadata).__name__}",
            "metadata",
            "Pass metadata as a dict or leave it out",
            index,
        )
    # Metadata holding only keys no convention reads (the admission stamp) marks nothing:
    # the flag checks below are skipped for it, as for no metadata at all.
    if metadata is None or conventions.marks_nothing(metadata):
        metadata = {}

    blocks = _check_content(role, message.get("content"), index)
    call_ids = _collect_call_ids(role, message, blocks, index)
    result_ids = _collect_result_ids(role, message, blocks, index)
    # Thinking is looked for only where it can be: assistant turns (most messages are not).
    thinking = signed_thinking = False
    if role == "assistant":
        for block in blocks:
            kind = block.get("type")
            if kind == "redacted_thinking" or (kind == "thinking" and block.get("signature")):
                signed_thinking = thinking = True
            elif kind == "thinking":
                thinking = True
        side_block = message.get("thinking_block")
        if isinstance(side_block, Mapping) and side_block.get("signature"):
            signed_thinking = True
        thinking = thinking or not _THINKING_KEY_SET.isdisjoint(message)
    loaded_tool_state = bool(metadata) and (
        bool(metadata.get("loaded_tools"))
        or metadata.get("kind") == "loaded_tool_state"
        or conventions.carries_loaded_tool_state(message)
    )
    kind = _classify(role, result_ids, message)
    reminder = bool(metadata) and conventions.is_persisted_reminder(message)
    reference_only = bool(metadata) and conventions.is_reference_only(message)
    if call_ids or result_ids:
        return MessageInfo(
            kind,
            call_ids,
            result_ids,
            signed_thinking,
            thinking,
            loaded_tool_state,
            reminder,
            reference_only,
        )
    # Without ids a classification is its kind and flags alone: most messages share one of
    # a few immutable infos (building a frozen dataclass costs a third of an inspection).
    return info_without_ids(
        kind, signed_thinking, thinking, loaded_tool_state, reminder, reference_only
    )


def info_without_ids(
    kind: Kind,
    signed_thinking: bool = False,
    thinking: bool = False,
    loaded_tool_state: bool = False,
    reminder: bool = False,
    reference_only: bool = False,
    ill_formed: bool = False,
) -> MessageInfo:
    """The shared classification of a message that makes and answers no calls."""
    key = (kind, signed_thinking, thinking, loaded_tool_state, reminder, reference_only, ill_formed)
    info = _WITHOUT_IDS.get(key)
    if info is None:
        info = _WITHOUT_IDS[key] = MessageInfo(kind, (), (), *key[1:])
    return info


def holds_lone_surrogate(value: Any) -> bool:
    """Whether any string in ``value`` (keys included) holds a lone surrogate. Plain loops
    and exact type tests: it runs on every message inspected, and most strings are ASCII
    (one C call each)."""
    kind = type(value)
    if kind is str:
        return not value.isascii() and _ill_formed(value)
    if kind is dict or (kind not in _SCALARS and isinstance(value, Mapping)):
        for key, item in value.items():
            if type(key) is str and not key.isascii() and _ill_formed(key):
                return True
            if type(item) not in _SCALARS and holds_lone_surrogate(item):
                return True
        return False
    if kind is list or kind is tuple:
        for item in value:
            if type(item) not in _SCALARS and holds_lone_surrogate(item):
                return True
    return False


_SCALARS = frozenset({int, float, bool, type(None)})


def _ill_formed(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# The shared infos of messages that make and answer no calls: at most 5 kinds x 64 flag sets.
_WITHOUT_IDS: dict[tuple[Any, ...], MessageInfo] = {}


THINKING_TYPES = ("thinking", "redacted_thinking")
# Copies of a turn's thinking kept beside its content: Amplifier's loops store the signed
# block as ``thinking_block``; its CLI transcripts turn that into ``thinking_text``.
THINKING_KEYS = ("thinking_block", "thinking_text")
_THINKING_KEY_SET = frozenset(THINKING_KEYS)


def _classify(role: str, result_ids: tuple[str, ...], message: Mapping[str, Any]) -> Kind:
    if role in ("system", "developer"):
        # A hook's injection is context for the model, not the system prompt: it may be
        # compacted like any note (the kernel stores one per tool:post on some setups).
        return Kind.USER if conventions.is_hook_injection(message) else Kind.SYSTEM
    if role in ("tool", "function") or result_ids:
        return Kind.TOOL_RESULT
    if role == "assistant":
        return Kind.ASSISTANT
    # The reference's rule: by metadata and envelope, not by role (hook injections,
    # reminders, ephemeral notes, history-only rows and <system-reminder> envelopes are
    # user-role but not a person's words).
    return Kind.HUMAN if conventions.is_human_prompt(message) else Kind.USER


def _check_content(role: str, content: Any, index: int | None) -> list[Mapping[str, Any]]:
    """Check the content field; return its blocks (empty for string or absent content).

    Absent content is admitted for every role (an empty assistant turn is legal; an empty
    user or tool message is a fact of some transcripts and is mended in the view).
    """
    if content is None or isinstance(content, str):
        return []
    if role in ("tool", "function") and not _looks_like_blocks(content):
        if isinstance(content, Mapping | list):
            return []  # a ToolResult's dict/list output is stored as given, JSON-checked later
        raise _fail(
            f"must be a string, a list of content blocks or a JSON object, got "
            f"{type(content).__name__}",
            "content",
            "Serialise the tool's output, e.g. str(output) or json.dumps(output)",
            index,
        )
    if not isinstance(content, list):
        raise _fail(
            f"must be a string or a list of content blocks, got {type(content).__name__}",
            "content",
            "Pass text as a string, or blocks such as [{'type': 'text', 'text': '...'}]",
            index,
        )
    for i, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _fail(
                "is not a content block (a dict with a string 'type')",
                f"content[{i}]",
                "Each block needs a type, e.g. {'type': 'text', 'text': '...'}",
                index,
            )
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise _fail(
                f"text must be a string, got {type(block.get('text')).__name__}",
                f"content[{i}].text",
                "Give a text block its text as a string, e.g. str(value)",
                index,
            )
    return content


def _looks_like_blocks(content: Any) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content)
    )


def _collect_call_ids(
    role: str, message: Mapping[str, Any], blocks: list[Mapping[str, Any]], index: int | None
) -> tuple[str, ...]:
    tool_calls = message.get("tool_calls")
    ids: list[str] = []
    if tool_calls is not None:
        if role != "assistant":
            raise _fail(
                f"only assistant messages make tool calls, this one has role {role!r}",
                "tool_calls",
                "Move the tool calls to an assistant message",
                index,
            )
        if not isinstance(tool_calls, list):
            raise _fail(
                f"must be a list, got {type(tool_calls).__name__}",
                "tool_calls",
                "Pass a list of calls such as [{'id': 'call_1', 'tool': 'read', 'arguments': {}}]",
                index,
            )
        for i, call in enumerate(tool_calls):
            ids.append(_check_call(call, f"tool_calls[{i}]", index))
    for i, block in enumerate(blocks):
        if block.get("type") in ("tool_use", "tool_call"):
            if role != "assistant":
                raise _fail(
                    f"a {block['type']} block belongs in an assistant message, not {role!r}",
                    f"content[{i}]",
                    "Move the tool call to the assistant message that makes it",
                    index,
                )
            call_id = _require_id(
                block.get("id"), f"content[{i}].id", "Give every tool_use block a unique id", index
            )
            if call_id not in ids:  # Amplifier may carry the same call as block and list entry
                ids.append(call_id)
    if len(set(ids)) != len(ids):
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise _fail(
            f"tool call id {repeated!r} is used twice in one message",
            "tool_calls",
            "Give each call of a message its own id; results refer to calls by id",
            index,
        )
    return tuple(ids)


def _check_call(call: Any, field: str, index: int | None) -> str:
    if not isinstance(call, Mapping):
        raise _fail("is not a dict", field, "Each tool call is a dict with an 'id'", index)
    call_id = _require_id(
        call.get("id"),
        f"{field}.id",
        "Give every tool call an id; its result refers to it by tool_call_id",
        index,
    )
    function = call.get("function")
    name = call.get("tool") or call.get("name")
    if isinstance(function, Mapping):
        name = name or function.get("name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise _fail(
                f"must be a JSON string in the OpenAI shape, got {type(arguments).__name__}",
                f"{field}.function.arguments",
                "Pass json.dumps(arguments), or use the Amplifier shape "
                "{'id', 'tool', 'arguments': {...}} which takes a dict",
                index,
            )
    if not isinstance(name, str) or not name:
        raise _fail(
            "has no tool name",
            field,
            "Name the tool: OpenAI shape {'function': {'name': ...}} or Amplifier "
            "shape {'tool': ...}",
            index,
        )
    return call_id


def _require_id(value: Any, field: str, fix: str, index: int | None) -> str:
    if value is None:
        raise _fail("has no 'id'", field, fix, index)
    if not isinstance(value, str) or not value:
        raise _fail(f"must be a non-empty string, got {value!r:.40}", field, fix, index)
    return value


def _collect_result_ids(
    role: str, message: Mapping[str, Any], blocks: list[Mapping[str, Any]], index: int | None
) -> tuple[str, ...]:
    """The call ids this message answers, in order; "" where a result names none."""
    if role == "tool":
        return (_result_id(message.get("tool_call_id"), "tool_call_id", index),)
    if role != "user":
        return ()
    ids: list[str] = []
    for i, block in enumerate(blocks):
        if block.get("type") == "tool_result":
            value = block.get("tool_use_id", block.get("tool_call_id"))
            ids.append(_result_id(value, f"content[{i}].tool_use_id", index))
    return tuple(ids)


def _result_id(value: Any, field: str, index: int | None) -> str:
    if value is None or value == "":
        return ""  # a result that names no call: admitted, mended in the view as a note
    if not isinstance(value, str):
        raise _fail(
            f"must be the string id of the call it answers, got {type(value).__name__} "
            f"{value!r:.40}",
            field,
            "Pass the call's id as a string, e.g. str(call_id)",
            index,
        )
    return value


def content_text(content: Any, separator: str = "") -> str:
    """A message content's text: the string itself, or its text blocks' texts joined by
    ``separator`` (other blocks carry none); anything else is empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return separator.join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""


def block_texts(
    blocks: list[Any], call_text: Callable[[Mapping[str, Any]], str] | None = None
) -> list[str]:
    """The texts of a content list, in order: text blocks, and a tool_result block's content
    (its string, or its own blocks' texts); with ``call_text``, what it makes of each
    tool_use (or tool_call) block too. Other blocks (images, thinking) carry none."""
    parts: list[str] = []
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
                parts.extend(block_texts(inner, call_text))
        elif call_text is not None and kind in ("tool_use", "tool_call"):
            parts.append(call_text(block))
    return parts


def text_length(message: Mapping[str, Any]) -> int:
    """Characters of text a message carries (for choosing what is worth shortening)."""
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            if isinstance(block, Mapping):
                if block.get("type") == "text":
                    total += len(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    total += _result_length(block.get("content"))
                else:
                    total += 200  # images and other blocks: worth shortening a result
        return total
    if content is None:
        return 0
    return len(json.dumps(content, ensure_ascii=False, default=str))


def _result_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return text_length({"content": content})
    return 0 if content is None else len(str(content))
