"""Errors contextfold raises, each saying what was wrong and what to do.

`ContextLengthError` is amplifier-core's own class, so an orchestrator that already
handles provider overflows handles ours the same way.
"""

from __future__ import annotations

from amplifier_core.llm_errors import ContextLengthError

__all__ = ["ConfigError", "ContextLengthError", "MessageValidationError", "context_length_error"]


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
    error.required_tokens = required_tokens  # type: ignore[attr-defined]
    error.budget = budget  # type: ignore[attr-defined]
    return error
