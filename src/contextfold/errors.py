"""Errors contextfold raises, each saying what was wrong and what to do.

`ContextLengthError` is amplifier-core's own class when the kernel is installed, so an
Amplifier orchestrator that already handles provider overflows handles ours the same way.
The library does not need the kernel: without it, `ContextLengthError` is
`StandaloneContextLengthError`, which takes the same arguments and carries the same
attributes (``provider``, ``model``, ``status_code``, ``retryable``, ``retry_after``,
``delay_multiplier``).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ContextLengthError",
    "MessageValidationError",
    "StandaloneContextLengthError",
    "context_length_error",
]


class StandaloneContextLengthError(Exception):
    """A request exceeds the model's context window; amplifier-core's shape, without it.

    Same keyword-only constructor and attributes as ``amplifier_core.llm_errors.LLMError``
    (whose ``ContextLengthError`` adds nothing), so code written against either reads both.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        delay_multiplier: float = 1.0,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.delay_multiplier = delay_multiplier

    def __repr__(self) -> str:
        parts = [repr(str(self))]
        for name in ("provider", "model", "status_code"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value!r}")
        if self.retryable:
            parts.append("retryable=True")
        if self.retry_after is not None:
            parts.append(f"retry_after={self.retry_after!r}")
        if self.delay_multiplier != 1.0:
            parts.append(f"delay_multiplier={self.delay_multiplier!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


try:
    from amplifier_core.llm_errors import ContextLengthError
except ImportError:  # the plain library: `pip install contextfold` without [amplifier]
    # One name bound to either class: a type checker takes the kernel's, as imported above.
    ContextLengthError = StandaloneContextLengthError  # type: ignore[assignment,misc]


class ConfigError(ValueError):
    """A configuration key or value is invalid. Raised at construction/mount, never later."""


class MessageValidationError(ValueError):
    """A message was refused at admission; history is left exactly as it was.

    Attributes:
        field: dotted path of the offending field, e.g. ``tool_calls[1].id``.
        index: position the message would have had in history (or in the list given to
            ``set_messages``), when known.
    """

    def __init__(self, problem: str, *, field: str, fix: str, index: int | None = None) -> None:
        where = f"message {index}" if index is not None else "message"
        super().__init__(f"{where}: field '{field}': {problem}. {fix}")
        self.field = field
        self.index = index
        self.problem = problem
        self.fix = fix


def context_length_error(
    message: str, *, required_tokens: int, budget: int, model: str | None = None
) -> ContextLengthError:
    """A ContextLengthError carrying the numbers as attributes as well as in its text."""
    error = ContextLengthError(message, provider="context-fold", model=model)
    # The numbers ride on the instance: the kernel's class (not ours to change) has no fields
    # for them.
    error.required_tokens = required_tokens  # type: ignore[attr-defined]
    error.budget = budget  # type: ignore[attr-defined]
    return error
