"""The demo: one long agent task in a small window, run twice in the real Amplifier kernel.

Both runs are whole ``AmplifierSession``\\ s built from a mount plan: the ``loop-fold``
orchestrator, the ``context-fold`` context module, the offline ``provider-scripted`` model and
the ``tool-doc-lookup`` tool. They differ in two switches only:

- *without compaction*: ``compaction_enabled: false`` and a provider that serves requests over
  its window (``enforce_window: false``) so the size they would have had can be measured;
- *with context-fold*: default settings and a provider that refuses an oversized request
  exactly like a real one does.

Everything reported is measured, not predicted: request sizes, prompt-cache reads and overflow
come from the provider's own records, compactions from the ``context:compaction`` events, the
history from ``context.get_messages()`` after the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from amplifier_core import AmplifierSession
from amplifier_core.llm_errors import ContextLengthError
from amplifier_core.models import HookResult, ToolResult

from contextfold.events import COMPACTION, REPORT

DEFAULT_WINDOW = 16_000
DEFAULT_STEPS = 40
DEFAULT_RESULT_CHARS = 6_000
# A small reply reserve keeps most of a small window for input, as a real 16k model would.
DEFAULT_MAX_OUTPUT_TOKENS = 1_024
MIN_STEPS = 1

TASK = (
    "Research the topics 'topic 1' to 'topic {steps}' with the lookup tool, one lookup per "
    "topic, then say you are done."
)
FINAL_TEXT = "Done: I looked up all {steps} topics."
SYSTEM_PROMPT = (
    "You are a careful research assistant. Use the lookup tool for every topic you are asked "
    "about and keep notes short."
)


class DemoDoesNotFit(Exception):
    """A run stopped because its protected content cannot fit the window, even compacted."""


# The kernel re-raises an orchestrator's exception as a RuntimeError carrying only
# "Execution failed: <type>: <message>", so the type has to be recognised by name.
_DOES_NOT_FIT = ("ContextLengthError", "WindowExceededError")


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs: a task of ``steps`` lookups in a ``window``-token model."""

    window: int = DEFAULT_WINDOW
    steps: int = DEFAULT_STEPS
    result_chars: int = DEFAULT_RESULT_CHARS
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    store: str | None = None  # keep the managed run's session in this durable store
    # With tools (N catalog tools whose schemas ride on every request), the two runs compare
    # the message-only budget with the measured request (the provider counts the whole
    # request, tool schemas included) instead of no compaction with context-fold.
    tools: int = 0


@dataclass(frozen=True)
class RequestPoint:
    """One provider request of a run, as the provider measured it."""

    request: int  # 1-based
    tokens: int  # full request size (gross input + cache writes)
    cache_read_tokens: int
    messages: int
    overflowed: bool  # over the provider's input limit
    rejected: bool  # refused by the provider (only when it enforces its window)
    compacted: bool  # context-fold compacted the view it handed to this request


@dataclass
class RunSummary:
    """One session of the demo, measured."""

    label: str
    managed: bool
    input_limit: int  # the provider's usable input: window minus the output reserve
    points: list[RequestPoint]
    compactions: int
    levels_used: list[int]
    rungs_used: list[str]
    budget: int | None  # context-fold's effective budget (its own estimate tokens)
    trigger: int | None  # where context-fold starts compacting (same units)
    history_messages: int
    expected_messages: int
    missing_tool_results: int  # tool runs whose result is not in the history
    final_text: str
    completed: bool  # the scripted task reached its final answer
    count_calls: int = 0  # whole-request counts the provider made (the measured path)

    @property
    def requests(self) -> int:
        return len(self.points)

    @property
    def largest_request(self) -> int:
        return max((p.tokens for p in self.points), default=0)

    @property
    def tokens_sent(self) -> int:
        return sum(p.tokens for p in self.points if not p.rejected)

    @property
    def cache_read_tokens(self) -> int:
        """Input tokens of served requests that the provider read from its prompt cache."""
        return sum(p.cache_read_tokens for p in self.points if not p.rejected)

    @property
    def uncached_tokens(self) -> int:
        """Input tokens processed afresh: what a prompt cache could not serve. Billed in
        full, where cache reads cost a fraction, so this is the figure to compare."""
        return self.tokens_sent - self.cache_read_tokens

    @property
    def cache_share(self) -> float:
        sent = self.tokens_sent
        return self.cache_read_tokens / sent if sent else 0.0

    @property
    def history_kept(self) -> bool:
        return self.history_messages == self.expected_messages and not self.missing_tool_results

    @property
    def overflowed(self) -> bool:
        return any(p.overflowed for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "requests": self.requests,
            "largest_request": self.largest_request,
            "tokens_sent": self.tokens_sent,
            "cache_read_tokens": self.cache_read_tokens,
            "uncached_tokens": self.uncached_tokens,
            "cache_share": round(self.cache_share, 4),
            "history_kept": self.history_kept,
            "overflowed": self.overflowed,
            "refused": self.refused,
        }

    @property
    def refused(self) -> int:
        """Requests the provider refused as over its input limit."""
        return sum(1 for p in self.points if p.rejected)


