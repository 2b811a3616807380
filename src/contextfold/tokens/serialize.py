"""One canonical, compact reading of a chat message: its text pieces and its media.

Every counter looks at a message through :func:`message_parts`, so they all agree on *what*
is counted; they differ only in *how* text becomes tokens. The walk visits known fields in a
fixed order and dumps unknown structures as sorted-key compact JSON, so the result is the same
bytes whatever order the dict keys came in. ``metadata`` is skipped (it is never sent to the
provider), and so are transport details such as ``cache_control``, ``visibility`` and thinking
``signature`` (a server-side integrity check, not prompt text). Images, PDFs and encrypted
reasoning become :class:`~contextfold.tokens.media.Media` entries, never text.

Shapes understood: OpenAI/Amplifier chat messages (content as a string or a list of ``text``,
``image``, ``image_url``, ``tool_call``, ``tool_result``, ``thinking``, ``redacted_thinking``,
``reasoning`` blocks; ``tool_calls`` in the OpenAI ``function`` shape or Amplifier's
``{"id", "tool", "arguments"}``; ``name``; ``tool_call_id``) and Anthropic content blocks
(``text``, ``image``, ``document``, ``tool_use``, ``tool_result``, ``thinking``,
``redacted_thinking``). Anything else that is JSON-like is counted as its canonical JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.tokens.media import Media, base64_size, count_pdf_pages, sniff_image_size

__all__ = [
    "MessageParts",
    "ToolParts",
    "canonical_json",
    "message_parts",
    "serialize_message",
    "tool_parts",
]

# Message keys read explicitly (role, content, ...) or never sent to the model (metadata).
_HANDLED_MESSAGE_KEYS = frozenset(
    {"metadata", "role", "content", "name", "tool_call_id", "tool_calls"}
)
# Block keys that are transport details, not prompt text.
_SKIPPED_BLOCK_KEYS = frozenset({"cache_control", "visibility", "signature"})
_TEXT_BLOCKS = frozenset({"text", "input_text", "output_text", "summary_text", "refusal"})
_TOOL_CALL_BLOCKS = frozenset({"tool_call", "tool_use", "server_tool_use", "function_call"})


class MessageParts:
    """What a message puts in front of the model, in a canonical order."""

    # A plain slotted class: built once per counted message, a dataclass __init__ costs 2x.
    __slots__ = ("media", "name", "role", "texts", "tool_calls")

    def __init__(
        self,
        role: str = "",
        name: str | None = None,
        texts: list[str] | None = None,
        media: list[Media] | None = None,
        tool_calls: int = 0,
    ) -> None:
        self.role = role
        self.name = name
        self.texts: list[str] = [] if texts is None else texts
        self.media: list[Media] = [] if media is None else media
        self.tool_calls = tool_calls

    def serialised(self) -> str:
        """Role, name, then every text piece, one per line: the bytes a heuristic reads."""
        head = [self.role] if self.name is None else [self.role, self.name]
        return "\n".join(head + self.texts)


@dataclass(slots=True)
class ToolParts:
    """A tool schema reduced to what the provider renders: name, description, parameters."""

    name: str
    description: str
    properties: list[tuple[str, str, str, list[str]]]  # (path, type, description, enum items)


def _plain(value: Any) -> Any:
    """Turn sets, tuples, non-str keys and pydantic models into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump())
    return value


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values give equal bytes whatever the key order."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )
    except (TypeError, ValueError):
        # Mixed-type keys cannot be sorted, or a container holds something exotic.
        return json.dumps(
            _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _as_mapping(block: Any) -> Mapping[str, Any] | None:
    if type(block) is dict or isinstance(block, Mapping):
        return block
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    return None


def _items(value: Any) -> Sequence[Any]:
    """A list field's items; anything else (missing, a scalar, a string) has none."""
    return value if isinstance(value, list | tuple) else ()


class _Walker:
    __slots__ = ("parts",)

    def __init__(self, parts: MessageParts) -> None:
        self.parts = parts

    def text(self, value: Any) -> None:
        if value is None or (type(value) is str and not value):
            return
        self.parts.texts.append(value if type(value) is str else _as_text(value))

    def content(self, content: Any) -> None:
        if content is None:
            return
        if isinstance(content, str):
            if content:
                self.parts.texts.append(content)
            return
        if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
            for block in content:
                self.block(block)
            return
        self.block(content)

    def block(self, raw: Any) -> None:
        if isinstance(raw, str):
            if raw:
                self.parts.texts.append(raw)
            return
        block = _as_mapping(raw)
        if block is None:
            self.text(raw)
            return
        kind = block.get("type")
        if not isinstance(kind, str):
            kind = None if kind is None else ""  # "" reads as an unknown block, counted as JSON
        if kind in _TEXT_BLOCKS or (kind is None and "text" in block):
            self.text(block.get("text", block.get("refusal")))
        elif kind == "image" or kind == "image_url" or kind == "input_image":
            self.image(block)
        elif kind == "document" or kind == "file" or kind == "input_file":
            self.document(block)
        elif kind in _TOOL_CALL_BLOCKS:
            self.tool_call(
                block.get("id") or block.get("call_id"),
                block.get("name"),
                block.get("input", block.get("arguments")),
            )
        elif kind == "tool_result" or kind == "function_call_output":
            self.text(block.get("tool_use_id") or block.get("tool_call_id") or block.get("call_id"))
            self.content(block.get("content", block.get("output")))
        elif kind == "thinking":
            self.text(block.get("thinking"))
            # Amplifier keeps OpenAI reasoning state here: [encrypted_content, reasoning_id].
            for item in _items(block.get("content")):
                if isinstance(item, str):
                    self.opaque(item)
        elif kind == "redacted_thinking":
            self.opaque(block.get("data"))
        elif kind == "reasoning":
            for item in _items(block.get("summary")):
                self.block(item)
            for item in _items(block.get("content")):
                self.block(item)
            self.opaque(block.get("encrypted_content"))
        else:
            self.text({k: v for k, v in block.items() if k not in _SKIPPED_BLOCK_KEYS})

    def opaque(self, data: Any) -> None:
        if isinstance(data, str) and data:
            self.parts.media.append(Media("opaque", nbytes=base64_size(data)))

    def image(self, block: Mapping[str, Any]) -> None:
        detail = block.get("detail")
        data: str | None = None
        source = block.get("source")
        if isinstance(source, Mapping):
            if source.get("type") == "base64" or "data" in source:
                data = source.get("data") if isinstance(source.get("data"), str) else None
            elif isinstance(source.get("url"), str):
                data = _data_url_payload(source["url"])
        url = block.get("image_url")
        if isinstance(url, Mapping):
            detail = url.get("detail", detail)
            url = url.get("url")
        if data is None and isinstance(url, str):
            data = _data_url_payload(url)
        if data is None and isinstance(block.get("data"), str):
            data = block["data"]
        size = sniff_image_size(data) if data else None
        width, height = size if size else (None, None)
        self.parts.media.append(
            Media(
                "image",
                width=width,
                height=height,
                detail=detail if isinstance(detail, str) else None,
            )
        )

    def document(self, block: Mapping[str, Any]) -> None:
        self.text(block.get("title"))
        self.text(block.get("context"))
        source = block.get("source")
        if isinstance(source, Mapping):
            kind = source.get("type")
            if kind == "text":
                self.text(source.get("data"))
                return
            if kind == "content":
                self.content(source.get("content"))
                return
            if kind == "base64" and isinstance(source.get("data"), str):
                self.pdf(source["data"])
                return
        file = block.get("file")
        if isinstance(file, Mapping) and isinstance(file.get("file_data"), str):
            payload = _data_url_payload(file["file_data"]) or file["file_data"]
            self.pdf(payload)
            return
        if isinstance(block.get("file_data"), str):
            self.pdf(_data_url_payload(block["file_data"]) or block["file_data"])
            return
        self.parts.media.append(Media("document"))

    def pdf(self, data: str) -> None:
        self.parts.media.append(
            Media("document", nbytes=base64_size(data), pages=count_pdf_pages(data))
        )

    def tool_call(self, call_id: Any, name: Any, arguments: Any) -> None:
        self.parts.tool_calls += 1
        self.text(call_id)
        self.text(name)
        if arguments is not None:
            # OpenAI sends arguments as a JSON string already: count it as written.
            self.text(arguments)

    def tool_calls(self, calls: Any) -> None:
        if type(calls) is not list and (not isinstance(calls, Sequence) or isinstance(calls, str)):
            self.text(calls)
            return
        for raw in calls:
            call = _as_mapping(raw)
            if call is None:
                self.text(raw)
                continue
            function = call.get("function")
            if type(function) is dict or isinstance(function, Mapping):  # OpenAI
                self.tool_call(call.get("id"), function.get("name"), function.get("arguments"))
            else:  # Amplifier {"id", "tool", "arguments"} (or {"id", "name", "input"})
                self.tool_call(
                    call.get("id"),
                    call.get("tool", call.get("name")),
                    call.get("arguments", call.get("input")),
                )


def _data_url_payload(url: str) -> str | None:
    """The base64 payload of a ``data:...;base64,`` URL, else None (remote URLs)."""
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        if head.endswith(";base64"):
            return payload
    return None


def message_parts(message: Mapping[str, Any]) -> MessageParts:
    """Walk one message into canonical parts. Raises TypeError only for a non-mapping."""
    if not isinstance(message, dict):
        mapping = _as_mapping(message)
        if mapping is None:
            raise TypeError(
                f"a message must be a dict like {{'role': ..., 'content': ...}}, "
                f"got {type(message).__name__}"
            )
        message = mapping
    role = message.get("role")
    name = message.get("name")
    texts: list[str] = []
    parts = MessageParts(
        role=role if isinstance(role, str) else "" if role is None else _as_text(role),
        name=None if name is None else _as_text(name),
        texts=texts,
    )
    # Fast path for the common shapes (plain strings); the walker handles everything else.
    walker: _Walker | None = None
    call_id = message.get("tool_call_id")
    if type(call_id) is str:
        if call_id:
            texts.append(call_id)
    elif call_id is not None:
        walker = _Walker(parts)
        walker.text(call_id)
    content = message.get("content")
    if type(content) is str:
        if content:
            texts.append(content)
    elif content is not None:
        walker = walker or _Walker(parts)
        walker.content(content)
    calls = message.get("tool_calls")
    if calls:
        walker = walker or _Walker(parts)
        walker.tool_calls(calls)
    extras = (
        [key for key in message if key not in _HANDLED_MESSAGE_KEYS] if len(message) > 2 else ()
    )
    if extras:
        walker = walker or _Walker(parts)
        function_call = message.get("function_call")  # legacy OpenAI single call
        if isinstance(function_call, Mapping):
            walker.tool_call(None, function_call.get("name"), function_call.get("arguments"))
            extras = [key for key in extras if key != "function_call"]
        # Fields we do not know are counted as written, in key order so dict order is moot.
        for key in sorted(extras, key=str):
            value = message[key]
            if value is not None:
                walker.text(value)
    return parts


def serialize_message(message: Mapping[str, Any]) -> str:
    """The canonical compact serialisation counters read (media are priced separately)."""
    return message_parts(message).serialised()


def _schema_of(tool: Mapping[str, Any]) -> tuple[str, str, Any]:
    function = tool.get("function")
    source = function if isinstance(function, Mapping) else tool
    name = source.get("name") or tool.get("type") or ""
    description = source.get("description") or ""
    parameters = source.get("parameters", source.get("input_schema"))
    return _as_text(name), _as_text(description), parameters


def _properties(schema: Any, prefix: str, out: list[tuple[str, str, str, list[str]]]) -> None:
    if not isinstance(schema, Mapping):
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for key in properties:
            spec = properties[key]
            path = f"{prefix}{key}"
            if not isinstance(spec, Mapping):
                out.append((path, "", _as_text(spec), []))
                continue
            kind = spec.get("type", "")
            enum = spec.get("enum")
            items = [_as_text(item) for item in enum] if isinstance(enum, list) else []
            out.append((path, _as_text(kind), _as_text(spec.get("description", "")), items))
            # Nested objects and arrays of objects: their fields are rendered too.
            _properties(spec, f"{path}.", out)
            _properties(spec.get("items"), f"{path}[].", out)


def tool_parts(tool: Mapping[str, Any]) -> ToolParts:
    """Reduce an OpenAI, Anthropic or Amplifier tool schema to name/description/properties."""
    mapping = tool if isinstance(tool, Mapping) else _as_mapping(tool)
    if mapping is None:
        raise TypeError(
            f"a tool schema must be a dict with a name (and description, parameters), "
            f"got {type(tool).__name__}"
        )
    name, description, parameters = _schema_of(mapping)
    properties: list[tuple[str, str, str, list[str]]] = []
    _properties(parameters, "", properties)
    return ToolParts(name=name, description=description, properties=properties)
