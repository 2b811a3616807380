"""The scoring categories, each on a small constructed case, and how a run is measured."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from contextfold import ContextFold
from contextfold.compaction.summarize import summary_message
from contextfold.evaluation import (
    EvalConversation,
    EvalInputError,
    EvalSettings,
    Fact,
    NaiveDropOldest,
    Outcome,
    Refusal,
    View,
    evaluate,
)
from contextfold.evaluation.counts import ContentCounts, ExactCounts
from contextfold.evaluation.fold_policy import (
    ContextFoldPolicy,
    ContextFoldSession,
    hit_indices,
    is_own_message,
)
from contextfold.evaluation.runner import Run, answered_by_all
from contextfold.evaluation.scoring import TextCache, score_fact, search_query
from contextfold.tokens import ExactCounter


def fact(value: str, *sources: int, near: bool = False) -> Fact:
    return Fact(value, "id", tuple(sources), near)


def msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


NOTICE_META = {"source": "context-fold", "compaction_notice": True}


# -- the four categories, in their order --------------------------------------------------


def test_in_view_when_a_view_message_holds_the_value() -> None:
    view = View([msg("user", "go"), msg("tool", "ORD-48213 late", tool_call_id="c")])
    assert score_fact(fact("ORD-48213", 5), view, TextCache()) is Outcome.IN_VIEW


def test_ledger_or_summary_when_only_the_policys_own_message_holds_it() -> None:
    view = View(
        [msg("user", "go"), msg("user", "called get(ORD-48213)", metadata=NOTICE_META)],
        ledger=frozenset({1}),
    )
    assert score_fact(fact("ORD-48213", 5), view, TextCache()) is Outcome.LEDGER_OR_SUMMARY
    # The same message outside the ledger positions is the view itself.
    assert score_fact(fact("ORD-48213", 5), View(view.messages), TextCache()) is Outcome.IN_VIEW


def test_in_view_wins_over_the_ledger_when_both_hold_it() -> None:
    view = View(
        [msg("user", "ORD-48213 in the notice"), msg("tool", "ORD-48213", tool_call_id="c")],
        ledger=frozenset({0}),
    )
    assert score_fact(fact("ORD-48213", 5), view, TextCache()) is Outcome.IN_VIEW


def test_recoverable_only_when_the_view_names_a_source_of_the_value() -> None:
    view = View([msg("user", "nothing here")], named_ids=frozenset({7, 9}))
    assert score_fact(fact("ORD-48213", 3, 9), view, TextCache()) is Outcome.RECALL_ID
    assert score_fact(fact("ORD-48213", 3, 8), view, TextCache()) is Outcome.LOST


def test_lost_when_nothing_holds_or_names_it() -> None:
    view = View([msg("user", "ORD-48231 and ORD-4821")])
    assert score_fact(fact("ORD-48213", 2), view, TextCache()) is Outcome.LOST


def test_outcomes_map_to_the_four_categories() -> None:
    assert {o.category for o in Outcome} == {"in_view", "ledger_or_summary", "recoverable", "lost"}
    assert Outcome.SEARCH.category == Outcome.RECALL_ID.category == "recoverable"
    assert Outcome.REFUSED.category == "lost"


def test_the_search_query_is_the_task_prompt_without_the_value() -> None:
    assert search_query("Refund ORD-48213 to  Dana", "ORD-48213") == "Refund to Dana"


# -- what contextfold's views say of themselves ---------------------------------------------


def test_contextfold_marks_its_notice_and_summary_but_not_its_repair_notes() -> None:
    assert is_own_message({"role": "user", "content": "x", "metadata": NOTICE_META})
    assert is_own_message(summary_message("digest", [2, 3, 4]))
    assert not is_own_message(
        {"role": "user", "content": "x", "metadata": {"source": "context-fold", "repair": "a"}}
    )
    assert not is_own_message({"role": "user", "content": "x", "metadata": {"source": "hook"}})


def test_recall_ids_count_on_their_own_never_inside_a_range() -> None:
    marks = ContextFoldSession(ContextFold())._marks  # how the policy reads its views
    notice = msg(
        "user",
        "- r4: user asked\n- r12-r15: assistant called get()\n- ... 9 more item(s) (r20-r176) ...",
        metadata=NOTICE_META,
    )
    own, ids = marks.of(notice)
    assert own
    assert ids == {4}  # a range names no message on its own, not even its ends
    marker = msg(
        "tool", '[... 812 tokens cleared; context_recall("r41") returns it]', tool_call_id="c"
    )
    assert marks.of(marker) == (False, frozenset({41}))
    # Outside contextfold's own messages a bare r-number is the conversation's, not an id.
    assert marks.of(msg("user", "see r12 and router r7")) == (False, frozenset())


def test_search_results_are_read_leniently() -> None:
    @dataclass
    class Hit:
        recall_id: str

    found = ["r41", 7, {"recall_id": "r3"}, {"id": 5}, Hit("r9"), "nonsense", None, -1, True]
    assert hit_indices(found) == [41, 7, 3, 5, 9]
    assert hit_indices(None) == []
    assert hit_indices("r2") == [2]


# -- runs: search, refusals, cache share, totals --------------------------------------------


class Searching(ContextFold):
    """contextfold with a search of its own: messages ranked by how many query words they
    hold, newest first among equals (a real search over the real history, as section 3 of
    the issue will add one)."""

    queries: ClassVar[list[str]] = []

    async def search(self, query: str, limit: int = 5) -> list[str]:
        Searching.queries.append(query)
        words = set(query.lower().split())
        history = await self.get_messages()
        scored = [
            (sum(w in json.dumps(m).lower() for w in words), i) for i, m in enumerate(history)
        ]
        ranked = sorted((s for s in scored if s[0]), reverse=True)
        return [f"r{i}" for _score, i in ranked[:limit]]


@dataclass(frozen=True)
class SearchingPolicy:
    key: ClassVar[str] = "searching"
    label: ClassVar[str] = "contextfold with a search"

    def start(self, window: int, counts: ExactCounts) -> ContextFoldSession:
        # No ledger and no notice: either would name the source on its own (recoverable by
        # id), and this is the fact a search alone finds.
        settings = {"max_tokens": window, "ledger_share": 0, "compaction_notice_enabled": False}
        return ContextFoldSession(Searching(settings))


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def lookup_session(rounds: int) -> list[dict[str, Any]]:
    """A task whose first call group (three parallel lookups) finds a code in its middle
    result, many bulky rounds, then a call needing the code."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {
            "role": "user",
            "content": "Find the vault code of the harbor depot and use it.",
            "metadata": {"source": "user"},
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call(f"a{k}", "lookup", {"site": k}) for k in range(3)],
        },
        {"role": "tool", "tool_call_id": "a0", "content": "no depot here " * 20},
        {"role": "tool", "tool_call_id": "a1", "content": "harbor depot vault code VLT-0000"},
        {"role": "tool", "tool_call_id": "a2", "content": "no depot here " * 20},
    ]
    for n in range(1, rounds):
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call(f"c{n}", "page", {"n": n})]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "filler " * 1200},
        ]
    messages += [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("u", "open", {"code": "VLT-0000"})],
        },
        {"role": "tool", "tool_call_id": "u", "content": "opened"},
    ]
    return messages


