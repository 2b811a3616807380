"""`contextfold demo` end to end: two real Amplifier sessions, their numbers, the files written.

The demo runs once per module (30 steps in a 12,000-token window, a few seconds); the tests
read its printout, its JSON and its chart.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contextfold.cli import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_OK, main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEPS = 30
WINDOW = 12_000


@dataclass(frozen=True)
class Outcome:
    status: int
    out: str
    err: str
    folder: Path


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    folder = tmp_path_factory.mktemp("demo")
    status, out, err = run_main(
        "demo", "--steps", str(STEPS), "--window", str(WINDOW), "--out", str(folder), "--quiet"
    )
    return Outcome(status, out, err, folder)


@pytest.fixture(scope="module")
def numbers(demo: Outcome) -> dict[str, Any]:
    return json.loads((demo.folder / "demo.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_demo_succeeds_quietly(demo: Outcome) -> None:
    assert demo.status == EXIT_OK, demo.err
    assert demo.err == ""  # --quiet: no progress bar, and nothing went wrong


def test_demo_writes_a_png_chart_and_json(demo: Outcome, numbers: dict[str, Any]) -> None:
    chart = demo.folder / "requests.png"
    assert chart.read_bytes()[:8] == PNG_MAGIC
    assert numbers["settings"]["steps"] == STEPS
    assert numbers["settings"]["window"] == WINDOW
    # The printout names the folder and both files, so a person can open them.
    assert str(chart) in demo.out
    assert str(demo.folder / "demo.json") in demo.out
    assert f"output folder: {demo.folder}" in demo.out


def test_every_run_is_a_real_amplifier_session(numbers: dict[str, Any]) -> None:
    plans = numbers["mount_plans"]
    assert list(plans) == list(numbers["runs"])
    assert list(plans) == ["unmanaged", "managed", "threshold", "summarize", "clear_tool_uses"]
    for name, plan in plans.items():
        assert plan["session"] == {"orchestrator": "loop-fold", "context": "context-fold"}
        provider = plan["providers"][0]
        assert provider["module"] == "provider-scripted"
        assert provider["config"]["enforce_window"] is (name != "unmanaged")
        assert plan["tools"][0]["module"] == "tool-doc-lookup"
    assert plans["unmanaged"]["context"]["config"] == {
        "report_events": "every_request",
        "compaction_enabled": False,
    }
    # The provider's own context editing: the whole history sent, the server clearing.
    server = plans["clear_tool_uses"]
    assert server["context"]["config"] == plans["unmanaged"]["context"]["config"]
    assert server["providers"][0]["config"] == plans["managed"]["providers"][0]["config"] | {
        "context_editing": {"type": "clear_tool_uses"}
    }
    assert plans["managed"]["context"]["config"] == {"report_events": "every_request"}
    assert plans["threshold"]["context"]["config"] == {
        "report_events": "every_request",
        "planner": "threshold",
    }
    # The summarize ladder with the rung's own defaults, compacting late and deep, the
    # session's provider summarizing; the task and everything else as in the other runs.
    assert plans["summarize"]["context"]["config"] == {
        "report_events": "every_request",
        "strategies": ["strip_thinking", "summarize", "truncate_tool_results", "drop_oldest"],
        "summarizer": {"provider": "scripted"},
        "planner": "threshold",
        "compact_threshold": 0.99,
        "target_usage": 0.2,
        "protected_recent": 0.05,
        "protected_tool_results": 1,
    }
    for part in ("orchestrator", "providers"):
        assert plans["summarize"][part] == plans["managed"][part]
    # The summarize run also gives the model its way back to what was compacted.
    assert plans["summarize"]["tools"] == [
        *plans["managed"]["tools"],
        {"module": "tool-context-recall"},
    ]


def test_managed_run_stays_inside_the_window_and_unmanaged_does_not(
    numbers: dict[str, Any],
) -> None:
    unmanaged, managed = numbers["runs"]["unmanaged"], numbers["runs"]["managed"]
    limit = managed["input_limit"]
    assert limit == unmanaged["input_limit"] < WINDOW  # the output reserve is kept free

    assert unmanaged["largest_request"] > limit
    assert unmanaged["overflowed"] is True
    assert unmanaged["compactions"] == 0

    assert all(point["tokens"] <= limit for point in managed["points"])
    assert managed["largest_request"] <= limit
    assert managed["overflowed"] is False
    assert not any(point["rejected"] for point in managed["points"])
    assert managed["compactions"] > 0
    assert managed["levels_used"] and managed["rungs_used"]
    assert managed["trigger"] < managed["budget"] < limit


def test_both_runs_do_the_whole_task_and_keep_the_whole_history(numbers: dict[str, Any]) -> None:
    for run in numbers["runs"].values():
        assert run["requests"] == STEPS + 1  # one per lookup, then the final answer
        assert run["completed"] is True
        assert run["final_text"] == f"Done: I looked up all {STEPS} topics."
        # system + task + (assistant, tool result) per step + the final answer
        assert run["expected_messages"] == 2 + 2 * STEPS + 1
        assert run["history_messages"] == run["expected_messages"]
        assert run["missing_tool_results"] == 0
        assert run["history_kept"] is True


def test_the_server_side_baseline_clears_old_results_and_fits(numbers: dict[str, Any]) -> None:
    run = numbers["runs"]["clear_tool_uses"]
    limit = run["input_limit"]
    assert run["compactions"] == 0  # contextfold sent the whole history every time
    assert run["largest_request"] <= limit and not run["overflowed"] and run["refused"] == 0
    cleared = [p["cleared_tool_uses"] for p in run["points"]]
    # Nothing is cleared under the trigger (half the window); over it, all but the newest
    # three tool uses, one more per request as the task goes on.
    assert cleared[0] == 0 and cleared[-1] == STEPS - 3
    growing = cleared[cleared.index(next(c for c in cleared if c)) :]
    assert all(b == a + 1 for a, b in itertools.pairwise(growing) if b)


def test_every_run_is_priced_at_both_pricings(demo: Outcome, numbers: dict[str, Any]) -> None:
    from contextfold.costing import PricedRequest, request_cost
    from contextfold.prices import reference_prices

    anthropic, openai = reference_prices()
    rows = {
        name: next(line for line in demo.out.splitlines() if f"cost ({name})" in line)
        for name in (anthropic.name, openai.name)
    }
    unmanaged = numbers["runs"]["unmanaged"]
    for key, run in numbers["runs"].items():
        for pricing, prices in (("anthropic", anthropic), ("openai", openai)):
            # The run's figure is its requests' plus its summary requests'.
            per_request = sum(p[f"cost_{pricing}_usd"] for p in run["points"])
            assert run["costs"][pricing] == pytest.approx(
                per_request + run["summary_costs"][pricing], abs=1e-5
            )
            # Each request priced by the cost model from what the provider recorded.
            previous = None
            for point in run["points"]:
                if point["rejected"]:
                    continue
                this = PricedRequest(
                    point["tokens"], point["prefix_tokens"], point["output_tokens"]
                )
                usd = request_cost(prices, this, previous).usd
                assert point[f"cost_{pricing}_usd"] == pytest.approx(usd, abs=1e-7), key
                previous = PricedRequest(point["tokens"], point["prefix_tokens"])
            shown = f"${run['costs'][pricing]:.4f}"
            assert shown in rows[prices.name]
        assert run["costs"]["anthropic"] > run["costs"]["openai"] > 0
    managed = numbers["runs"]["managed"]["costs"]["anthropic"]
    change = (managed - unmanaged["costs"]["anthropic"]) / unmanaged["costs"]["anthropic"]
    assert f"${managed:.4f} ({change:+.0%})" in rows[anthropic.name]
    assert "cheapest run was" in demo.out


def test_the_defaults_cost_planner_run_is_the_cheapest_and_stays_inside_the_window(
    numbers: dict[str, Any],
) -> None:
    runs = numbers["runs"]
    cost, threshold = runs["managed"], runs["threshold"]
    assert cost["completed"] and not cost["overflowed"] and cost["refused"] == 0
    assert all(point["tokens"] <= cost["input_limit"] for point in cost["points"])
    assert cost["history_messages"] == threshold["history_messages"]
    for pricing in ("anthropic", "openai"):
        cheapest = min(run["costs"][pricing] for run in runs.values())
        assert cost["costs"][pricing] == cheapest
        # Cheaper than the threshold planner, the defaults before it, at the same window
        # (this short task: about a sixth).
        assert cost["costs"][pricing] < 0.9 * threshold["costs"][pricing]


def test_numbers_are_consistent(numbers: dict[str, Any]) -> None:
    for run in numbers["runs"].values():
        points = run["points"]
        assert run["requests"] == len(points)
        assert run["largest_request"] == max(p["tokens"] for p in points)
        assert run["tokens_sent"] == sum(p["tokens"] for p in points)
        reads = sum(p["cache_read_tokens"] for p in points)
        assert run["cache_share"] == pytest.approx(reads / run["tokens_sent"], abs=1e-4)
        assert run["compactions"] == sum(1 for p in points if p["compacted"])
    unmanaged, managed = numbers["runs"]["unmanaged"], numbers["runs"]["managed"]
    # Without compaction each request repeats the previous one and grows by what was added.
    sizes = [p["tokens"] for p in unmanaged["points"]]
    assert sizes == sorted(sizes)
    assert managed["tokens_sent"] < unmanaged["tokens_sent"]
    # Until the first compaction both runs send exactly the same requests.
    first = next(i for i, p in enumerate(managed["points"]) if p["compacted"])
    assert [p["tokens"] for p in managed["points"][:first]] == sizes[:first]


def test_table_shows_the_runs_side_by_side(demo: Outcome, numbers: dict[str, Any]) -> None:
    unmanaged, managed = numbers["runs"]["unmanaged"], numbers["runs"]["managed"]
    for label in (
        "without compaction",
        "with context-fold",
        "summarize ladder",
        "rungs applied",
        "summaries written / reused",
        "to the summarizer",
        "recalled byte-identical",
        "largest request",
        "requests made",
        "compactions",
        "tokens sent in total",
        "read from the prompt cache",
        "not from the cache",
        "full history kept",
        "request over the window",
    ):
        assert label in demo.out
    assert f"{unmanaged['largest_request']:,}" in demo.out
    assert f"{managed['largest_request']:,}" in demo.out
    assert f"{managed['tokens_sent']:,}" in demo.out


def test_cache_reads_and_fresh_input_are_absolute_figures(
    demo: Outcome, numbers: dict[str, Any]
) -> None:
    # A share of cache reads alone ("95% vs 64%") hides that the totals differ threefold:
    # the table shows the tokens read from the cache and the tokens processed afresh.
    labels = ("read from the prompt cache", "not from the cache")
    rows = {label: line for line in demo.out.splitlines() for label in labels if label in line}
    for name, run in numbers["runs"].items():
        reads = sum(p["cache_read_tokens"] for p in run["points"])
        assert run["cache_read_tokens"] == reads
        assert run["uncached_tokens"] == run["tokens_sent"] - reads
        share = reads / run["tokens_sent"]
        assert f"{reads:,} ({share:.0%})" in rows["read from the prompt cache"]
        assert f"{run['uncached_tokens']:,}" in rows["not from the cache"], name


# The summarize run in the demo's own window (blocks of turns worth a summary need room).
# A second whole demo run: its tests run with the slow ones. In the default run the demo's
# own summarize column is checked by the tests above, recall's faithfulness by
# test_recall_faithful and a summarizing session by test_summarize_rung.
SUMMARY_STEPS = 30


@pytest.fixture(scope="module")
def summarized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("demo-summaries")
    argv = ("demo", "--steps", str(SUMMARY_STEPS), "--out", str(folder), "--quiet", "--no-chart")
    status, out, err = run_main(*argv)
    assert status == EXIT_OK, err
    numbers = json.loads((folder / "demo.json").read_text(encoding="utf-8"))
    return Outcome(status, out, err, folder), numbers


@pytest.mark.slow
def test_summarize_run_writes_summaries_and_counts_them_consistently(
    summarized: tuple[Outcome, dict[str, Any]],
) -> None:
    _, numbers = summarized
    run = numbers["runs"]["summarize"]
    assert run["summarizes"] is True and run["completed"] is True
    assert "summarize" in run["rungs_used"]
    assert run["summaries_written"] > 0 and run["summary_failures"] == 0
    # Every call wrote a record; the provider's summary requests, the context's calls and
    # the context:summary events agree.
    assert run["summary_calls"] == run["summaries_written"] + run["summary_failures"]
    assert run["summary_requests"] == run["summary_calls"] == run["summary_event_calls"]
    assert run["summaries_reused"] >= 0
    # The summarizer's cost counts toward the run's total, and only there.
    assert run["summary_tokens"] > 0
    assert run["total_tokens"] == run["tokens_sent"] + run["summary_tokens"]
    assert run["tokens_sent"] == sum(p["tokens"] for p in run["points"])
    assert len(run["points"]) == SUMMARY_STEPS + 1  # chat requests only
    assert all(p["tokens"] <= run["input_limit"] for p in run["points"])
    for other in ("unmanaged", "managed"):
        unsummarized = numbers["runs"][other]
        assert unsummarized["summary_requests"] == unsummarized["summary_tokens"] == 0
        assert unsummarized["total_tokens"] == unsummarized["tokens_sent"]


@pytest.mark.slow
def test_every_tool_result_is_recalled_byte_identical(
    summarized: tuple[Outcome, dict[str, Any]],
) -> None:
    _, numbers = summarized
    run = numbers["runs"]["summarize"]
    assert run["recall_checked"] == run["recall_identical"] == SUMMARY_STEPS
    assert numbers["runs"]["managed"]["recall_checked"] == 0  # asked of the summarize run


@pytest.mark.slow
def test_summary_requests_repeat_the_conversation_and_are_mostly_cache_reads(
    summarized: tuple[Outcome, dict[str, Any]],
) -> None:
    demo, numbers = summarized
    run = numbers["runs"]["summarize"]
    # Every summary request was the conversation as last sent plus the instruction, read
    # from the conversation's cache: most of what summarizing sent came from it.
    assert run["summary_aligned"] == run["summary_requests"] > 0
    assert run["summary_cache_read_tokens"] > 0.8 * run["summary_tokens"]
    # Priced apart, and part of the run's total.
    for pricing, usd in run["summary_costs"].items():
        assert 0 < usd < run["costs"][pricing]
    text = " ".join(demo.out.split())
    assert f"{run['summary_cache_read_tokens']:,} tokens read from the cache" in text


@pytest.mark.slow
def test_summarize_column_prints_its_rungs_summaries_cache_and_totals(
    summarized: tuple[Outcome, dict[str, Any]],
) -> None:
    demo, numbers = summarized
    runs = numbers["runs"]
    run = runs["summarize"]
    lines = demo.out.splitlines()

    def line(label: str) -> str:
        return next(text for text in lines if text.strip().startswith(label))

    # The summarize column, third of four: the others have none.
    cells = line("summaries written / reused").split()[-6:]
    assert cells == [
        "-",
        "-",
        str(run["summaries_written"]),
        "/",
        str(run["summaries_reused"]),
        "-",
    ]
    calls = f"{run['summary_tokens']:,} ({run['summary_requests']} calls)"
    assert line("to the summarizer").split()[-5:] == ["-", *calls.split(), "-"]
    # The cache share per column, in the order of the columns.
    shares = [
        f"{r['cache_read_tokens']:,} ({r['cache_read_tokens'] / r['tokens_sent']:.0%})"
        for r in runs.values()
    ]
    cached = line("read from the prompt cache")
    assert re.findall(r"[\d,]+ \(\d+%\)", cached) == shares
    change = round((run["total_tokens"] / runs["unmanaged"]["total_tokens"] - 1) * 100)
    assert f"{run['total_tokens']:,} ({change:+d}%)" in line("tokens sent in total")
    rungs = "\n".join(lines[lines.index(line("rungs applied")) :][:3])
    assert "summarize" in rungs
    assert f"{run['recall_identical']}/{run['recall_checked']} results" in demo.out
    assert f"wrote {run['summaries_written']} summaries" in " ".join(demo.out.split())


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--window", "1400"], "--window 1400 is too small"),
        (["--result-chars", "50"], "--result-chars must be at least"),
    ],
)
def test_bad_options_get_one_line(tmp_path: Path, argv: list[str], fragment: str) -> None:
    status, out, err = run_main("demo", *argv, "--out", str(tmp_path))
    assert status == EXIT_BAD_INPUT
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith("contextfold: error: ") and fragment in err
    assert out == ""


def test_out_that_is_a_file_is_refused_before_running(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    status, out, err = run_main("demo", "--out", str(taken), "--quiet")
    assert status == EXIT_BAD_INPUT
    assert err.startswith("contextfold: error: --out: ") and "not a folder" in err
    assert out == ""


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--window", "lots"]])
def test_malformed_numbers_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        run_main("demo", *argv)
    assert caught.value.code == EXIT_BAD_INPUT


def test_a_window_too_small_for_the_task_exits_1(tmp_path: Path) -> None:
    status, out, err = run_main(
        "demo", "--steps", "3", "--window", "1500", "--out", str(tmp_path), "--quiet"
    )
    assert status == EXIT_DOES_NOT_FIT
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "cannot fit a 1,500-token window" in line
    assert out == ""


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "replay" in out and "exit status" in out


def test_no_subcommand_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_BAD_INPUT
    assert "usage: contextfold" in capsys.readouterr().out


@pytest.mark.slow
def test_version_through_python_dash_m_without_heavy_imports() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("contextfold ")
    # Parsing the command line (what --help and --version do) must not pay for the imports
    # a subcommand needs.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from contextfold.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('matplotlib', 'rich') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.stdout.strip() == "[]", probe.stderr


@pytest.mark.slow
def test_help_states_the_window_the_default_task_really_needs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from contextfold.cli import DEMO_WINDOW_FOR_DEFAULT_RESULTS, MIN_DEMO_WINDOW

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"Below {MIN_DEMO_WINDOW} is refused" in help_text
    assert f"the task needs about {DEMO_WINDOW_FOR_DEFAULT_RESULTS}" in help_text
    # The number is the truth for the default task: it runs at that window, and a window a
    # little smaller cannot fit it (if compaction improves, lower the stated number).
    status, _, err = run_main(
        "demo", "--window", str(DEMO_WINDOW_FOR_DEFAULT_RESULTS), "--out", str(tmp_path), "--quiet"
    )
    assert status == EXIT_OK, err
    status, _, err = run_main(
        "demo",
        "--window",
        str(DEMO_WINDOW_FOR_DEFAULT_RESULTS - 50),
        "--out",
        str(tmp_path / "smaller"),
        "--quiet",
    )
    assert status == EXIT_DOES_NOT_FIT, "the stated minimum is no longer tight; update it"
    assert "cannot fit" in err


@pytest.mark.parametrize("kind", ["empty", "symlink"])
def test_an_empty_or_symlinked_out_is_refused_before_running(tmp_path: Path, kind: str) -> None:
    if kind == "empty":
        out = ""
    else:
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        out = str(tmp_path / "link")
    status, printed, err = run_main("demo", "--out", out, "--quiet")
    assert status == EXIT_BAD_INPUT
    assert err.startswith("contextfold: error: --out: ") and err.count("\n") == 1
    assert printed == ""


@pytest.mark.slow
def test_with_cache_breakpoints_every_context_marks_and_the_provider_bills_by_them(
    tmp_path: Path,
) -> None:
    status, out, err = run_main(
        "demo", "--steps", "20", "--window", str(WINDOW), "--cache-breakpoints",
        "--out", str(tmp_path), "--quiet", "--no-chart",
    )  # fmt: skip
    assert status == EXIT_OK, err
    numbers = json.loads((tmp_path / "demo.json").read_text(encoding="utf-8"))
    for name, plan in numbers["mount_plans"].items():
        assert plan["context"]["config"]["cache_breakpoints"] == "anthropic", name
    for name, run in numbers["runs"].items():
        served = [p for p in run["points"] if not p["rejected"]]
        assert served and all(p["breakpoints"] for p in served), name
        # Billed as the provider reported it: reads and writes within each request.
        assert all(p["cache_read_tokens"] + p["cache_write_tokens"] <= p["tokens"] for p in served)
    assert "Cost (cache_control breakpoints marked):" in " ".join(out.split())
