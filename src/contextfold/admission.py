"""The way in: one message, admitted in order (placeholder, replaced below)."""

from __future__ import annotations

from typing import Any

from .conventions import stamp_timestamp
from .history import Admission, History


def admit(message: Any, history: History) -> Admission:
    return history.prepare(stamp_timestamp(message))
