"""What the dashboard asks of a decision that stops something, and what it offers after one.

A rejection (of an approval gate) and a cancel (of a run) stop work that someone else started,
so each is confirmed and carries a reason: the reason is what the next person reads. A run
whose gate was rejected ended because a person said no to its evidence: resuming it would reuse
the steps that made that evidence and ask the same question again, so the run's page offers
only a retry as a new run, which makes new evidence (docs/ui.md, "Waits and approvals")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

# The database keeps a decision's reason up to 2000 characters (rara_approval_decide); a
# cancel's reason is held to the same.
MAX_REASON = 2000


class Decided(Protocol):
    @property
    def step_key(self) -> str: ...

    @property
    def decision(self) -> str | None: ...


def reason_problem(reason: str, what: str) -> str:
    """Why ``reason`` (already stripped) cannot go with ``what`` (a rejection, a cancel), or
    "" when it can: it is required, and bounded."""
    if not reason:
        return f"{what} needs a reason: the reason field is empty"
    if len(reason) > MAX_REASON:
        return f"the reason is longer than {MAX_REASON} characters ({len(reason)})"
    return ""


def gate_rejected(approvals: Iterable[Decided]) -> str:
    """Why a run is not resumed from failure ("" when nothing stops it): a gate of it was
    rejected."""
    rejected = [a.step_key for a in approvals if a.decision == "rejected"]
    if not rejected:
        return ""
    gates = ", ".join(rejected)
    return (
        f"its approval gate {gates} was rejected: a resume would ask the same question "
        "again with the same evidence; retry as a new run for new evidence"
    )
