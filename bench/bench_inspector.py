"""The inspector page of a long replay: is recording the views linear, how big is the page,
and how long does a browser take to open it?

For each size, the synthetic conversation of ``bench_replay.py`` (short tool-using rounds) is
replayed twice in the same run: without recording the views (``contextfold replay``) and
with (``contextfold replay --html``: the passes noted per request, the inspection built at
the end), then the page is written and opened in headless Chromium (Debian's ``chromium``,
driven by Playwright) until it is ready to use: its timeline drawn and the last request's
view listed. Printed per size: both replay times and their ratio, the inspection and page
building times, the page's size, and the time to open it (median of ``--opens``).

    uv run python bench/bench_inspector.py                       # 10k, 100k, 1M messages
    uv run python bench/bench_inspector.py --sizes 100000 --window 8000
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_replay import short_conversation
from contextfold.cli.inspector_page import inspector_html, replay_run
from contextfold.cli.replay import replay_messages

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)


def timed_replay(messages: list[dict[str, Any]], window: int, inspect: bool) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = replay_messages(messages, {}, window, inspect=inspect)
    return time.perf_counter() - start, result


def open_seconds(path: Path, opens: int) -> float:
    from tests.browser_support import FLAGS, chromium_path

    executable = chromium_path()
    if executable is None:
        raise SystemExit("no chromium on this machine: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    times = []
    errors: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            for _ in range(opens):
                page = browser.new_page(viewport={"width": 1150, "height": 1400})
                page.on("pageerror", lambda error: errors.append(str(error)))
                start = time.perf_counter()
                page.goto(path.resolve().as_uri())
                page.wait_for_selector("#details[data-ready='1']", timeout=120_000)
                times.append(time.perf_counter() - start)
                if errors:
                    raise SystemExit(f"the page raised: {errors}")
                page.close()
        finally:
            browser.close()
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--window", type=int, default=8000)
    parser.add_argument("--opens", type=int, default=3, help="page opens per size (median)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = []
    timed_replay(short_conversation(2_000), args.window, inspect=True)  # warm up
    for size in (int(s) for s in args.sizes.split(",")):
        messages = short_conversation(size)
        plain, _ = timed_replay(messages, args.window, inspect=False)
        recorded, result = timed_replay(messages, args.window, inspect=True)
        start = time.perf_counter()
        html = inspector_html(f"replay of {size:,} messages", [replay_run(result, "bench")])
        built = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "inspector.html"
            path.write_text(html, encoding="utf-8")
            opened = open_seconds(path, args.opens)
        rows.append(
            {
                "messages": size,
                "requests": len(result.rows),
                "compactions": len(result.inspection.passes),
                "replay_s": round(plain, 2),
                "replay_recording_views_s": round(recorded, 2),
                "recording_ratio": round(recorded / plain, 3),
                "page_build_s": round(built, 2),
                "page_mb": round(len(html.encode("utf-8")) / 1e6, 2),
                "open_s": round(opened, 2),
            }
        )
        del result, html, messages
    print(f"inspector page: Python {sys.version.split()[0]}, window {args.window}")
    print(
        "| messages | requests | compactions | replay | replay recording views | ratio "
        "| page built in | page size | opens in |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['messages']:,} | {r['requests']:,} | {r['compactions']:,} | {r['replay_s']} s "
            f"| {r['replay_recording_views_s']} s | {r['recording_ratio']:.2f}x "
            f"| {r['page_build_s']} s | {r['page_mb']} MB | {r['open_s']} s |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
