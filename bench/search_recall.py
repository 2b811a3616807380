"""What each part of search's ranking adds: far facts found in the top 5, per ranking.

Replays the eval's corpora through contextfold (its defaults) exactly as `contextfold eval`
does, and counts, for every far fact no view kept or named by id (the facts the eval then
searches for, with the step's task prompt as the query), whether the search's top 5 holds a
message holding it. Three rankings, the later ones adding to the earlier (module constants of
`contextfold.search.ranking`, set for the run):

  words   BM25 over each message's own words only (no task lends a score)
  task    + the earlier tasks whose prompts match lend their messages a score, evenly
  shipped + that score weighted toward the task's end, the closing answer first (the default)

    uv run python bench/search_recall.py [--window 8000] [--seeds 0,1,2,3] [--no-bfcl]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import contextfold.evaluation.runner as runner
import contextfold.search.ranking as ranking
from contextfold.evaluation import (
    CorpusSettings,
    EvalConversation,
    EvalSettings,
    Fact,
    evaluate,
    generate_corpus,
)
from contextfold.evaluation.policies import builtin_policy

RANKINGS: dict[str, dict[str, float]] = {
    "words": {"TASK_WEIGHT": 0.0},
    "task": {"TASK_WEIGHT": ranking.TASK_WEIGHT, "TASK_START_WEIGHT": 1.0, "CLOSING_WEIGHT": 1.0},
    "shipped": {
        "TASK_WEIGHT": ranking.TASK_WEIGHT,
        "TASK_START_WEIGHT": ranking.TASK_START_WEIGHT,
        "CLOSING_WEIGHT": ranking.CLOSING_WEIGHT,
    },
}


def far_found(conversations: Sequence[EvalConversation], window: int) -> tuple[int, int]:
    """(far facts a search found, far facts searched for) over one replay of the corpus."""
    tally = [0, 0]
    scored: Callable[[Fact, Sequence[int]], bool] = runner.found_by_search

    def counted(fact: Fact, hits: Sequence[int]) -> bool:
        found = scored(fact, hits)
        if not fact.near:
            tally[0] += found
            tally[1] += 1
        return found

    runner.found_by_search = counted  # the eval's own scoring, counted on the way
    try:
        evaluate(conversations, [builtin_policy("contextfold")], EvalSettings(windows=(window,)))
    finally:
        runner.found_by_search = scored
    return tally[0], tally[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=8000)
    parser.add_argument("--seeds", default="0,1,2,3", help="long-horizon corpus seeds")
    parser.add_argument("--no-bfcl", action="store_true")
    args = parser.parse_args()
    corpora: dict[str, list[EvalConversation]] = {}
    long_horizon: list[EvalConversation] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        long_horizon += generate_corpus(CorpusSettings(seed=seed))
    corpora[f"long-horizon (seeds {args.seeds})"] = long_horizon
    if not args.no_bfcl:
        from contextfold.evaluation.bfcl import bfcl_available, bfcl_sessions

        if bfcl_available():
            corpora["bfcl-long-context"] = bfcl_sessions()
        else:
            print("bfcl-long-context skipped: the bfcl-eval package is not installed")
    print(f"far facts found by search in its top 5, window {args.window:,} tokens\n")
    defaults = {name: getattr(ranking, name) for name in RANKINGS["shipped"]}
    try:
        for name, constants in RANKINGS.items():
            for key, value in {**defaults, **constants}.items():
                setattr(ranking, key, value)
            cells: list[Any] = []
            for corpus, conversations in corpora.items():
                found, searched = far_found(conversations, args.window)
                share = found / searched if searched else 0.0
                cells.append(f"{corpus}: {found}/{searched} = {share:.0%}")
            print(f"{name:>8}  " + "   ".join(cells), flush=True)
    finally:
        for key, value in defaults.items():
            setattr(ranking, key, value)


if __name__ == "__main__":
    main()
