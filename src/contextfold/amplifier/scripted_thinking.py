"""The signed thinking blocks ``provider-scripted`` produces with ``reply_shape:
"anthropic-thinking"``: deterministic reasoning text and a base64 signature, of the sizes
Amplifier's Anthropic provider returns."""

from __future__ import annotations

import base64
import hashlib

# Sizes of a real signed thinking block from Amplifier's Anthropic provider: a few hundred
# words of reasoning and a signature of several hundred base64 characters.
THINKING_WORDS = 250
SIGNATURE_CHARS = 480

_THINKING_WORDS = (
    "the", "result", "suggests", "that", "next", "source", "should", "confirm", "figure",
    "before", "summary", "compare", "earlier", "notes", "check", "whether", "topic", "covers",
    "detail", "missing", "evidence", "so", "I", "will", "look", "up", "again", "and", "weigh",
    "each", "claim", "against", "document", "carefully", "then", "decide", "what", "remains",
    "reconciling", "discrepancy", "provenance", "methodology", "quantitative", "assumptions",
    "cross-reference", "inconsistent", "timeline", "2019", "estimates", "caveat", "plausibly",
)  # fmt: skip


def thinking_text(response_index: int, step_text: str) -> str:
    """Deterministic reasoning of ``THINKING_WORDS`` words for one response."""
    words = [f"Response {response_index}: {step_text.rstrip('.') or 'answering'}."]
    seed = hashlib.sha256(f"thinking:{response_index}".encode()).digest()
    i = 0
    while len(words) < THINKING_WORDS:
        byte = seed[i % len(seed)] ^ (i * 31 % 256)
        words.append(_THINKING_WORDS[byte % len(_THINKING_WORDS)])
        i += 1
    return " ".join(words) + "."


def thinking_signature(response_index: int, thinking: str) -> str:
    """A deterministic base64 signature of ``SIGNATURE_CHARS`` characters for a thinking text."""
    material = b""
    block = hashlib.sha256(f"{response_index}:{thinking}".encode()).digest()
    while len(material) * 4 < SIGNATURE_CHARS * 3:
        material += block
        block = hashlib.sha256(block).digest()
    return base64.b64encode(material).decode()[:SIGNATURE_CHARS]
