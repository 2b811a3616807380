"""How honest are contextfold's token counts? Error and cost of each counter on real data.

Corpora (all offline, deterministic):

- ``bfcl:base`` and ``bfcl:long_context``: multi-turn tool conversations built by
  ``bench/bfcl_corpus.py`` (BFCL questions, ground-truth calls run through the BFCL tool
  simulators, real tool outputs, the tool schemas offered to the model);
- ``prose``: long user messages made of the docstrings of the Python stdlib's own modules,
  read from disk, each followed by a short assistant reply;
- ``code``: long user messages made of stdlib ``.py`` source, likewise.

A *request* is a conversation prefix ending just before an assistant turn, plus the tool
schemas (what a provider is sent before each reply). Its truth is the exact ``o200k_base``
count (messages with OpenAI's framing, tool definitions, reply priming).

1. Error against the exact count, per request: the contract's old estimator
   (``len(str(message)) // 4`` over messages), the heuristic, exact ``cl100k_base`` (the other
   vocabulary), and the calibrated heuristic learning from a provider that bills exactly o200k.
2. Calibration against a simulated provider whose real usage is the exact count times a hidden
   ratio (1.15). Each conversation is a session with a fresh calibrated counter that observes
   every response; errors are bucketed by how many responses it had seen.
3. Odd readings: the same provider, but the first and every ``ODD_EVERY``-th response after it
   report a wrong figure (alternately 1 token, as an error response does, and half the real
   one, as the Anthropic SDK's ``input_tokens`` read as a gross figure does). How far the
   calibrated estimates fall under what is really billed, and how often.
4. Cost: time per 1,000 messages of ``count_message`` for each counter (best of a few rounds,
   counters interleaved, garbage collector paused), and the heuristic/exact ratio.

Run::

    uv run python bench/bench_tokens.py
    uv run python bench/bench_tokens.py --limit 40 --json bench/out/tokens.json
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import math
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_corpus import build_conversations
from contextfold.tokens import (
    REPLY_PRIMING_TOKENS,
    CalibratedCounter,
    ExactCounter,
    HeuristicCounter,
    TokenCounter,
)
from contextfold.tokens.heuristic import WEIGHTS, character_classes
from contextfold.tokens.serialize import message_parts, tool_parts

HIDDEN_RATIO = 1.15
MODEL = "simulated-model"
# Sizes of the long synthetic user messages, cycled (characters).
LONG_MESSAGE_CHARS = (1_500, 4_000, 9_000, 16_000, 30_000, 6_000)
TURNS_PER_LONG_CONVERSATION = 12
BUCKETS = ((0, 0, "0 (uncalibrated)"), (1, 9, "1-9"), (10, math.inf, ">= 10"))
# Every ODD_EVERY-th response of the odd-readings provider reports a wrong figure.
ODD_EVERY = 4
# An estimate this far under what is billed counts as an under-estimate (percent).
UNDER_MARGIN = 2.0

Message = dict[str, Any]


@dataclass(frozen=True)
class Conversation:
    messages: list[Message]
    tools: list[dict[str, Any]]


@dataclass
class Corpus:
    name: str
    conversations: list[Conversation]

    @property
    def messages(self) -> list[Message]:
        return [m for c in self.conversations for m in c.messages]


# -- corpora -------------------------------------------------------------------------------------


def bfcl_corpus(category: str, limit: int | None) -> Corpus:
    conversations = []
    for item in build_conversations(category, limit):
        # bfcl_corpus returns Conversation objects; accept plain message lists too.
        messages = getattr(item, "messages", item)
        tools = getattr(item, "tools", [])
        conversations.append(Conversation(list(messages), list(tools)))
    return Corpus(f"bfcl:{category}", conversations)


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if p.stat().st_size > 4_000)


def _docstrings(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return ""
    nodes = (
        n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
    )
    return "\n\n".join(doc for n in nodes if (doc := ast.get_docstring(n)))


def _chunks(texts: Iterable[str], count: int) -> list[str]:
    """``count`` chunks cut from the concatenated texts at the cycled target sizes."""
    stream = "\n\n".join(t for t in texts if t)
    out, position = [], 0
    for i in range(count):
        size = LONG_MESSAGE_CHARS[i % len(LONG_MESSAGE_CHARS)]
        if position + size > len(stream):
            position = 0
        out.append(stream[position : position + size])
        position += size
    return out


def long_corpus(name: str, texts: Iterable[str], conversations: int, ask: str) -> Corpus:
    chunks = _chunks(texts, conversations * TURNS_PER_LONG_CONVERSATION)
    out = []
    for c in range(conversations):
        messages: list[Message] = [
            {"role": "system", "content": "You are a careful reviewer. Answer briefly."}
        ]
        for t in range(TURNS_PER_LONG_CONVERSATION):
            chunk = chunks[c * TURNS_PER_LONG_CONVERSATION + t]
            messages.append({"role": "user", "content": f"{ask}\n\n{chunk}"})
            first_line = next((line for line in chunk.splitlines() if line.strip()), "")
            messages.append({"role": "assistant", "content": f"Noted. It starts: {first_line}"})
        out.append(Conversation(messages, []))
    return Corpus(name, out)


def build_corpora(limit: int | None, long_conversations: int) -> list[Corpus]:
    files = _stdlib_files()
    return [
        bfcl_corpus("base", limit),
        bfcl_corpus("long_context", limit),
        long_corpus(
            "prose",
            (_docstrings(p) for p in files),
            long_conversations,
            "Summarise this documentation.",
        ),
        long_corpus(
            "code",
            (p.read_text(encoding="utf-8", errors="replace") for p in files[::-1]),
            long_conversations,
            "Review this code.",
        ),
    ]


# -- requests --------------------------------------------------------------------------------


def legacy_estimate(message: Message) -> int:
    """The contract's estimator: len(str(message)) // 4 over the Python repr."""
    return len(str(message)) // 4


