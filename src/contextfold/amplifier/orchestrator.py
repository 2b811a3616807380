"""Amplifier orchestrator module ``loop-fold``: the contract's agent loop, run offline.

The loop is the mechanism; the mounted context manager is the policy. Before every model call
the loop asks the context for the messages of the request (``get_messages_for_request``), sends
them with the tools' specs, stores the reply in Amplifier's turn shape and runs the tool calls,
until a reply comes back without tool calls.

What it honours, and why it is shaped the way it is:

* Hooks: ``prompt:submit`` (deny, modify the prompt, inject), ``tool:pre`` (deny, modify the
  input, inject, ask_user), ``tool:post`` / ``tool:error`` (inject), ``provider:request``
  (inject; ephemeral injections ride along on that one request only). With ``injections:
  "deferred"`` (the default) injections raised while tools run are stored *after* the tool
  results of that turn, so an assistant message and its results always stay one unbroken
  group. With ``"immediate"`` they are stored the moment the hook returns, through the kernel's
  ``process_hook_result`` as Amplifier's own loops do, which can put them between an
  assistant's tool calls and their results (what a context manager meets in production).
* Provider errors use amplifier-core's ``LLMError`` taxonomy: retryable errors are retried a
  bounded number of times with a tiny backoff, others are reported on ``provider:error`` and
  re-raised.
* Context overflow: with ``overflow: "refit"`` (the default), when the provider refuses the
  request as too long (``ContextLengthError``), the loop asks the context for a forced refit to
  a budget taken from the error and retries. A calibrating context (context-fold's default
  counter) is first given the refused request's measured size as a usage reading, and the
  refit uses the provider's limit as it stands (``error_learned``); further overflows are
  refit again while each retry is measured smaller than the last, up to three refits.
  Otherwise a second overflow propagates. With
  ``"raise"`` it behaves like Amplifier's ``loop-basic``: ``provider:error`` is emitted and the
  error ends the session, so whatever the context delivers at the budget is final.
  The refit budget uses what the provider said: when its error carries the size it measured
  (``requested``), the limit is scaled by how far the context under-counted; when it carries
  only the limit, the request is assumed twice as big as estimated (half the limit).
* Measured requests: when the context registers ``context.measured_request_view`` and the
  provider advertises ``supports_request_count`` (``count_request``), the loop builds the
  complete request (messages, hook injections, tool schemas) for each view the context offers
  and has the provider count it; the context fits the view to that count and returns the
  request exactly as counted. The loop commits the context's transaction right before it
  dispatches that request, and rolls it back if anything fails or is cancelled before then.
  When the request is over the provider's hard limit after the context's last rung, the
  loop's ``fit_output`` lowers ``max_output_tokens`` (halving, at most six recounts) for
  providers whose input allowance grows with a smaller output reserve.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amplifier_core.llm_errors import ContextLengthError, LLMError
from amplifier_core.message_models import ChatRequest, ChatResponse, Message, ToolCall, ToolSpec
from amplifier_core.models import HookResult, ToolResult

from contextfold.tokens import CalibratedCounter

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13

logger = logging.getLogger(__name__)

MODULE_ID = "loop-fold"
EVENT_OVERFLOW_RETRY = "loop-fold:overflow_retry"
EVENT_MAX_ITERATIONS = "loop-fold:max_iterations"
EVENT_MEASURED_REQUEST = "loop-fold:measured_request"
CUSTOM_EVENTS = (EVENT_OVERFLOW_RETRY, EVENT_MAX_ITERATIONS, EVENT_MEASURED_REQUEST)
# EVENT_MEASURED_REQUEST: once per request on the measured path (outcome, count calls, the
# two counts).
MEASURED_REQUEST_VIEW = "context.measured_request_view"
# fit_output's bounded output-cap ladder: at most this many recounts, halving each time.
FIT_OUTPUT_RECOUNTS = 6

# When the context under-counted (the provider measured more than the context thought it
# sent), the refit budget is scaled by that ratio; this slack covers the ratio itself being
# measured on a single request.
_REFIT_SLACK = 0.95
# Refits after overflows in a row, each retry measured smaller than the last (a calibrating
# context may need a few readings to settle); an overflow without progress propagates.
MAX_OVERFLOW_REFITS = 3
_BUDGET_ATTRIBUTES = ("limit", "max_tokens", "token_limit", "max_input_tokens")
_BUDGET_PATTERNS = (
    re.compile(r"\blimit(?:\s+of|\s+is|:)?\s*(\d[\d,]*)", re.IGNORECASE),
    re.compile(r"maximum context length is\s*(\d[\d,]*)", re.IGNORECASE),
    re.compile(r">\s*(\d[\d,]*)\s*maximum", re.IGNORECASE),
)
_KNOWN_KEYS = frozenset(
    {
        "max_iterations",
        "default_provider",
        "system_prompt",
        "provider_retries",
        "retry_backoff",
        "overflow",
        "injections",
    }
)
OVERFLOW_MODES = ("refit", "raise")
INJECTION_MODES = ("deferred", "immediate")


@dataclass(frozen=True)
class LoopConfig:
    """Validated orchestrator configuration.

    ``provider_retries`` bounds retries of retryable provider errors; ``retry_backoff`` is the
    first pause in seconds (doubled per retry), kept tiny because this loop runs offline.
    ``overflow`` and ``injections`` choose between this loop's behaviour and that of
    Amplifier's own loops (see the module docstring).
    """

    max_iterations: int = 100
    default_provider: str | None = None
    system_prompt: str | None = None
    provider_retries: int = 2
    retry_backoff: float = 0.01
    overflow: str = "refit"
    injections: str = "deferred"

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> LoopConfig:
        config = dict(config or {})
        unknown = sorted(set(config) - _KNOWN_KEYS)
        if unknown:
            raise ValueError(
                f"loop-fold: unknown config keys {unknown}; known: {sorted(_KNOWN_KEYS)}"
            )
        max_iterations = config.get("max_iterations", cls.max_iterations)
        if (
            isinstance(max_iterations, bool)
            or not isinstance(max_iterations, int)
            or max_iterations < 1
        ):
            raise ValueError(
                f"loop-fold: 'max_iterations' must be an integer >= 1, got {max_iterations!r}"
            )
        retries = config.get("provider_retries", cls.provider_retries)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(
                f"loop-fold: 'provider_retries' must be an integer >= 0, got {retries!r}"
            )
        backoff = config.get("retry_backoff", cls.retry_backoff)
        if (
            isinstance(backoff, bool)
            or not isinstance(backoff, int | float)
            or not 0 <= backoff <= 1
        ):
            raise ValueError(
                f"loop-fold: 'retry_backoff' must be a number of seconds in [0, 1], got {backoff!r}"
            )
        for key, allowed in (("overflow", OVERFLOW_MODES), ("injections", INJECTION_MODES)):
            if config.get(key, allowed[0]) not in allowed:
                raise ValueError(
                    f"loop-fold: '{key}' must be one of {list(allowed)}, got {config[key]!r}"
                )
        for key in ("default_provider", "system_prompt"):
            value = config.get(key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"loop-fold: '{key}' must be a non-empty string when set")
        return cls(
            max_iterations=max_iterations,
            default_provider=config.get("default_provider"),
            system_prompt=config.get("system_prompt"),
            provider_retries=retries,
            retry_backoff=float(backoff),
            overflow=config.get("overflow", cls.overflow),
            injections=config.get("injections", cls.injections),
        )


class FoldLoop:
    """The ``loop-fold`` orchestrator. Stateless between calls: each ``execute`` is one turn."""

    def __init__(self, config: LoopConfig | Mapping[str, Any] | None = None) -> None:
        self.config = config if isinstance(config, LoopConfig) else LoopConfig.from_mapping(config)

    async def execute(
        self,
        prompt: str,
        context: Any,
        providers: Mapping[str, Any],
        tools: Mapping[str, Any],
        hooks: Any,
        coordinator: Any | None = None,
        **kwargs: Any,
    ) -> str:
        if hooks is None and coordinator is not None:
            hooks = coordinator.hooks
        name, provider = self._select_provider(providers)
        turn = _Turn(self.config, context, name, provider, dict(tools or {}), hooks, coordinator)
        return await turn.run(prompt)

    def _select_provider(self, providers: Mapping[str, Any]) -> tuple[str, Any]:
        if not providers:
            raise RuntimeError("loop-fold: no provider is mounted; add one under 'providers'")
        wanted = self.config.default_provider
        if wanted is None:
            return next(iter(providers.items()))
        if wanted not in providers:
            raise ValueError(
                f"loop-fold: default_provider {wanted!r} is not mounted; "
                f"mounted providers: {sorted(providers)}"
            )
        return wanted, providers[wanted]


@dataclass(frozen=True)
class _Injection:
    content: str
    role: str
    ephemeral: bool
    hook_name: str
    event: str


class _Turn:
    """One ``execute`` call: the loop plus the little state it carries between steps."""

    def __init__(
        self,
        config: LoopConfig,
        context: Any,
        provider_name: str,
        provider: Any,
        tools: dict[str, Any],
        hooks: Any,
        coordinator: Any | None,
    ) -> None:
        self.config = config
        self.context = context
        self.provider_name = provider_name
        self.provider = provider
        self.tools = tools
        self.hooks = hooks
        self.coordinator = coordinator
        self.iterations = 0
        self._pending: list[_Injection] = []  # waiting for a point where no tool group is open
        self._ephemeral: list[_Injection] = []  # for the next request only, never stored

    async def run(self, prompt: str) -> str:
        await self._emit("execution:start", {"prompt": prompt})
        try:
            status, text = await self._loop(prompt)
        except Exception as error:
            await self._emit("execution:end", {"status": "error", "error": str(error)})
            raise
        await self._emit(
            "orchestrator:complete",
            {"orchestrator": MODULE_ID, "turn_count": self.iterations, "status": status},
        )
        await self._emit("execution:end", {"status": status, "response": text})
        return text

    async def _loop(self, prompt: str) -> tuple[str, str]:
        if self.config.system_prompt and not await self.context.get_messages():
            await self.context.add_message({"role": "system", "content": self.config.system_prompt})

        submitted = await self._settle(
            await self._emit("prompt:submit", {"prompt": prompt}), "prompt:submit"
        )
        if submitted.action == "deny":
            return "denied", f"Prompt denied: {submitted.reason or 'a hook refused it'}"
        if submitted.data and isinstance(submitted.data.get("prompt"), str):
            prompt = submitted.data["prompt"]
        await self._flush_injections()  # context a hook adds for this prompt precedes it
        await self.context.add_message(
            {"role": "user", "content": prompt, "metadata": {"source": "user"}}
        )

        while self.iterations < self.config.max_iterations:
            if self._cancelled():
                return "cancelled", "Execution cancelled."
            self.iterations += 1
            response = await self._request()
            calls = self.provider.parse_tool_calls(response) or []
            await self.context.add_message(_assistant_message(response, calls))
            if not calls:
                text = _text_of(response)
                await self._emit("prompt:complete", {"prompt": prompt, "response": text})
                return "success", text
            for call in calls:
                await self._run_tool(call)
            await self._flush_injections()

        limit = self.config.max_iterations
        await self._emit(
            EVENT_MAX_ITERATIONS, {"max_iterations": limit, "provider": self.provider_name}
        )
        return "max_iterations", (
            f"Stopped after {limit} model calls (max_iterations) without a final answer. "
            "The work so far is in the conversation; raise max_iterations to let it continue."
        )

    # -- provider ----------------------------------------------------------------------

    async def _request(self) -> ChatResponse:
        await self._settle(
            await self._emit(
                "provider:request", {"provider": self.provider_name, "iteration": self.iterations}
            ),
            "provider:request",
        )
        await self._flush_injections()
        # Ephemeral injections ride on this request (and on its refit retry), then vanish.
        extra, self._ephemeral = self._ephemeral, []
        measured = self._measured_capability()
        if measured is not None:
            # The context's own fail-closed error is final: no refit can fit what it refused.
            request = await self._measured_request(measured, extra)
        else:
            messages = await self.context.get_messages_for_request(provider=self.provider)
            request = self._build_request(messages, extra)
        try:
            return await self._send(request)
        except ContextLengthError as error:
            if self.config.overflow == "raise":
                raise  # provider:error is already out; like loop-basic, the session ends here
            return await self._refit_after_overflow(error, extra)

    async def _refit_after_overflow(
        self, error: ContextLengthError, extra: list[_Injection]
    ) -> ChatResponse:
        """Refit the view to what the provider's error said and retry.

        A context that calibrates learns the refused request's measured size as a reading
        (that is what it is), so the refit can use the provider's own limit: the context now
        estimates that view at least as large as the provider measured it. Calibration may
        take a few readings to settle (the ratio's bound, a fixed part that needs three
        readings), so further overflows are refit again while each retry is measured smaller
        than the one before, at most ``MAX_OVERFLOW_REFITS`` times; an overflow that makes no
        progress propagates.
        """
        previous: int | None = None
        for refit in range(1, MAX_OVERFLOW_REFITS + 1):
            learned = await self._learn_from_overflow(error)
            budget, source = self._refit_budget(error, learned=learned)
            if budget is None:
                raise error
            hard_fit = bool(getattr(self.context, "supports_hard_fit", False))
            await self._emit(
                EVENT_OVERFLOW_RETRY,
                {
                    "provider": self.provider_name,
                    "budget": budget,
                    "budget_source": source,
                    "hard_fit": hard_fit,
                    "refit": refit,
                    "error": str(error),
                },
            )
            fit = {"hard_fit": True} if hard_fit else {}
            messages = await self.context.get_messages_for_request(
                token_budget=budget, provider=self.provider, **fit
            )
            try:
                return await self._complete(messages, extra)
            except ContextLengthError as again:
                measured = getattr(again, "requested", None)
                before = getattr(error, "requested", None) if previous is None else previous
                progress = _positive(measured) and _positive(before) and measured < before
                if not learned or not progress or refit == MAX_OVERFLOW_REFITS:
                    raise
                previous, error = measured, again
        raise error  # unreachable: the loop returns or raises

    async def _learn_from_overflow(self, error: ContextLengthError) -> bool:
        """Hand a calibrating context the refused request's measured size as a usage reading;
        True when the context learns from readings (its estimate now covers that request)."""
        requested = getattr(error, "requested", None)
        learn = getattr(self.context, "on_llm_response", None)
        counter = getattr(self.context, "counter", None)
        if not _positive(requested) or not callable(learn):
            return False
        if not isinstance(counter, CalibratedCounter):
            return False
        try:
            await learn({"usage": {"input_tokens": requested}})
        except Exception:
            logger.warning("loop-fold: the context could not learn from an overflow", exc_info=True)
            return False
        return True

    def _measured_capability(self) -> Any | None:
        """The context's measured-request capability, when the provider can count too."""
        if not getattr(self.provider, "supports_request_count", False):
            return None
        if not callable(getattr(self.provider, "count_request", None)):
            return None
        get_capability = getattr(self.coordinator, "get_capability", None)
        if not callable(get_capability):
            return None
        capability = get_capability(MEASURED_REQUEST_VIEW)
        return capability if callable(capability) else None

    async def _measured_request(self, measure: Any, extra: list[_Injection]) -> ChatRequest:
        """One request on the negotiated path: the provider counts each view the context
        offers as the complete request; the counted request, returned with the context's
        transaction committed, is what is dispatched."""

        async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
            request = self._build_request(view, extra)
            return {"dispatch": request, "budget_decision": await self._count(request)}

        async def fit_output(
            view: list[dict[str, Any]], attempt: Mapping[str, Any]
        ) -> dict[str, Any] | None:
            return await self._fit_output(attempt.get("dispatch"))

        result = await measure(
            provider=self.provider, retain_contents=[], count_view=count_view, fit_output=fit_output
        )
        transaction = result.get("transaction")
        request = result.get("dispatch")
        try:
            if not isinstance(request, ChatRequest):
                request = self._build_request(result["base_view"], extra)
            await self._emit(
                EVENT_MEASURED_REQUEST,
                {
                    "provider": self.provider_name,
                    "outcome": result.get("outcome"),
                    "count_calls": result.get("count_calls"),
                    "measured_before": result.get("measured_before"),
                    "measured_after": result.get("measured_after"),
                    "max_output_tokens": request.max_output_tokens,
                },
            )
            if transaction is not None:
                await transaction.commit(is_cancelled=self._cancelled)
        except BaseException:
            if transaction is not None:
                transaction.rollback()
            raise
        return request

    async def _count(self, request: ChatRequest) -> Any:
        return await self.provider.count_request(request)

    async def _fit_output(self, request: Any) -> dict[str, Any] | None:
        """Lower the request's output cap, halving it, until the provider's count of the
        request fits its input limit (at most FIT_OUTPUT_RECOUNTS recounts), or None."""
        if not isinstance(request, ChatRequest):
            return None
        cap = request.max_output_tokens or _provider_output_cap(self.provider)
        if not _positive(cap):
            return None
        calls = 0
        while calls < FIT_OUTPUT_RECOUNTS and cap > 1:
            cap //= 2
            smaller = request.model_copy(update={"max_output_tokens": cap})
            decision = await self._count(smaller)
            calls += 1
            if _fits_its_limit(decision):
                return {"dispatch": smaller, "budget_decision": decision, "count_calls": calls}
        return None

    async def _complete(
        self, messages: list[dict[str, Any]], extra: list[_Injection]
    ) -> ChatResponse:
        return await self._send(self._build_request(messages, extra))

    async def _send(self, request: ChatRequest) -> ChatResponse:
        attempt = 0
        while True:
            try:
                response = await self.provider.complete(request)
            except LLMError as error:
                if error.retryable and attempt < self.config.provider_retries:
                    attempt += 1
                    delay = self.config.retry_backoff * 2 ** (attempt - 1)
                    await self._emit(
                        "provider:retry",
                        {"provider": self.provider_name, "attempt": attempt, "delay": delay}
                        | _error_fields(error),
                    )
                    await asyncio.sleep(delay)
                    continue
                await self._emit(
                    "provider:error", {"provider": self.provider_name} | _error_fields(error)
                )
                raise
            except Exception as error:
                await self._emit(
                    "provider:error", {"provider": self.provider_name} | _error_fields(error)
                )
                raise
            usage = response.usage.model_dump(exclude_none=True) if response.usage else None
            await self._emit(
                "provider:response",
                {
                    "provider": self.provider_name,
                    "usage": usage,
                    "finish_reason": response.finish_reason,
                },
            )
            return response

    def _build_request(
        self, messages: list[dict[str, Any]], extra: list[_Injection]
    ) -> ChatRequest:
        view = list(messages) + [
            {
                "role": i.role,
                "content": i.content,
                "metadata": {"source": "hook", "ephemeral": True},
            }
            for i in extra
        ]
        typed = []
        for index, message in enumerate(view):
            try:
                typed.append(Message.model_validate(message))
            except ValueError as error:
                raise ValueError(
                    f"loop-fold: message {index} of the request is not a valid Amplifier message "
                    f"(role {message.get('role')!r}): {error}"
                ) from error
        specs = [_tool_spec(tool) for tool in self.tools.values()]
        return ChatRequest(messages=typed, tools=specs or None)

    def _refit_budget(
        self, error: ContextLengthError, *, learned: bool = False
    ) -> tuple[int | None, str]:
        """The budget to refit to after an overflow, and where it came from."""
        limit = _budget_from_error(error)
        report = getattr(self.context, "last_report", None)
        if limit is not None and learned:
            # The context learned the measured size. Where its estimate of the refused view
            # now covers it, the limit is the budget as it stands; where calibration's bounds
            # left it short, the limit is scaled by what is still uncovered.
            requested = getattr(error, "requested", None)
            covered = getattr(self.context, "last_view_estimate", None)
            if _positive(requested) and _positive(covered) and covered < requested:
                return max(1, int(limit * covered / requested * _REFIT_SLACK)), "error_scaled"
            return limit, "error_learned"
        if limit is not None:
            # If the provider measured more than the context believed it sent, a refit to
            # the bare limit would return the same view; shrink by the observed under-count.
            requested = getattr(error, "requested", None)
            believed = getattr(report, "tokens_after", None)
            if _positive(requested) and _positive(believed) and requested > believed:
                return max(1, int(limit * believed / requested * _REFIT_SLACK)), "error_scaled"
            if _positive(requested):
                return limit, "error"  # the provider measured no more than we believed
            # Only the limit is known: assume the request was twice as big as estimated.
            return max(1, limit // 2), "error_doubled"
        last_budget = getattr(report, "budget", None)
        if _positive(last_budget):
            return max(1, last_budget // 2), "half_last_budget"
        window = _provider_window(self.provider)
        if window is not None:
            return max(1, window // 2), "half_model_window"
        return None, "none"

    # -- tools -------------------------------------------------------------------------

    async def _run_tool(self, call: ToolCall) -> None:
        base: dict[str, Any] = {
            "tool_name": call.name,
            "tool_input": dict(call.arguments),
            "tool_call_id": call.id,
        }
        pre = await self._settle(await self._emit("tool:pre", base), "tool:pre", call.name)
        if pre.action == "deny":
            reason = pre.reason or "denied by a hook"
            result = ToolResult(
                success=False,
                error={"message": f"Tool '{call.name}' was not run: {reason}", "type": "denied"},
            )
        else:
            tool_input = base["tool_input"]
            if pre.data and isinstance(pre.data.get("tool_input"), dict):
                tool_input = pre.data["tool_input"]
            result = await self._execute_tool(call, tool_input)
        await self.context.add_message(
            {"role": "tool", "tool_call_id": call.id, "content": result.get_serialized_output()}
        )

    async def _execute_tool(self, call: ToolCall, tool_input: dict[str, Any]) -> ToolResult:
        data = {"tool_name": call.name, "tool_input": tool_input, "tool_call_id": call.id}
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            error = {
                "message": f"Unknown tool '{call.name}'. Available tools: {known}.",
                "type": "unknown_tool",
            }
            await self._settle(
                await self._emit("tool:error", data | {"error": error}), "tool:error", call.name
            )
            return ToolResult(success=False, error=error)
        try:
            result = await tool.execute(tool_input)
        except Exception as exc:  # a failing tool becomes an error result, not a dead session
            logger.warning("loop-fold: tool %s raised", call.name, exc_info=True)
            error = {"message": f"Tool '{call.name}' failed: {exc}", "type": type(exc).__name__}
            await self._settle(
                await self._emit("tool:error", data | {"error": error}), "tool:error", call.name
            )
            return ToolResult(success=False, error=error)
        if not isinstance(result, ToolResult):
            result = ToolResult(success=True, output=result)
        post = await self._emit(
            "tool:post", data | {"tool_result": result.safe_hook_presentation()}
        )
        await self._settle(post, "tool:post", call.name)
        return result

    # -- hooks -------------------------------------------------------------------------

    async def _emit(self, event: str, data: dict[str, Any]) -> HookResult:
        if self.hooks is None:
            return HookResult()
        return await self.hooks.emit(event, data)

    async def _settle(
        self, result: HookResult, event: str, hook_name: str = MODULE_ID
    ) -> HookResult:
        """Take the result's injections and resolve an approval request into allow or deny."""
        injections = _injections_of(result, event)
        if self.config.injections == "immediate" and injections:
            await self._store_now(result, injections, hook_name)
        else:
            self._pending.extend(injections)
        if result.action != "ask_user":
            return result
        if self.coordinator is not None:
            try:
                return await self.coordinator.process_hook_result(result, event, hook_name)
            except Exception:
                logger.warning(
                    "loop-fold: approval for %s failed; using its default", event, exc_info=True
                )
        allowed = result.approval_default == "allow"
        return HookResult(
            action="continue" if allowed else "deny",
            reason=result.reason or "approval was required but could not be obtained",
        )

    async def _store_now(
        self, result: HookResult, injections: list[_Injection], hook_name: str
    ) -> None:
        """Store injections at once, where the loop is now (Amplifier's own loops do this)."""
        durable = [i for i in injections if not i.ephemeral]
        self._ephemeral.extend(i for i in injections if i.ephemeral)
        process = getattr(self.coordinator, "process_hook_result", None)
        if durable and result.action == "inject_context" and callable(process):
            # The kernel itself stores them (role, provenance metadata; ephemeral ones it
            # skips), exactly as in production.
            await process(result, durable[0].event, hook_name)
            return
        for injection in durable:
            await self._store(injection)

    async def _flush_injections(self) -> None:
        pending, self._pending = self._pending, []
        for injection in pending:
            if injection.ephemeral:
                self._ephemeral.append(injection)
                continue
            await self._store(injection)

    async def _store(self, injection: _Injection) -> None:
        await self.context.add_message(
            {
                "role": injection.role,
                "content": injection.content,
                "metadata": {
                    "source": "hook",
                    "hook_name": injection.hook_name,
                    "event": injection.event,
                },
            }
        )

    def _cancelled(self) -> bool:
        cancellation = getattr(self.coordinator, "cancellation", None)
        return bool(getattr(cancellation, "is_cancelled", False))


def _injections_of(result: HookResult, event: str) -> list[_Injection]:
    if result.context_injections:
        return [
            _Injection(i.content, i.role, i.ephemeral, i.hook_name, i.event or event)
            for i in result.context_injections
            if i.content
        ]
    if result.action == "inject_context" and result.context_injection:
        return [
            _Injection(
                result.context_injection,
                result.context_injection_role,
                result.ephemeral,
                "unknown",
                event,
            )
        ]
    return []


def _assistant_message(response: ChatResponse, calls: list[ToolCall]) -> dict[str, Any]:
    blocks = [block.model_dump(exclude_none=True) for block in response.content]
    # Plain text is stored as a string; anything richer (thinking signatures, ...) is kept
    # as blocks so it survives byte for byte.
    text_only = all(block.get("type") == "text" for block in blocks)
    content: str | list[dict[str, Any]] = _text_of(response) if text_only else blocks
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "tool": c.name, "arguments": dict(c.arguments)} for c in calls
        ]
    return message


def _text_of(response: ChatResponse) -> str:
    return "\n\n".join(block.text for block in response.content if block.type == "text")


def _tool_spec(tool: Any) -> ToolSpec:
    schema = getattr(tool, "input_schema", None)
    if not schema and callable(getattr(tool, "get_schema", None)):
        schema = tool.get_schema()
    return ToolSpec(
        name=tool.name,
        parameters=dict(schema or {"type": "object", "properties": {}}),
        description=getattr(tool, "description", None),
    )


def _error_fields(error: BaseException) -> dict[str, Any]:
    fields: dict[str, Any] = {"error": str(error), "error_type": type(error).__name__}
    if isinstance(error, LLMError):
        fields |= {"retryable": error.retryable, "status_code": error.status_code}
    return fields


def _budget_from_error(error: BaseException) -> int | None:
    for attribute in _BUDGET_ATTRIBUTES:
        value = getattr(error, attribute, None)
        if _positive(value):
            return value
    for pattern in _BUDGET_PATTERNS:
        match = pattern.search(str(error))
        if match:
            value = int(match.group(1).replace(",", ""))
            if value > 0:
                return value
    return None


def _provider_window(provider: Any) -> int | None:
    """Usable input of the provider's model: context window minus the output reserve."""
    try:
        if callable(getattr(provider, "get_model_info", None)):
            info = provider.get_model_info()
            window, output = info.context_window, info.max_output_tokens
        else:
            defaults = provider.get_info().defaults or {}
            window, output = defaults.get("context_window"), defaults.get("max_output_tokens", 0)
    except Exception:
        logger.debug("loop-fold: provider model info unavailable", exc_info=True)
        return None
    if _positive(window) and isinstance(output, int) and window > output:
        return window - output
    return None


def _provider_output_cap(provider: Any) -> int | None:
    """The provider model's output cap (the reserve ``fit_output`` starts lowering from)."""
    try:
        if callable(getattr(provider, "get_model_info", None)):
            return provider.get_model_info().max_output_tokens
        return (provider.get_info().defaults or {}).get("max_output_tokens")
    except Exception:
        logger.debug("loop-fold: provider model info unavailable", exc_info=True)
        return None


def _positive(value: Any) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fits_its_limit(decision: Any) -> bool:
    """Whether a provider's budget decision puts the request under its input limit, by its
    estimate and by its own count alike."""
    if not isinstance(decision, Mapping) or not _positive(decision.get("input_limit_tokens")):
        return False
    limit = decision["input_limit_tokens"]
    estimated = decision.get("estimated_input_tokens")
    if not isinstance(estimated, int) or isinstance(estimated, bool) or estimated > limit:
        return False
    measurement = decision.get("measurement")
    counted = measurement.get("input_tokens") if isinstance(measurement, Mapping) else None
    return not (isinstance(counted, int) and counted > limit)


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount ``loop-fold`` at the kernel's ``orchestrator`` mount point."""
    orchestrator = FoldLoop(LoopConfig.from_mapping(config))
    await coordinator.mount("orchestrator", orchestrator)
    register = getattr(coordinator, "register_contributor", None)
    if callable(register):
        register("observability.events", MODULE_ID, lambda: list(CUSTOM_EVENTS))