def test_a_search_with_the_tasks_words_recovers_a_lost_fact() -> None:
    conv = EvalConversation("s", "test", lookup_session(12))
    Searching.queries.clear()
    report = evaluate(
        [conv], [SearchingPolicy(), NaiveDropOldest()], EvalSettings(windows=(4_000,))
    )
    by_policy = {run.policy: run for run in report.runs}
    final_step = by_policy["searching"].requests[-2]
    assert final_step.outcomes == Outcome.SEARCH.value
    # The query carried the task's words, never the value sought.
    assert Searching.queries and all("VLT-0000" not in q for q in Searching.queries)
    assert "harbor depot" in Searching.queries[-1]
    # A policy without search just loses it, and says it has none.
    assert by_policy["naive"].requests[-2].outcomes == Outcome.LOST.value
    assert by_policy["searching"].offers_search and not by_policy["naive"].offers_search
    totals = {t.policy: t for t in report.totals}
    assert (
        totals["searching"].count("far", "recoverable")
        + totals["searching"].count("near", "recoverable")
        == 1
    )


@dataclass(frozen=True)
class Scripted:
    """A policy that sends the views it is given, in order (None: refuse)."""

    views: Sequence[Sequence[dict[str, Any]] | None]
    key: ClassVar[str] = "scripted"
    label: ClassVar[str] = "scripted"

    def start(self, window: int, counts: ExactCounts) -> Any:
        views = iter(self.views)

        class Session:
            offers_search = False

            async def add(self, message: dict[str, Any]) -> None:
                return None

            async def request(self) -> View:
                view = next(views)
                if view is None:
                    raise Refusal("scripted refusal")
                return View(view)

            async def search(self, query: str, limit: int) -> list[int] | None:
                return None

        return Session()


