"""context-fold in the real amplifier-core kernel: mount, events, meter, validation, a session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.testing import MockCoordinator

from contextfold import ConfigError, ContextFold
from contextfold.amplifier import METER_HOOK_NAME, METER_PRIORITY, mount
from support import agent_run, kernel_cli

ROOT = Path(__file__).resolve().parents[1]


async def test_mount_registers_context_events_and_meter() -> None:
    coordinator = MockCoordinator()
    seen: list[tuple[str, dict]] = []

    async def record(event: str, data: dict):
        from amplifier_core.models import HookResult

        seen.append((event, data))
        return HookResult(action="continue")

    for name in ("context:budget", "context:compaction", "context:report"):
        coordinator.hooks.register(name, record, priority=10, name=f"rec-{name}")
    cleanup = await mount(coordinator, {"max_tokens": 12_000, "token_counter": "heuristic"})
    context = coordinator.get("context")
    assert isinstance(context, ContextFold)
    retention = coordinator.get_capability("context.request_retention")
    assert retention["required_reminders"] is True and retention["hard_fit"] is True
    await context.set_messages(agent_run(40, result_chars=3000))
    view = await context.get_messages_for_request()
    assert len(view) < len(await context.get_messages())
    names = [e for e, _ in seen]
    assert names.count("context:budget") == 1 and "context:compaction" in names
    budget = next(d for e, d in seen if e == "context:budget")
    assert budget["effective_budget"] == 12_000 and budget["source"] == "max_tokens_fallback"
    # The meter listens on llm:response through the kernel's hook registry.
    await coordinator.hooks.emit(
        "llm:response", {"usage": {"input_tokens": 777, "cache_write_tokens": 23}}
    )
    await context.get_messages_for_request()
    assert context.token_meter_stats.last_actual == 800
    assert coordinator.hooks.list_handlers()["llm:response"] == [METER_HOOK_NAME]
    await cleanup()
    assert not coordinator.hooks.list_handlers().get("llm:response")
    await coordinator.hooks.emit("llm:response", {"usage": {"input_tokens": 5}})
    await context.get_messages_for_request()
    assert context.token_meter_stats.last_actual == 800  # unregistered


class RecordingHooks:
    """Just the hook registry surface a host coordinator offers: register and emit."""

    def __init__(self, *, with_emit: bool = True) -> None:
        self.registered: list[dict] = []
        self.events: list[tuple[str, dict]] = []
        if not with_emit:
            self.emit = None  # the reference module's meter-only doubles have no emit

    def register(self, event, handler, priority=0, name=None):
        entry = {"event": event, "handler": handler, "priority": priority, "name": name}
        self.registered.append(entry)
        return lambda: self.registered.remove(entry)

    async def emit(self, event: str, data: dict) -> None:
        self.events.append((event, dict(data)))


class PlainCoordinator:
    """A host's coordinator as the reference module's tests build it: ``mount(point,
    module)`` without a ``name`` keyword, ``hooks`` optional, no capabilities."""

    def __init__(self, hooks: RecordingHooks | None = None) -> None:
        self.hooks = hooks
        self.mounted: dict[str, object] = {}

    async def mount(self, point: str, module: object) -> None:
        self.mounted[point] = module


async def test_mount_with_a_plain_coordinator_double() -> None:
    hooks = RecordingHooks()
    coordinator = PlainCoordinator(hooks)
    cleanup = await mount(coordinator, {"max_tokens": 12_000, "token_counter": "heuristic"})
    context = coordinator.mounted["context"]
    assert isinstance(context, ContextFold)
    [meter] = hooks.registered
    assert meter["event"] == "llm:response"
    assert meter["name"] == METER_HOOK_NAME == "context-fold-meter"
    assert meter["priority"] == METER_PRIORITY == 50
    # Our events reach the host's emit; the meter reads usage through the handler.
    await context.set_messages(agent_run(40, result_chars=3000))
    await context.get_messages_for_request()
    names = [name for name, _ in hooks.events]
    assert "context:budget" in names and "context:compaction" in names
    await meter["handler"]("llm:response", {"usage": {"input_tokens": 900}})
    await context.get_messages_for_request()
    assert context.token_meter_stats.last_actual == 900
    await cleanup()
    assert hooks.registered == []
    await cleanup()  # a second cleanup is harmless


async def test_mount_with_hooks_that_cannot_emit_or_no_hooks_at_all() -> None:
    meter_only = RecordingHooks(with_emit=False)
    coordinator = PlainCoordinator(meter_only)
    cleanup = await mount(coordinator, {"token_counter": "heuristic"})
    context = coordinator.mounted["context"]
    await context.add_message({"role": "user", "content": "hi"})
    assert len(await context.get_messages_for_request()) == 1
    assert [entry["name"] for entry in meter_only.registered] == [METER_HOOK_NAME]
    await cleanup()
    assert meter_only.registered == []

    bare = PlainCoordinator(hooks=None)
    cleanup = await mount(bare, {})
    assert isinstance(bare.mounted["context"], ContextFold)
    await cleanup()


async def test_mount_does_not_hide_a_coordinator_fault() -> None:
    class BrokenCoordinator(PlainCoordinator):
        async def mount(self, point: str, module: object, name: str | None = None) -> None:
            raise TypeError("mount point 'context' takes a ContextManager")

    class PositionalOnly(PlainCoordinator):
        def mount(self, point: str, module: object) -> None:  # sync, no name keyword
            self.mounted[point] = module

    with pytest.raises(TypeError, match="takes a ContextManager"):
        await mount(BrokenCoordinator(), {})
    sync_host = PositionalOnly()
    await mount(sync_host, {})
    assert isinstance(sync_host.mounted["context"], ContextFold)


class ListingHooks(RecordingHooks):
    """A registry that can say which events have handlers, as the kernel's can."""

    def __init__(self, listened: set[str], *, broken: bool = False) -> None:
        super().__init__()
        self.listened = listened
        self.broken = broken

    def list_handlers(self, event=None):
        if self.broken:
            raise RuntimeError("this registry lists nothing")
        return {event: ["someone"] if event in self.listened else []}


