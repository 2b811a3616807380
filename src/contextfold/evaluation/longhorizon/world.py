"""The fictional operations world the long-horizon sessions are made of: ids, look-alikes and
bulky tool output, all drawn from one seeded random generator.

Every value a session mints is unique within it (`Mint`), and look-alikes differ from the
value they imitate in a digit or two (``ORD-48213`` / ``ORD-48231`` / ``ORD-48218``), so a
step that needs one id is surrounded by many that are almost it, as in real operations data.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from functools import partial

FIRST_NAMES = (
    "Dana", "Marek", "Ines", "Tobias", "Priya", "Kofi", "Lena", "Rafael", "Yuki", "Anouk",
    "Sven", "Amara", "Jonas", "Noor", "Elif", "Mateo", "Hana", "Oskar", "Lucia", "Ravi",
)  # fmt: skip
LAST_NAMES = (
    "Whitfield", "Okafor", "Lindqvist", "Moreau", "Castellanos", "Brandt", "Nakamura", "Haddad",
    "Kowalski", "Ferreira", "Osei", "Varga", "Delacroix", "Sorensen", "Achterberg", "Quint",
)  # fmt: skip
COMPANIES = (
    "Bluepeak Outfitters", "Harrow Finch", "Lumen Dental Group", "Crestline Foods",
    "Ostara Labs", "Meridian Print", "Tallgrass Cycles", "Kestrel Analytics", "Vantor Tools",
    "Saltmarsh Coffee", "Northbeam Optics", "Copperleaf Studio",
)  # fmt: skip
DOMAINS = ("mailbox.example", "post.example", "inbox.example", "corpmail.example")
SERVICES = (
    "billing-worker", "label-printer", "rates-api", "inventory-sync", "checkout-gateway",
    "webhook-relay", "returns-portal", "tax-engine",
)  # fmt: skip
WAREHOUSES = ("EU-WEST-2", "EU-WEST-7", "US-EAST-4", "US-CENTRAL-1", "APAC-SE-3", "EU-NORTH-5")
CARRIERS = ("Parcelnet", "SwiftRoute", "Nordpost", "BlueLine Freight")
CURRENCIES = ("EUR", "USD", "GBP")
MONTHS = ("2024-02", "2024-03", "2024-04", "2024-05")
MONTH_NAMES = {"2024-02": "February", "2024-03": "March", "2024-04": "April", "2024-05": "May"}
ORDER_STATUSES = (
    "delivered",
    "delivered",
    "delivered",
    "in transit",
    "returned",
    "awaiting pickup",
)
SCAN_EVENTS = (
    "accepted at origin hub", "departed origin hub", "arrived at sort centre",
    "processed at sort centre", "loaded for line haul", "arrived at regional depot",
    "out for delivery", "delivery attempted", "held at depot", "customs cleared",
)  # fmt: skip
LOG_LINES = (
    "retrying upstream call", "connection reset by peer", "queue depth above threshold",
    "payment provider timeout", "stale cache entry evicted", "lock wait exceeded",
    "schema validation failed", "duplicate delivery suppressed", "batch committed",
)  # fmt: skip
HEX = "0123456789abcdef"


class Mint:
    """Unique values for one session, and look-alikes of them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._used: set[str] = set()

    def unique(self, make: Callable[[], str]) -> str:
        for _ in range(10_000):
            value = make()
            if value not in self._used:
                self._used.add(value)
                return value
        raise RuntimeError("the id space is exhausted; use fewer or longer ids")

    def _numbered_email(self, local: str) -> str:
        return f"{local}{self.rng.randint(1, 99)}@{self.rng.choice(DOMAINS)}"

    def number(self, prefix: str, digits: int) -> str:
        low, high = 10 ** (digits - 1), 10**digits - 1
        return self.unique(lambda: f"{prefix}{self.rng.randint(low, high)}")

    def hex(self, prefix: str, length: int) -> str:
        return self.unique(lambda: prefix + "".join(self.rng.choices(HEX, k=length)))

    def code(self, prefix: str, length: int) -> str:
        alphabet = string.ascii_uppercase + string.digits
        return self.unique(
            lambda: (
                prefix
                + self.rng.choice(string.digits)
                + "".join(self.rng.choices(alphabet, k=length - 1))
            )
        )

    def amount(self, low: int = 40, high: int = 4_800) -> str:
        return self.unique(lambda: f"{self.rng.randint(low, high)}.{self.rng.randint(0, 99):02d}")

    def date(self, month: str) -> str:
        return f"{month}-{self.rng.randint(1, 28):02d}"

    def lookalikes(self, value: str, count: int) -> list[str]:
        """``count`` new values differing from ``value`` in one or two of its digits (or
        hex letters), or by two neighbouring digits swapped."""
        positions = _last_run(value, str.isdigit) or _last_run(value, lambda c: c in HEX)
        found: list[str] = []
        for _ in range(count * 50):
            if len(found) == count:
                break
            chars = list(value)
            move = self.rng.random()
            if move < 0.35 and len(positions) > 1:
                k = self.rng.randrange(len(positions) - 1)
                a, b = positions[k], positions[k + 1]
                chars[a], chars[b] = chars[b], chars[a]
            else:
                for position in self.rng.sample(positions, min(len(positions), 1 + (move > 0.8))):
                    pool = string.digits if chars[position].isdigit() else HEX
                    chars[position] = self.rng.choice(pool.replace(chars[position], ""))
            candidate = "".join(chars)
            if candidate != value and candidate not in self._used:
                self._used.add(candidate)
                found.append(candidate)
        return found

    def person(self) -> tuple[str, str]:
        """A full name and an email address for it, both new."""
        while True:
            first, last = self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)
            name = f"{first} {last}"
            if name in self._used:
                continue
            self._used.add(name)
            domain = self.rng.choice(DOMAINS)
            email = self.unique(partial(str, f"{first.lower()}.{last.lower()}@{domain}"))
            return name, email

    def similar_people(self, name: str, count: int) -> list[tuple[str, str]]:
        """People whose names look like ``name`` (same first or last name), with emails."""
        first, last = name.split(" ", 1)
        people: list[tuple[str, str]] = []
        for _ in range(count * 20):
            if len(people) == count:
                break
            if self.rng.random() < 0.5:
                other = f"{first} {self.rng.choice(LAST_NAMES)}"
            else:
                other = f"{self.rng.choice(FIRST_NAMES)} {last}"
            if other in self._used:
                continue
            self._used.add(other)
            o_first, o_last = other.split(" ", 1)
            style = self.rng.random()
            local = (
                f"{o_first[0].lower()}.{o_last.lower()}"
                if style < 0.5
                else f"{o_first.lower()}{o_last.lower()[:3]}"
            )
            email = self.unique(partial(self._numbered_email, local))
            people.append((other, email))
        return people


def _last_run(value: str, member: Callable[[str], bool]) -> list[int]:
    """Positions of the last run of ``member`` characters (an id's serial, not its year)."""
    end = len(value)
    while end and not member(value[end - 1]):
        end -= 1
    start = end
    while start and member(value[start - 1]):
        start -= 1
    return list(range(start, end))


def table(header: str, rows: list[str]) -> str:
    """Rows of a listing, as a tool prints them."""
    return "\n".join([header, *rows])


def filler_rows(rng: random.Random, count: int, make: Callable[[int], str]) -> list[str]:
    return [make(i) for i in range(count)]


def timestamp(rng: random.Random, date: str) -> str:
    return f"{date}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
