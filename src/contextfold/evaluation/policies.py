"""The policies the eval knows by name, and contextfold configurations as policies.

``BUILTIN_POLICIES`` maps each ``--policy`` name to a maker of the policy; `default_policies`
is the set ``contextfold eval`` runs when none is named. Adding a policy is one class (see
`policy.Policy`) and one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .baselines import NaiveDropOldest, ObservationMasking
from .context_simple import ContextSimple
from .fold_policy import ContextFoldPolicy
from .policy import Policy
from .server_editing import ServerClearToolUses

# The summarize ladder the demo runs: summarize ahead of text truncation, drop_oldest still
# the last resort; the rung's own settings are its defaults (the summary follows the budget).
SUMMARIZE_LADDER: tuple[str, ...] = (
    "strip_thinking",
    "summarize",
    "truncate_tool_results",
    "drop_oldest",
)


def summarize_ladder_policy() -> ContextFoldPolicy:
    return ContextFoldPolicy(
        key="summarize",
        label="contextfold, summarize ladder",
        config={"strategies": list(SUMMARIZE_LADDER)},
    )


def threshold_planner_policy() -> ContextFoldPolicy:
    """contextfold's defaults with the threshold planner: a pass at the trigger, down to the
    target (the defaults before the cost planner, `compaction.cost_plan`, became them)."""
    return ContextFoldPolicy(
        key="threshold", label="contextfold, threshold planner", config={"planner": "threshold"}
    )


BUILTIN_POLICIES: dict[str, Callable[[], Policy]] = {
    "naive": NaiveDropOldest,
    "masking": ObservationMasking,
    "context-simple": ContextSimple,
    "clear-tool-uses": ServerClearToolUses,
    "contextfold": ContextFoldPolicy,
    "summarize": summarize_ladder_policy,
    "threshold": threshold_planner_policy,
}


def builtin_policy(name: str) -> Policy:
    """The built-in policy ``name``; ValueError naming the known ones otherwise."""
    maker = BUILTIN_POLICIES.get(name)
    if maker is None:
        raise ValueError(
            f"unknown policy {name!r}; the built-in policies are {', '.join(BUILTIN_POLICIES)}"
        )
    return maker()


def default_policies() -> list[Policy]:
    """Every built-in policy, baselines first."""
    return [maker() for maker in BUILTIN_POLICIES.values()]


def config_policy(
    key: str, config: Mapping[str, Any], label: str | None = None
) -> ContextFoldPolicy:
    """contextfold with ``config`` (a mount plan's ``config`` mapping) as a policy."""
    return ContextFoldPolicy(key=key, label=label or f"contextfold, {key}", config=config)
