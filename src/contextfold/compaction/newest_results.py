"""The last step before a refusal: shorten the newest call group's tool results in the view.

The newest call group is required core: its results are what the model asked for, and a
request cannot go without them. But one result can be larger than the whole window (the
default ingress cap, 131,072 bytes, is about 27,600 tokens, more than a 16,000-token window
holds), and refusing such a request ends the session. So when every soft protection has
yielded and the view is still over the budget, the group's results are shortened in the
view, the largest first and no further than the budget needs: their head and tail stay, with
a marker naming the recall id and the offset where the left-out middle starts, so the model
can read the rest with ``context_recall``. The call and its answer stay paired; the
assistant turn (and its signed thinking) is not touched; history keeps the result whole.
Only when even the shortened group cannot fit is the request refused.

Shortened, the results keep at most `RESULTS_SHARE` of the budget, however much room is
left: the model reads them for this request only (once answered, a pass cuts them further,
see `oversized`), and what it needs of the rest it recalls by offset. Filling the window
instead made this request and the next ones as large as the window (`contextfold eval`,
BFCL, 42 results of 20,000 tokens: tokens sent at 4k / 8k / 16k 4.09 / 7.17 / 9.60M
instead of 4.39 / 7.45 / 10.13M, near facts in view 2,688 / 2,726 / 2,730 instead of
2,694 / 2,725 / 2,730).
"""

from __future__ import annotations

from ..messages import Kind
from ..recall import recall_hint
from .protection import REASON_CURRENT_GROUP, REASON_CURRENT_TURN
from .truncate import shorten_tool_result
from .working import WorkingView

NAME = "newest_results_shortened"  # the change's name in `applied` and `changed`
# Tries per result at a smaller size, when dense text counts more than its share of chars.
_ATTEMPTS = 6
# What a result keeps at least (a result that cannot keep this much is not worth sending).
MIN_KEEP_CHARS = 200
# The share of the budget the newest group's shortened results keep at most, together.
RESULTS_SHARE = 0.05


def shorten_newest_results(
    work: WorkingView, budget_raw: int, results_raw: int | None = None
) -> bool:
    """Shorten the newest group's tool results until the view's raw total is within
    ``budget_raw`` and, given ``results_raw``, the results' own total within that when they
    can keep so little, largest first; True if any was shortened."""
    history = work.history
    entries = history.entries
    required = (REASON_CURRENT_GROUP, REASON_CURRENT_TURN)
    results = [
        index
        for index, reason in work.protection.untouchable.items()
        if reason in required
        and entries[index].info.kind is Kind.TOOL_RESULT
        and not work.is_removed(index)
    ]
    if results_raw is not None:
        capped = work.raw_total - sum(work.current(i)[1] for i in results) + results_raw
        if capped < budget_raw and _shorten(work, results, capped):
            return True
    return _shorten(work, results, budget_raw)


def _shorten(work: WorkingView, results: list[int], budget_raw: int) -> bool:
    """Shorten ``results``, largest first, until the view's raw total is within
    ``budget_raw``; True if any was shortened (an attempt may leave it above: the caller
    checks)."""
    shortened = False
    for index in sorted(results, key=lambda i: work.current(i)[1], reverse=True):
        excess = work.raw_total - budget_raw
        if excess <= 0:
            break
        if _fit(work, index, excess):
            shortened = True
    return shortened


def _fit(work: WorkingView, index: int, excess: int) -> bool:
    """Shorten result ``index`` by at least ``excess`` raw tokens if it can; True if changed."""
    current, cost = work.current(index)
    chars = _text_chars(current)
    goal = cost - excess
    if goal <= 0 or chars <= MIN_KEEP_CHARS:
        return False
    keep = int(chars * goal / cost)
    for _ in range(_ATTEMPTS):
        if keep < MIN_KEEP_CHARS:
            return False
        short = shorten_tool_result(current, keep, index=index, shape="head_tail")
        if short is None:
            return False
        short = _with_offset(short, index, keep - keep // 2)
        short_cost = work.counter.count_message(short)
        if short_cost <= goal:
            work.replace(index, short, short_cost, NAME)
            return True
        keep = int(keep * goal / short_cost * 0.95)  # dense text: aim lower and count again
    return False


def _with_offset(message: dict, index: int, head: int) -> dict:
    """Say where the left-out middle starts, so a recall can start there:
    ``context_recall("r3", offset=6000) returns it``."""
    hint = recall_hint(index)
    note = f"{hint[:-1]}, offset={head})"

    def swap(value: object) -> object:
        if isinstance(value, str):
            return value.replace(hint, note, 1)
        if isinstance(value, list):
            return [swap(item) for item in value]
        if isinstance(value, dict):
            return {key: swap(item) for key, item in value.items()}
        return value

    return {key: swap(item) for key, item in message.items()}


def _text_chars(message: dict) -> int:
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            if isinstance(block, dict):
                inner = block.get("text", block.get("content", ""))
                total += len(inner) if isinstance(inner, str) else _text_chars(block)
        return total
    return len(str(content or ""))
