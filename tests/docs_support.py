"""Running the documentation's examples as written, offline.

The README and the docs show contextfold wrapping real `openai` and `anthropic` client calls.
To run those examples unchanged, `LocalModelServer` answers the two APIs on 127.0.0.1 the way
the providers do, with the shapes their SDKs parse: Chat Completions (`/v1/chat/completions`)
and Anthropic Messages (`/v1/messages`). It checks what a provider checks before it answers
(a message list it would refuse gets the provider's 400), counts the input with the exact
o200k tokenizer, and replies with a short text. Examples reach it through the environment
variables the SDKs read (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and their API keys).

`code_blocks(path, language)` extracts a Markdown file's fenced blocks of one language.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from contextfold.tokens import build_counter

_COUNTER = build_counter("exact", model="gpt-4o")
_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", flags=re.S | re.M)


def code_blocks(path: Path, language: str) -> list[str]:
    """The fenced blocks of ``language`` in a Markdown file, in order."""
    text = path.read_text(encoding="utf-8")
    return [body for lang, body in _FENCE.findall(text) if lang == language]


def _chat_problem(messages: Any) -> str | None:
    """What Chat Completions would refuse in a message list (None if nothing)."""
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty array"
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            return f"messages[{index}].role is invalid"
        if "metadata" in message:
            return f"messages[{index}]: Unrecognized request argument: metadata"
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return f"messages[{index}]: a tool message must answer a preceding tool call"
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return f"messages[{index}]: tool calls must be followed by their tool messages"
        if role == "assistant":
            open_calls = {call["id"] for call in message.get("tool_calls") or []}
    return None


def _anthropic_problem(body: dict[str, Any]) -> str | None:
    """What the Messages API would refuse in a request body (None if nothing)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: field required"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in {"user", "assistant"}:
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if set(message) - {"role", "content"}:
            return f"messages.{index}: Extra inputs are not permitted"
    if messages[0]["role"] != "user":
        return "messages: first message must use the user role"
    return None


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.server.requests.append((self.path, body))  # type: ignore[attr-defined]
        if self.path.endswith("/chat/completions"):
            problem = _chat_problem(body.get("messages"))
            if problem:
                self._reply(400, {"error": {"message": problem, "type": "invalid_request_error"}})
                return
            used = sum(_COUNTER.count_message(m) for m in body["messages"])
            self._reply(
                200,
                {
                    "id": "chatcmpl-local",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "local"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "Deploy 14 failed first."},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": used,
                        "completion_tokens": 6,
                        "total_tokens": used + 6,
                    },
                },
            )
        elif self.path.endswith("/messages"):
            problem = _anthropic_problem(body)
            if problem:
                self._reply(
                    400,
                    {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": problem},
                    },
                )
                return
            used = sum(_COUNTER.count_message(m) for m in body["messages"])
            self._reply(
                200,
                {
                    "id": "msg_local",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "local"),
                    "content": [{"type": "text", "text": "Deploy 14 failed first."}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": used, "output_tokens": 6},
                },
            )
        else:
            self._reply(404, {"error": {"message": f"no route {self.path}"}})


@contextmanager
def local_model_server() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A started server: its base URL and the list of (path, body) requests it received."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.requests = []  # type: ignore[attr-defined]
    # A short poll: `shutdown()` waits for the serving loop's next look at its flag, and the
    # default half second would be spent idle after every example.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
