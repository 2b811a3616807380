"""The inspector page in a real headless Chromium: it renders without a console error or a
network request, its timeline has the expected points and markers, a click on a compaction
shows that pass, a request's view lists the messages the context sent, and a zoom draws
every request of its range. A screenshot of each page is kept (see `keep_screenshot`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.browser_support import keep_screenshot, opened
from tests.support import agent_run, human, reply

from contextfold.cli import main
from contextfold.cli.chart import _envelope, _marks_kept
from contextfold.cli.inspector_page import (
    MAX_PAGE_BYTES,
    inspector_html,
    iter_chunk_names,
    replay_run,
)
from contextfold.cli.replay import ReplayResult, replay_messages

pytestmark = pytest.mark.slow


def replayed(messages: list[dict[str, Any]], window: int = 9000) -> ReplayResult:
    return replay_messages(
        messages,
        {"protected_tool_results": 2},
        window,
        max_output_tokens=1000,
        inspect=True,
    )


def write_page(tmp_path: Path, result: ReplayResult, name: str = "inspector.html") -> Path:
    path = tmp_path / name
    path.write_text(inspector_html("test run", [replay_run(result, "test")]), encoding="utf-8")
    return path


def view_rows(page: Any) -> list[tuple[str, str]]:
    rows = page.eval_on_selector_all(
        "#view-table tbody tr", "rows => rows.map(r => [r.dataset.index, r.dataset.status])"
    )
    return [(index, status) for index, status in rows]


def figure_after(label: str, text: str) -> float:
    found = re.search(label + r"([\d.]+)", text)
    assert found is not None, f"no {label!r} in {text!r}"
    return float(found.group(1))


def expected_rows(result: ReplayResult, request: int) -> list[tuple[str, str]]:
    assert result.inspection is not None
    return [
        (str(item.index) if item.index is not None else item.status, item.status)
        for item in result.inspection.view_of(request)
    ]


def test_a_replay_page_renders_and_shows_each_compaction_and_view(tmp_path: Path) -> None:
    messages = agent_run(40, result_chars=1500)
    result = replayed(messages)
    inspection = result.inspection
    assert inspection is not None
    passes = [p.request for p in inspection.passes]
    assert len(passes) >= 3
    path = write_page(tmp_path, result)

    with opened(path) as opened_page:
        page = opened_page.page
        keep_screenshot(page, tmp_path / "inspector.png")
        # Every request is a point (fewer than the envelope's bound); every pass a marker.
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == len(result.rows)
        assert page.locator("#timeline .marker").count() == len(passes)
        markers = page.eval_on_selector_all(
            "#timeline .marker", "ms => ms.map(m => Number(m.dataset.request))"
        )
        assert markers == passes
        assert page.locator("#passes tbody tr").count() == len(passes)
        # The window, budget and trigger are lines with their values; cost and cache share
        # are drawn per request too.
        totals = result.totals
        for name, value in (("window", 9000), ("budget", totals.budget)):
            title = page.text_content(f"#timeline .limit-{name} title")
            assert title == f"{name}: {value:,}"
        trigger = page.text_content("#timeline .limit-trigger title")
        assert trigger == f"compaction trigger: {totals.trigger:,}"
        for line in ("cost-line", "share-line"):
            drawn = page.evaluate(f"document.getElementById('{line}').points.numberOfItems")
            assert drawn == len(result.rows)

        # The last request is shown first: its view is the one the context sent.
        last = len(result.rows)
        assert page.get_attribute("#details", "data-request") == str(last)
        assert view_rows(page) == expected_rows(result, last)

        # A click on a compaction marker shows that pass: sizes, rungs, notice, its view.
        chosen = passes[1]
        row = result.rows[chosen - 1]
        page.click(f"#timeline .marker[data-request='{chosen}']")
        page.wait_for_selector(f"#details[data-request='{chosen}'][data-ready='1']")
        details = page.inner_text("#pass-details")
        assert f"Compaction at request {chosen}" in details
        assert f"{row.tokens_before:,} → {row.tokens_after:,} tokens" in details
        for rung in row.applied:
            assert rung in details
        pass_view = inspection.pass_of(chosen)
        assert pass_view is not None and pass_view.request == chosen
        if pass_view.notice:
            assert page.inner_text("#notice-text") == pass_view.notice
        assert view_rows(page) == expected_rows(result, chosen)
        dropped = page.inner_text("#dropped")
        for first, final in pass_view.dropped:
            assert (f"r{first}–r{final}" if first != final else f"r{first}") in dropped
        keep_screenshot(page, tmp_path / "inspector-compaction.png")

        # A row of the compaction table selects it too; a request between passes shows the
        # pass's view plus the messages admitted since.
        between = chosen + 1
        assert between not in passes
        box = page.locator("#timeline").bounding_box()
        assert box is not None
        x = page.evaluate(f"(() => {{ const r = {between}; return r; }})()")
        # Click where request `between` is drawn (the chart maps requests linearly).
        span = len(result.rows) - 1
        left, right = 64, 960 - 56
        position = (left + (x - 1) / span * (right - left)) / 960 * box["width"]
        page.mouse.click(box["x"] + position, box["y"] + box["height"] * 0.9)
        page.wait_for_selector(f"#details[data-request='{between}'][data-ready='1']")
        assert view_rows(page) == expected_rows(result, between)
        # Its figures: the share repeating the previous request, and its cost per pricing.
        facts = page.inner_text("#details .facts")
        before_it = result.rows[between - 2]
        at = result.rows[between - 1]
        shown = figure_after(r"cache share ", facts)
        assert abs(shown - 100 * min(at.prefix_tokens / at.tokens_after, 1.0)) <= 0.051
        assert at.prefix_tokens > 0 and before_it.tokens_after > 0
        assert result.costs
        for priced in result.costs:
            cost = figure_after(rf"cost \({priced.name}\) \$", facts)
            assert cost == pytest.approx(priced.requests[between - 1], abs=1e-5)
        statuses = {status for _, status in view_rows(page)}
        assert "notice" in statuses and "kept" in statuses

        page.click(f"#passes tbody tr[data-request='{passes[0]}']")
        page.wait_for_selector(f"#details[data-request='{passes[0]}'][data-ready='1']")
        assert view_rows(page) == expected_rows(result, passes[0])
    assert opened_page.errors == []


def test_a_long_replay_is_downsampled_and_a_zoom_draws_every_request(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_replay import short_conversation

    result = replayed(short_conversation(12_000), window=6000)
    sizes = [row.tokens_after for row in result.rows]
    assert len(sizes) > 4000  # more requests than the envelope keeps
    assert result.inspection is not None
    passes = [p.request for p in result.inspection.passes]
    expected_points = len(_envelope(sizes)[0])
    expected_marks = len(_marks_kept([r - 1 for r in passes], sizes))
    path = write_page(tmp_path, result)
    html = path.read_text(encoding="utf-8")
    # Details are compressed chunks, not one JSON per request.
    assert sum(1 for name in iter_chunk_names(html) if "-rows-" in name) == -(-len(sizes) // 4096)

    with opened(path) as opened_page:
        page = opened_page.page
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == expected_points < len(sizes)
        assert page.locator("#timeline .marker").count() == expected_marks
        # Zoom into requests 2001..2400 by dragging across them: every request is drawn.
        box = page.locator("#timeline").bounding_box()
        assert box is not None
        span = len(sizes) - 1
        left, right = 64, 960 - 56

        def x_of(request: int) -> float:
            return box["x"] + (left + (request - 1) / span * (right - left)) / 960 * box["width"]

        y = box["y"] + box["height"] * 0.5
        page.mouse.move(x_of(2001), y)
        page.mouse.down()
        page.mouse.move(x_of(2400), y, steps=5)
        page.mouse.up()
        wait_until(page, "Number(document.getElementById('timeline').dataset.points) < 1000")
        label = page.inner_text("#range-label")
        first, last = (int(n.replace(",", "")) for n in re.findall(r"[\d,]+", label)[:2])
        assert 1990 <= first <= 2010 and 2390 <= last <= 2410
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == last - first + 1
        in_range = [r for r in passes if first <= r <= last]
        assert page.locator("#timeline .marker").count() == len(in_range)
        chosen = in_range[0]
        page.click(f"#timeline .marker[data-request='{chosen}']")
        page.wait_for_selector(f"#details[data-request='{chosen}'][data-ready='1']")
        assert view_rows(page) == expected_rows(result, chosen)
        keep_screenshot(page, tmp_path / "inspector-zoomed.png")
        page.click("#zoom-out")
        wait_until(
            page, f"document.getElementById('timeline').dataset.points === '{expected_points}'"
        )
    assert opened_page.errors == []


def test_the_replay_command_writes_the_page_and_it_opens(tmp_path: Path) -> None:
    conversation = [human("Look into the logs."), *agent_run(25, result_chars=1200)[1:]]
    conversation.append(reply("Done."))
    source = tmp_path / "session.json"
    source.write_text(json.dumps(conversation), encoding="utf-8")
    out = tmp_path / "out"
    status = main(
        ["replay", str(source), "--window", "8000", "--max-output-tokens", "1000", "--html",
         "--no-chart", "-q", "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    page_path = out / "inspector.html"
    html = page_path.read_text(encoding="utf-8")
    assert len(html.encode("utf-8")) < MAX_PAGE_BYTES
    # Self-contained: nothing to fetch (no src or href to a URL), and a policy that forbids it.
    assert not re.search(r"""<[a-zA-Z][^<>]*\s(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "default-src 'none'" in html
    with opened(page_path) as opened_page:
        assert "session.json" in opened_page.page.inner_text("h1")
        keep_screenshot(opened_page.page, tmp_path / "inspector-cli.png")
    assert opened_page.errors == []


def select_run(page: Any, label_part: str) -> None:
    options = page.eval_on_selector_all("#run-select option", "os => os.map(o => o.textContent)")
    index = next(i for i, text in enumerate(options) if label_part in text)
    page.select_option("#run-select", str(index))
    wait_until(
        page,
        f"document.querySelector('#run-select').value === '{index}' && "
        "document.getElementById('details').dataset.ready === '1'",
    )


def wait_until(page: Any, expression: str) -> None:
    """Poll ``expression`` from here, not with `wait_for_function`: the page's policy
    forbids eval, which Playwright's in-page poller needs once the first check fails (a
    run slow to draw failed CI that way)."""
    for _ in range(600):
        if page.evaluate(expression):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the page never reached {expression!r}")


def test_an_eval_page_holds_every_run_and_contextfolds_views(tmp_path: Path) -> None:
    from contextfold.cli.inspector_page import eval_runs
    from contextfold.evaluation import (
        CorpusSettings,
        EvalSettings,
        builtin_policy,
        evaluate,
        generate_corpus,
    )

    conversations = generate_corpus(CorpusSettings(seed=3, sessions=1))
    policies = [builtin_policy("naive"), builtin_policy("contextfold")]
    report = evaluate(conversations, policies, EvalSettings(windows=(4000,), inspect=True))
    fold = next(run for run in report.runs if run.policy == "contextfold")
    naive = next(run for run in report.runs if run.policy == "naive")
    assert fold.inspection is not None and naive.inspection is None
    passes = [p.request for p in fold.inspection.passes]
    assert passes
    path = tmp_path / "eval.html"
    path.write_text(inspector_html("eval", eval_runs(report)), encoding="utf-8")

    with opened(path) as opened_page:
        page = opened_page.page
        assert page.locator("#run-select option").count() == len(report.runs)
        select_run(page, "naive")
        assert "No views were recorded" in page.inner_text("#details")
        select_run(page, "contextfold")
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == len(fold.requests)
        assert page.locator("#timeline .marker").count() == len(passes)
        chosen = passes[-1]
        page.click(f"#timeline .marker[data-request='{chosen}']")
        page.wait_for_selector(f"#details[data-request='{chosen}'][data-ready='1']")
        expected = [
            (str(i.index) if i.index is not None else i.status, i.status)
            for i in fold.inspection.view_of(chosen)
        ]
        assert view_rows(page) == expected
        keep_screenshot(page, tmp_path / "inspector-eval.png")
    assert opened_page.errors == []

    out = tmp_path / "out"
    status = main(
        ["eval", "--corpus", "long-horizon", "--sessions", "1", "--window", "4000",
         "--policy", "contextfold", "--html", "--no-chart", "-q", "--out", str(out)]
    )  # fmt: skip
    assert status == 0 and (out / "inspector.html").is_file()


def test_a_stored_session_page(tmp_path: Path) -> None:
    import asyncio

    from contextfold import ContextFold

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    messages = agent_run(30, result_chars=1500)

    async def store() -> None:
        context = ContextFold(store=url, session_id="agent-1")
        for message in messages:
            await context.add_message(message)

    asyncio.run(store())
    page_path = tmp_path / "session.html"
    status = main(
        ["sessions", "show", url, "agent-1", "--html", str(page_path), "--window", "9000"]
    )
    assert status == 0
    requests = sum(1 for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0) + 1
    with opened(page_path) as opened_page:
        page = opened_page.page
        assert "agent-1" in page.inner_text("h1")
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == requests
        assert page.locator("#timeline .marker").count() >= 1
        assert page.locator("#view-table tbody tr").count() > 3
    assert opened_page.errors == []
    # Bad input leaves nothing behind and says what was wrong.
    missing = tmp_path / "none.html"
    assert main(["sessions", "show", url, "nobody", "--html", str(missing)]) == 2
    assert not missing.exists()


def test_the_demo_writes_its_page_beside_demo_json(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    status = main(
        ["demo", "--steps", "30", "--window", "9000", "--no-chart", "-q", "--out", str(out)]
    )
    assert status == 0
    numbers = json.loads((out / "demo.json").read_text(encoding="utf-8"))
    managed = numbers["runs"]["managed"]
    with opened(out / "inspector.html") as opened_page:
        page = opened_page.page
        points = page.evaluate("document.getElementById('sent-line').points.numberOfItems")
        assert points == len(managed["points"])
        compacted = [p["request"] for p in managed["points"] if p["compacted"]]
        markers = page.eval_on_selector_all(
            "#timeline .marker", "ms => ms.map(m => Number(m.dataset.request))"
        )
        assert markers == compacted and markers
        page.click(f"#timeline .marker[data-request='{markers[0]}']")
        page.wait_for_selector(f"#details[data-request='{markers[0]}'][data-ready='1']")
        assert "Compaction at request" in page.inner_text("#pass-details")
        assert "notice" in {status for _, status in view_rows(page)}
    assert opened_page.errors == []
