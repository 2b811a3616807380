"""The tool-result ingress cap: oversized tool output is clipped once, before admission.

What the contract asks ("Tool-result text ingress cap"): the text of a tool result is
limited to ``max_tool_result_bytes`` UTF-8 bytes; an oversized text keeps a UTF-8-safe
prefix plus ONE explicit retrieval marker stating the original size. Only direct text is
read: a string content, the direct text blocks of a block list, and (Anthropic shape) the
string or direct text blocks of a ``tool_result`` block. Images, audio, unknown and nested
block data are neither read nor sliced. Byte accounting of ill-formed text (lone
surrogates) uses UTF-8 replacement, so an under-cap text is returned unchanged and a
clipped prefix is always valid UTF-8. The clipped remainder is not kept anywhere.

The event payload carries our keys (``original_bytes``, ``kept_bytes``: the text kept
before the marker, ``limit``) and the reference module's (``tool_name``,
``original_text_utf8_bytes``, ``stored_text_utf8_bytes``: everything stored, marker
included, ``max_tool_result_bytes``, ``content_kind``), so dashboards built for either
read it. It holds sizes and names only, never the tool's text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

MARKER_TEMPLATE = (
    "\n\n[contextfold: tool output truncated at ingress: kept the first {kept:,} of "
    "{original:,} bytes (limit {limit:,}). The rest was not stored. Retrieve what you need "
    "with narrower read/query parameters; do not repeat state-changing actions to recover it.]"
)


# What the clipped content was: a string, direct text blocks (the reference's two kinds),
# or a dict/list tool output capped as its JSON text (ours: the reference receives that
# output already serialised, as a string).
ContentKind = Literal["string", "text_blocks", "json"]


@dataclass(frozen=True, slots=True)
class IngressClip:
    """What one clip did (the payload of ``context:tool_result_ingress_truncated``)."""

    tool_call_id: str | None
    original_bytes: int
    kept_bytes: int
    limit: int
    stored_bytes: int
    content_kind: ContentKind
    tool_name: str | None = None

    def to_event(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "original_bytes": self.original_bytes,
            "kept_bytes": self.kept_bytes,
            "limit": self.limit,
            "tool_name": self.tool_name,
            "original_text_utf8_bytes": self.original_bytes,
            "stored_text_utf8_bytes": self.stored_bytes,
            "max_tool_result_bytes": self.limit,
            "content_kind": self.content_kind,
        }


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def _marker_room(original: int, limit: int) -> int:
    """Bytes the marker can take at most (kept <= limit), so prefix + marker fits the limit."""
    return len(MARKER_TEMPLATE.format(kept=limit, original=original, limit=limit).encode())


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits ``max_bytes``, never a split char."""
    return text.encode("utf-8", "replace")[: max(0, max_bytes)].decode("utf-8", "ignore")


def clip_text(text: str, limit: int) -> tuple[str, int, int] | None:
    """Clip ``text`` to ``limit`` bytes including the marker; None if it already fits."""
    # A str of n code points is at most 4n bytes: most tool output is far under any cap,
    # so the common case never encodes.
    if len(text) * 4 <= limit:
        return None
    original = utf8_size(text)
    if original <= limit:
        return None
    prefix = _utf8_prefix(text, limit - _marker_room(original, limit))
    kept = utf8_size(prefix)
    return (
        prefix + MARKER_TEMPLATE.format(kept=kept, original=original, limit=limit),
        original,
        kept,
    )


def cap_tool_result(
    message: Mapping[str, Any], limit: int
) -> tuple[dict[str, Any], list[IngressClip]]:
    """Apply the cap to one message; returns the (possibly new) message and what was clipped.

    Non-tool messages and messages under the cap come back as an equal new dict.
    """
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        new_content, sizes = _cap_content(content, limit, serialise_json=True)
        clips = (
            [_clip(sizes, limit, message.get("tool_call_id"), _tool_name(message))] if sizes else []
        )
    elif role == "user" and isinstance(content, list):
        new_content, clips = _cap_anthropic_results(content, limit)
    else:
        return dict(message), []
    if not clips:
        return dict(message), []
    capped = dict(message)
    capped["content"] = new_content
    return capped, clips


