"""Typed token estimates for what is not text: images, documents, opaque payloads.

A base64 image is megabytes of characters but a few hundred to ~1,600 tokens to the model, so
counting its encoding as text would overstate it by orders of magnitude. We read the pixel size
from the image header (a few dozen bytes, decoded from the base64 in place) and price it with
the provider's published formula:

- Anthropic: ``ceil(width * height / 750)``, after the provider's own downscale to a long edge
  of 1,568 px, and at most ~1,600 tokens (larger images are scaled down to fit that).
- OpenAI (gpt-4o family): ``85`` for ``detail: "low"``; otherwise fit in 2048x2048, scale the
  short side down to 768, and pay ``85 + 170`` per 512-px tile.
- Unknown size (remote URL, unreadable header): a flat ``UNKNOWN_IMAGE_TOKENS`` (1,600), the
  largest Anthropic image, so an unknown image is never under-counted by much.

PDF documents (Anthropic): ``DOCUMENT_PAGE_TOKENS`` per page (text 1,500-3,000 per page plus a
page image, per Anthropic's docs); pages are counted from ``/Type /Page`` objects, else guessed
from the size. Encrypted reasoning (``redacted_thinking``, ``encrypted_content``) is priced at
its decoded size over four bytes per token. These are estimates; calibration absorbs the rest.
"""

from __future__ import annotations

import binascii
import math
import re
import struct
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DOCUMENT_PAGE_TOKENS",
    "UNKNOWN_IMAGE_TOKENS",
    "Media",
    "anthropic_image_tokens",
    "document_tokens",
    "opaque_tokens",
    "openai_image_tokens",
    "sniff_image_size",
]

UNKNOWN_IMAGE_TOKENS = 1600
DOCUMENT_PAGE_TOKENS = 3000
# Fallback when a PDF's pages are hidden in compressed object streams: ~1 page per 60 KB.
_BYTES_PER_PDF_PAGE = 60_000
_ANTHROPIC_MAX_EDGE = 1568
_ANTHROPIC_MAX_TOKENS = 1600
# JPEG dimensions live in the SOF segment, which may follow large EXIF blocks; walk at most this
# many segments before giving up (a valid file reaches SOF in a handful).
_MAX_JPEG_SEGMENTS = 64


@dataclass(frozen=True, slots=True)
class Media:
    """A non-text part of a message, described well enough to price it."""

    kind: Literal["image", "document", "opaque"]
    width: int | None = None
    height: int | None = None
    detail: str | None = None
    nbytes: int | None = None
    pages: int | None = None


class _B64View:
    """Random access to the bytes behind a base64 string without decoding all of it."""

    __slots__ = ("_data", "size")

    def __init__(self, data: str) -> None:
        self._data = data
        padding = len(data) - len(data.rstrip("="))
        self.size = len(data) * 3 // 4 - padding

    def read(self, start: int, length: int) -> bytes:
        if start < 0 or length <= 0 or start >= self.size:
            return b""
        first = (start // 3) * 4
        last = -(-(start + length) // 3) * 4
        try:
            chunk = binascii.a2b_base64(self._data[first:last])
        except (binascii.Error, ValueError):
            return b""
        offset = start - (first // 4) * 3
        return chunk[offset : offset + length]


def _png(view: _B64View) -> tuple[int, int] | None:
    head = view.read(0, 24)
    if len(head) == 24 and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    return None


def _gif(view: _B64View) -> tuple[int, int] | None:
    head = view.read(0, 10)
    if len(head) == 10 and head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    return None


def _webp(view: _B64View) -> tuple[int, int] | None:
    head = view.read(0, 30)
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    return None


def _jpeg(view: _B64View) -> tuple[int, int] | None:
    if view.read(0, 2) != b"\xff\xd8":
        return None
    position = 2
    for _ in range(_MAX_JPEG_SEGMENTS):
        marker = view.read(position, 4)
        if len(marker) < 4 or marker[0] != 0xFF:
            return None
        code = marker[1]
        if code == 0xFF:  # fill byte
            position += 1
            continue
        # SOF0..SOF15 carry the frame size, except DHT (C4), JPG (C8) and DAC (CC).
        if 0xC0 <= code <= 0xCF and code not in (0xC4, 0xC8, 0xCC):
            frame = view.read(position + 5, 4)
            if len(frame) == 4:
                height, width = struct.unpack(">HH", frame)
                return width, height
            return None
        position += 2 + int.from_bytes(marker[2:4], "big")
    return None


def sniff_image_size(data: str) -> tuple[int, int] | None:
    """(width, height) from a base64 PNG, GIF, WebP or JPEG header; None if unreadable."""
    if not data:
        return None
    view = _B64View(data)
    for reader in (_png, _jpeg, _gif, _webp):
        size = reader(view)
        if size is not None and size[0] > 0 and size[1] > 0:
            return size
    return None


def anthropic_image_tokens(width: int | None, height: int | None) -> int:
    """Anthropic's published estimate: pixels / 750 after its own downscale."""
    if not width or not height:
        return UNKNOWN_IMAGE_TOKENS
    scale = min(1.0, _ANTHROPIC_MAX_EDGE / max(width, height))
    pixels = (width * scale) * (height * scale)
    return max(1, min(_ANTHROPIC_MAX_TOKENS, math.ceil(pixels / 750)))


def openai_image_tokens(width: int | None, height: int | None, detail: str | None) -> int:
    """OpenAI's tile formula for the gpt-4o family (85 base + 170 per 512-px tile)."""
    if detail == "low":
        return 85
    if not width or not height:
        return UNKNOWN_IMAGE_TOKENS
    w, h = float(width), float(height)
    fit = min(1.0, 2048 / max(w, h))
    w, h = w * fit, h * fit
    shrink = min(1.0, 768 / min(w, h))
    w, h = w * shrink, h * shrink
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 85 + 170 * tiles


_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def count_pdf_pages(data: str) -> int | None:
    """Pages of a base64 PDF, from its page objects; None when they are not visible."""
    try:
        raw = binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(b"%PDF"):
        return None
    pages = len(_PDF_PAGE.findall(raw))
    return pages or None


def document_tokens(pages: int | None, nbytes: int | None) -> int:
    """Estimate for a PDF document: a fixed cost per page, pages guessed from size if unknown."""
    if not pages:
        pages = max(1, math.ceil((nbytes or 0) / _BYTES_PER_PDF_PAGE))
    return pages * DOCUMENT_PAGE_TOKENS


def opaque_tokens(nbytes: int | None) -> int:
    """Encrypted reasoning and similar payloads: decoded bytes over four."""
    return max(1, math.ceil((nbytes or 0) / 4))


def base64_size(data: str) -> int:
    """Decoded size of a base64 string, without decoding it."""
    return _B64View(data).size
