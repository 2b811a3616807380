"""The message conventions Amplifier's reference context module (``context-simple``) honours.

Each function here is pure (no manager state) and says, in its docstring, what the
reference does and why, so contextfold can behave the same where a host relies on it and
differ only on purpose. Read from the reference's public code and tests
(``microsoft/amplifier-module-context-simple``: ``__init__.py``, ``request_view.py`` and
``tests/test_timestamps.py``, ``test_public_history_request_view.py``,
``test_request_retention.py``, ``test_replay_last_user.py``) and its README.

The system prompt factory (``set_system_prompt_factory``)
---------------------------------------------------------
Amplifier's foundation calls ``await context.set_system_prompt_factory(factory)`` when the
context has the method, so AGENTS.md, bundle instructions and @mentions are re-read on
every turn; without it the session keeps one static system message that goes stale.

What the reference does with it:

- ``set_system_prompt_factory`` is itself ``async`` and only stores the factory
  (a later call replaces it; there is no way to unset it but ``None`` is not refused).
- The factory is an *async* callable taking no arguments and returning the prompt text.
  It is awaited on **every** request: ``get_messages_for_request`` and
  ``get_messages_for_request_retaining`` alike, before any budget arithmetic, so two
  requests in a row call it twice. Nothing is cached between requests; a changed result
  shows on the very next request.
- Its result becomes ``{"role": "system", "content": text}`` at position 0 of the view
  (no metadata). It is **not** stored in history: ``get_messages()`` never shows it.
- While a factory is set, stored messages with ``role == "system"`` are left out of the
  view (the factory's text replaces them), **except** hook injections
  (``metadata.source == "hook"``), which stay where they are. Only the role ``system`` is
  filtered; a stored ``developer`` message is kept (`replaced_by_system_prompt`).
- The factory's message is part of what is counted and fitted: it is a system message,
  so compaction never removes or truncates it; the compaction notice goes at position 1,
  right after it.
- If the factory raises, the exception propagates out of the request unchanged (the
  reference catches nothing): no view, no compaction state change.

`resolve_system_prompt` runs a factory the same way, and fails clearly on what the
reference would pass on silently (a non-text result would reach the provider as a
malformed system message).

Request retention (``get_messages_for_request_retaining``)
-----------------------------------------------------------
``get_messages_for_request_retaining(*, retain_contents, provider=None, token_budget=None,
hard_fit=False)`` is the reference's request path with a per-request requirement; the
reference also registers it as the ``context.request_retention`` capability (the bound
method itself: ``capability(retain_contents=[...])`` returns the view), and its plain
``get_messages_for_request`` is the same path with ``retain_contents=[]``.

- ``retain_contents`` names the exact ``content`` strings of persisted reminder envelopes
  (`is_persisted_reminder`: user role, ``metadata.ephemeral is True`` and
  ``metadata.persisted`` truthy) that the next request must carry complete. Identity is
  exact string equality of the whole ``content``; quoting the reminder's XML inside a human
  prompt does not make that prompt the reminder.
- For each body, only the **newest** matching admitted envelope is kept (an older copy of
  the same body may still be compacted away), so the view holds it exactly once.
- A body that matches no admitted envelope raises ``ValueError`` whose message contains
  "not in admitted history", before any compaction state changes.
- A required set that cannot fit (with the system messages and the first and last human
  prompts) raises amplifier-core's ``ContextLengthError`` whose message contains
  "Required content was not discarded", and rolls back every sticky decision the attempt
  staged (no ``context:compaction`` event is emitted for it).
- Retention is per request, never a pin: the next call without the body may compact it
  away again; history is never rewritten; a resumed transcript (``set_messages``) can be
  retained the same way.
- ``hard_fit=True`` (a provider-directed forced refit after an overflow) targets the
  supplied ``token_budget`` itself (``target_tokens == token_budget``) instead of
  ``target_usage * budget``, with or without retained bodies; the forced view then becomes
  the sticky view later ordinary requests reuse. An explicit ``token_budget`` without
  ``hard_fit`` keeps the ordinary ``target_usage`` semantics.

`normalize_retain_contents` checks the argument's shape the way contextfold refuses bad
input: clearly, before anything is computed.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TypeVar

SystemPromptFactory = Callable[[], Awaitable[str] | str]

TIMESTAMP_KEY = "timestamp"

# The three history-only metadata keys, all inside ``metadata`` (request_view.py).
PUBLIC_MESSAGE_KEY = "amplifier_public_message"
PUBLIC_COPY_SOURCE_KEY = "amplifier_public_copy_source"
PUBLIC_REFERENCE_ONLY_KEY = "amplifier_public_reference_only"
HISTORY_ONLY_METADATA = frozenset(
    {PUBLIC_MESSAGE_KEY, PUBLIC_COPY_SOURCE_KEY, PUBLIC_REFERENCE_ONLY_KEY}
)

HOOK_SOURCE = "hook"
# A user-role message is a human prompt unless its metadata says it came from elsewhere:
# hook injections, reminders and our own notices are user-role but not human input
# (`is_human_prompt`).
HUMAN_SOURCES = frozenset({"user", "human", "cli", "prompt", "repl", "api"})

# Provider state carried on a message's metadata that must not be dropped: the OpenAI
# provider replays ``openai:tool_search_items`` (the tool_search_call/tool_search_output
# items) from each message's own metadata; without it every tool the model discovered
# ceases to exist and the prompt cache breaks forward. Keyed on metadata, not on a
# provider name, so another provider's equivalent is one more key.
LOADED_TOOL_STATE_METADATA_KEYS = frozenset({"openai:tool_search_items"})

# ``<system-reminder>`` or ``<system-reminder source="...">`` (any attributes) at the start
# of the text, after whitespace: a synthetic envelope, not words a person typed.
_REMINDER_ENVELOPE = re.compile(r"<system-reminder(?:>|\s)")
# The same, after any leading whitespace, matched in place (no stripped copy of a long text).
_LEADING_REMINDER_ENVELOPE = re.compile(r"\s*<system-reminder(?:>|\s)")
_REMINDER_SOURCE = re.compile(r"""<system-reminder\s[^>]*?\bsource\s*=\s*(["'])(.*?)\1""")

SYSTEM_ROLES = frozenset({"system", "developer"})


def _metadata(message: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = message.get("metadata")
    # A plain dict (nearly always) skips the ABC check, which costs more than the rest.
    if type(metadata) is dict or isinstance(metadata, Mapping):
        return metadata
    return _NO_METADATA


_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

# Metadata keys no convention here reads: metadata holding only these marks nothing (not
# history-only, ephemeral, a hook's, a reminder, loaded-tool state, nor a source). Every
# admitted message carries the admission stamp, so this is the usual metadata.
INERT_METADATA_KEYS = frozenset({TIMESTAMP_KEY})


def marks_nothing(metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` (a message's, as `_metadata` reads it) sets no convention."""
    return not metadata or metadata.keys() <= INERT_METADATA_KEYS


# -- metadata.timestamp ---------------------------------------------------------------------


def utc_timestamp(now: datetime | None = None) -> str:
    """The reference's timestamp text: UTC ISO-8601 with milliseconds and an explicit
    offset, ``datetime.now(UTC).isoformat(timespec="milliseconds")``, for example
    ``2026-02-06T10:00:00.123+00:00``. An aware ``now`` is converted to UTC; a naive one is
    refused (its zone is unknowable, and a wrong replay clock is worse than an error)."""
    if now is None:
        return _now_text()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("utc_timestamp needs an aware datetime (e.g. datetime.now(UTC))")
    return now.astimezone(UTC).isoformat(timespec="milliseconds")


def _now_text() -> str:
    """The current time as `utc_timestamp` writes it, formatted once per millisecond: a
    replay admits thousands of messages a second, and the formatting is most of a stamp."""
    global _last_stamp
    millis = time.time_ns() // 1_000_000
    last_millis, text = _last_stamp
    if millis != last_millis:
        moment = datetime.fromtimestamp(millis / 1000, UTC)
        text = moment.isoformat(timespec="milliseconds")
        _last_stamp = (millis, text)
    return text


_last_stamp: tuple[int, str] = (-1, "")  # the millisecond last formatted, and its text


def stamp_timestamp(message: Any, *, now: datetime | None = None) -> Any:
    """The message as the reference admits it: with ``metadata.timestamp`` when missing.

    The reference's ``add_message`` stamps the admission time into ``metadata.timestamp``
    (the CLI replays sessions with these for timing) unless the key is already present,
    whatever its value, and keeps every other metadata key. It builds a new message
    (``{**message, "metadata": {**metadata, "timestamp": ...}}``), so the caller's dict
    and its metadata are never mutated; a message that already has one is returned as is.
    ``set_messages`` (resume) does not stamp: a transcript keeps its own times.

    Anything that is not a mapping with a mapping (or missing/None) ``metadata`` is
    returned unchanged, for validation to refuse with its own clear error.
    """
    if type(message) is not dict and not isinstance(message, Mapping):
        return message
    metadata = message.get("metadata")
    if metadata is None:
        metadata = {}
    elif type(metadata) is not dict and not isinstance(metadata, Mapping):
        return message
    if TIMESTAMP_KEY in metadata:
        return message
    return {**message, "metadata": {**metadata, TIMESTAMP_KEY: utc_timestamp(now)}}


# -- public history rows -------------------------------------------------------------------


def is_reference_only(message: Mapping[str, Any]) -> bool:
    """Whether a row is history only: ``metadata.amplifier_public_reference_only is True``.

    The reference keeps such a row in history (``get_messages``, transcripts) but leaves it
    out of every request view before anything is counted or fitted: it is never sent, never
    counted toward the trigger, and so never protected as the last human prompt. Only the
    boolean ``True`` counts (``False``, ``1`` or ``"true"`` leave the row in the view).
    """
    return _metadata(message).get(PUBLIC_REFERENCE_ONLY_KEY) is True


_MessageT = TypeVar("_MessageT", bound=Mapping[str, Any])


def request_form(message: _MessageT) -> _MessageT | dict[str, Any]:
    """The form of a message the model sees: without the history-only metadata keys.

    ``amplifier_public_message`` (the public original a row was expanded from),
    ``amplifier_public_copy_source`` (copy lineage) and ``amplifier_public_reference_only``
    are history facts, never model context: the reference strips them from the view's copy
    and keeps them in history. Every other metadata key stays. When nothing is stripped the
    same object is returned (no copy on the hot path); otherwise a new dict with a new
    metadata dict, the original untouched. Reference-only rows are the caller's to drop
    first (`is_reference_only`).
    """
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping) or HISTORY_ONLY_METADATA.isdisjoint(metadata):
        return message
    kept = {k: v for k, v in metadata.items() if k not in HISTORY_ONLY_METADATA}
    return {**message, "metadata": kept}


# -- roles and sources ---------------------------------------------------------------------


def is_system_role(role: Any) -> bool:
    """Whether a role is treated as the system prompt: ``system`` or ``developer``.

    The reference checks ``role == "system"`` only: a ``developer`` message (OpenAI's
    newer name for the same thing) is neither protected as a system message nor replaced
    by the system prompt factory there. contextfold treats ``developer`` as system for
    protection on purpose: it carries the same instructions and losing it loses them.
    """
    return role in SYSTEM_ROLES


def is_hook_injection(message: Mapping[str, Any]) -> bool:
    """Whether a message is a hook's injection: ``metadata.source == "hook"``.

    Amplifier's kernel stores a hook's ``inject_context`` at once, as role ``system`` by
    default (``user`` when the hook says so), marked ``metadata.source = "hook"``. The
    reference keeps hook system messages in the view when a system prompt factory replaces
    the stored system messages (they are per-turn context, not the system prompt), and, as
    system messages, never removes them. Whatever the role, a hook injection is never a
    human prompt.
    """
    return _metadata(message).get("source") == HOOK_SOURCE


def replaced_by_system_prompt(message: Mapping[str, Any]) -> bool:
    """Whether a system prompt factory's text replaces this stored message in the view.

    The reference filters ``role == "system"`` messages out of the view while a factory is
    set, except hook injections. Role ``developer`` is not filtered (see `is_system_role`).
    """
    return message.get("role") == "system" and not is_hook_injection(message)


def is_persisted_reminder(message: Mapping[str, Any]) -> bool:
    """Whether a message is a persisted reminder envelope, the unit request retention names.

    Role ``user`` with ``metadata.ephemeral is True`` and a truthy ``metadata.persisted``:
    an orchestrator-made reminder stored in history so it can be replayed and retained
    (`normalize_retain_contents`). Such a message is machine-made: never a human prompt
    (the reference's "machine messages cannot take human boundary protection"); it is
    compactable like any note unless a request names its body in ``retain_contents``.
    """
    metadata = _metadata(message)
    return (
        message.get("role") == "user"
        and metadata.get("ephemeral") is True
        and bool(metadata.get("persisted"))
    )


def is_ephemeral(message: Mapping[str, Any]) -> bool:
    """Whether a message's metadata marks it ephemeral (``metadata.ephemeral`` truthy).

    Ephemeral user messages are injected by orchestrators and hooks (reminders, the
    reference's own compaction notice and last-user replay carry ``ephemeral: True``); the
    reference never counts them as human prompts. Stored ones are ordinary compactable
    context; persisted ones are reminder envelopes (`is_persisted_reminder`).
    """
    return bool(_metadata(message).get("ephemeral"))


def is_reminder_envelope(content: Any) -> bool:
    """Whether content is a ``<system-reminder>`` envelope rather than typed words.

    The reference (its ``_is_real_user_message``, stricter than Amplifier foundation's
    ``is_real_user_message`` on purpose) rejects a user message whose text starts, after
    leading whitespace, with a bare ``<system-reminder>`` or an attributed
    ``<system-reminder source="...">`` tag; for block content, any ``text`` block that does.
    Foundation 1.0.0 only knows the bare tag, so the reference's own attributed envelopes
    (its summary, its last-user replay) would otherwise pass as the user's words.
    """
    return any(_LEADING_REMINDER_ENVELOPE.match(text) for text in _texts(content))


def reminder_source(content: Any) -> str | None:
    """The ``source`` attribute of a leading ``<system-reminder source="...">`` envelope
    (``context-summary``, ``context-replay``, a hook's name), or None for a bare tag or
    anything else. Where the envelope came from; it does not change how it is classified."""
    for text in _texts(content):
        stripped = text.lstrip()
        if _REMINDER_ENVELOPE.match(stripped):
            found = _REMINDER_SOURCE.match(stripped)
            return found.group(2) if found else None
    return None


def is_human_prompt(message: Mapping[str, Any]) -> bool:
    """Whether a message is words a person typed: the first/last human prompt candidates.

    The reference protects the first and the last human prompt "using message metadata
    rather than treating every user-role message as human input". A message is a human
    prompt when all of these hold:

    - role ``user``, not a tool result (no ``tool_call_id``, no ``tool_result`` block);
    - not history only (`is_reference_only`): a reference-only row is never sent, so it
      can never be the last human prompt (an 80,000-token one would otherwise be sent);
    - not ephemeral (`is_ephemeral`, which covers persisted reminders) and not a hook
      injection (`is_hook_injection`);
    - its ``metadata.source``, if any, names a person (``human``, ``user``, ...): see
      `HUMAN_SOURCES`;
    - its text is not a ``<system-reminder>`` envelope (`is_reminder_envelope`).
    """
    if message.get("role") != "user" or "tool_call_id" in message:
        return False
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
    ):
        return False
    if not marks_nothing(_metadata(message)):  # the admission stamp alone marks nothing
        if is_reference_only(message) or is_ephemeral(message) or is_hook_injection(message):
            return False
        source = _metadata(message).get("source")
        if source is not None and str(source).lower() not in HUMAN_SOURCES:
            return False
    if type(content) is str:  # the usual prompt: one text, matched in place
        return _LEADING_REMINDER_ENVELOPE.match(content) is None
    return not is_reminder_envelope(content)


def carries_loaded_tool_state(message: Mapping[str, Any]) -> bool:
    """Whether a message carries provider loaded-tool state (``openai:tool_search_items``).

    The key lives in ``metadata``; its value is the list of hosted items the API returned
    (``{"type": "tool_search_call", ...}``, ``{"type": "tool_search_output", "tools":
    [...]}``), which the provider replays verbatim on the next request. The reference
    protects every message whose metadata has such a key (presence, whatever the value)
    from removal at every level, including the tool-pair cascade that would take it with
    its group; truncating such a message's text is allowed because the rebuilt message
    keeps its metadata whole. Ingress keeps the metadata untouched too.
    """
    return not LOADED_TOOL_STATE_METADATA_KEYS.isdisjoint(_metadata(message))


# -- request retention ---------------------------------------------------------------------


def normalize_retain_contents(retain_contents: Any) -> tuple[str, ...]:
    """``retain_contents`` as a tuple of distinct bodies, in order; bad shapes refused.

    The reference takes a list of reminder bodies (exact ``content`` strings). A bare
    string is refused rather than read as its characters (the reference would iterate it);
    so is anything that is not an iterable of strings. Duplicates collapse: retaining a
    body twice keeps one newest copy, as retaining it once does.
    """
    if isinstance(retain_contents, str | bytes | Mapping):
        raise TypeError(
            "retain_contents takes a list of reminder bodies (strings), e.g. "
            f"retain_contents=[body]; got {type(retain_contents).__name__}"
        )
    if not isinstance(retain_contents, Iterable):
        raise TypeError(
            "retain_contents takes a list of reminder bodies (strings); "
            f"got {type(retain_contents).__name__}"
        )
    bodies: list[str] = []
    for position, body in enumerate(retain_contents):
        if not isinstance(body, str):
            raise TypeError(
                f"retain_contents[{position}] must be a reminder body (str), "
                f"got {type(body).__name__}"
            )
        if body not in bodies:
            bodies.append(body)
    return tuple(bodies)


def missing_retained_body_message(body: str) -> str:
    """The reference's wording for a body no admitted envelope carries (a ValueError)."""
    return (
        f"retain_contents body is not in admitted history as a persisted reminder "
        f"(user role, metadata ephemeral=True, persisted=True): {body[:80]!r}"
    )


# -- the system prompt factory -------------------------------------------------------------


async def resolve_system_prompt(factory: SystemPromptFactory | None) -> str | None:
    """Run a system prompt factory as the reference does, once per request.

    None when no factory is set. The factory is called with no arguments and awaited
    when it returns an awaitable (the reference requires an async factory; a plain
    function returning text is accepted too). Whatever it raises propagates unchanged,
    as in the reference. A result that is not text raises TypeError naming the factory:
    the reference would send it on as a malformed system message.
    """
    if factory is None:
        return None
    if not callable(factory):
        raise TypeError(f"the system prompt factory must be callable, got {type(factory).__name__}")
    result = factory()
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, str):
        name = getattr(factory, "__qualname__", type(factory).__name__)
        raise TypeError(
            f"system prompt factory {name} returned {type(result).__name__}; it must return "
            "the system prompt text (str)"
        )
    return result


def system_prompt_message(text: str) -> dict[str, Any]:
    """The view's first message for a factory's text, exactly as the reference builds it:
    ``{"role": "system", "content": text}``, no metadata (it is not a history row)."""
    return {"role": "system", "content": text}


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            b["text"] for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        ]
    return []


__all__ = [
    "HISTORY_ONLY_METADATA",
    "HOOK_SOURCE",
    "INERT_METADATA_KEYS",
    "LOADED_TOOL_STATE_METADATA_KEYS",
    "PUBLIC_COPY_SOURCE_KEY",
    "PUBLIC_MESSAGE_KEY",
    "PUBLIC_REFERENCE_ONLY_KEY",
    "SYSTEM_ROLES",
    "TIMESTAMP_KEY",
    "SystemPromptFactory",
    "carries_loaded_tool_state",
    "is_ephemeral",
    "is_hook_injection",
    "is_human_prompt",
    "is_persisted_reminder",
    "is_reference_only",
    "is_reminder_envelope",
    "is_system_role",
    "missing_retained_body_message",
    "normalize_retain_contents",
    "reminder_source",
    "replaced_by_system_prompt",
    "request_form",
    "resolve_system_prompt",
    "stamp_timestamp",
    "system_prompt_message",
    "utc_timestamp",
]
