"""contextfold: an honest token budget and a fitted view for LLM agents.

Keep the whole conversation; before every model call, hand the provider a view that
fits the budget, compacting cheapest and least lossy first, never separating a tool
call from its result, never losing history.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .budget import BudgetDecision, derive_budget
from .compaction.relaxation import RELAXATION_ORDER, Relaxation
from .config import ContextConfig
from .errors import ConfigError, ContextLengthError, MessageValidationError
from .events import (
    ALL_EVENTS,
    BUDGET,
    CALIBRATION,
    COMPACTION,
    INGRESS_TRUNCATED,
    REPAIRED,
    REPORT,
    SUMMARY,
)
from .manager import ContextFold, SummaryStats
from .messages import Kind
from .oneshot import afit, fit
from .recall import RecallError
from .repair import Repair
from .report import RequestReport
from .search import SearchHit
from .store import ConcurrentUpdateError, StoreError
from .tokens import (
    CalibratedCounter,
    ExactCounter,
    HeuristicCounter,
    TokenCounter,
    build_counter,
)
from .views import strip_metadata

try:
    __version__ = version("contextfold")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = [
    "ALL_EVENTS",
    "BUDGET",
    "CALIBRATION",
    "COMPACTION",
    "INGRESS_TRUNCATED",
    "RELAXATION_ORDER",
    "REPAIRED",
    "REPORT",
    "SUMMARY",
    "BudgetDecision",
    "CalibratedCounter",
    "ConcurrentUpdateError",
    "ConfigError",
    "ContextConfig",
    "ContextFold",
    "ContextLengthError",
    "ExactCounter",
    "HeuristicCounter",
    "Kind",
    "MessageValidationError",
    "RecallError",
    "Relaxation",
    "Repair",
    "RequestReport",
    "SearchHit",
    "StoreError",
    "SummaryStats",
    "TokenCounter",
    "__version__",
    "afit",
    "build_counter",
    "derive_budget",
    "fit",
    "strip_metadata",
]
