"""The BFCL benchmark corpus (contextfold.evaluation.bfcl, which bench/bfcl_corpus.py
re-exports) builds well-formed, deterministic histories."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "bench" / "bfcl_corpus.py"


def _load_corpus_module() -> Any:
    # bench/ is not a package; load the file under a private name so nothing leaks into sys.path.
    spec = importlib.util.spec_from_file_location("_bench_bfcl_corpus", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus_mod = _load_corpus_module()


@pytest.fixture(scope="module")
def base() -> list[Any]:
    return corpus_mod.build_conversations("base", limit=60)


@pytest.fixture(scope="module")
def long_context() -> list[Any]:
    return corpus_mod.build_conversations("long_context")


def _assert_well_formed(conv: Any) -> None:
    messages = conv.messages
    assert messages, conv.id
    json.dumps(conv.to_dict())  # JSON-serialisable end to end
    seen_ids: set[str] = set()
    pending: list[str] = []  # call ids of the last assistant message still awaiting results
    for index, msg in enumerate(messages):
        role = msg["role"]
        assert role in {"system", "user", "assistant", "tool"}, (conv.id, index, role)
        if role == "system":
            assert index == 0, (conv.id, index)
        if role == "tool":
            # Every result answers a call of the immediately preceding assistant message.
            assert msg["tool_call_id"] in pending, (conv.id, index, msg["tool_call_id"])
            pending.remove(msg["tool_call_id"])
            assert isinstance(msg["content"], str)
            continue
        assert not pending, f"{conv.id}[{index}]: calls {pending} left unanswered"
        if role == "user":
            assert msg["metadata"] == {"source": "user"}
            assert msg["content"].strip()
        if role == "assistant" and msg.get("tool_calls"):
            for call in msg["tool_calls"]:
                assert call["type"] == "function"
                assert call["id"] not in seen_ids, (conv.id, call["id"])
                seen_ids.add(call["id"])
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
                pending.append(call["id"])
    assert not pending, f"{conv.id}: calls {pending} left unanswered at the end"
    assert messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")


def test_categories_include_base_and_long_context() -> None:
    names = corpus_mod.categories()
    assert {"base", "long_context"} <= set(names)


def test_unknown_category_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown BFCL multi-turn category 'nope'.*base"):
        corpus_mod.build_conversations("nope")


def test_base_conversations_are_well_formed(base: list[Any]) -> None:
    assert len(base) == 60
    for conv in base:
        _assert_well_formed(conv)
        names = {tool["function"]["name"] for tool in conv.tools}
        called = {
            call["function"]["name"] for msg in conv.messages for call in msg.get("tool_calls", [])
        }
        assert called <= names, conv.id
        # BFCL's Python type names are translated to JSON Schema.
        assert all(tool["function"]["parameters"]["type"] == "object" for tool in conv.tools)


def test_long_context_is_well_formed_and_has_big_tool_results(long_context: list[Any]) -> None:
    assert len(long_context) == 200
    for conv in long_context:
        _assert_well_formed(conv)
    largest = max(
        len(msg["content"])
        for conv in long_context
        for msg in conv.messages
        if msg["role"] == "tool"
    )
    # Single results reach ~31 KB (about 20,000 exact o200k tokens: dense ticker lists).
    assert largest > 25_000


def test_parallel_call_groups_appear(base: list[Any]) -> None:
    sizes = [len(m["tool_calls"]) for c in base for m in c.messages if m.get("tool_calls")]
    assert 1 in sizes
    assert any(size > 1 for size in sizes)
    assert max(sizes) <= 3


def test_build_is_deterministic(base: list[Any]) -> None:
    again = corpus_mod.build_conversations("base", limit=60)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in base]


def test_long_context_build_is_deterministic(long_context: list[Any]) -> None:
    again = corpus_mod.build_conversations("long_context", limit=40)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in long_context[:40]]


def test_system_prompt_is_optional_and_names_the_tools() -> None:
    with_system = corpus_mod.build_conversations("base", limit=1)[0]
    without = corpus_mod.build_conversations("base", limit=1, system_prompt=False)[0]
    assert with_system.messages[0]["role"] == "system"
    for tool in with_system.tools:
        assert tool["function"]["name"] in with_system.messages[0]["content"]
    assert without.messages == with_system.messages[1:]


def test_tool_results_come_from_the_simulators() -> None:
    # multi_turn_base_0 starts with cd(folder='document'); the file system answers with the
    # new current directory, which proves the call really ran against the scenario.
    conv = corpus_mod.build_conversations("base", limit=1)[0]
    first_call = next(m for m in conv.messages if m.get("tool_calls"))["tool_calls"][0]
    assert first_call["function"]["name"] == "cd"
    assert json.loads(first_call["function"]["arguments"]) == {"folder": "document"}
    result = next(m for m in conv.messages if m["role"] == "tool")
    assert result["tool_call_id"] == first_call["id"]
    assert json.loads(result["content"]) == {"current_working_directory": "document"}


def test_held_out_function_turn_gets_bfcl_prompt() -> None:
    # miss_func conversations have a turn with no user text: BFCL's harness announces the
    # newly available function instead, and so does the corpus.
    conv = corpus_mod.build_conversations("miss_func", limit=1)[0]
    users = [m["content"] for m in conv.messages if m["role"] == "user"]
    assert any("updated some more functions" in text for text in users)
    _assert_well_formed(conv)


def test_missing_simulator_is_skipped_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    # The builder lives in the package; the bench file re-exports it.
    import contextfold.evaluation.bfcl as builder

    assert corpus_mod.build_corpus is builder.build_corpus
    real = builder._simulator_class

    def without_twitter(class_name: str) -> type:
        if class_name == "TwitterAPI":
            raise ImportError("simulated missing dependency")
        return real(class_name)

    monkeypatch.setattr(builder, "_simulator_class", without_twitter)
    corpus = corpus_mod.build_corpus("base", limit=10)
    assert corpus.skipped, "base_0 involves TwitterAPI and must be reported as skipped"
    assert all("simulated missing dependency" in reason for reason in corpus.skipped.values())
    assert len(corpus.conversations) == 10
    for conv in corpus.conversations:
        assert all(
            call["function"]["name"] != "post_tweet"
            for m in conv.messages
            for call in m.get("tool_calls", [])
        )


# --------------------------------------------------------------------------- bench helpers
# The request bench's synthetic histories and the replay bench's integrity check are what the
# bench numbers rest on, so they are checked here too.


def _load_bench(name: str) -> Any:
    path = _BENCH.parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


requests_mod = _load_bench("bench_requests")
replay_mod = _load_bench("bench_bfcl_replay")


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1_000])
def test_synthetic_history_has_exact_size_and_closed_groups(n: int) -> None:
    history = requests_mod.make_history(n, seed=3)
    assert len(history) == n
    assert history[0]["role"] == "system"
    assert replay_mod.group_problems(history) == []
    assert history == requests_mod.make_history(n, seed=3)
    if n >= 100:
        sizes = {len(m["tool_calls"]) for m in history if m.get("tool_calls")}
        assert sizes == {1, 2, 3}
        assert max(len(m["content"]) for m in history if m["role"] == "tool") > 4_000


def test_synthetic_history_rejects_empty() -> None:
    with pytest.raises(ValueError, match="at least one message"):
        requests_mod.make_history(0)


async def test_naive_drop_schedule_matches_the_naive_compaction() -> None:
    history = requests_mod.make_history(120, seed=5)
    budget = requests_mod.naive_total(history) // 2
    naive = requests_mod.NaiveContext()
    await naive.set_messages(history)
    view = await naive.get_messages_for_request(token_budget=budget)
    schedule = requests_mod.naive_drop_schedule(history, budget)
    assert len(view) == len(history) - len(schedule)
    assert schedule == list(range(len(history) - 1, len(view) - 1, -1))
    assert requests_mod.naive_total(view) <= budget * requests_mod.TARGET_USAGE


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_group_check_catches_orphans_and_unanswered_calls() -> None:
    user = {"role": "user", "content": "hi"}
    calls = {"role": "assistant", "content": "", "tool_calls": [_call("a"), _call("b")]}
    result_a = {"role": "tool", "tool_call_id": "a", "content": "1"}
    result_b = {"role": "tool", "tool_call_id": "b", "content": "2"}
    check = replay_mod.group_problems
    assert check([user, calls, result_a, result_b, user]) == []
    assert check([user, calls]) == []  # calls at the very tail await their results
    assert check([user, result_a]) == ["orphan tool result 'a' at 1"]
    assert check([user, calls, result_a, user]) == ["calls ['b'] unanswered before message 3"]
    assert check([user, calls, result_b]) == ["calls ['a'] unanswered at the end"]
