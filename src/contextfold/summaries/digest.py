"""A deterministic, extractive summary: what the offline summarizer answers.

It keeps, in order, each user ask and each tool call with its arguments (the facts a run most
often needs back), and the first words of every result and reply, one line each. It is
bounded by a token limit: when the lines do not fit, every line is cut to fewer words, level
by level, and only past the last level are lines left out, oldest first and the user's asks
last (a line at the top counts them). The same text always gives the same digest, so records
made from it are stable across runs, and a digest folded with more messages stays within the
same limit.
"""

from __future__ import annotations

import re

from contextfold.summaries.transcript import MESSAGES_HEADING, PREVIOUS_SUMMARY_HEADING
from contextfold.tokens import TokenCounter

__all__ = ["digest_transcript", "parse_transcript"]

# Words kept per line at each level: (asks and calls, everything else). Asks and calls carry
# names, ids and arguments, so they keep more.
_LEVELS: tuple[tuple[int, int], ...] = (
    (48, 16),
    (32, 12),
    (20, 8),
    (12, 6),
    (8, 4),
    (5, 3),
    (3, 2),
    (2, 1),
)
_DETAILED = frozenset({"user", "call", "human"})
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
    lines: list[str] = []
    for detailed, other in _LEVELS:
        lines = [_line(label, body, detailed, other) for label, body in kept_entries]
        digest = _with_count(lines, left_out)
        if counter.count_text(digest) <= max_tokens:
            return digest
    # Even the shortest lines do not fit: leave lines out, oldest first, the user's asks
    # last of all (they hold the task), and say how many went.
    asks = [i for i, (label, _) in enumerate(kept_entries) if _is_detailed(label)]
    order = [i for i in range(len(lines)) if i not in set(asks)] + asks
    low, high = 1, len(order)  # the fewest lines to leave out so the rest fit
    while low < high:
        middle = (low + high) // 2
        if counter.count_text(_without(lines, order[:middle], left_out)) <= max_tokens:
            high = middle
        else:
            low = middle + 1
    digest = _without(lines, order[:low], left_out)
    return digest if counter.count_text(digest) <= max_tokens else ""


def _is_detailed(label: str) -> bool:
    return label.split(" ")[0] in _DETAILED


def _with_count(lines: list[str], left_out: int) -> str:
    marker = [f"- earlier: {left_out} earlier points left out"] if left_out else []
    return "\n".join(marker + lines)


def _without(lines: list[str], dropped: list[int], left_out: int) -> str:
    gone = set(dropped)
    return _with_count(
        [line for i, line in enumerate(lines) if i not in gone], left_out + len(gone)
    )


def _line(label: str, body: str, detailed: int, other: int) -> str:
    limit = detailed if _is_detailed(label) else other
    words = body.split(" ")
    shown = " ".join(words[:limit]) + (_ELLIPSIS if len(words) > limit else "")
    return f"- {label}: {shown}"
