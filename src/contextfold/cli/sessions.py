"""``contextfold sessions list|show|export STORE``: what a durable store holds.

``list`` prints one line per stored session; ``show`` one session's history size, tokens,
compaction state, summaries and calibration; ``export`` its messages as JSONL, one message a
line, which ``contextfold replay`` reads back.

These commands only read: the store is opened read-only, so a mistyped path is an error
(nothing is created), an older store is not migrated, and a store on a read-only medium (a
mounted backup) can be inspected. What the store holds is shown, never obeyed: session ids
are printed escaped (an id holding a terminal escape or a newline cannot restyle the
terminal or forge a row), and a stored document of a shape this version does not know is
reported as such.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextfold.cli.errors import InputError
from contextfold.cli.files import display_path, write_output_file
from contextfold.cli.numbers import whole_number
from contextfold.cli.output import fail, write_stdout
from contextfold.store.base import SessionStore, StoredSession, StoreError
from contextfold.store.urls import store_from_url


def add_sessions_parser(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list, show or export the sessions a durable store holds",
        description="What a durable store (sqlite:///..., postgresql://...) holds. The store "
        "is only read: nothing is created, migrated or written.",
    )
    actions = sessions.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="one line per stored session")
    listing.add_argument("store", metavar="STORE", help="the store URL, e.g. sqlite:///agent.db")
    show = actions.add_parser("show", help="one session: history, compaction, summaries")
    show.add_argument("store", metavar="STORE")
    show.add_argument("session", metavar="SESSION_ID")
    show.add_argument(
        "--html",
        metavar="FILE",
        help="also write the inspector page of the session to FILE (never through a "
        "symlink): its stored messages replayed through context-fold, every request's view "
        "(needs the [cli] extra)",
    )
    show.add_argument(
        "--window",
        type=_window,
        metavar="TOKENS",
        help="with --html: the model's context window the replay fits (default: the "
        "budget from max_tokens_fallback, 200000)",
    )
    export = actions.add_parser("export", help="one session's messages as JSONL (for replay)")
    export.add_argument("store", metavar="STORE")
    export.add_argument("session", metavar="SESSION_ID")
    export.add_argument(
        "--out", metavar="FILE", help="write to FILE (never through a symlink); default stdout"
    )


def run_sessions(args: argparse.Namespace) -> int:
    """The ``sessions`` command: it reads a store with the library alone (no extra needed)."""
    try:
        status, text = run_sessions_command(args)
    except InputError as error:
        return fail(str(error))
    write_stdout(text + "\n")
    return status


def run_sessions_command(args: argparse.Namespace) -> tuple[int, str]:
    """(exit status, text to print) for one ``sessions`` action."""
    try:
        store = store_from_url(args.store, read_only=True)
    except StoreError as error:
        raise InputError("STORE", str(error)) from None
    return asyncio.run(_run(store, args))


async def _run(store: SessionStore, args: argparse.Namespace) -> tuple[int, str]:
    try:
        await store.open()
        if args.action == "list":
            return 0, await _list(store)
        session = await store.open_session(args.session)
        if not session.exists:
            raise InputError(
                "SESSION_ID",
                f"no session '{shown(args.session)}' in {shown(_where(store, args.store))}",
            )
        if args.action == "show":
            text = await _show(store, session)
            if getattr(args, "html", None):
                text += "\n" + await _inspector_page(session, args)
            return 0, text
        text = "".join(_jsonl_line(m.message) for m in session.messages)
        if args.out:
            path = write_output_file(Path(args.out), text.encode("utf-8"))
            return 0, f"{len(session.messages)} messages written to {display_path(path)}"
        return 0, text.rstrip("\n")
    except (StoreError, ValueError) as error:  # ValueError: a stored message is not JSON
        raise InputError("STORE", str(error)) from None
    finally:
        await store.close()


def _window(text: str) -> int:
    value = whole_number(text)
    if value <= 4096:
        raise argparse.ArgumentTypeError(f"must be above the 4096-token reply reserve, got {text}")
    return value


async def _inspector_page(session: StoredSession, args: argparse.Namespace) -> str:
    """Replay the stored messages with context-fold's defaults and write the page."""
    try:
        from contextfold.cli.inspector_page import replay_run, write_inspector_page
        from contextfold.cli.replay import ReplayError, replay_messages_async
    except ImportError as error:
        raise InputError(
            "--html",
            f"the page replays the session, which needs the [cli] extra ({error.name} is "
            "missing): pip install '.[cli]' from a checkout",
        ) from None
    from contextfold.errors import ContextLengthError

    messages = [m.message for m in session.messages]
    if not messages:
        raise InputError("--html", "the session holds no message: there is nothing to show")
    try:
        result = await replay_messages_async(messages, {}, args.window, inspect=True)
    except (ReplayError, ContextLengthError) as error:
        raise InputError("--html", f"the stored messages cannot be replayed: {error}") from None
    label = shown(session.session_id)
    path = write_inspector_page(
        Path(args.html), f"contextfold session {label}", [replay_run(result, label)]
    )
    return f"page           {display_path(path)}"


