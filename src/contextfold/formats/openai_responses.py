"""OpenAI Responses ``input`` items, grouped into contextfold's messages and back.

    view = await openai_responses.view_for(context, items, instructions=..., tools=tools)
    response = client.responses.create(model=..., input=view, tools=tools, ...)
    await openai_responses.record_usage(context, response.usage)
    items += [item.model_dump(exclude_unset=True) for item in response.output]

A model turn is several items: reasoning, an assistant message, function calls. They become
one assistant message whose calls are answered by the ``function_call_output`` items after
it, so a turn and its results are kept, dropped and repaired as one group like any other.
Reasoning becomes a thinking block (its ``encrypted_content`` or id as the signature): the
newest turn's goes back whole, earlier turns' may be left out, and then their items are
sent without their ids (the API refuses an item that names a reasoning item it was not sent).

Items other than messages, reasoning, function and custom tool calls and their outputs
(hosted tools' calls, MCP items, references) are carried whole in their turn. A call of
another kind with a ``call_id`` (computer, shell, apply_patch) is paired with its output like
a function call; when compaction shortens such an output and its ``output`` is not text, the
item keeps its original output (the view's text cannot stand for a screenshot).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..mirror import REF, Mirror, mirror_for, unchanged
from ..views import detached

if TYPE_CHECKING:
    from ..manager import ContextFold

SHAPE = "openai_responses"

_REQUEST_ROLES = ("user", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text", "text")
# Items a caller sends on the user's side that answer nothing by call id.
_USER_SIDE = ("mcp_approval_response",)
# What an item keeps of itself as a call's arguments when it is not a function call.
_CALL_FIELDS_LEFT_OUT = ("type", "id", "call_id", "status")


def plain_item(item: Any) -> dict[str, Any]:
    """An input item as a plain dict (SDK objects through their JSON form)."""
    if type(item) is dict:
        return item
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    raise TypeError(
        f"a Responses input item is a dict (or an SDK item object), got {type(item).__name__}"
    )


def to_messages(items: Sequence[Any], start: int = 0) -> list[dict[str, Any]]:
    """Input items as contextfold messages, each marked with the items it stands for."""
    messages: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None
    for offset, raw in enumerate(items):
        item = plain_item(raw)
        index = start + offset
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and role in _REQUEST_ROLES:
            turn = None
            content = _request_content(item.get("content"))
            messages.append({"role": role, "content": content, "metadata": {REF: [index, 1]}})
        elif isinstance(kind, str) and kind.endswith("_output") and item.get("call_id"):
            turn = None
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": _output_content(item.get("output")),
                    "metadata": {REF: [index, 1]},
                }
            )
        elif kind in _USER_SIDE:
            turn = None
            block = {"type": "responses_item", "item": item}
            messages.append({"role": "user", "content": [block], "metadata": {REF: [index, 1]}})
        else:
            if turn is None:
                turn = {"role": "assistant", "content": [], "metadata": {REF: [index, 0]}}
                messages.append(turn)
            turn["metadata"][REF][1] += 1
            _add_to_turn(turn, item, kind)
    for message in messages:
        if message["role"] == "assistant" and not message["content"]:
            message["content"] = ""  # as a view carries it: an empty turn's text
    return messages


def _add_to_turn(turn: dict[str, Any], item: dict[str, Any], kind: Any) -> None:
    content: list[dict[str, Any]] = turn["content"]
    if kind in (None, "message"):
        parts = item.get("content")
        if isinstance(parts, str):
            content.append({"type": "text", "text": parts})
        for part in parts if isinstance(parts, list) else ():
            text = part.get("text", part.get("refusal")) if isinstance(part, Mapping) else None
            content.append({"type": "text", "text": text if isinstance(text, str) else ""})
    elif kind == "reasoning":
        texts = [
            part.get("text", "")
            for key in ("summary", "content")
            for part in item.get(key) or ()
            if isinstance(part, Mapping)
        ]
        signature = item.get("encrypted_content") or item.get("id") or ""
        content.append({"type": "thinking", "thinking": "\n".join(texts), "signature": signature})
    elif item.get("call_id") and isinstance(kind, str) and kind.endswith("_call"):
        if kind == "function_call":
            name, arguments = item.get("name"), item.get("arguments")
        elif kind == "custom_tool_call":
            name, arguments = item.get("name"), item.get("input")
        else:
            name = kind
            arguments = {k: v for k, v in item.items() if k not in _CALL_FIELDS_LEFT_OUT}
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        call = {"id": item["call_id"], "type": "function"}
        call["function"] = {"name": name or kind, "arguments": arguments}
        turn.setdefault("tool_calls", []).append(call)
    else:
        content.append({"type": "responses_item", "item": item})


def _request_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [_text_block(part) for part in content]


def _text_block(part: Any) -> Any:
    if isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS and len(part) == 2:
        return {"type": "text", "text": part.get("text")}
    return part


def _output_content(output: Any) -> Any:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return [_text_block(part) for part in output]
    return json.dumps(output, ensure_ascii=False, separators=(",", ":"))


# -- back ------------------------------------------------------------------------------------


def from_view(view: Sequence[Mapping[str, Any]], mirror: Mirror) -> list[dict[str, Any]]:
    """A view as input items: items of unchanged messages as they were (copies), changed
    ones rebuilt around what the view says, the context's own messages as new items."""
    out: list[dict[str, Any]] = []
    call_kinds: dict[Any, str] = {}  # an item's call_id (as given) -> its type
    for message in view:
        admitted = mirror.admitted(message)
        originals: list[dict[str, Any]] = []
        if admitted is not None:
            first, count = admitted["metadata"][REF]
            originals = [plain_item(item) for item in mirror.items[first : first + count]]
        for item in originals:
            if item.get("call_id") and str(item.get("type", "")).endswith("_call"):
                call_kinds[item["call_id"]] = item["type"]
        if originals and unchanged(message, admitted):
            out.extend(detached(item) for item in originals)
        elif message.get("role") == "assistant":
            out.extend(_turn(message, originals))
        elif message.get("role") == "tool":
            out.append(_result(message, originals, call_kinds))
        else:
            out.append(_request(message, originals))
    return out