async def test_events_nobody_listens_to_are_not_sent_to_the_kernel() -> None:
    hooks = ListingHooks({"context:budget"})
    coordinator = PlainCoordinator(hooks)
    await mount(coordinator, {"max_tokens": 12_000, "token_counter": "heuristic"})
    context = coordinator.mounted["context"]
    await context.set_messages(agent_run(40, result_chars=3000))
    await context.get_messages_for_request()
    assert [name for name, _ in hooks.events] == ["context:budget"]
    hooks.listened.add("context:report")  # a handler registered mid-session hears the next
    await context.get_messages_for_request(token_budget=11_000)
    assert [name for name, _ in hooks.events] == [
        "context:budget",
        "context:budget",
        "context:report",
    ]

    broken = ListingHooks(set(), broken=True)  # cannot tell: every event is emitted
    other = PlainCoordinator(broken)
    await mount(other, {"max_tokens": 12_000, "token_counter": "heuristic"})
    await other.mounted["context"].set_messages(agent_run(40, result_chars=3000))
    await other.mounted["context"].get_messages_for_request()
    assert {"context:budget", "context:report"} <= {name for name, _ in broken.events}


async def test_capability_registered_when_the_coordinator_offers_it() -> None:
    class CapableCoordinator(PlainCoordinator):
        def __init__(self) -> None:
            super().__init__(RecordingHooks())
            self.capabilities: dict[str, object] = {}

        def register_capability(self, name: str, value: object) -> None:
            self.capabilities[name] = value

    coordinator = CapableCoordinator()
    await mount(coordinator, {})
    assert coordinator.capabilities["context.request_retention"] == {
        "required_reminders": True,
        "hard_fit": True,
        "module": "context-fold",
    }


async def test_bad_config_fails_at_mount() -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        await mount(MockCoordinator(), {"max_tokens": 0})
    with pytest.raises(ConfigError, match="target_usage"):
        await mount(MockCoordinator(), {"target_usage": 0.99})
    hooks = RecordingHooks()
    with pytest.raises(ConfigError, match="max_tokens"):
        await mount(PlainCoordinator(hooks), {"max_tokens": -5})
    assert hooks.registered == []  # nothing is left registered by a refused mount


async def test_session_resolves_context_fold_by_module_id() -> None:
    plan = {
        "session": {
            "orchestrator": "loop-fold",
            "context": {"module": "context-fold", "config": {"max_tokens": 30_000}},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {
                        "steps": 6,
                        "tool": "lookup",
                        "argument": "topic",
                        "final_text": "All done.",
                    }
                },
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {}}],
    }
    async with AmplifierSession(plan) as session:
        answer = await session.execute("Look everything up.")
        context = session.coordinator.get("context")
        assert isinstance(context, ContextFold)
        assert "All done." in answer
        messages = await context.get_messages()
        assert sum(1 for m in messages if m["role"] == "tool") == 6
        assert context.last_report is not None and context.last_report.budget == 30_000


@pytest.mark.slow
def test_kernel_validator_accepts_the_module() -> None:
    result = subprocess.run(
        kernel_cli("validate", "context", str(ROOT / "src" / "contextfold" / "amplifier")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "fail" not in out.lower() or "0 failed" in out.lower()