def test_cache_share_counts_the_prefix_repeated_from_the_previous_view_and_refusals_reset_it() -> (
    None
):
    a, b, c = msg("system", "S " * 100), msg("user", "U " * 50), msg("assistant", "A " * 30)
    d = msg("user", "D " * 20)
    messages = [
        b,
        {"role": "assistant", "content": "1"},
        {"role": "assistant", "content": "2"},
        {"role": "assistant", "content": "3"},
    ]
    views = [[a, b], [a, b, c], None, [a, b, c, d]]
    report = evaluate(
        [EvalConversation("x", "t", messages)], [Scripted(views)], EvalSettings(windows=(100_000,))
    )
    run = report.runs[0]
    counts = ExactCounts(ContentCounts(ExactCounter()))
    size = {id(m): counts(m) for m in (a, b, c, d)}
    first, second, refused, fourth = run.requests
    assert first.cached_tokens == 0
    assert second.cached_tokens == size[id(a)] + size[id(b)]
    assert refused.refused and refused.tokens == 0
    assert fourth.cached_tokens == 0  # nothing was sent the request before
    assert second.tokens == size[id(a)] + size[id(b)] + size[id(c)] + counts.overhead
    totals = report.totals[0]
    assert totals.refused == 1
    assert totals.tokens_sent == first.tokens + second.tokens + fourth.tokens
    assert totals.cache_share == pytest.approx(
        second.cached_tokens / (second.tokens + fourth.tokens)
    )


def test_a_refused_request_loses_every_fact_of_its_step() -> None:
    messages = [
        {"role": "user", "content": "Use the code.", "metadata": {"source": "user"}},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "code KEY-4242"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "use", "arguments": json.dumps({"k": "KEY-4242"})},
                }
            ],
        },
    ]
    report = evaluate(
        [EvalConversation("x", "t", messages)],
        [Scripted([[messages[0]], None, [messages[0]]])],
        EvalSettings(windows=(9_000,)),
    )
    assert [r.outcomes for r in report.runs[0].requests] == ["", Outcome.REFUSED.value, ""]
    totals = report.totals[0]
    assert totals.count("near", "lost") == 1
    assert totals.count_outcome("near", Outcome.REFUSED) == 1


def test_a_message_the_context_refuses_names_the_conversation_and_the_place() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "?"}]
    conv = EvalConversation("my.json", "files", messages, places=["line 1", "line 2"])
    with pytest.raises(EvalInputError) as caught:
        evaluate([conv], [ContextFoldPolicy()], EvalSettings(windows=(8_000,)))
    assert caught.value.conversation == "my.json"
    assert caught.value.place == "line 2"
    with pytest.raises(EvalInputError, match="message 1: a message must be an object"):
        evaluate([EvalConversation("x", "t", [messages[0], "text"])], [NaiveDropOldest()])


def test_evaluate_refuses_what_it_cannot_run() -> None:
    conv = EvalConversation("x", "t", [msg("user", "hi")])
    with pytest.raises(ValueError, match="no policies"):
        evaluate([conv], [])
    with pytest.raises(ValueError, match="no conversations"):
        evaluate([], [NaiveDropOldest()])
    with pytest.raises(ValueError, match="share a key"):
        evaluate([conv], [NaiveDropOldest(), NaiveDropOldest()])
    for bad in ((), (0,), (-5,), ("8000",), (True,)):
        with pytest.raises(ValueError, match="window"):
            EvalSettings(windows=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="search_limit"):
        EvalSettings(search_limit=0)


