"""Typed access to ``db/queries/runs.sql``: runs, their start and cancel. (The parent
aggregation by counters is no statement of its own: ``rara_run_count`` in
``db/functions/steps.sql``, last in the transaction of the functions that end steps.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row, scalar_row, tuple_row
from psycopg.types.json import Jsonb

from rara.namespaces import DEFAULT_NAMESPACE
from rara.pg.queries import Conn, many, one, value
from rara.states import RunStatus


@dataclass(frozen=True, slots=True)
class RunRow:
    id: int
    namespace: str
    status: RunStatus
    input: dict[str, Any]
    idempotency_key: str | None
    cancel_requested: bool
    error: Any
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    definition: str
    version: int
    digest: str
    # The phase people read (rara_run_phase): the status, "paused", or "waiting" with what for.
    phase: str = ""
    waiting_for: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", RunStatus(self.status))


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A line of ``run_list``: a run and how many of its steps succeeded."""

    id: int
    namespace: str
    status: RunStatus
    definition: str
    version: int
    created_at: datetime
    finished_at: datetime | None
    done: int
    total: int
    phase: str = ""  # the status, "paused" or "waiting" (rara_run_phase)
    waiting_for: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", RunStatus(self.status))


@dataclass(frozen=True, slots=True)
class RunStatusRow:
    """A line of ``run_status_many``: what a WorkflowRun's status mirrors of its run."""

    id: int
    status: RunStatus
    version: int
    done: int
    total: int
    started_at: datetime | None
    finished_at: datetime | None
    phase: str = ""  # the status, "paused" or "waiting" (rara_run_phase)
    waiting_for: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", RunStatus(self.status))


@dataclass(frozen=True, slots=True)
class StartAnswer:
    """What ``run_start`` did (see the statement): ``run_id`` None when nothing was inserted."""

    id: int
    digest: str
    retired_at: datetime | None
    spec: dict[str, Any] | None
    missing: list[str] | None
    run_id: int | None


def start(
    conn: Conn,
    *,
    namespace: str,
    name: str,
    version: int | None,
    digest: str | None,
    input: dict[str, Any],
    idempotency_key: str | None,
    check_capabilities: bool,
    alive_seconds: float,
) -> StartAnswer | None:
    """One round trip (``rara.runs.start_run``); None: no such definition (version)."""
    return one(
        conn,
        "run_start",
        class_row(StartAnswer),
        namespace=namespace,
        name=name,
        version=version,
        digest=digest,
        input=Jsonb(input),
        idempotency_key=idempotency_key,
        check_capabilities=check_capabilities,
        alive_seconds=alive_seconds,
    )


def id_by_key(conn: Conn, idempotency_key: str, *, namespace: str) -> int | None:
    """The run of ``idempotency_key`` in ``namespace`` (a key names one run there)."""
    return value(conn, "run_get_by_key", int, idempotency_key=idempotency_key, namespace=namespace)


def get(conn: Conn, run_id: int) -> RunRow | None:
    return one(conn, "run_get", class_row(RunRow), run_id=run_id)


def list_recent(
    conn: Conn, status: RunStatus | str | None, limit: int, *, namespace: str | None
) -> list[RunSummary]:
    """The newest runs of ``namespace``; of every namespace when None. ``status``: a phase
    (rara.waits.RUN_PHASES: a status, "waiting" or "paused"), checked by the caller."""
    return many(
        conn,
        "run_list",
        class_row(RunSummary),
        status=None if status is None else str(getattr(status, "value", status)),
        limit=limit,
        namespace=namespace,
    )


def status_many(conn: Conn, run_ids: list[int]) -> list[RunStatusRow]:
    """The runs of ``run_ids`` in one statement (``run_status_many``); missing ones left out."""
    return many(conn, "run_status_many", class_row(RunStatusRow), run_ids=run_ids)


def waiting_count(conn: Conn) -> dict[str, int]:
    """Runs waiting now by what they wait for (``run_waiting_count``): approval, signal and
    timer, each present (0 when none)."""
    counts = dict.fromkeys(("approval", "signal", "timer"), 0)
    for kind, n in many(conn, "run_waiting_count", tuple_row):
        counts[str(kind)] = int(n)
    return counts


@dataclass(frozen=True, slots=True)
class ResumedRun:
    run_id: int
    reused: int  # steps (map children included) taken from the resumed run
    created: bool  # False: the idempotency key found the run an earlier resume made


def resume(
    conn: Conn, run_id: int, idempotency_key: str | None, rerun_from: str | None = None
) -> ResumedRun:
    """``run_resume``: a new run reusing every succeeded step of ``run_id`` (but
    ``rerun_from`` and the steps downstream of it, which run again)."""
    found = one(
        conn,
        "run_resume",
        class_row(ResumedRun),
        run_id=run_id,
        idempotency_key=idempotency_key,
        rerun_from=rerun_from,
    )
    assert found is not None  # the function answers one row or raises
    return found


def cancel(conn: Conn, run_id: int) -> bool | None:
    """Cancel the run (``run_cancel``): True when cancelled now, False when it had already
    ended, None when there is no such run."""
    return value(conn, "run_cancel", bool, run_id=run_id)


@dataclass(frozen=True)
class PauseRow:
    outcome: str  # 'paused' | 'resumed' | 'unchanged' | 'ended' (rara_run_set_paused)
    steps: int  # the steps held by the pause, or released by the resume


def set_paused(conn: Conn, run_id: int, paused: bool) -> PauseRow | None:
    """Pause or resume the run (``run_pause_set``); None when there is no such run."""
    return one(conn, "run_pause_set", class_row(PauseRow), run_id=run_id, paused=paused)


def enqueue_many(
    conn: Conn,
    *,
    definition: str,
    version: int | None,
    runs: int,
    steps: int,
    key: str,
    capability: str,
    executor: str = "inprocess",
    chained: bool = False,
    input: dict[str, Any] | None = None,
    priority: int = 0,
    max_attempts: int = 3,
    retry_initial_ms: int = 1000,
    retry_max_ms: int = 60_000,
    numbered: bool | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    concurrency_keys: int | None = None,
    concurrency_max: int = 2,
) -> list[int]:
    """Runs inserted set-wise for tests and benchmarks (``run_enqueue_many``); the run ids, one
    per run in order. Step keys are ``key`` itself, or ``key0``, ``key1``… when ``numbered``
    (by default when there are several steps or they are chained). ``concurrency_keys``: the
    runs take that many distinct concurrency keys in turn, each at most ``concurrency_max``
    running."""
    if numbered is None:
        numbered = steps > 1 or chained
    rows = many(
        conn,
        "run_enqueue_many",
        scalar_row,
        namespace=namespace,
        name=definition,
        version=version,
        runs=runs,
        steps=steps,
        key=key,
        capability=capability,
        executor=executor,
        chained=chained,
        numbered=numbered,
        input=Jsonb(input or {}),
        payload=Jsonb({"input": {}, "secrets": {}}),
        priority=priority,
        max_attempts=max_attempts,
        retry_initial_ms=retry_initial_ms,
        retry_max_ms=retry_max_ms,
        concurrency_keys=concurrency_keys,
        concurrency_max=concurrency_max,
    )
    return list(dict.fromkeys(int(r) for r in rows))
