"""Follow-ups: act on an earlier finding, which the prompt describes and never quotes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .script import Script
from .world import MONTHS, table, timestamp

_STATES = ("pending", "done", "failed", "queued")


def _refund(s: Script, until: int, f: dict[str, Any]) -> None:
    mint = s.mint
    s.prompt(
        "Please refund the customer whose parcel went missing (the order you tracked down "
        "earlier) for the full amount they paid, and email them a confirmation."
    )
    refund = mint.number("RF-", 6)
    s.step(
        "Creating the refund for the lost order.",
        (
            "create_refund",
            {
                "order_id": f["order_id"],
                "amount": f["amount"],
                "currency": f["currency"],
                "reason": "lost in transit",
            },
            f"refund {refund} created: {f['amount']} {f['currency']}, state pending approval",
        ),
    )
    s.pad(until - 1, _listings(s, "list_refunds", "RF-", refund, "refund"))
    s.step(
        "Emailing the customer.",
        (
            "send_email",
            {
                "to": f["email"],
                "subject": f"Your refund {refund}",
                "body": f"We refunded {f['amount']} {f['currency']} for your lost parcel.",
            },
            f"queued {mint.hex('MSG-', 6)}",
        ),
    )
    s.answer(f"Refund {refund} is pending approval and the customer has been emailed.")
    f["refund"] = refund


def _ticket(s: Script, until: int, f: dict[str, Any]) -> None:
    mint = s.mint
    s.prompt(
        "Open an engineering ticket for the outage you investigated earlier: link the "
        "incident page, cite the error code and the log file, and assign whoever was on call."
    )
    ticket = mint.number("ENG-", 4)
    s.step(
        "Opening the ticket.",
        (
            "create_ticket",
            {
                "title": f"Errors {f['code']} in production",
                "incident_url": f["url"],
                "error_code": f["code"],
                "log_path": f["log_path"],
                "assignee": f["on_call_email"],
            },
            f"ticket {ticket} created",
        ),
    )
    s.pad(until, _listings(s, "list_tickets", "ENG-", ticket, "ticket"))
    s.answer(f"Ticket {ticket} is open and assigned.")
    f["ticket"] = ticket


def _void(s: Script, until: int, f: dict[str, Any]) -> None:
    mint = s.mint
    s.prompt(
        "For the customer that was billed twice, void the duplicate payment you found, mark "
        "the invoice corrected, and tell their billing contact."
    )
    s.step(
        "Voiding the duplicate payment.",
        (
            "void_payment",
            {"payment_id": f["duplicate"], "amount": f["amount"]},
            f"payment voided; {mint.hex('rev-', 8)} issued",
        ),
    )
    s.step(
        "Marking the invoice corrected.",
        ("update_invoice", {"invoice_id": f["invoice"], "state": "corrected"}, "invoice updated"),
    )
    s.pad(until - 1, _listings(s, "list_reversals", "rev-", None, "reversal"))
    s.step(
        "Telling the billing contact.",
        (
            "send_email",
            {
                "to": f["billing_email"],
                "subject": "Duplicate charge reversed",
                "body": "The second charge has been voided.",
            },
            f"queued {mint.hex('MSG-', 6)}",
        ),
    )
    s.answer("The duplicate payment is voided and the invoice corrected.")


def _reconcile(s: Script, until: int, f: dict[str, Any]) -> None:
    mint = s.mint
    s.prompt(
        "The export file you located before: check it has not changed since (compare its "
        "checksum) and archive it."
    )
    s.step(
        "Comparing the checksum.",
        ("verify_checksum", {"path": f["path"], "expected": f["checksum"]}, "match"),
    )
    s.pad(until - 1, _listings(s, "list_archive", "arc-", None, "archive entry"))
    s.step(
        "Archiving it.",
        (
            "archive_file",
            {"path": f["path"], "rows": f["rows"]},
            f"archived as {mint.hex('arc-', 8)}",
        ),
    )
    s.answer("The export is unchanged and archived.")


FOLLOW_UPS: dict[str, Callable[[Script, int, dict[str, Any]], None]] = {
    "lost_order": _refund,
    "incident": _ticket,
    "double_charge": _void,
    "export_file": _reconcile,
}


def status_note(s: Script, until: int, findings: list[dict[str, Any]]) -> None:
    s.prompt(
        "Write today's status note to the team notes: list the refunds, tickets and corrected "
        "invoices you handled today and the incidents behind them, with their ids."
    )
    cited = []
    for f in findings:
        for key in ("refund", "order_id", "ticket", "incident", "invoice"):
            if key in f:
                cited.append(str(f[key]))
    s.pad(until - 1, _listings(s, "list_activity", "evt-", None, "activity"))
    s.step(
        "Writing the note.",
        (
            "write_note",
            {"path": "/home/agent/notes/status.md", "text": "Handled today: " + ", ".join(cited)},
            "saved",
        ),
    )
    s.answer("The status note is written.")


def _listings(
    s: Script, tool: str, prefix: str, anchor: str | None, noun: str
) -> Iterator[Callable[[], None]]:
    """Padding for a follow-up: pages of a listing full of ids like ``anchor``."""
    rng, mint = s.rng, s.mint
    page = 0
    while True:
        page += 1
        if anchor is not None:
            ids = mint.lookalikes(anchor, rng.randint(6, 10))
        else:
            ids = [mint.hex(prefix, 8) for _ in range(rng.randint(14, 22))]
        ids += [mint.hex(prefix, 8) for _ in range(rng.randint(8, 14))]
        rows = [
            f"{entry}  {timestamp(rng, mint.date(rng.choice(MONTHS)))}  {rng.choice(_STATES)}"
            for entry in ids
        ]

        def step(page: int = page, rows: list[str] = rows) -> None:
            s.step(
                f"Checking the {noun} queue, page {page}.",
                (tool, {"page": page}, table(f"{noun}s, page {page}", rows)),
            )

        yield step
