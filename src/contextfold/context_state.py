"""What one context knows between calls: its history, the sticky view, and the bookkeeping of
the requests and readings so far. Plain state, no behaviour beyond keeping itself
consistent: the parts that act on it (`request`, `delivery`, `persistence`, `usage_feed`)
each take it as their first argument."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .admission import Admission
from .budget import BudgetDecision
from .compaction.cost_plan import CacheWatch
from .compaction.sticky import StickyView
from .conventions import SystemPromptFactory
from .costing import PricedRequest
from .history import Appended, History
from .meter import MeterStats, UsageReading
from .recall import RecallError, parse_recall_id
from .report import RequestReport


@dataclass(slots=True)
class ContextState:
    """One context's state. History and the sticky view are replaced together (`reset`)."""

    history: History
    sticky: StickyView
    # -- per history: a new one forgets these ------------------------------------------------
    last_reading: UsageReading | None = None  # the meter's last usage reading
    aside_reading: UsageReading | None = None  # a suspect reading set aside (see `request`)
    last_delivered_raw: int | None = None  # raw size of the last view handed out
    # The last view handed out: the list it was taken from, its length then, and the system
    # prompt factory's message it carried (see `Delivery.sent_prefix`).
    last_sent: tuple[list[dict[str, Any]], int, Any] | None = None
    # -- per context --------------------------------------------------------------------------
    model: str | None = None
    last_budget: BudgetDecision | None = None  # the last one reported on context:budget
    refit_cap: int | None = None  # a provider overflow's lesson, kept as a cap
    margin_waived: bool = False  # the last request was fitted to the input limit
    system_prompt_factory: SystemPromptFactory | None = None
    system_prompt_cost: tuple[str, int] | None = None  # the factory's last text, its cost
    header_cost: tuple[str, int] | None = None  # the notice's role, its header's cost
    link_loaded: bool = False  # a durable session was read in
    state_dirty: bool = False  # a committed pass not yet saved to the durable session
    last_persisted_budget: tuple[int, int | None] | None = None
    last_report: RequestReport | None = None
    # What the meter knew at the last delivery, kept as its inputs: the stats record is
    # built when read (most requests are never asked about it).
    meter_inputs: tuple[Any, ...] | None = None
    meter_stats: MeterStats | None = None
    summary_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # What the cost planner (``planner: cost``) knows of the provider's cache.
    cache_watch: CacheWatch = field(default_factory=CacheWatch)
    last_priced: PricedRequest | None = None  # the last view as the report priced it

    @classmethod
    def fresh(cls, history: History, model: str | None) -> ContextState:
        return cls(history=history, sticky=StickyView.fresh(history), model=model)

    def reset(self, history: History) -> None:
        """Take ``history`` (a resume, a replacement, a clear): compaction starts afresh,
        and the meter's last reading, which described a request over the old history, goes."""
        self.history = history
        self.sticky = StickyView.fresh(history)
        self.last_reading = None
        self.aside_reading = None
        self.last_delivered_raw = None
        self.last_sent = None

    def admitted(self, admission: Admission) -> Appended:
        """Append a prepared message to history and to the sticky view."""
        appended = self.history.append(admission)
        self.sticky.admitted(appended)
        return appended

    def change_pin(self, recall_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the message ``recall_id`` names; True when that changed anything
        (the compaction state then needs saving). `RecallError` for an id history does not
        hold, or a message never sent (the view cannot carry it)."""
        history = self.history
        index = parse_recall_id(recall_id, len(history))
        if history.entries[index].view is None:
            raise RecallError(
                f"{recall_id.strip()} is history only (never sent to the model), so the "
                "view cannot carry it: there is nothing to pin",
                "invalid_argument",
            )
        if (index in history.pins) == pinned:
            return False
        if pinned:
            history.pins.add(index)
        else:
            history.pins.discard(index)
            self.sticky.pins_seen = self.sticky.pins_seen - {index}
        self.state_dirty = True  # saved with the compaction state
        return True
