"""Amplifier tool module ``tool-doc-lookup``: a document lookup with long, stable results.

An offline agent session needs a tool whose results are big enough to press on the context
budget and realistic enough that token counts behave like real prose (not one word repeated).
``lookup`` returns a pseudo-document about the requested topic: a title, a summary, a block of
structured fact lines and several paragraphs of varied English. The text is a pure function of
``(topic, result_chars)``: the same topic always yields the same document, so sessions replay
byte for byte and prompt-cache figures are reproducible.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from amplifier_core.models import ToolResult

TOOL_NAME = "lookup"
DEFAULT_RESULT_CHARS = 6000
MIN_RESULT_CHARS = 200
MAX_TOPIC_CHARS = 200

_DESCRIPTION = (
    "Look up reference material about a topic. Returns a long document: a summary, key facts "
    "as 'Field: value' lines, and several sections of background prose. Input: {'topic': str}."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "topic": {
            "type": "string",
            "description": "What to look up, e.g. 'tidal energy' or 'topic 3'.",
            "minLength": 1,
            "maxLength": MAX_TOPIC_CHARS,
        }
    },
    "required": ["topic"],
    "additionalProperties": False,
}

# Word pools and sentence templates. Enough variety that consecutive paragraphs differ and
# the token-per-character ratio looks like ordinary technical prose.
_ADJECTIVES = (
    "early",
    "regional",
    "modest",
    "durable",
    "contested",
    "practical",
    "seasonal",
    "layered",
    "informal",
    "costly",
    "gradual",
    "well documented",
    "uneven",
    "experimental",
    "routine",
    "fragile",
    "central",
    "overlooked",
    "sustained",
    "careful",
)
_NOUNS = (
    "survey",
    "archive",
    "field trial",
    "supply chain",
    "standard",
    "workshop",
    "ledger",
    "census",
    "pilot programme",
    "guideline",
    "budget",
    "inspection",
    "catalogue",
    "network",
    "treaty",
    "prototype",
    "benchmark",
    "registry",
    "forecast",
    "audit",
)
_GROUPS = (
    "local councils",
    "independent researchers",
    "two universities",
    "a trade association",
    "volunteer groups",
    "the national statistics office",
    "small manufacturers",
    "regional utilities",
    "a consortium of hospitals",
    "port authorities",
    "school districts",
    "insurance underwriters",
)
_PLACES = (
    "Lisbon",
    "Osaka",
    "Tallinn",
    "Valparaíso",
    "Nairobi",
    "Winnipeg",
    "Cork",
    "Porto Alegre",
    "Bergen",
    "Hobart",
    "Tbilisi",
    "Kraków",
    "Da Nang",
    "Accra",
)
_VERBS = (
    "revised",
    "questioned",
    "extended",
    "simplified",
    "measured",
    "replicated",
    "funded",
    "documented",
    "reorganised",
    "compared",
    "tightened",
    "published",
)
_OUTCOMES = (
    "costs fell by roughly {pct}%",
    "error rates dropped to {pct}% of the baseline",
    "adoption reached {pct}% within {num} years",
    "reported delays rose by {pct}%",
    "coverage climbed to {pct}% of eligible sites",
    "maintenance time shrank by {pct}%",
)
_TEMPLATES = (
    "In {year}, {group} in {place} {verb} the {adj} {noun} that shaped how {topic} is handled.",
    "Most accounts of {topic} start with the {noun}, although the {adj} work done in {place} "
    "arguably mattered more.",
    "Critics point out that the {noun} was never meant to carry the weight now placed on it.",
    "After {group} {verb} the figures, {outcome}, a result that held up in later reviews.",
    "The {adj} {noun} of {year} is still cited, mostly because nobody has replaced it.",
    "Practitioners describe {topic} as {adj} rather than difficult: the hard part is keeping "
    "records consistent over time.",
    "A second {noun}, run from {place}, found that {outcome}.",
    "Not every attempt succeeded; one {adj} {noun} was abandoned after {num} months.",
    "Today the {noun} is maintained by {group}, who publish an update every {num} months.",
    "Where the evidence is thin, guidance on {topic} tends to rely on the {adj} {noun}.",
    "Between {year} and {year2}, {group} {verb} their approach at least {num} times.",
    "Observers in {place} noted that {outcome} once the {noun} was {verb}.",
    "The debate over {topic} is less about goals than about who pays for the {noun}.",
    "Newcomers are usually surprised by how much of {topic} depends on one {adj} {noun}.",
    "A frequently quoted figure is that {outcome}, though the method behind it is {adj}.",
)
_SECTION_TITLES = (
    "Background",
    "How it developed",
    "Methods and measurement",
    "Open questions",
    "Regional differences",
    "Costs and funding",
    "Practical notes",
    "Further reading",
    "Known limitations",
    "Recent changes",
)


class DocLookupTool:
    """The ``lookup`` tool: returns a deterministic pseudo-document about a topic."""

    def __init__(self, result_chars: int = DEFAULT_RESULT_CHARS) -> None:
        self.result_chars = _validated_result_chars(result_chars)

    @property
    def name(self) -> str:
        return TOOL_NAME

    @property
    def description(self) -> str:
        return _DESCRIPTION

    @property
    def input_schema(self) -> dict[str, Any]:
        return dict(_SCHEMA)

    def get_schema(self) -> dict[str, Any]:
        return self.input_schema

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        problem = _topic_problem(input)
        if problem is not None:
            return ToolResult(success=False, error={"message": problem, "type": "invalid_input"})
        return ToolResult(success=True, output=render_document(input["topic"], self.result_chars))


def render_document(topic: str, result_chars: int = DEFAULT_RESULT_CHARS) -> str:
    """The document for ``topic``, at most ``result_chars`` characters, cut at a line break."""
    topic = topic.strip()
    # A seed from a stable hash (not hash(), which is salted per process).
    seed = int.from_bytes(hashlib.sha256(topic.encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    lines = [f"# {topic.title()}", "", _summary(topic, rng), "", "## Key facts"]
    lines += _fact_lines(topic, rng)
    section = 0
    while sum(len(line) + 1 for line in lines) < result_chars:
        title = _SECTION_TITLES[section % len(_SECTION_TITLES)]
        rounds = section // len(_SECTION_TITLES)
        lines += ["", f"## {title}" if rounds == 0 else f"## {title} ({rounds + 1})"]
        lines.append(_paragraph(topic, rng))
        section += 1
    return _cut(lines, result_chars)


def _summary(topic: str, rng: random.Random) -> str:
    return (
        f"Summary: {topic} covers the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} and the "
        f"practice built around it since {rng.randint(1950, 2015)}. This entry collects the "
        "main facts, the history and the points still argued over."
    )


def _fact_lines(topic: str, rng: random.Random) -> list[str]:
    first = rng.randint(1890, 1990)
    return [
        f"- Topic: {topic}",
        f"- Reference id: DOC-{rng.randint(10000, 99999)}",
        f"- First recorded: {first} ({rng.choice(_PLACES)})",
        f"- Last revised: {rng.randint(first + 10, 2024)}",
        f"- Maintained by: {rng.choice(_GROUPS)}",
        f"- Related: {rng.choice(_NOUNS)}, {rng.choice(_NOUNS)}, {rng.choice(_NOUNS)}",
        f"- Confidence: {rng.choice(('high', 'medium', 'low'))}; sources: {rng.randint(3, 40)}",
    ]


def _paragraph(topic: str, rng: random.Random) -> str:
    sentences = []
    for template in rng.sample(_TEMPLATES, k=rng.randint(4, 7)):
        year = rng.randint(1900, 2020)
        outcome = rng.choice(_OUTCOMES).format(pct=rng.randint(4, 85), num=rng.randint(2, 12))
        sentence = template.format(
            topic=topic,
            adj=rng.choice(_ADJECTIVES),
            noun=rng.choice(_NOUNS),
            group=rng.choice(_GROUPS),
            place=rng.choice(_PLACES),
            verb=rng.choice(_VERBS),
            year=year,
            year2=year + rng.randint(2, 30),
            num=rng.randint(2, 18),
            outcome=outcome,
        )
        sentences.append(sentence[0].upper() + sentence[1:])
    return " ".join(sentences)


def _cut(lines: list[str], limit: int) -> str:
    """Join lines, then trim to ``limit`` at the last line or sentence end that fits."""
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head = text[:limit]
    # Prefer a clean boundary in the last fifth; otherwise a hard cut still respects the size.
    for boundary in ("\n", ". "):
        at = head.rfind(boundary)
        if at >= limit * 4 // 5:
            head = head[: at + (1 if boundary == ". " else 0)]
            break
    kept = head.rstrip().split("\n")
    # A heading left without its section reads like a truncation bug; drop it.
    while len(kept) > 1 and (not kept[-1].strip() or kept[-1].startswith("#")):
        kept.pop()
    return "\n".join(kept)


def _topic_problem(input: Any) -> str | None:
    if not isinstance(input, dict):
        return (
            f"lookup expects an object like {{'topic': 'tidal energy'}}, got {type(input).__name__}"
        )
    if "topic" not in input:
        return "lookup needs a 'topic' (a non-empty string), e.g. {'topic': 'tidal energy'}"
    topic = input["topic"]
    if not isinstance(topic, str):
        return f"'topic' must be a string, got {type(topic).__name__}"
    if not topic.strip():
        return "'topic' must not be empty: name what to look up"
    if len(topic) > MAX_TOPIC_CHARS:
        return f"'topic' is {len(topic)} characters; keep it under {MAX_TOPIC_CHARS}"
    return None


def _validated_result_chars(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_RESULT_CHARS:
        raise ValueError(
            f"tool-doc-lookup config 'result_chars' must be an integer >= {MIN_RESULT_CHARS}, "
            f"got {value!r}"
        )
    return value


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount ``lookup`` at the kernel's ``tools`` mount point.

    Config: ``result_chars`` (int, default 6000): the size of each returned document.
    """
    config = dict(config or {})
    unknown = sorted(set(config) - {"result_chars"})
    if unknown:
        raise ValueError(f"tool-doc-lookup: unknown config keys {unknown}; known: ['result_chars']")
    tool = DocLookupTool(config.get("result_chars", DEFAULT_RESULT_CHARS))
    await coordinator.mount("tools", tool, name=tool.name)
    return None
