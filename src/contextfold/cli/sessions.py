"""``contextfold sessions list|show|export STORE``: what a durable store holds.

``list`` prints one line per stored session; ``show`` one session's history size, tokens,
compaction state, summaries and calibration; ``export`` its messages as JSONL, one message a
line, which ``contextfold replay`` reads back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from contextfold.cli.errors import InputError
from contextfold.cli.files import display_path, write_output_file
from contextfold.messages import escape_surrogates
from contextfold.store.base import SessionStore, StoreError
from contextfold.store.urls import store_from_url


def add_sessions_parser(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list, show or export the sessions a durable store holds",
        description="What a durable store (sqlite:///..., postgresql://...) holds.",
    )
    actions = sessions.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="one line per stored session")
    listing.add_argument("store", metavar="STORE", help="the store URL, e.g. sqlite:///agent.db")
    show = actions.add_parser("show", help="one session: history, compaction, summaries")
    show.add_argument("store", metavar="STORE")
    show.add_argument("session", metavar="SESSION_ID")
    export = actions.add_parser("export", help="one session's messages as JSONL (for replay)")
    export.add_argument("store", metavar="STORE")
    export.add_argument("session", metavar="SESSION_ID")
    export.add_argument(
        "--out", metavar="FILE", help="write to FILE (never through a symlink); default stdout"
    )


def run_sessions_command(args: argparse.Namespace) -> tuple[int, str]:
    """(exit status, text to print) for one ``sessions`` action."""
    try:
        store = store_from_url(args.store)
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
            raise InputError("SESSION_ID", f"no session {args.session!r} in {args.store}")
        if args.action == "show":
            return 0, await _show(store, session)
        # A lone surrogate (admitted as it was) is written as its JSON escape: UTF-8 text
        # that replay reads back to the same message.
        text = "".join(
            escape_surrogates(json.dumps(m.message, ensure_ascii=False)) + "\n"
            for m in session.messages
        )
        if args.out:
            path = write_output_file(Path(args.out), text.encode("utf-8"))
            return 0, f"{len(session.messages)} messages written to {display_path(path)}"
        return 0, text.rstrip("\n")
    except StoreError as error:
        raise InputError("STORE", str(error)) from None
    finally:
        await store.close()


async def _list(store: SessionStore) -> str:
    sessions = await store.list_sessions()
    if not sessions:
        return "no sessions"
    width = max(len(s.session_id) for s in sessions)
    lines = [f"{'session':<{width}}  messages  last seq  generation"]
    for s in sessions:
        lines.append(
            f"{s.session_id:<{width}}  {s.message_count:>8,}  {s.last_seq:>8,}  {s.generation:>10}"
        )
    return "\n".join(lines)


async def _show(store: SessionStore, session: Any) -> str:
    tokens = sum(m.cost for m in session.messages)
    lines = [
        f"session        {session.session_id}",
        f"messages       {len(session.messages):,} (last seq {session.last_seq:,}, "
        f"generation {session.generation})",
        f"tokens         {tokens:,} (raw, as counted at admission)",
    ]
    state = session.state.snapshot if session.state is not None else None
    if state:
        lines.append(
            f"compaction     {len(state.get('removed_units', []))} turns out of the view, "
            f"{len(state.get('shortened', []))} shortened, "
            f"{len(state.get('summarized_units', []))} summarized; level {state.get('level', 0)}"
            f" (state of seq {session.state.seq:,})"
        )
    else:
        lines.append("compaction     none saved")
    records = await store.records(session_id=session.session_id)
    written = max((len(r.history_ids) for r in records), default=0)
    lines.append(
        f"summaries      {len(records)} records written by this session"
        + (f" (the longest covers {written:,} messages)" if records else "")
    )
    calibration = session.calibration or {}
    if calibration:
        ratios = ", ".join(
            f"{model} {value.get('ratio', 0):.3f}"
            + (f" + {value['fixed']:,} fixed" if value.get("fixed") else "")
            + f" ({value.get('samples', 0)} readings)"
            for model, value in sorted(calibration.items())
        )
        lines.append(f"calibration    {ratios}")
    else:
        lines.append("calibration    none")
    return "\n".join(lines)
