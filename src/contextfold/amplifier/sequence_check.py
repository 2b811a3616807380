"""What ``provider-scripted`` checks on a request with ``strict_sequence: true``: the checks
real providers make before they run a request (tool calls paired with their results; the
latest tool-using turn's signed thinking sent back exactly as produced)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from amplifier_core.llm_errors import InvalidRequestError

from contextfold.messages import content_text


def canonical(item: Mapping[str, Any]) -> str:
    """One JSON text per value, whatever its key order: what two requests are compared by."""
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class EmittedReply:
    """What this provider answered once: enough to recognise the turn when it comes back."""

    index: int
    text: str
    calls: tuple[tuple[str, str, str], ...]  # (id, name, canonical arguments)
    thinking: Mapping[str, Any] | None  # the signed thinking block, as produced


@dataclass
class SequenceCheck:
    """What ``strict_sequence`` checked on one request, and the faults it found.

    ``thinking_turn`` is the index of the assistant message whose signed thinking was compared
    with what this provider produced (None when no such check applied).
    """

    messages: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    thinking_turn: int | None = None
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.faults


def _calls_of(message: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(id, name, canonical arguments) of an assistant message's tool calls, in order."""
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = {}
        name = call.get("tool") or call.get("name") or function.get("name") or ""
        arguments = call.get("arguments", function.get("arguments", {}))
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: compare the raw string
                arguments = json.loads(arguments)
        found.append((str(call.get("id")), str(name), canonical({"a": arguments})))
        seen.add(str(call.get("id")))
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        is_call = isinstance(block, Mapping) and block.get("type") in ("tool_call", "tool_use")
        if is_call and str(block.get("id")) not in seen:  # Amplifier repeats calls as blocks
            arguments = block.get("input", block.get("arguments", {}))
            found.append(
                (str(block.get("id")), str(block.get("name")), canonical({"a": arguments}))
            )
    return found


def text_content(message: Mapping[str, Any]) -> str:
    return content_text(message.get("content"), "\n\n")


def _thinking_blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    return [
        b
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking")
    ]


class SequenceChecker:
    """Checks a request the way real providers do before they run it.

    * OpenAI: nothing but tool results may sit between an assistant message with tool calls
      and the results of those calls; every result answers a call of the assistant message
      just before it (else an *orphan*); every call has a result before the next non-tool
      message (else *unanswered*).
    * Anthropic, with thinking replies: the latest assistant turn whose tool results are being
      sent must carry its signed thinking block exactly as the provider produced it. Thinking
      of earlier turns may be left out (the API ignores it), so only that turn is compared.
    """

    def __init__(self, *, check_thinking: bool) -> None:
        self.check_thinking = check_thinking

    def check(
        self, messages: Sequence[Mapping[str, Any]], emitted: Sequence[EmittedReply]
    ) -> SequenceCheck:
        report = SequenceCheck(messages=len(messages))
        self._check_pairing(messages, report)
        if self.check_thinking:
            self._check_latest_thinking(messages, emitted, report)
        return report

    @staticmethod
    def _check_pairing(messages: Sequence[Mapping[str, Any]], report: SequenceCheck) -> None:
        open_at: int | None = None  # the assistant message whose results are being collected
        pending: list[str] = []
        for index, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                report.tool_results += 1
                call_id = message.get("tool_call_id")
                if open_at is not None and call_id in pending:
                    pending.remove(call_id)
                else:
                    report.faults.append(
                        f"message {index}: tool result {call_id!r} answers no call of the "
                        "assistant message before it (orphan result)"
                    )
                continue
            if pending:
                answered_later = any(
                    m.get("role") == "tool" and m.get("tool_call_id") in pending
                    for m in messages[index + 1 :]
                )
                if answered_later and not _calls_of(message):
                    # Keep the calls open: their results further on are not orphans too.
                    report.faults.append(
                        f"message {index} (role {role!r}) sits between the tool calls of "
                        f"message {open_at} and their results"
                    )
                    continue
                report.faults.append(
                    f"message {open_at}: tool call(s) {pending} have no result before "
                    f"message {index} (role {role!r}) (unanswered call)"
                )
            calls = _calls_of(message) if role == "assistant" else []
            report.tool_calls += len(calls)
            open_at = index if calls else None
            pending = [call_id for call_id, _, _ in calls]
        if pending:
            report.faults.append(
                f"message {open_at}: tool call(s) {pending} have no result at the end of the "
                "request (unanswered call)"
            )

    @staticmethod
    def _check_latest_thinking(
        messages: Sequence[Mapping[str, Any]],
        emitted: Sequence[EmittedReply],
        report: SequenceCheck,
    ) -> None:
        last = max(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None
        )
        if last is None or last == len(messages) - 1:
            return
        if not _calls_of(messages[last]) or any(
            m.get("role") != "tool" for m in messages[last + 1 :]
        ):
            return  # its tool results are not what this request sends
        report.thinking_turn = last
        message = messages[last]
        key = (text_content(message), tuple(_calls_of(message)))
        origin = next((r for r in reversed(emitted) if (r.text, r.calls) == key), None)
        if origin is None or origin.thinking is None:
            report.faults.append(
                f"message {last}: the assistant turn whose tool results are sent was not "
                "produced by this provider, so its thinking signature cannot be verified"
            )
            return
        blocks = _thinking_blocks(message)
        intact = len(blocks) == 1 and all(
            blocks[0].get(k) == origin.thinking.get(k) for k in ("type", "thinking", "signature")
        )
        if not intact:
            report.faults.append(
                f"message {last}: the latest assistant turn is sent with its tool results but "
                "without its signed thinking block exactly as produced (Anthropic requires it "
                "unmodified)"
            )


def sequence_refusal(check: SequenceCheck, *, provider: str, model: str) -> InvalidRequestError:
    """The non-retryable error a real provider answers a malformed sequence with."""
    more = f" (and {len(check.faults) - 1} more)" if len(check.faults) > 1 else ""
    return InvalidRequestError(
        f"Invalid request: {check.faults[0]}{more}.",
        provider=provider,
        model=model,
        status_code=400,
        retryable=False,
    )