@dataclass
class DemoResult:
    """Both runs of the demo and the settings they ran with."""

    settings: DemoSettings
    unmanaged: RunSummary
    managed: RunSummary
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "runs": {"unmanaged": self.unmanaged.to_dict(), "managed": self.managed.to_dict()},
        }


def _context_config(settings: DemoSettings, *, managed: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"report_events": "every_request"}
    if settings.tools:
        # The message-only budget (estimate) against the measured request (actual + counts).
        config["token_meter"] = "actual" if managed else "estimate"
    elif not managed:
        config["compaction_enabled"] = False
    if managed and settings.store:
        config["store"] = settings.store
    return config


def mount_plan(settings: DemoSettings, *, managed: bool) -> dict[str, Any]:
    """The Amplifier mount plan of one run (also written to the output folder)."""
    return {
        "session": {"orchestrator": "loop-fold", "context": "context-fold"},
        "orchestrator": {
            # One request per lookup plus the final answer, with room to spare: the cap only
            # guards against a runaway loop.
            "config": {"system_prompt": SYSTEM_PROMPT, "max_iterations": settings.steps + 10}
        },
        # The demo charts every request, so it asks for a report on each.
        "context": {"config": _context_config(settings, managed=managed)},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {
                        "steps": settings.steps,
                        "tool": "lookup",
                        "argument": "topic",
                        "final_text": FINAL_TEXT.format(steps=settings.steps),
                    },
                    "context_window": settings.window,
                    "max_output_tokens": settings.max_output_tokens,
                    # With tools both runs are compacted, and the provider refuses what is over
                    # its limit in both; only the measured run has it count requests.
                    "enforce_window": managed or settings.tools > 0,
                }
                | ({"count_requests": managed} if settings.tools else {}),
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": settings.result_chars}}],
    }


