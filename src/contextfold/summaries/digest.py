"""A deterministic, extractive summary: what the offline summarizer answers.

It keeps, in order, each user ask and each tool call with its arguments (the facts a run most
often needs back), and the first words of every result and reply, one line each. It is
bounded by a token limit: when the lines do not fit, every line is cut to fewer words, level
by level, and only past the last level are the oldest lines left out (and counted in a line
saying so). The same text always gives the same digest, so records made from it are stable
across runs, and a digest folded with more messages stays within the same limit.
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
    entries = [(label, body) for label, body in entries if body]
    if not entries:
        return ""
    lines: list[str] = []
    for detailed, other in _LEVELS:
        lines = [_line(label, body, detailed, other) for label, body in entries]
        if counter.count_text("\n".join(lines)) <= max_tokens:
            return "\n".join(lines)
    # Even the shortest lines do not fit: leave out the oldest ones, and say how many.
    for dropped in range(1, len(lines)):
        kept = [f"- earlier: {dropped} earlier points left out", *lines[dropped:]]
        if counter.count_text("\n".join(kept)) <= max_tokens:
            return "\n".join(kept)
    return _cut_to_tokens(lines[-1], max_tokens, counter)


def _line(label: str, body: str, detailed: int, other: int) -> str:
    limit = detailed if label.split(" ")[0] in _DETAILED else other
    words = body.split(" ")
    shown = " ".join(words[:limit]) + (_ELLIPSIS if len(words) > limit else "")
    return f"- {label}: {shown}"


def _cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """The longest start of ``text`` within ``max_tokens`` (binary search on characters)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text[:low]