def request_totals(
    conversation: Conversation, count: Callable[[Message], int], tools: int
) -> list[int]:
    """Raw size of every request: the prefix before each assistant turn, tools, priming."""
    totals, running = [], 0
    for message in conversation.messages:
        if message.get("role") == "assistant" and running:
            totals.append(running + tools + REPLY_PRIMING_TOKENS)
        running += count(message)
    return totals


@dataclass
class ErrorStats:
    n: int
    p50: float
    p90: float
    max: float
    bias: float  # median signed error, percent (+ = over-count)

    @classmethod
    def of(cls, estimates: Sequence[float], truths: Sequence[float]) -> ErrorStats:
        signed = [(e - t) / t * 100 for e, t in zip(estimates, truths, strict=True)]
        errors = sorted(abs(s) for s in signed)
        if not errors:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(
            n=len(errors),
            p50=_quantile(errors, 0.5),
            p90=_quantile(errors, 0.9),
            max=errors[-1],
            bias=statistics.median(signed),
        )


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class CorpusResult:
    corpus: str
    conversations: int
    messages: int
    requests: int
    errors_vs_exact: dict[str, ErrorStats] = field(default_factory=dict)
    simulated: dict[str, dict[str, ErrorStats]] = field(default_factory=dict)
    odd: dict[str, OddStats] = field(default_factory=dict)
    ms_per_1000: dict[str, float] = field(default_factory=dict)


@dataclass
class OddStats:
    """Estimates against what is billed while some readings are wrong."""

    errors: ErrorStats
    under_share: float  # percent of requests estimated more than UNDER_MARGIN % under the bill
    worst_under: float  # percent: the largest shortfall (0 when never under)

    @classmethod
    def of(cls, estimates: Sequence[float], billed: Sequence[float]) -> OddStats:
        shortfalls = [(b - e) / b * 100 for e, b in zip(estimates, billed, strict=True)]
        under = sum(1 for s in shortfalls if s > UNDER_MARGIN)
        return cls(
            errors=ErrorStats.of(estimates, billed),
            under_share=under / len(shortfalls) * 100 if shortfalls else math.nan,
            worst_under=max([0.0, *shortfalls]),
        )