@dataclass(frozen=True, slots=True)
class _Sizes:
    """The byte counts of one clip, before we know whose result it was."""

    original: int
    kept: int  # text kept before the marker
    stored: int  # all text stored, marker included
    kind: ContentKind


def _clip(sizes: _Sizes, limit: int, call_id: Any, tool_name: Any) -> IngressClip:
    return IngressClip(
        tool_call_id=call_id if isinstance(call_id, str) else None,
        original_bytes=sizes.original,
        kept_bytes=sizes.kept,
        limit=limit,
        stored_bytes=sizes.stored,
        content_kind=sizes.kind,
        tool_name=tool_name if isinstance(tool_name, str) else None,
    )


def _tool_name(message: Mapping[str, Any]) -> Any:
    """The tool's name as Amplifier's loops and the OpenAI shape record it, if they do."""
    if message.get("name") is not None:
        return message.get("name")
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping):
        return metadata.get("tool_name") or metadata.get("name")
    return None


def _cap_content(content: Any, limit: int, *, serialise_json: bool) -> tuple[Any, _Sizes | None]:
    if isinstance(content, str):
        return _cap_string(content, limit, "string")
    if (
        isinstance(content, list)
        and content
        and all(isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content)
    ):
        return _cap_text_blocks(content, limit)
    if serialise_json and isinstance(content, dict | list):
        # A ToolResult's dict/list output: the contract caps its JSON text. Under the cap
        # it stays as given; over it, the clipped JSON text replaces it.
        as_text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=str)
        text, sizes = _cap_string(as_text, limit, "json")
        return (content, None) if sizes is None else (text, sizes)
    return content, None


def _cap_string(text: str, limit: int, kind: ContentKind) -> tuple[str, _Sizes | None]:
    clipped = clip_text(text, limit)
    if clipped is None:
        return text, None
    stored, original, kept = clipped
    return stored, _Sizes(original, kept, utf8_size(stored), kind)


def _cap_text_blocks(blocks: list[Any], limit: int) -> tuple[list[Any], _Sizes | None]:
    """The cap covers the direct text blocks together: once it is spent, later text is dropped."""
    sizes = [utf8_size(b["text"]) if _is_text_block(b) else 0 for b in blocks]
    original = sum(sizes)
    if original <= limit:
        return blocks, None
    room = limit - _marker_room(original, limit)  # text bytes we may keep, marker excluded
    out: list[Any] = []
    kept = 0
    stored = 0
    clipped = False
    for block, size in zip(blocks, sizes, strict=True):
        if not _is_text_block(block):
            out.append(block)  # images and other blocks are neither read nor sliced
        elif clipped:
            continue  # past the cap: this text is not admitted
        elif kept + size <= room:
            out.append(block)
            kept += size
            stored += size
        else:
            prefix = _utf8_prefix(block["text"], room - kept)
            kept += utf8_size(prefix)
            marker = MARKER_TEMPLATE.format(kept=kept, original=original, limit=limit)
            out.append({**block, "text": prefix + marker})
            stored = kept + utf8_size(marker)
            clipped = True
    return out, _Sizes(original, kept, stored, "text_blocks")


def _cap_anthropic_results(blocks: list[Any], limit: int) -> tuple[list[Any], list[IngressClip]]:
    out: list[Any] = []
    clips: list[IngressClip] = []
    for block in blocks:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            new_inner, sizes = _cap_content(block.get("content"), limit, serialise_json=False)
            if sizes is not None:
                call_id = block.get("tool_use_id") or block.get("tool_call_id")
                # A tool_result block does not name its tool (its tool_use block does).
                clips.append(_clip(sizes, limit, call_id, block.get("name")))
                block = {**block, "content": new_inner}
        out.append(block)
    return out, clips


def _is_text_block(block: Any) -> bool:
    return (
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )
