"""The session being written: messages in the shape agents record, turn by turn."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

from .world import LOG_LINES, MONTHS, SERVICES, Mint, table, timestamp

SYSTEM_PROMPT = (
    "You are the operations agent of a logistics and billing team. Work each request to the "
    "end with the tools you have: customers, orders, shipments, files and exports, "
    "incidents and logs, invoices and payments, refunds, tickets, email and notes. Look "
    "things up instead of guessing, and keep your replies short."
)


class Script:
    """The session being written: messages, and counts of turns and calls."""

    def __init__(self, rng: random.Random, mint: Mint) -> None:
        self.rng = rng
        self.mint = mint
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        self.turns = 0
        self._calls = 0

    def prompt(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text, "metadata": {"source": "user"}})

    def step(self, text: str, *calls: tuple[str, dict[str, Any], str]) -> None:
        tool_calls = []
        results = []
        for name, arguments, result in calls:
            self._calls += 1
            call_id = f"call_{self._calls:04d}"
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
            results.append({"role": "tool", "tool_call_id": call_id, "content": result})
        self.messages.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        self.messages.extend(results)
        self.turns += 1

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})
        self.turns += 1

    def pad(self, until: int, steps: Iterator[Callable[[], None]]) -> None:
        """Take padding steps until one turn is left for the answer (generic activity
        listings once ``steps`` runs out)."""
        while self.turns < until - 1:
            step = next(steps, None)
            if step is None:
                step = self._activity
            step()

    def _activity(self) -> None:
        rng, mint = self.rng, self.mint
        page = rng.randint(2, 9)
        rows = [
            f"{mint.hex('evt-', 8)}  {timestamp(rng, mint.date(rng.choice(MONTHS)))}  "
            f"{rng.choice(SERVICES):<16} {rng.choice(LOG_LINES)}"
            for _ in range(rng.randint(18, 30))
        ]
        self.step(
            "Checking the activity feed for anything related.",
            ("list_activity", {"page": page}, table(f"activity, page {page}", rows)),
        )
