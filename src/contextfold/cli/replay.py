"""Replay a recorded conversation through context-fold and record every request it would send.

The conversation grows one message at a time, and the context manager is called the way an
orchestrator calls it: one request before each assistant message (the reply to what came
before) and one at the end (the next turn). Each request becomes a :class:`ReplayRow`: its size
before and after compaction, the level and rungs applied, and how much of it repeats the
previous request byte for byte (the part a provider's prompt cache could serve).

:func:`replay_messages` is the reusable core (``bench/`` imports it); the CLI wraps it with
file reading, a table, a chart and a JSON file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from amplifier_core.models import ModelInfo, ProviderInfo

from contextfold import ContextFold
from contextfold.errors import ConfigError, MessageValidationError

# The output reserve a replayed "model" declares. Budgets follow the main contract's
# formula (window - 0.5 * max_output_tokens - safety margin), so this only moves the budget.
DEFAULT_MAX_OUTPUT_TOKENS = 4096


class ReplayError(ValueError):
    """A message the context manager refused; ``place`` says which one (e.g. ``message 3``)."""

    def __init__(self, place: str, problem: str) -> None:
        super().__init__(f"{place}: {problem}")
        self.place = place
        self.problem = problem


@dataclass(frozen=True)
class ReplayRow:
    """One request the context manager delivered during the replay."""

    request: int  # 1-based
    history_messages: int  # messages admitted when this request was made
    history_tokens: int  # the whole conversation so far: what an unmanaged request would send
    tokens_before: int  # the view as it stood before this request's compaction pass
    tokens_after: int  # the view delivered
    messages_before: int
    messages_after: int
    compacted: bool
    level: int
    applied: list[str]
    budget: int
    trigger: int
    prefix_messages: int  # leading messages byte-identical to the previous request's view
    prefix_tokens: int
    prefix_share: float  # prefix_tokens / tokens of this view (0 for the first request)

    @property
    def over_budget(self) -> bool:
        return self.tokens_after > self.budget


@dataclass(frozen=True)
class ReplayTotals:
    """The replay at a glance."""

    messages: int
    requests: int
    compactions: int  # requests where compaction acted on the view
    levels_used: list[int]
    rungs_used: list[str]
    largest_history: int
    largest_after: int
    history_tokens_total: int  # what resending the full history every time would cost
    tokens_sent_total: int
    saved_share: float  # 1 - sent / history
    prefix_share: float  # token-weighted share of all sent tokens repeating the previous view
    over_budget_requests: int
    history_kept: bool  # get_messages() still holds every admitted message, in order
    budget: int
    trigger: int


@dataclass(frozen=True)
class ReplayResult:
    """Rows and totals of a replay, plus the settings it ran with."""

    rows: list[ReplayRow]
    totals: ReplayTotals
    window: int | None
    max_output_tokens: int
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "max_output_tokens": self.max_output_tokens,
            "config": dict(self.config),
            "totals": asdict(self.totals),
            "rows": [asdict(row) | {"over_budget": row.over_budget} for row in self.rows],
        }


class ReplayModel:
    """What a replay knows of the model: its window. Offered where a provider would be.

    The context manager derives its budget from ``get_model_info()`` exactly as it does for a
    live provider, so a replay at ``--window 128000`` runs on the budget a real 128k model
    would get. It never completes a request: a replay has no model to ask.
    """

    def __init__(self, context_window: int, max_output_tokens: int) -> None:
        if max_output_tokens >= context_window:
            raise ValueError(
                f"max output tokens ({max_output_tokens}) must be below the window "
                f"({context_window}), or no input would fit"
            )
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens

    @property
    def name(self) -> str:
        return "replay"

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(
            id="replay",
            display_name="contextfold replay",
            defaults={
                "context_window": self.context_window,
                "max_output_tokens": self.max_output_tokens,
            },
        )

    def get_model_info(self) -> ModelInfo:
        return ModelInfo(
            id="replay",
            display_name="contextfold replay",
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
        )


def replay_messages(
    messages: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    window: int | None = None,
    *,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    places: Sequence[str] | None = None,
    on_request: Callable[[ReplayRow], None] | None = None,
) -> ReplayResult:
    """Replay ``messages`` through a fresh ``ContextFold`` (synchronous wrapper).

    ``window`` is the model's context window in tokens; ``None`` leaves the budget to the
    config (``max_tokens``, else ``max_tokens_fallback``). Raises ``ConfigError`` for a bad
    config, :class:`ReplayError` for a refused message (naming ``places[i]`` or
    ``message i``) and ``ContextLengthError`` when protected content alone cannot fit.
    Use :func:`replay_messages_async` from inside a running event loop.
    """
    return asyncio.run(
        replay_messages_async(
            messages,
            config,
            window,
            max_output_tokens=max_output_tokens,
            places=places,
            on_request=on_request,
        )
    )


async def replay_messages_async(
    messages: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    window: int | None = None,
    *,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    places: Sequence[str] | None = None,
    on_request: Callable[[ReplayRow], None] | None = None,
) -> ReplayResult:
    """The replay itself; see :func:`replay_messages`."""
    config = dict(config or {})
    model = ReplayModel(window, max_output_tokens) if window is not None else None
    context = ContextFold(config)
    counter = context.counter
    rows: list[ReplayRow] = []
    previous: list[str] = []
    history_tokens = 0

    async def request(history_messages: int) -> None:
        nonlocal previous
        view = await context.get_messages_for_request(provider=model)
        report = context.last_report
        keys = [_canonical(message) for message in view]
        shared = _common_prefix(previous, keys)
        view_tokens = max(report.tokens_after, 1)
        prefix_tokens = sum(counter.count_message(message) for message in view[:shared])
        row = ReplayRow(
            request=len(rows) + 1,
            history_messages=history_messages,
            history_tokens=history_tokens,
            tokens_before=report.tokens_before,
            tokens_after=report.tokens_after,
            messages_before=report.messages_before,
            messages_after=report.messages_after,
            compacted=report.compacted,
            level=report.level,
            applied=list(report.applied),
            budget=report.budget,
            trigger=report.trigger,
            prefix_messages=shared,
            prefix_tokens=prefix_tokens,
            prefix_share=min(prefix_tokens / view_tokens, 1.0) if rows else 0.0,
        )
        rows.append(row)
        previous = keys
        if on_request is not None:
            on_request(row)

    for index, message in enumerate(messages):
        # The model answers what came before it: that is a request, unless nothing came before.
        if message.get("role") == "assistant" and index > 0:
            await request(index)
        try:
            await context.add_message(dict(message))
        except MessageValidationError as error:
            place = places[index] if places is not None else f"message {index}"
            raise ReplayError(
                place, f"field '{error.field}': {error.problem}. {error.fix}"
            ) from None
        except (ValueError, TypeError) as error:
            place = places[index] if places is not None else f"message {index}"
            raise ReplayError(place, str(error)) from None
        history_tokens += counter.count_message(message)
    await request(len(messages))

    history = await context.get_messages()
    return ReplayResult(
        rows=rows,
        totals=_totals(rows, messages, history),
        window=window,
        max_output_tokens=max_output_tokens,
        config=config,
    )


def _totals(
    rows: list[ReplayRow],
    messages: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
) -> ReplayTotals:
    before = sum(row.history_tokens for row in rows)
    sent = sum(row.tokens_after for row in rows)
    # Prefix reuse is undefined for the first request; weigh the rest by their size.
    later = rows[1:]
    later_sent = sum(row.tokens_after for row in later)
    last = rows[-1]
    return ReplayTotals(
        messages=len(messages),
        requests=len(rows),
        compactions=sum(1 for row in rows if row.compacted),
        levels_used=sorted({row.level for row in rows if row.level > 0}),
        rungs_used=sorted({rung for row in rows for rung in row.applied}),
        largest_history=max(row.history_tokens for row in rows),
        largest_after=max(row.tokens_after for row in rows),
        history_tokens_total=before,
        tokens_sent_total=sent,
        saved_share=1 - sent / before if before else 0.0,
        prefix_share=sum(row.prefix_tokens for row in later) / later_sent if later_sent else 0.0,
        over_budget_requests=sum(1 for row in rows if row.over_budget),
        history_kept=_same_history(messages, history),
        budget=last.budget,
        trigger=last.trigger,
    )


def _same_history(
    messages: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
) -> bool:
    """History keeps every message in order. The ingress cap may shorten a huge tool result's
    text on admission (by contract), so messages are matched by role and tool-call id."""
    if len(messages) != len(history):
        return False
    return all(
        a.get("role") == b.get("role") and a.get("tool_call_id") == b.get("tool_call_id")
        for a, b in zip(messages, history, strict=True)
    )


def _canonical(message: Mapping[str, Any]) -> str:
    # Key order is part of the bytes a provider sees, so it is kept (no sort_keys).
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)


def _common_prefix(previous: list[str], current: list[str]) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old != new:
            break
        shared += 1
    return shared


__all__ = [
    "ConfigError",
    "ReplayError",
    "ReplayModel",
    "ReplayResult",
    "ReplayRow",
    "ReplayTotals",
    "replay_messages",
    "replay_messages_async",
]
