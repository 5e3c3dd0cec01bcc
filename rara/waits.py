"""Signals and approval decisions, as a person or a program makes them (docs/waits.md).

The rules are the database's (db/functions/waits.sql): which step a signal ends, that a key
is accepted once, who may decide an approval and that a decision is made once. Here its
refusals become rara's errors, each naming the run, the step or the signal, and a repeated
signal or decision comes back marked as such (``accepted``/``recorded`` False), never as a
second one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg

from rara.errors import InputInvalid, NotFound, WaitNotYet, WaitRefused
from rara.pg import waits as wait_sql
from rara.pg.waits import Approval, Decided, PersonWait, Signalled

# A signal says what happened; bytes go to the artifact store. The database's limit
# (rara_limits() signal_payload_bytes), refused here first: the JSON text's UTF-8 bytes.
MAX_PAYLOAD_BYTES = 64 * 1024


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except psycopg.errors.NoDataFound as exc:
        raise NotFound(exc.diag.message_primary or str(exc)) from None
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:  # rara_wait_refuse: not yet
        raise WaitNotYet(exc.diag.message_primary or str(exc)) from None
    except psycopg.errors.ProgramLimitExceeded as exc:  # rara_limits: nothing was written
        raise InputInvalid(exc.diag.message_primary or str(exc)) from None
    except (psycopg.errors.InvalidParameterValue, psycopg.errors.UniqueViolation) as exc:
        raise WaitRefused(exc.diag.message_primary or str(exc)) from None


def signal(
    conn: psycopg.Connection[Any], run_id: int, name: str, payload: Any = None,
    key: str | None = None,
) -> Signalled:  # fmt: skip
    """Signal ``name`` to run ``run_id``: the step waiting for it succeeds with ``payload``
    as its result. ``key`` (default: the signal's name, so a run takes each signal once)
    makes it idempotent: the same key again answers the first signal."""
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InputInvalid(
            f"signal {name}: its payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}"
        )
    with _refusals():
        return wait_sql.signal(conn, run_id, name, payload, key or name)


def decide(
    conn: psycopg.Connection[Any], run_id: int, step_key: str, *, approve: bool,
    reason: str | None = None, identity: str | None = None,
) -> Decided:  # fmt: skip
    """Approve or reject approval step ``step_key`` of run ``run_id`` as the database login.
    ``identity``: the person a vouching login (a member of rara_vouch: the UI's, the
    operator's) authenticated, recorded as ``<identity> via <login>``; from any other login
    the database refuses it."""
    with _refusals():
        return wait_sql.decide(
            conn, run_id, step_key, approve=approve, reason=reason, identity=identity
        )


def approval(conn: psycopg.Connection[Any], run_id: int, step_key: str) -> Approval:
    found = wait_sql.approval(conn, run_id, step_key)
    if found is None:
        raise NotFound(f"run {run_id} has no approval {step_key} (or it has not begun to wait)")
    return found


def shown_status(status: str, wait_kind: str | None) -> str:
    """A step's status as people read it: one that waits (blocked, with the rara_waits row
    that the wait's end deletes) is "waiting", as the dashboard's statements say it."""
    return "waiting" if wait_kind else str(status)


def waiting_for(kind: str | None, signal: str | None, due: datetime | None) -> str:
    """What a waiting step waits for (its rara_waits row), as the CLI and the dashboard say
    it: "waits until 2026-12-03 02:00:00 UTC", "waits for signal go (deadline …)", "waits for
    an approval"; "" for a step that waits for nothing."""
    at = f"{due.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if due else ""
    if kind == "timer":
        return f"waits until {at}"
    if kind not in ("signal", "approval"):
        return ""
    what = f"waits for signal {signal}" if kind == "signal" else "waits for an approval"
    return f"{what} (deadline {at})" if at else what


# A run's phases as people read them: its status (rara.states.RunStatus), `paused` for an
# unfinished run that is paused (rara.pauses), and `waiting` for an unfinished run with no step
# ready or running and a wait open (rara_run_phase, db/functions/waits.sql: the rule, derived at
# each read, never stored). The order of the filters that offer them.
RUN_PHASES = ("pending", "running", "waiting", "paused", "succeeded", "failed", "cancelled")


def check_phase(phase: str | None) -> str | None:
    """A run filter's status, refused naming the allowed values when it is none of them."""
    if phase is None or phase in RUN_PHASES:
        return phase
    raise InputInvalid(f"unknown run status {phase!r}: use one of {', '.join(RUN_PHASES)}")


def run_waiting_for(waits: list[dict[str, Any]] | None) -> str:
    """What a waiting run waits for (rara_run_phase's ``waiting_for``), as every reader says
    it: "approval of gate release", "signal go (step wait-go)", "timer of step nap until
    2026-12-03 02:00:00 UTC", joined by "; "; "" for a run that waits for nothing."""
    said = []
    for w in waits or []:
        due = w.get("due_at")
        if isinstance(due, str):
            due = datetime.fromisoformat(due)
        at = f"{due.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if due else ""
        if w.get("kind") == "approval":
            said.append(f"approval of gate {w['step']}" + (f" (deadline {at})" if at else ""))
        elif w.get("kind") == "signal":
            said.append(
                f"signal {w.get('signal')} (step {w['step']}" + (f", deadline {at})" if at else ")")
            )
        else:
            said.append(f"timer of step {w['step']} until {at}")
    return "; ".join(said)


def run_phase_text(phase: str, waits: list[dict[str, Any]] | None) -> str:
    """A run's phase with what it waits for: "waiting for approval of gate release", or the
    phase alone."""
    what = run_waiting_for(waits) if phase == "waiting" else ""
    return f"waiting for {what}" if what else phase


def next_moves(run_id: int, waits: list[PersonWait]) -> list[str]:
    """What a person can do for each wait of a run that only a person can move on, as
    `rara runs watch` and the demo say it: "release waits for an approval: rara approvals
    show 42 release"."""
    lines = []
    for w in waits:
        what = waiting_for(w.kind, w.signal, w.due_at)
        if w.kind == "approval":
            how = f"rara approvals show {run_id} {w.step_key}, then approve or reject"
        else:
            how = f"rara runs signal {run_id} {w.signal} --payload JSON"
        lines.append(f"{w.step_key} {what}: {how}")
    return lines