def _request(message: Mapping[str, Any], originals: list[dict[str, Any]]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        content = [_back_block(block, "input_text") for block in content]
    if originals:
        return {**detached(originals[0]), "content": content}
    return {"role": message.get("role", "user"), "content": content}


def _back_block(block: Any, text_type: str) -> Any:
    if isinstance(block, Mapping):
        if block.get("type") == "text":
            return {"type": text_type, "text": block.get("text", "")}
        if block.get("type") == "responses_item":
            return detached(block.get("item"))
    return detached(block)


def _result(
    message: Mapping[str, Any], originals: list[dict[str, Any]], call_kinds: dict[Any, str]
) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else None
    output: Any = text
    if isinstance(content, list):
        output = [_back_block(block, "input_text") for block in content]
    if originals:
        item = detached(originals[0])
        if isinstance(item.get("output"), str | list):
            item["output"] = output
        return item
    call_id = message.get("tool_call_id")
    kind = call_kinds.get(call_id, "function_call")
    kind = kind if kind in ("function_call", "custom_tool_call") else "function_call"
    return {"type": f"{kind}_output", "call_id": call_id, "output": output or ""}


def _turn(message: Mapping[str, Any], originals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    texts = iter(b.get("text", "") for b in blocks if b.get("type") == "text")
    kept_reasoning = any(b.get("type") == "thinking" for b in blocks)
    left_out = not kept_reasoning and any(o.get("type") == "reasoning" for o in originals)
    items: list[dict[str, Any]] = []
    for original in originals:
        item = detached(original)
        kind = item.get("type")
        if kind == "reasoning" and left_out:
            continue
        if kind in (None, "message") and isinstance(item.get("content"), list):
            item["content"] = [_shortened_part(part, texts) for part in item["content"]]
        elif kind in (None, "message") and isinstance(item.get("content"), str):
            item["content"] = next(texts, item["content"])
        if left_out:
            item.pop("id", None)  # it would name a reasoning item this request leaves out
        items.append(item)
    return items


def _shortened_part(part: Any, texts: Any) -> Any:
    if not isinstance(part, dict):
        return part
    text = next(texts, None)
    if text is None:
        return part
    key = "refusal" if "refusal" in part and "text" not in part else "text"
    return {**part, key: text}


# -- the plain-client entry points -----------------------------------------------------------


def _mirror(context: ContextFold) -> Mirror:
    return mirror_for(context, SHAPE, to_messages)


async def view_for(
    context: ContextFold,
    items: Sequence[Any],
    *,
    instructions: str | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The fitted ``input`` for the next request with ``instructions`` and ``tools`` (both
    counted, never cut)."""
    mirror = _mirror(context)
    system = [{"role": "system", "content": instructions}] if instructions else []
    view = await mirror.view(items, fixed_tokens=mirror.fixed_tokens(system=system, tools=tools))
    return from_view(view, mirror)


async def record_usage(context: ContextFold, usage: Any, *, model: str | None = None) -> None:
    """Teach the context what the provider billed for the last request (``response.usage``)."""
    await _mirror(context).record_usage(usage, model=model)