async def run_session(
    settings: DemoSettings,
    *,
    managed: bool,
    on_request: Callable[[], None] | None = None,
) -> RunSummary:
    """Run one session of the demo and measure it. ``on_request`` fires per model request."""
    session = AmplifierSession(mount_plan(settings, managed=managed))
    compactions: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    tool_call_ids: list[str] = []
    user_messages = 0

    async def on_compaction(_event: str, data: dict[str, Any]) -> HookResult:
        compactions.append(dict(data))
        return HookResult()

    async def on_report(_event: str, data: dict[str, Any]) -> HookResult:
        reports.append(dict(data))
        return HookResult()

    async def on_tool_post(_event: str, data: dict[str, Any]) -> HookResult:
        tool_call_ids.append(str(data.get("tool_call_id")))
        return HookResult()

    async def on_prompt(_event: str, _data: dict[str, Any]) -> HookResult:
        nonlocal user_messages
        user_messages += 1
        return HookResult()

    async def on_provider_request(_event: str, _data: dict[str, Any]) -> HookResult:
        if on_request is not None:
            on_request()
        return HookResult()

    try:
        await session.initialize()
        provider = _mounted(session, "providers", "scripted")
        _mounted(session, "tools", "lookup")
        for index in range(settings.tools):
            tool = CatalogTool(index)
            await session.coordinator.mount("tools", tool, name=tool.name)
        hooks = session.coordinator.hooks
        hooks.register(COMPACTION, on_compaction, name="contextfold-demo-compaction")
        hooks.register(REPORT, on_report, name="contextfold-demo-report")
        hooks.register("tool:post", on_tool_post, name="contextfold-demo-tools")
        hooks.register("prompt:submit", on_prompt, name="contextfold-demo-prompt")
        hooks.register("llm:request", on_provider_request, name="contextfold-demo-progress")

        try:
            final_text = await session.execute(TASK.format(steps=settings.steps))
        except (ContextLengthError, RuntimeError) as error:
            if isinstance(error, ContextLengthError) or any(
                f"{name}:" in str(error) for name in _DOES_NOT_FIT
            ):
                text = str(error).removeprefix("Execution failed: ")
                raise DemoDoesNotFit(text) from error
            raise
        context = session.coordinator.get("context")
        history = await context.get_messages()
    finally:
        await session.cleanup()

    # Compaction state is sticky: a report after the first compaction shows the folded view
    # as it stands, so "compacted" marks the requests where a pass actually ran.
    compacted_flags = [bool(r.get("compacted")) for r in reports]
    records = provider.records
    served = [r for r in records if not r.rejected]
    points = [
        RequestPoint(
            request=i + 1,
            tokens=record.request_tokens,
            cache_read_tokens=record.cache_read_tokens,
            messages=record.message_count,
            overflowed=record.overflowed,
            rejected=record.rejected,
            compacted=compacted_flags[i] if i < len(compacted_flags) else False,
        )
        for i, record in enumerate(records)
    ]
    # Every message the session produced: the system prompt, each user prompt, one assistant
    # message per served request, one tool message per tool run.
    expected = 1 + user_messages + len(served) + len(tool_call_ids)
    # And each tool run's result is there under its own call id, not just some message.
    kept_ids = {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
    last = reports[-1] if reports else {}
    if settings.tools:
        label = "measured request" if managed else "message-only budget"
    else:
        label = "with context-fold" if managed else "without compaction"
    return RunSummary(
        label=label,
        managed=managed,
        input_limit=provider.config.window,
        points=points,
        compactions=len(compactions),
        levels_used=sorted({int(c.get("level", 0)) for c in compactions} - {0}),
        rungs_used=sorted({str(rung) for c in compactions for rung in c.get("applied", [])}),
        budget=last.get("budget"),
        trigger=last.get("trigger"),
        history_messages=len(history),
        expected_messages=expected,
        missing_tool_results=len(set(tool_call_ids) - kept_ids),
        final_text=final_text,
        completed=final_text == FINAL_TEXT.format(steps=settings.steps),
        count_calls=provider.count_calls,
    )


class CatalogTool:
    """One of many mounted tools with a sizeable schema (a catalog query), as agents with large
    toolsets carry: its schema rides on every request; the scripted task never calls it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"catalog_{index}"
        self.description = (
            f"Query section {index} of the product catalog. Matches entries by name, family, "
            "region, price band, supplier and free-text notes; returns each match with its "
            "stock on hand per warehouse, the lead time for a reorder, the supplier's contact, "
            "the last three price changes and any open quality notice. Use it before quoting "
            "a customer, never for entries outside this section."
        )
        fields = {
            "name": "Product name or a prefix of it; case-insensitive.",
            "family": "Product family, as listed in the catalog's table of contents.",
            "region": "Sales region code (EMEA, AMER, APAC) the stock should be counted in.",
            "price_band": "Price band from A (lowest) to F (highest) to restrict matches to.",
            "supplier": "Supplier name or number, when only one supplier's items are wanted.",
            "notes": "Free text matched against the entry's notes and quality notices.",
        }
        self.input_schema = {
            "type": "object",
            "properties": {
                field: {"type": "string", "description": f"{text} (section {index})"}
                for field, text in fields.items()
            },
            "required": ["name"],
        }

    def get_schema(self) -> dict[str, Any]:
        return self.input_schema

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(success=True, output=f"catalog section {self.index}: nothing found")


def _mounted(session: AmplifierSession, mount_point: str, name: str) -> Any:
    """The named module, or a clear error: the kernel only logs a module that failed to load."""
    modules = session.coordinator.get(mount_point) or {}
    if name not in modules:
        raise RuntimeError(
            f"the {mount_point} module {name!r} did not mount (see the log above); "
            "is contextfold installed (uv sync)?"
        )
    return modules[name]


async def run_demo(
    settings: DemoSettings, *, on_request: Callable[[str], None] | None = None
) -> DemoResult:
    """Run the task without compaction, then with context-fold. ``on_request(label)`` per
    model request, for progress bars."""

    def progress(label: str) -> Callable[[], None] | None:
        if on_request is None:
            return None
        return lambda: on_request(label)

    unmanaged = await run_session(settings, managed=False, on_request=progress("unmanaged"))
    managed = await run_session(settings, managed=True, on_request=progress("managed"))
    return DemoResult(settings=settings, unmanaged=unmanaged, managed=managed)