def _where(store: SessionStore, url: str) -> str:
    """The store for a message: a PostgreSQL store's address without its password."""
    where = getattr(store, "where", url)
    return where if isinstance(where, str) else url


def shown(text: str) -> str:
    """``text`` as one line of plain printable characters: control characters (terminal
    escapes, newlines), invisible formatting characters, lone surrogates and backslashes
    are escaped, so what a store holds cannot restyle a terminal or pass for another row."""
    return "".join(char if char.isprintable() and char != "\\" else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if char == "\\":
        return "\\\\"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _jsonl_line(message: dict[str, Any]) -> str:
    line = json.dumps(message, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, the same text to a JSON reader
        line = json.dumps(message)
    return line + "\n"


async def _list(store: SessionStore) -> str:
    sessions = await store.list_sessions()
    if not sessions:
        return "no sessions"
    ids = [shown(s.session_id) for s in sessions]
    width = max(len(i) for i in ids)
    lines = [f"{'session':<{width}}  messages  last seq  generation"]
    for s, session_id in zip(sessions, ids, strict=True):
        lines.append(
            f"{session_id:<{width}}  {s.message_count:>8,}  {s.last_seq:>8,}  {s.generation:>10}"
        )
    return "\n".join(lines)


async def _show(store: SessionStore, session: StoredSession) -> str:
    tokens = sum(m.cost for m in session.messages)
    lines = [
        f"session        {shown(session.session_id)}",
        f"messages       {len(session.messages):,} (last seq {session.last_seq:,}, "
        f"generation {session.generation})",
        f"tokens         {tokens:,} (raw, as counted at admission)",
    ]
    if session.state is not None and session.state.snapshot:
        lines.append(
            "compaction     "
            + _readable(_compaction, session.state.snapshot)
            + f" (state of seq {session.state.seq:,})"
        )
    else:
        lines.append("compaction     none saved")
    records = await store.records(session_id=session.session_id)
    written = max((len(r.history_ids) for r in records), default=0)
    lines.append(
        f"summaries      {len(records)} records written by this session"
        + (f" (the longest covers {written:,} messages)" if records else "")
    )
    if session.calibration:
        lines.append("calibration    " + _readable(_calibration, session.calibration))
    else:
        lines.append("calibration    none")
    return "\n".join(lines)


def _readable(describe: Any, document: Mapping[str, Any]) -> str:
    """``describe(document)``, or a note that its shape is not one this version reads."""
    try:
        return str(describe(document))
    except (TypeError, ValueError, KeyError) as error:
        return f"saved, in a form this contextfold cannot read ({shown(str(error))[:80]})"


def _compaction(state: Mapping[str, Any]) -> str:
    """What the saved compaction state takes out of the view, counted."""
    removed = _unit_count(state.get("removed_units", ()))
    summarized = _unit_count(state.get("summarized_units", ()))
    shortened = len(_list_of(state.get("shortened", ()), "shortened"))
    level = _number(state.get("level", 0), "level")
    removed_messages = state.get("removed_messages")
    summarized_messages = state.get("summarized_messages")
    return (
        f"{removed:,} turns out of the view{_messages(removed_messages)}, {shortened:,} "
        f"shortened, {summarized:,} turns summarized{_messages(summarized_messages)}; "
        f"level {level}"
    )


def _unit_count(stored: Any) -> int:
    """How many units a stored set holds: ``{"runs": [[start, end], ...]}``, or the plain
    index list older versions wrote."""
    if isinstance(stored, Mapping):
        total = 0
        for run in _list_of(stored["runs"], "runs"):
            start, end = _list_of(run, "a run")
            total += max(0, _number(end, "a run") - _number(start, "a run"))
        return total
    return len(_list_of(stored, "a unit set"))


def _messages(count: Any) -> str:
    return (
        f" ({count:,} messages)" if isinstance(count, int) and not isinstance(count, bool) else ""
    )


def _calibration(calibration: Mapping[str, Any]) -> str:
    parts = []
    for model, value in sorted(calibration.items()):
        if not isinstance(value, Mapping):
            raise ValueError(f"the entry of {model!r} is not an object")
        ratio = _number(value.get("ratio", 0), "ratio")
        fixed = _number(value.get("fixed", 0), "fixed")
        samples = _number(value.get("samples", 0), "samples")
        parts.append(
            f"{shown(model)} {ratio:.3f}"
            + (f" + {fixed:,} fixed" if fixed else "")
            + f" ({samples} readings)"
        )
    return ", ".join(parts)


def _list_of(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{what} is not a list")
    return list(value)


def _number(value: Any, what: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is not a number")
    return value
