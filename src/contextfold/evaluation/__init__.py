"""``contextfold eval``'s library: a scored counterfactual replay of recorded sessions.

Every conversation is replayed under every policy in every window; at each model request
the eval scores where each fact the next step needs stands in the view sent (in view, in
the view's ledger or summary, recoverable by recall id or search, lost) and measures tokens
sent, prefix-cache share, refusals and views over the window by exact o200k recount.

    from contextfold.evaluation import evaluate, default_policies, generate_corpus
    report = evaluate(generate_corpus(), default_policies())

See docs/eval.md for the fact rule and the categories.
"""

from __future__ import annotations

from .baselines import NaiveDropOldest, ObservationMasking
from .context_simple import ContextSimple
from .facts import Fact, FactRule, Step, find_steps
from .fold_policy import ContextFoldPolicy
from .longhorizon import CORPUS_NAME, CorpusSettings, generate_corpus, generate_session
from .metrics import COLUMNS, Column
from .policies import (
    BUILTIN_POLICIES,
    SUMMARIZE_LADDER,
    builtin_policy,
    config_policy,
    default_policies,
)
from .policy import Policy, PolicySession, Refusal
from .runner import (
    DEFAULT_WINDOWS,
    EvalConversation,
    EvalInputError,
    EvalReport,
    EvalSettings,
    RequestRecord,
    Run,
    Totals,
    evaluate,
    evaluate_async,
)
from .scoring import CATEGORIES, Outcome, View
from .server_editing import ServerClearToolUses

__all__ = [
    "BUILTIN_POLICIES",
    "CATEGORIES",
    "COLUMNS",
    "CORPUS_NAME",
    "DEFAULT_WINDOWS",
    "SUMMARIZE_LADDER",
    "Column",
    "ContextFoldPolicy",
    "ContextSimple",
    "CorpusSettings",
    "EvalConversation",
    "EvalInputError",
    "EvalReport",
    "EvalSettings",
    "Fact",
    "FactRule",
    "NaiveDropOldest",
    "ObservationMasking",
    "Outcome",
    "Policy",
    "PolicySession",
    "Refusal",
    "RequestRecord",
    "Run",
    "ServerClearToolUses",
    "Step",
    "Totals",
    "View",
    "builtin_policy",
    "config_policy",
    "default_policies",
    "evaluate",
    "evaluate_async",
    "find_steps",
    "generate_corpus",
    "generate_session",
]