def test_evaluate_inside_a_running_loop_has_an_async_twin() -> None:
    from contextfold.evaluation import evaluate_async

    conv = EvalConversation("x", "t", lookup_session(3))
    report = asyncio.run(
        evaluate_async([conv], [NaiveDropOldest()], EvalSettings(windows=(50_000,)))
    )
    assert report.totals[0].requests == 5  # 4 assistant messages after the first, and the end


@dataclass(frozen=True)
class ScriptedOther(Scripted):
    key: ClassVar[str] = "other"
    label: ClassVar[str] = "other"


def test_tokens_and_cost_on_the_requests_every_policy_answered_leave_out_any_refused() -> None:
    a, b, c = msg("system", "S " * 100), msg("user", "U " * 50), msg("assistant", "A " * 30)
    messages = [
        b,
        {"role": "assistant", "content": "1"},
        {"role": "assistant", "content": "2"},
        {"role": "assistant", "content": "3"},
    ]
    # "scripted" refuses the third request; "other" answers every one, with more.
    refusing = Scripted([[a, b], [a, b, c], None, [a, b]])
    answering = ScriptedOther([[a, b, c], [a, b, c], [a, b, c], [a, b, c]])
    report = evaluate(
        [EvalConversation("x", "t", messages)],
        [refusing, answering],
        EvalSettings(windows=(100_000,)),
    )
    runs = {run.policy: run for run in report.runs}
    totals = {t.policy: t for t in report.totals}
    common = (0, 1, 3)  # the requests both answered
    for key in ("scripted", "other"):
        requests = runs[key].requests
        assert totals[key].answered_requests == len(common)
        assert totals[key].answered_tokens == sum(requests[i].tokens for i in common)
        for position in range(len(requests[0].costs)):
            assert totals[key].answered_costs[position] == pytest.approx(
                sum(requests[i].costs[position] for i in common)
            )
    # The raw totals keep every answered request: "other" sent a fourth view.
    assert totals["other"].tokens_sent == sum(r.tokens for r in runs["other"].requests)
    assert totals["other"].tokens_sent > totals["other"].answered_tokens
    assert totals["scripted"].tokens_sent == totals["scripted"].answered_tokens
    # One policy alone: every request it answered is answered by all.
    alone = evaluate(
        [EvalConversation("x", "t", messages)], [refusing], EvalSettings(windows=(100_000,))
    ).totals[0]
    assert (alone.answered_requests, alone.answered_tokens) == (3, alone.tokens_sent)


def test_answered_flags_must_match_the_requests_of_a_run() -> None:
    report = evaluate(
        [EvalConversation("x", "t", [msg("user", "hi"), msg("assistant", "ok")])],
        [Scripted([[msg("user", "hi")], [msg("user", "hi")]])],
        EvalSettings(windows=(1_000,)),
    )
    totals, run = report.totals[0], report.runs[0]
    before = (totals.answered_requests, totals.answered_tokens)
    with pytest.raises(ValueError, match="one per request"):
        totals.add_answered(run, [True])
    assert (totals.answered_requests, totals.answered_tokens) == before
    assert answered_by_all([]) == []
    shorter = Run("t", "x", "other", 1_000, False, run.requests[:1])
    with pytest.raises(ValueError, match="different numbers of requests"):
        answered_by_all([run, shorter])


def test_naive_refuses_what_contextfold_answers_and_the_comparison_leaves_those_out() -> None:
    # One tool result larger than the window: naive drop-oldest cannot send its call group
    # and refuses; contextfold shortens the newest result and answers.
    big = " ".join(f"row-{n} value {n * 7}" for n in range(2_000))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "List the rows."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You're welcome."},
    ]
    report = evaluate(
        [EvalConversation("x", "t", messages)],
        [NaiveDropOldest(), ContextFoldPolicy()],
        EvalSettings(windows=(2_000,)),
    )
    totals = {t.policy: t for t in report.totals}
    naive, fold = totals["naive"], totals["contextfold"]
    assert naive.refused > 0 and fold.refused == 0
    assert naive.answered_requests == fold.answered_requests == naive.requests - naive.refused
    assert naive.answered_tokens == naive.tokens_sent
    assert fold.answered_tokens < fold.tokens_sent
