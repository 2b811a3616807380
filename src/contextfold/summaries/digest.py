"""A deterministic, extractive summary: what the offline summarizer answers.

It keeps, in order, each user ask and each tool call with its arguments whole (the facts a run
most often needs back: a call is never cut mid-argument), and the first words of every
result and reply, one line each. It is bounded by a token limit: when the lines do not fit,
asks, results and replies are cut to fewer words, level by level, and lines are left out,
oldest first: results and replies, then calls, the user's asks last (a line at the top
counts them). The same text always gives the same digest, so records
made from it are stable across runs, and a digest folded with more messages stays within the
same limit.
"""

from __future__ import annotations

import re

from contextfold.summaries.transcript import MESSAGES_HEADING, PREVIOUS_SUMMARY_HEADING
from contextfold.tokens import TokenCounter

__all__ = ["digest_transcript", "parse_transcript"]

# Words kept per line at each level: (user asks, tool calls, everything else). Asks hold the
# task and calls hold names, ids and arguments, so they keep their words longest.
_LEVELS: tuple[tuple[int, int, int], ...] = (
    (64, 24, 16),
    (64, 24, 12),
    (64, 16, 8),
    (64, 12, 5),
    (64, 8, 3),
    (64, 6, 2),
    (48, 4, 1),
    (32, 3, 1),
    (20, 2, 1),
    (12, 2, 1),
    (6, 1, 1),
    (3, 1, 1),
)
_DROP_FROM_LEVEL = 4  # from (64, 8, 3) on, old results go before calls and asks shrink
_ASK_LABELS = frozenset({"user", "human"})
_ENTRY = re.compile(r"^\[(\d+)\] ([^:\n]{1,80}): ?(.*)$")
_DIGEST_LINE = re.compile(r"^- ([^:\n]{1,80}): (.*)$")
_LEFT_OUT = re.compile(r"^(\d+) earlier points left out$")
_ELLIPSIS = "…"


def parse_transcript(text: str) -> list[tuple[str, str]]:
    """(label, text) entries of a rendered transcript, earlier-summary lines first."""
    earlier: list[tuple[str, str]] = []
    body = text
    if text.startswith(PREVIOUS_SUMMARY_HEADING):
        head, _, body = text.partition("\n\n" + MESSAGES_HEADING)
        for line in head[len(PREVIOUS_SUMMARY_HEADING) :].splitlines():
            line = line.strip()
            if not line:
                continue
            match = _DIGEST_LINE.match(line)
            earlier.append((match[1], match[2]) if match else ("earlier", line))
    entries: list[tuple[str, str]] = []
    number = 0
    for line in body.splitlines():
        match = _ENTRY.match(line)
        # A line inside a message can look like an entry; only the expected numbers count.
        if match and int(match[1]) in (number, number + 1):
            number = int(match[1])
            entries.append((match[2].strip(), match[3]))
        elif entries:
            label, so_far = entries[-1]
            entries[-1] = (label, f"{so_far}\n{line}")
        elif line.strip():
            entries.append(("text", line))
    return earlier + entries


def digest_transcript(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """The digest of a rendered transcript, at most ``max_tokens`` by ``counter``."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    entries = [(label, " ".join(body.split())) for label, body in parse_transcript(text)]
    left_out = 0
    kept_entries = []
    for label, body in entries:
        earlier = _LEFT_OUT.match(body) if label == "earlier" else None
        if earlier:  # a previous digest's own count of what it left out
            left_out += int(earlier[1])
        elif body:
            kept_entries.append((label, body))
    if not kept_entries:
        return ""
    order = sorted(range(len(kept_entries)), key=lambda i: (-_tier(kept_entries[i][0]), i))
    replies = sum(1 for label, _ in kept_entries if _tier(label) == 2)
    for index, level in enumerate(_LEVELS):
        lines = [_line(label, body, level) for label, body in kept_entries]
        drops = _fewest_drops(lines, order, left_out, max_tokens, counter)
        if drops == 0:
            return _with_count(lines, left_out)
        # Past _DROP_FROM_LEVEL, leaving out the oldest results and replies beats cutting
        # calls and asks further; at the last level, leave out whatever must go.
        last = index == len(_LEVELS) - 1
        if drops is not None and (last or (index >= _DROP_FROM_LEVEL and drops <= replies)):
            dropped = set(order[:drops])
            kept = [entry for i, entry in enumerate(kept_entries) if i not in dropped]
            return _richest(kept, left_out + len(dropped), max_tokens, counter)
    return ""


def _fewest_drops(
    lines: list[str], order: list[int], left_out: int, max_tokens: int, counter: TokenCounter
) -> int | None:
    """The fewest lines to leave out (in ``order``) so the rest fit; None if none do."""

    def fits(drops: int) -> bool:
        return counter.count_text(_without(lines, order[:drops], left_out)) <= max_tokens

    if fits(0):
        return 0
    if not fits(len(order)):
        return None
    low, high = 1, len(order)
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _richest(
    entries: list[tuple[str, str]], left_out: int, max_tokens: int, counter: TokenCounter
) -> str:
    """The lines that stay, with as many words as now fit."""
    for level in _LEVELS:
        digest = _with_count([_line(label, body, level) for label, body in entries], left_out)
        if counter.count_text(digest) <= max_tokens:
            return digest
    return ""


def _tier(label: str) -> int:
    """0 for a user's ask, 1 for a tool call, 2 for anything else."""
    kind = label.split(" ")[0]
    return 0 if kind in _ASK_LABELS else 1 if kind == "call" else 2


def _with_count(lines: list[str], left_out: int) -> str:
    marker = [f"- earlier: {left_out} earlier points left out"] if left_out else []
    return "\n".join(marker + lines)


def _without(lines: list[str], dropped: list[int], left_out: int) -> str:
    gone = set(dropped)
    return _with_count(
        [line for i, line in enumerate(lines) if i not in gone], left_out + len(gone)
    )


def _line(label: str, body: str, level: tuple[int, int, int]) -> str:
    tier = _tier(label)
    if tier == 1:
        # A call is kept whole: its name and arguments are the ids and values a later step
        # needs, and an argument cut mid-value is a wrong value. Calls that do not fit are
        # left out whole (counted), oldest first, after the results and replies.
        return f"- {label}: {body}"
    limit = level[tier]
    words = body.split(" ")
    shown = " ".join(words[:limit]) + (_ELLIPSIS if len(words) > limit else "")
    return f"- {label}: {shown}"
