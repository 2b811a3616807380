"""context-fold in the real amplifier-core kernel: mount, events, meter, validation, a session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.testing import MockCoordinator

from contextfold import ConfigError, ContextFold
from contextfold.amplifier import mount
from support import agent_run

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
    cleanup()
    await coordinator.hooks.emit("llm:response", {"usage": {"input_tokens": 5}})
    await context.get_messages_for_request()
    assert context.token_meter_stats.last_actual == 800  # unregistered


async def test_bad_config_fails_at_mount() -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        await mount(MockCoordinator(), {"max_tokens": 0})
    with pytest.raises(ConfigError, match="target_usage"):
        await mount(MockCoordinator(), {"target_usage": 0.99})


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


def test_kernel_validator_accepts_the_module() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "amplifier_core.cli",
            "validate",
            "context",
            str(ROOT / "src" / "contextfold" / "amplifier"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "fail" not in out.lower() or "0 failed" in out.lower()