def odd_reading(seen: int, real: int) -> int:
    """What the odd-readings provider reports for response number ``seen`` (from 0).

    Responses 0, ODD_EVERY, 2 * ODD_EVERY, ... are wrong, alternately 1 token and half the real
    figure: the very first one is odd, as when a session opens on an error response.
    """
    if seen % ODD_EVERY:
        return real
    return 1 if (seen // ODD_EVERY) % 2 == 0 else max(1, real // 2)


def error_table(
    corpus: Corpus, exact: TokenCounter, heuristic: TokenCounter, cl100k: TokenCounter
) -> tuple[int, dict[str, ErrorStats], dict[str, dict[str, ErrorStats]], dict[str, OddStats]]:
    truths: list[int] = []
    estimates: dict[str, list[float]] = {
        "len(str)//4 (old, messages only)": [],
        "len(str)//4 incl. tools": [],
        "heuristic": [],
        "exact cl100k_base": [],
        "calibrated heuristic": [],
    }
    simulated: dict[str, dict[str, tuple[list[float], list[float]]]] = {
        name: {label: ([], []) for *_, label in BUCKETS}
        for name in ("heuristic", "exact", "calibrated heuristic", "calibrated exact")
    }
    odd: dict[str, tuple[list[float], list[float]]] = {
        f"{name}, {readings} readings": ([], [])
        for name in ("calibrated heuristic", "calibrated exact")
        for readings in ("right", "odd")
    }
    for conversation in corpus.conversations:
        tools = conversation.tools
        truth = request_totals(conversation, exact.count_message, exact.count_tools(tools))
        heur = request_totals(conversation, heuristic.count_message, heuristic.count_tools(tools))
        legacy = request_totals(conversation, legacy_estimate, 0)
        legacy_tools = request_totals(conversation, legacy_estimate, len(str(tools)) // 4)
        other = request_totals(conversation, cl100k.count_message, cl100k.count_tools(tools))
        truths.extend(truth)
        estimates["len(str)//4 (old, messages only)"].extend(legacy)
        estimates["len(str)//4 incl. tools"].extend(legacy_tools)
        estimates["heuristic"].extend(heur)
        estimates["exact cl100k_base"].extend(other)

        # A provider that bills exactly o200k: what calibration does for the heuristic.
        honest = CalibratedCounter(heuristic)
        for raw, real in zip(heur, truth, strict=True):
            estimates["calibrated heuristic"].append(honest.scale(raw, MODEL))
            honest.observe(MODEL, raw, real)

        # A provider that bills 1.15x o200k (its own framing/vocabulary), one session each.
        billed = [math.ceil(t * HIDDEN_RATIO) for t in truth]
        sessions = {
            "calibrated heuristic": (CalibratedCounter(heuristic), heur),
            "calibrated exact": (CalibratedCounter(exact), truth),
        }
        for seen, real in enumerate(billed):
            label = next(label for low, high, label in BUCKETS if low <= seen <= high)
            for name, raw in (("heuristic", heur), ("exact", truth)):
                simulated[name][label][0].append(raw[seen])
                simulated[name][label][1].append(real)
            for name, (counter, raw) in sessions.items():
                simulated[name][label][0].append(counter.scale(raw[seen], MODEL))
                simulated[name][label][1].append(real)
                counter.observe(MODEL, raw[seen], real)

        # The same provider, but some of its readings are wrong (see odd_reading), side by side
        # with one whose readings are all right. The first two requests of a session are left
        # out: until a right reading has been seen, neither can know the provider's ratio.
        pairs = (("calibrated heuristic", heuristic, heur), ("calibrated exact", exact, truth))
        for name, base, raw in pairs:
            for readings in ("right", "odd"):
                counter = CalibratedCounter(base)
                guesses, bills = odd[f"{name}, {readings} readings"]
                for seen, real in enumerate(billed):
                    if seen >= 2:
                        guesses.append(counter.scale(raw[seen], MODEL))
                        bills.append(real)
                    reported = odd_reading(seen, real) if readings == "odd" else real
                    counter.observe(MODEL, raw[seen], reported)
    errors = {name: ErrorStats.of(values, truths) for name, values in estimates.items()}
    sim = {
        name: {label: ErrorStats.of(e, t) for label, (e, t) in buckets.items()}
        for name, buckets in simulated.items()
    }
    odd_stats = {name: OddStats.of(e, b) for name, (e, b) in odd.items()}
    return len(truths), errors, sim, odd_stats


def time_counters(
    messages: Sequence[Message], counters: dict[str, Callable[[Message], int]], rounds: int
) -> dict[str, float]:
    """Best-of-``rounds`` milliseconds per 1,000 messages, counters interleaved."""
    best = dict.fromkeys(counters, math.inf)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, count in counters.items():
                start = time.perf_counter()
                for message in messages:
                    count(message)
                best[name] = min(best[name], time.perf_counter() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: seconds / len(messages) * 1e6 for name, seconds in best.items()}


# -- fitting the heuristic's weights (--fit) -------------------------------------------------
# Trained on data the measurements above never use: BFCL's miss_func/miss_param categories,
# stdlib *sub-package* sources and docstrings (the corpora above read top-level modules), and
# the CJK samples in the stdlib's test/cjkencodings.

Sample = tuple[tuple[int, ...], int]


def _training_corpora(exact: ExactCounter) -> dict[str, list[Sample]]:
    encode_len = exact.count_text
    bfcl: list[Sample] = []
    seen_tools: set[str] = set()
    for category in ("miss_func", "miss_param"):
        for item in build_conversations(category):
            for message in item.messages:
                parts = message_parts(message)
                head = [parts.role] if parts.name is None else [parts.role, parts.name]
                truth = sum(encode_len(piece) for piece in head + parts.texts)
                bfcl.append((character_classes(parts.serialised()), truth))
            for tool in item.tools:
                spec = tool_parts(tool)
                if spec.name in seen_tools:
                    continue
                seen_tools.add(spec.name)
                pieces = [f"{spec.name}:{spec.description}"]
                for path, kind, description, enum in spec.properties:
                    pieces += [f"{path}:{kind}:{description}", *enum]
                for piece in pieces:
                    bfcl.append((character_classes(piece), encode_len(piece)))
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.glob("*/*.py") if p.parent.name not in {"test", "site-packages"}
    )[::3]
    code: list[Sample] = []
    prose: list[Sample] = []
    for path in files:
        source = path.read_text(encoding="utf-8", errors="replace")
        for text, bucket in ((source[:8_000], code), (_docstrings(path)[:8_000], prose)):
            if text.strip():
                bucket.append((character_classes(text), encode_len(text)))
    cjk = [
        (character_classes(text), encode_len(text))
        for path in sorted((root / "test" / "cjkencodings").glob("*-utf8.txt"))
        if (text := path.read_text(encoding="utf-8"))
    ]
    return {"bfcl (miss_*)": bfcl, "code (sub-packages)": code, "prose": prose, "cjk": cjk}


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the system is 5x5)."""
    n = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[col][col]:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] if rows[i][i] else 0.0 for i in range(n)]


def fit_weights(corpora: dict[str, list[Sample]]) -> list[float]:
    """Least squares, each corpus weighing the same, samples by relative error times size."""
    size = len(WEIGHTS)
    matrix = [[0.0] * size for _ in range(size)]
    vector = [0.0] * size
    for samples in corpora.values():
        total = sum(truth for _, truth in samples if truth)
        for features, truth in samples:
            if not truth:
                continue
            weight = 1.0 / (total * truth)
            for i in range(size):
                vector[i] += weight * features[i] * truth
                for j in range(size):
                    matrix[i][j] += weight * features[i] * features[j]
    return _solve(matrix, vector)


def render_fit(corpora: dict[str, list[Sample]], fitted: Sequence[float]) -> str:
    lines = [
        "| weights | corpus | samples | p50 error % | p90 error % | total estimate / exact |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, weights in (("current", WEIGHTS), ("fitted", fitted)):
        for name, samples in corpora.items():
            estimates = [sum(w * f for w, f in zip(weights, x, strict=True)) for x, _ in samples]
            truths = [truth for _, truth in samples]
            keep = [(e, t) for e, t in zip(estimates, truths, strict=True) if t >= 5]
            stats = ErrorStats.of([e for e, _ in keep], [t for _, t in keep])
            ratio = sum(estimates) / sum(truths)
            lines.append(
                f"| {label} | {name} | {len(samples)} | {stats.p50:.1f} | {stats.p90:.1f} "
                f"| {ratio:.3f} |"
            )
    names = ("letter", "digit", "punct", "space", "high byte")
    lines.append("")
    lines.append("fitted: " + ", ".join(f"{n}={w:.4f}" for n, w in zip(names, fitted, strict=True)))
    return "\n".join(lines)


# -- report ----------------------------------------------------------------------------------


def _fmt(stats: ErrorStats) -> str:
    if not stats.n:
        return "| - | - | - | - | 0 |"
    return (
        f"| {stats.p50:.1f} | {stats.p90:.1f} | {stats.max:.1f} | {stats.bias:+.1f} | {stats.n} |"
    )


def render(results: list[CorpusResult], total: CorpusResult) -> str:
    everything = [*results, total]
    lines = [
        "### Error per request against exact o200k_base (percent)",
        "",
        "| corpus | counter | p50 | p90 | max | median bias | requests |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for result in everything:
        for name, stats in result.errors_vs_exact.items():
            lines.append(f"| {result.corpus} | {name} {_fmt(stats)}")
    lines += [
        "",
        f"### Simulated provider billing {HIDDEN_RATIO}x exact o200k, by responses seen (percent)",
        "",
        "| corpus | counter | responses seen | p50 | p90 | max | median bias | requests |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for result in everything:
        for name, buckets in result.simulated.items():
            for label, stats in buckets.items():
                if stats.n:
                    lines.append(f"| {result.corpus} | {name} | {label} {_fmt(stats)}")
    lines += [
        "",
        f"### Odd readings: the first and every {ODD_EVERY}th response report 1 token or half "
        f"the real figure (provider billing {HIDDEN_RATIO}x o200k; requests after the first two "
        "responses; percent of what is billed)",
        "",
        f"| corpus | counter | p50 | p90 | max | median bias | requests "
        f"| under by > {UNDER_MARGIN:g}% | worst under |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in everything:
        for name, stats in result.odd.items():
            lines.append(
                f"| {result.corpus} | {name} {_fmt(stats.errors)} {stats.under_share:.1f}% "
                f"| {stats.worst_under:.1f}% |"
            )
    lines += [
        "",
        "### Cost of count_message (ms per 1,000 messages, best of rounds)",
        "",
        "| corpus | messages | len(str)//4 | heuristic | exact o200k | exact cl100k "
        "| heuristic / exact |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in everything:
        t = result.ms_per_1000
        ratio = t["heuristic"] / t["exact o200k"]
        lines.append(
            f"| {result.corpus} | {result.messages} | {t['len(str)//4']:.2f} "
            f"| {t['heuristic']:.2f} | {t['exact o200k']:.2f} | {t['exact cl100k']:.2f} "
            f"| {ratio:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="BFCL conversations per category")
    parser.add_argument(
        "--long-conversations", type=int, default=20, help="prose and code conversations each"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (best is kept)")
    parser.add_argument("--json", type=Path, default=None, help="also write results as JSON")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="instead: refit the heuristic's character-class weights on held-out training data",
    )
    args = parser.parse_args(argv)
    if args.fit:
        training = _training_corpora(ExactCounter("o200k_base"))
        print(render_fit(training, fit_weights(training)))
        return 0
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    if args.long_conversations < 1 or args.rounds < 1:
        parser.error("--long-conversations and --rounds must be >= 1")

    heuristic, exact, cl100k = (
        HeuristicCounter(),
        ExactCounter("o200k_base"),
        ExactCounter("cl100k_base"),
    )
    corpora = build_corpora(args.limit, args.long_conversations)
    results = []
    timers = {
        "len(str)//4": legacy_estimate,
        "heuristic": heuristic.count_message,
        "exact o200k": exact.count_message,
        "exact cl100k": cl100k.count_message,
    }
    for corpus in corpora:
        requests, errors, simulated, odd = error_table(corpus, exact, heuristic, cl100k)
        result = CorpusResult(
            corpus=corpus.name,
            conversations=len(corpus.conversations),
            messages=len(corpus.messages),
            requests=requests,
            errors_vs_exact=errors,
            simulated=simulated,
            odd=odd,
            ms_per_1000=time_counters(corpus.messages, timers, args.rounds),
        )
        results.append(result)
        print(
            f"measured {corpus.name}: {result.conversations} conversations, "
            f"{result.messages} messages, {requests} requests",
            file=sys.stderr,
        )

    everything = Corpus("all", [c for corpus in corpora for c in corpus.conversations])
    requests, errors, simulated, odd = error_table(everything, exact, heuristic, cl100k)
    total = CorpusResult(
        corpus="all",
        conversations=len(everything.conversations),
        messages=len(everything.messages),
        requests=requests,
        errors_vs_exact=errors,
        simulated=simulated,
        odd=odd,
        ms_per_1000=time_counters(everything.messages, timers, args.rounds),
    )
    print(render(results, total))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = [asdict(r) for r in [*results, total]]
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
