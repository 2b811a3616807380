"""The eval's report as JSON-ready data: settings, corpora, totals per policy and window
(every `metrics.COLUMNS` value, plus the fact counts behind them), the facts of every step,
and every request of every run."""

from __future__ import annotations

from typing import Any

from .metrics import COLUMNS
from .runner import PRICING_NAMES, REQUEST_FIELDS, EvalReport, Totals
from .scoring import CATEGORIES, Outcome

OUTCOME_NAMES = {
    Outcome.IN_VIEW.value: "in view",
    Outcome.LEDGER_OR_SUMMARY.value: "in the view's ledger or a summary",
    Outcome.RECALL_ID.value: "recoverable: the view names a source's recall id on its own",
    Outcome.SEARCH.value: "recoverable: a search with the task's words finds a source",
    Outcome.LOST.value: "lost",
    Outcome.REFUSED.value: "lost: the request was refused",
}


def report_dict(report: EvalReport) -> dict[str, Any]:
    settings = report.settings
    return {
        "settings": {
            "windows": list(settings.windows),
            "near_turns": settings.rule.near_turns,
            "search_limit": settings.search_limit,
            "counter": "exact:o200k_base",
        },
        "outcome_codes": OUTCOME_NAMES,
        "request_fields": list(REQUEST_FIELDS),
        "policies": [
            {"key": p.key, "label": p.label, "config": dict(getattr(p, "config", {}) or {})}
            for p in report.policies
        ],
        "corpora": [{"name": c, **report.corpus_summary(c)} for c in report.corpora],
        "totals": [totals_dict(t) for t in report.totals],
        "conversations": [
            {
                "corpus": conv.corpus,
                "id": conv.id,
                "messages": len(conv.messages),
                "steps": [s.to_dict() for s in report.steps[(conv.corpus, conv.id)]],
            }
            for conv in report.conversations
        ],
        "runs": [run.to_dict() for run in report.runs],
    }


def totals_dict(totals: Totals) -> dict[str, Any]:
    data: dict[str, Any] = {
        "corpus": totals.corpus,
        "policy": totals.policy,
        "label": totals.label,
        "window": totals.window,
        "sessions": totals.sessions,
        "requests": totals.requests,
        "offers_search": totals.offers_search,
    }
    data.update({column.key: column.value(totals) for column in COLUMNS})
    # Summary requests, part of the costs above: apart.
    data["summary_requests"] = totals.summary_requests
    for name in PRICING_NAMES:
        data[f"summary_cost_{name}_usd"] = totals.summary_cost(name)
    for scope in ("far", "near"):
        data[scope] = {
            "facts": totals.facts(scope),
            **{category: totals.count(scope, category) for category in CATEGORIES},
            "by_recall_id": totals.count_outcome(scope, Outcome.RECALL_ID),
            "by_search": totals.count_outcome(scope, Outcome.SEARCH),
            "refused": totals.count_outcome(scope, Outcome.REFUSED),
        }
    data["tokens_cached"] = totals.tokens_cached
    # How many requests the ``answered_*`` measures cover (every compared policy answered).
    data["answered_requests"] = totals.answered_requests
    return data
