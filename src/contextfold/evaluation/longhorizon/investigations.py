"""Investigations: dig one finding out of bulky output full of look-alike ids.

Each returns its finding (the values a follow-up will need) and takes turns until ``until``
(its share of the session), padding with checks of the look-alikes it meets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .script import Script
from .world import (
    CARRIERS,
    COMPANIES,
    CURRENCIES,
    LOG_LINES,
    MONTH_NAMES,
    MONTHS,
    ORDER_STATUSES,
    SCAN_EVENTS,
    SERVICES,
    WAREHOUSES,
    table,
    timestamp,
)

_CHARGES = ("freight", "storage", "handling", "insurance", "customs")
_PAY_STATES = ("authorized", "captured", "settled", "reconciled")


def _lost_order(s: Script, until: int) -> dict[str, Any]:
    rng, mint = s.rng, s.mint
    name, email = mint.person()
    company = rng.choice(COMPANIES)
    month = rng.choice(MONTHS)
    customer_id = mint.number("CUS-", 5)
    order_id = mint.number("ORD-", 5)
    amount, currency = mint.amount(), rng.choice(CURRENCIES)
    tracking = mint.code("TRK", 9)
    warehouse, carrier = rng.choice(WAREHOUSES), rng.choice(CARRIERS)
    placed = mint.date(month)
    manifest = mint.unique(
        lambda: f"/srv/manifests/{warehouse.lower()}/{placed}/batch-{rng.randint(100, 999)}.csv"
    )
    s.prompt(
        f"{name} from {company} wrote in: a parcel they ordered in {MONTH_NAMES[month]} never "
        "arrived. Find out which order it is and what happened to it."
    )
    people = [(name, email, customer_id)] + [
        (other, mail, mint.number("CUS-", 5))
        for other, mail in mint.similar_people(name, rng.randint(4, 7))
    ]
    rng.shuffle(people)
    s.step(
        "Looking up the customer first.",
        (
            "find_customer",
            {"name": name},
            table(
                "customer_id  name                     email                          since",
                [
                    f"{c}  {n:<24} {m:<30} {mint.date('2023-0' + str(rng.randint(1, 9)))}"
                    for n, m, c in people
                ],
            ),
        ),
    )
    candidates = mint.lookalikes(order_id, rng.randint(8, 12))
    others = candidates + [mint.number("ORD-", 5) for _ in range(rng.randint(12, 18))]
    rows = {oid: (mint.date(month), mint.amount(), rng.choice(ORDER_STATUSES)) for oid in others}
    rows[order_id] = (placed, amount, "lost in transit")
    listing = list(rows)
    rng.shuffle(listing)
    half = len(listing) // 2
    pages = [listing[:half], listing[half:]]

    def order_page(ids: list[str], page: int) -> str:
        lines = [
            f"{oid}  {rows[oid][0]}  {rows[oid][1]:>9} {currency}  {rows[oid][2]:<16} "
            f"{rng.choice(WAREHOUSES)}"
            for oid in ids
        ]
        return table(f"orders of {customer_id} in {month}, page {page} of 2", lines)

    s.step(
        f"Listing the orders of {customer_id} from {MONTH_NAMES[month]}.",
        ("search_orders", {"customer_id": customer_id, "month": month}, order_page(pages[0], 1)),
    )
    padding = (_order_check(s, oid, currency) for oid in candidates)
    s.pad(until - 4, padding)  # five turns follow: two pages, the record, tracking, answer
    s.step(
        "Next page of orders.",
        (
            "search_orders",
            {"customer_id": customer_id, "month": month, "page": 2},
            order_page(pages[1], 2),
        ),
    )
    s.step(
        f"{order_id} is marked lost in transit; opening it.",
        (
            "get_order",
            {"order_id": order_id},
            _order_record(
                s,
                order_id,
                placed,
                amount,
                currency,
                "lost in transit",
                tracking,
                warehouse,
                carrier,
                manifest,
            ),
        ),
    )
    events = [
        f"{timestamp(rng, mint.date(month))}  {mint.code('FAC-', 5)}  {rng.choice(SCAN_EVENTS)}"
        for _ in range(rng.randint(16, 28))
    ]
    s.step(
        "Tracking the shipment.",
        (
            "track_shipment",
            {"tracking_number": tracking},
            table(f"{carrier} {tracking}", [*events, "no scan since; case opened with carrier"]),
        ),
    )
    s.step(
        "Reading the warehouse manifest for that batch.",
        ("read_file", {"path": manifest}, _manifest(s, order_id, month)),
    )
    s.pad(until, iter(()))
    if rng.random() < 0.5:
        s.answer(
            f"Found it: order {order_id}, placed {placed}, is lost in transit with {carrier}. "
            f"The customer paid {amount} {currency}."
        )
    else:
        s.answer("Found it: the order is lost in transit; the carrier has no scan since dispatch.")
    return {
        "kind": "lost_order",
        "email": email,
        "order_id": order_id,
        "amount": amount,
        "currency": currency,
        "tracking": tracking,
    }


def _order_check(s: Script, order_id: str, currency: str) -> Callable[[], None]:
    def step() -> None:
        rng, mint = s.rng, s.mint
        status = rng.choice(ORDER_STATUSES)
        record = _order_record(
            s, order_id, mint.date(rng.choice(MONTHS)), mint.amount(), currency, status,
            mint.code("TRK", 9), rng.choice(WAREHOUSES), rng.choice(CARRIERS), None,
        )  # fmt: skip
        s.step(
            f"Checking {order_id}, which looks close.",
            ("get_order", {"order_id": order_id}, record),
        )

    return step


def _order_record(
    s: Script,
    order_id: str,
    placed: str,
    amount: str,
    currency: str,
    status: str,
    tracking: str,
    warehouse: str,
    carrier: str,
    manifest: str | None,
) -> str:
    rng, mint = s.rng, s.mint
    items = [
        f"  {mint.code('SKU-', 6)}  qty {rng.randint(1, 9)}  {mint.amount(5, 400)} {currency}  "
        f"bin {rng.choice('ABCDEFGH')}{rng.randint(10, 99)}-{rng.randint(1, 40)}"
        for _ in range(rng.randint(6, 14))
    ]
    head = [
        f"order {order_id}",
        f"placed: {placed}",
        f"status: {status}",
        f"total: {amount} {currency}",
        f"carrier: {carrier}, tracking {tracking}",
        f"warehouse: {warehouse}",
    ]
    if manifest:
        head.append(f"manifest: {manifest}")
    return "\n".join([*head, "items:", *items])


def _manifest(s: Script, order_id: str, month: str) -> str:
    rng, mint = s.rng, s.mint
    ids = [order_id, *mint.lookalikes(order_id, 6)] + [mint.number("ORD-", 5) for _ in range(30)]
    rng.shuffle(ids)
    rows = [
        f"{oid},{mint.date(month)},{mint.code('SKU-', 6)},"
        f"{rng.randint(1, 30)}.{rng.randint(0, 9)}kg,{rng.choice(('packed', 'loaded', 'held'))}"
        for oid in ids
    ]
    return table("order_id,packed_on,sku,weight,state", rows)


def _incident(s: Script, until: int) -> dict[str, Any]:
    rng, mint = s.rng, s.mint
    service = rng.choice(SERVICES)
    month = rng.choice(MONTHS)
    started = mint.date(month)
    incident = mint.number("INC-", 5)
    url = f"https://status.ops.example/incidents/{incident}"
    code = mint.number("E", 4)
    host = f"{service}-{rng.randint(1, 9)}"
    log_path = mint.unique(lambda: f"/var/log/{service}/{host}-{started}.log")
    on_call, on_call_email = mint.person()
    s.prompt(
        f"The {service} service threw errors for a while in {MONTH_NAMES[month]}. Find the "
        "incident, the error code behind it and the log file that shows it."
    )
    candidates = mint.lookalikes(incident, rng.randint(8, 12))
    rows = [
        f"{inc}  {mint.date(month)}  {rng.choice(('sev3', 'sev2', 'sev4'))}  "
        f"{rng.choice(SERVICES):<16} {rng.choice(LOG_LINES)}"
        for inc in candidates + [mint.number("INC-", 5) for _ in range(rng.randint(8, 14))]
    ]
    rows.append(f"{incident}  {started}  sev2  {service:<16} error rate above 20% for 47 minutes")
    rng.shuffle(rows)
    s.step(
        f"Listing incidents for {service}.",
        (
            "list_incidents",
            {"service": service, "month": month},
            table("incident  opened  sev  service  summary", rows),
        ),
    )

    def check(other: str) -> Callable[[], None]:
        def step() -> None:
            s.step(
                f"Looking at {other} in case it is the same outage.",
                ("get_incident", {"incident_id": other}, _incident_record(s, other, month, None)),
            )

        return step

    s.pad(until - 2, (check(other) for other in candidates))
    s.step(
        f"{incident} matches the service and the error burst.",
        (
            "get_incident",
            {"incident_id": incident},
            _incident_record(
                s, incident, month, (url, code, log_path, on_call, on_call_email, started)
            ),
        ),
    )
    codes = [code, *mint.lookalikes(code, 4)]
    lines = [
        f"{timestamp(rng, started)} {rng.choice(('ERROR', 'WARN', 'INFO'))} {mint.hex('req-', 10)} "
        f"{rng.choice(codes)} {rng.choice(LOG_LINES)}"
        for _ in range(rng.randint(28, 44))
    ]
    s.step(
        "Reading the log around the start of the incident.",
        ("query_logs", {"path": log_path, "date": started, "level": "ERROR"}, "\n".join(lines)),
    )
    s.pad(until, iter(()))
    s.answer(
        f"It is {incident}: {code} errors, see {log_path}."
        if rng.random() < 0.5
        else "Found the incident and the failing log; the error code repeats throughout."
    )
    return {
        "kind": "incident",
        "url": url,
        "code": code,
        "log_path": log_path,
        "on_call_email": on_call_email,
        "incident": incident,
    }


def _incident_record(
    s: Script, incident: str, month: str, facts: tuple[str, str, str, str, str, str] | None
) -> str:
    rng, mint = s.rng, s.mint
    if facts is None:
        service = rng.choice(SERVICES)
        day = mint.date(month)
        facts = (
            f"https://status.ops.example/incidents/{incident}",
            mint.number("E", 4),
            f"/var/log/{service}/{service}-{rng.randint(1, 9)}-{day}.log",
            *mint.person(),
            day,
        )
    url, code, log_path, on_call, email, started = facts
    timeline = [
        f"  {timestamp(rng, started)}  {rng.choice(SCAN_EVENTS + LOG_LINES)}"
        for _ in range(rng.randint(8, 16))
    ]
    return "\n".join(
        [
            f"incident {incident}",
            f"page: {url}",
            f"started: {started}",
            f"error code: {code}",
            f"log: {log_path}",
            f"on call: {on_call} <{email}>",
            "timeline:",
            *timeline,
        ]
    )


def _double_charge(s: Script, until: int) -> dict[str, Any]:
    rng, mint = s.rng, s.mint
    company = rng.choice(COMPANIES)
    month = rng.choice(MONTHS)
    account = mint.number("ACC-", 6)
    _contact, billing_email = mint.person()
    invoice = mint.number(f"INV-{month[:4]}-", 5)
    amount = mint.amount()
    payment, duplicate = mint.hex("PAY-", 8), mint.hex("PAY-", 8)
    s.prompt(
        f"{company} says they were billed twice in {MONTH_NAMES[month]}. Find the invoice "
        "and the payment that was taken twice."
    )
    accounts = [(account, company, billing_email)] + [
        (
            mint.number("ACC-", 6),
            f"{company.split()[0]} {rng.choice(('Group', 'Ltd', 'Holdings', 'Retail'))}",
            mail,
        )
        for _other, mail in (mint.person() for _ in range(rng.randint(3, 6)))
    ]
    rng.shuffle(accounts)
    s.step(
        "Finding the account.",
        (
            "find_account",
            {"company": company},
            table(
                "account  company  billing contact", [f"{a}  {c:<28} {m}" for a, c, m in accounts]
            ),
        ),
    )
    candidates = mint.lookalikes(invoice, rng.randint(8, 12))
    invoices = {
        inv: (mint.amount(), rng.choice(("paid", "paid", "open", "credited"))) for inv in candidates
    }
    invoices.update(
        {mint.number(f"INV-{month[:4]}-", 5): (mint.amount(), "paid") for _ in range(10)}
    )
    invoices[invoice] = (amount, "paid (2 payments)")
    listing = list(invoices)
    rng.shuffle(listing)
    s.step(
        f"Listing invoices of {account} for {month}.",
        (
            "list_invoices",
            {"account_id": account, "month": month},
            table(
                "invoice  issued  amount  state",
                [
                    f"{i}  {mint.date(month)}  {invoices[i][0]:>9}  {invoices[i][1]}"
                    for i in listing
                ],
            ),
        ),
    )

    def check(other: str) -> Callable[[], None]:
        def step() -> None:
            pays = [(mint.hex("PAY-", 8), invoices[other][0])]
            s.step(
                f"Checking the payments on {other}.",
                ("get_invoice", {"invoice_id": other}, _invoice_record(s, other, month, pays)),
            )

        return step

    s.pad(until - 2, (check(other) for other in candidates))
    s.step(
        f"{invoice} shows two payments.",
        (
            "get_invoice",
            {"invoice_id": invoice},
            _invoice_record(s, invoice, month, [(payment, amount), (duplicate, amount)]),
        ),
    )
    s.step(
        f"Confirming {duplicate} is the later, duplicate charge.",
        ("get_payment", {"payment_id": duplicate}, _payment_record(s, duplicate, amount, month)),
    )
    s.pad(until, iter(()))
    s.answer(
        f"Invoice {invoice} was paid twice; {duplicate} is the duplicate."
        if rng.random() < 0.5
        else "Found the invoice paid twice and the duplicate payment."
    )
    return {
        "kind": "double_charge",
        "invoice": invoice,
        "duplicate": duplicate,
        "amount": amount,
        "billing_email": billing_email,
    }


def _invoice_record(s: Script, invoice: str, month: str, payments: list[tuple[str, str]]) -> str:
    rng, mint = s.rng, s.mint
    lines = [
        f"  {mint.code('LN-', 5)}  {rng.choice(_CHARGES)}  {mint.amount(5, 900)}"
        for _ in range(rng.randint(8, 16))
    ]
    pays = [f"  {pid}  {timestamp(rng, mint.date(month))}  {amt}" for pid, amt in payments]
    return "\n".join([f"invoice {invoice}", "lines:", *lines, "payments:", *pays])


def _payment_record(s: Script, payment: str, amount: str, month: str) -> str:
    rng, mint = s.rng, s.mint
    trail = [
        f"  {timestamp(rng, mint.date(month))}  {mint.hex('auth-', 8)}  {rng.choice(_PAY_STATES)}"
        for _ in range(rng.randint(8, 14))
    ]
    return "\n".join([f"payment {payment}", f"amount: {amount}", "trail:", *trail])


def _export_file(s: Script, until: int) -> dict[str, Any]:
    rng, mint = s.rng, s.mint
    warehouse = rng.choice(WAREHOUSES)
    month = rng.choice(MONTHS)
    day = mint.date(month)
    folder = f"/srv/exports/{warehouse.lower()}"
    path = mint.unique(lambda: f"{folder}/{day}/orders-{rng.randint(100, 999)}.csv")
    checksum = mint.hex("sha256:", 16)
    rows = rng.randint(1_200, 9_800)
    s.prompt(
        f"Find the order export of the {warehouse} warehouse for {day} and check how many rows "
        "it has."
    )
    siblings = [
        mint.unique(lambda: f"{folder}/{mint.date(month)}/orders-{rng.randint(100, 999)}.csv")
        for _ in range(rng.randint(26, 38))
    ] + [path]
    rng.shuffle(siblings)
    s.step(
        f"Listing {folder}.",
        (
            "list_files",
            {"directory": folder},
            table(f"{len(siblings)} files", [f"{p}  {rng.randint(80, 9000)} KB" for p in siblings]),
        ),
    )

    def check(other: str) -> Callable[[], None]:
        def step() -> None:
            info = _file_info(s, other, mint.hex("sha256:", 16), rng.randint(1_200, 9_800), month)
            s.step(f"Checking {other}.", ("file_info", {"path": other}, info))

        return step

    near_misses = [p for p in siblings if p != path][:12]
    s.pad(until - 1, (check(other) for other in near_misses))
    s.step(
        "This one is the export for that day.",
        ("file_info", {"path": path}, _file_info(s, path, checksum, rows, month)),
    )
    s.pad(until, iter(()))
    s.answer(
        f"The export is {path} with {rows} rows."
        if rng.random() < 0.5
        else "Found the export; its row count is in the file info."
    )
    return {"kind": "export_file", "path": path, "checksum": checksum, "rows": rows}


def _file_info(s: Script, path: str, checksum: str, rows: int, month: str) -> str:
    rng, mint = s.rng, s.mint
    columns = [
        f"  {name}: {rng.choice(('text', 'int', 'decimal', 'date'))}"
        for name in ("order_id", "sku", "qty", "price", "packed_on", "state", "bin", "carrier")
    ]
    sample = [
        f"  {mint.number('ORD-', 5)},{mint.code('SKU-', 6)},{rng.randint(1, 9)}"
        for _ in range(rng.randint(8, 14))
    ]
    return "\n".join(
        [
            f"path: {path}",
            f"checksum: {checksum}",
            f"rows: {rows}",
            f"modified: {timestamp(rng, mint.date(month))}",
            "columns:",
            *columns,
            "sample:",
            *sample,
        ]
    )


INVESTIGATIONS: dict[str, Callable[[Script, int], dict[str, Any]]] = {
    "lost_order": _lost_order,
    "incident": _incident,
    "double_charge": _double_charge,
    "export_file": _export_file,
}
