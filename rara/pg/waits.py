"""Typed access to ``db/queries/waits.sql``: durable waits, signals and approval decisions
(migration 0021; the rules in db/functions/waits.sql and docs/waits.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rara.pg.queries import AsyncConn, Conn, aone, many, one, value


@dataclass(frozen=True, slots=True)
class Fired:
    fired: int
    next_due: datetime | None  # None: no wait has a time
    db_now: datetime


@dataclass(frozen=True, slots=True)
class Signalled:
    step_id: int
    step_key: str
    accepted: bool  # False: the key was sent before; that signal's answer, nothing written
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Decided:
    step_id: int
    decision: str
    decided_by: str
    decided_at: datetime
    recorded: bool  # False: the same decision was made before; its answer, nothing written


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    step_id: int
    run_id: int
    namespace: str
    step_key: str
    definition: str
    approvers: list[str]
    requested_at: datetime
    due_at: datetime | None
    decision: str | None
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Approval(ApprovalRow):
    """One approval with the evidence it shows (frozen when it began to wait)."""

    decided_login: str | None
    evidence: dict[str, Any]
    on_reject: str


@dataclass(frozen=True, slots=True)
class PersonWait:
    """A wait only a person can end, in a run nothing else can move on (wait_list_for_person):
    a signal's or an approval's, with its deadline if it has one."""

    step_key: str
    kind: str  # signal | approval
    signal: str | None
    due_at: datetime | None


async def fire(conn: AsyncConn, limit: int) -> Fired:
    found = await aone(conn, "waits_fire", class_row(Fired), limit=limit)
    assert found is not None  # one row always
    return found


def signal(conn: Conn, run_id: int, name: str, payload: Any, key: str) -> Signalled:
    found = one(
        conn,
        "run_signal",
        class_row(Signalled),
        run_id=run_id,
        name=name,
        payload=Jsonb(payload),
        key=key,
    )
    assert found is not None  # a row, or the function raised
    return found


def decide(
    conn: Conn, run_id: int, step_key: str, *, approve: bool, reason: str | None,
    identity: str | None = None,
) -> Decided:  # fmt: skip
    found = one(
        conn,
        "approval_decide",
        class_row(Decided),
        run_id=run_id,
        step_key=step_key,
        approve=approve,
        reason=reason,
        identity=identity,
    )
    assert found is not None
    return found


def approvals(
    conn: Conn, *, open_only: bool, namespace: str | None, limit: int = 100
) -> list[ApprovalRow]:
    return many(
        conn,
        "approval_list",
        class_row(ApprovalRow),
        open_only=open_only,
        namespace=namespace,
        limit=limit,
    )


def approval(conn: Conn, run_id: int, step_key: str) -> Approval | None:
    return one(conn, "approval_get", class_row(Approval), run_id=run_id, step_key=step_key)


def for_person(conn: Conn, run_id: int) -> list[PersonWait]:
    return many(conn, "wait_list_for_person", class_row(PersonWait), run_id=run_id)


def login_vouches(conn: Conn) -> bool:
    """Whether this connection's login may name the person it decides or starts for (a
    member of rara_vouch: the dashboard's login, the operator's)."""
    return bool(value(conn, "login_vouches", bool))
