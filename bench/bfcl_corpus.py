"""Real multi-turn tool-calling conversations from the Berkeley Function Calling Leaderboard.

The builder lives in the package (``contextfold.evaluation.bfcl``, which ``contextfold eval``
replays); this file re-exports it for the benches and adds a command line: statistics of a
category, or its conversations written out as JSON Lines.

CLI::

    uv run python bench/bfcl_corpus.py --category long_context --stats
    uv run python bench/bfcl_corpus.py --category base --out bench/.corpus/base.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from contextfold.evaluation.bfcl import (
    Conversation,
    Corpus,
    build_conversations,
    build_corpus,
    categories,
    chain_conversations,
)

__all__ = [
    "Conversation",
    "Corpus",
    "build_conversations",
    "build_corpus",
    "categories",
    "chain_conversations",
]


# --------------------------------------------------------------------------- CLI


def approx_tokens(message: dict[str, Any]) -> int:
    """Token-ish size used for corpus stats: serialised bytes / 4."""
    return len(json.dumps(message, ensure_ascii=False).encode("utf-8")) // 4


def corpus_stats(corpus: Corpus) -> dict[str, Any]:
    convs = corpus.conversations
    per_conv_msgs = [len(c.messages) for c in convs]
    per_conv_tokens = [sum(approx_tokens(m) for m in c.messages) for c in convs]
    tool_results = [
        (len(m["content"].encode("utf-8")), c.id)
        for c in convs
        for m in c.messages
        if m["role"] == "tool"
    ]
    assistant_calls = [
        len(m["tool_calls"]) for c in convs for m in c.messages if m.get("tool_calls")
    ]
    largest = max(tool_results, default=(0, ""))
    return {
        "category": corpus.category,
        "conversations": len(convs),
        "skipped": len(corpus.skipped),
        "messages": sum(per_conv_msgs),
        "messages_per_conversation_median": statistics.median(per_conv_msgs) if convs else 0,
        "messages_per_conversation_max": max(per_conv_msgs, default=0),
        "tool_calls": sum(assistant_calls),
        "parallel_call_messages": sum(1 for n in assistant_calls if n > 1),
        "tokens_approx_total": sum(per_conv_tokens),
        "tokens_approx_per_conversation_median": (
            statistics.median(per_conv_tokens) if convs else 0
        ),
        "tokens_approx_per_conversation_max": max(per_conv_tokens, default=0),
        "largest_tool_result_bytes": largest[0],
        "largest_tool_result_tokens_approx": largest[0] // 4,
        "largest_tool_result_conversation": largest[1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--category", default="long_context", help="multi-turn category")
    parser.add_argument("--limit", type=int, default=None, help="build at most N conversations")
    parser.add_argument("--no-system", action="store_true", help="omit the system message")
    parser.add_argument("--stats", action="store_true", help="print corpus statistics")
    parser.add_argument("--out", type=Path, help="write one conversation per line (JSONL)")
    parser.add_argument("--list", action="store_true", help="list the available categories")
    args = parser.parse_args(argv)

    if args.list:
        print("\n".join(categories()))
        return 0
    try:
        corpus = build_corpus(args.category, args.limit, system_prompt=not args.no_system)
    except ValueError as exc:
        parser.error(str(exc))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as handle:
            for conv in corpus.conversations:
                handle.write(json.dumps(conv.to_dict(), ensure_ascii=False) + "\n")
        print(f"wrote {len(corpus.conversations)} conversations to {args.out}", file=sys.stderr)
    if args.stats or not args.out:
        for key, value in corpus_stats(corpus).items():
            print(f"{key:40} {value}")
        for conv_id, reason in corpus.skipped.items():
            print(f"skipped {conv_id}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
