"""The dashboard's reads: ``db/queries/ui.sql`` (the ``ui_`` statements), typed rows.

Every row is a frozen dataclass built by column name (``class_row``); nothing here writes.
The connections come from the UI's read-only pool (``rara.ui.app``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row, scalar_row

from rara.evidence import metric_table
from rara.pg.events import EventRow
from rara.pg.queries import AsyncConn, amany, aone, avalue
from rara.pg.schedules import ScheduleRow, ScheduleSummary, TickRow
from rara.pg.waits import ApprovalRow
from rara.ui.reuse import Reuse, reuse_of

PAGE = 50


@dataclass(frozen=True, slots=True)
class RunLine:
    id: int
    namespace: str
    status: str  # the phase (rara_run_phase): the run's status, "paused" or "waiting"
    waiting_for: list[dict[str, Any]] | None  # what a waiting run waits for
    definition: str
    version: int
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class RunDetail:
    id: int
    namespace: str
    status: str  # the phase (rara_run_phase): the run's status, "paused" or "waiting"
    waiting_for: list[dict[str, Any]] | None  # what a waiting run waits for
    definition: str
    version: int
    digest: str
    idempotency_key: str | None
    input: dict[str, Any]
    error: Any
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    steps_total: int
    steps_succeeded: int
    steps_failed: int
    steps_cancelled: int

    @property
    def terminal(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")

    @property
    def counts(self) -> dict[str, int]:
        return step_counts(self)


def step_counts(run: RunDetail | LiveRun) -> dict[str, int]:
    """The run's steps as the dashboard counts them everywhere (runs list, run page, live
    view): the run's own counters, kept by rara_run_count, that also decide when it ends.
    Every step of the definition counts, and so does each child of a map step (from the
    moment the map expands): a run of six steps whose map makes four children has ten."""
    done = run.steps_succeeded + run.steps_failed + run.steps_cancelled
    return {
        "total": run.steps_total,
        "succeeded": run.steps_succeeded,
        "failed": run.steps_failed,
        "cancelled": run.steps_cancelled,
        "open": run.steps_total - done,
    }


@dataclass(frozen=True, slots=True)
class StepLine:
    id: int
    key: str
    depends_on: list[str]
    capability: str
    executor: str
    status: str  # "waiting" for a step with a rara_waits row (its stored status: blocked)
    wait_kind: str | None  # timer | signal | approval while it waits; None otherwise
    wait_signal: str | None
    wait_due: datetime | None  # a timer's time, or a signal's or approval's deadline
    attempt: int
    max_attempts: int
    releases: int
    leased_by: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    available_at: datetime
    cancel_requested: bool
    result: Any
    error: Any
    started_at: datetime | None
    finished_at: datetime | None
    is_map: bool
    map_total: int | None  # a map step's children, once it has expanded
    fraction: float | None
    message: str
    worker: str | None
    reused_from: dict[str, Any] | None  # where its result came from (cache, resume); None: ran
    reused_run_kept: bool | None  # that run is still there (None: not reused)

    @property
    def reuse(self) -> Reuse | None:
        return reuse_of(self.reused_from, self.reused_run_kept)


@dataclass(frozen=True, slots=True)
class RunApproval:
    """An approval gate of a run: the evidence it froze when it began to wait (``shown``:
    each ``show:`` entry's value; ``artifacts``: the shown steps' name, digest, size) beside
    its decision."""

    step_key: str
    approvers: list[str]
    requested_at: datetime
    due_at: datetime | None  # its deadline, while it waits
    decision: str | None  # approved | rejected | timed_out; None: waiting
    decided_by: str | None
    decided_login: str | None
    decided_at: datetime | None
    reason: str | None
    evidence: dict[str, Any]
    on_reject: str

    @property
    def shown(self) -> list[dict[str, Any]]:
        """Each shown value, with ``table``: it drawn as a table of metrics (rara.evidence),
        or None (shown as JSON)."""
        return [
            {**e, "table": metric_table(e.get("value"), e.get("show", ""))}
            for e in self.evidence.get("shown") or []
        ]

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return list(self.evidence.get("artifacts") or [])


@dataclass(frozen=True, slots=True)
class MapChild:
    parent: str
    key: str
    map_index: int
    status: str
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    worker: str | None
    reused_from: dict[str, Any] | None
    reused_run_kept: bool | None

    @property
    def reuse(self) -> Reuse | None:
        return reuse_of(self.reused_from, self.reused_run_kept)


@dataclass(frozen=True, slots=True)
class AttemptLine:
    key: str
    attempt: int
    worker: str
    outcome: str
    started_at: datetime
    ended_at: datetime | None
    ended_by: str | None
    error: Any


@dataclass(frozen=True, slots=True)
class MetricPoint:
    run_id: int
    key: str
    attempt: int
    seq: int
    created_at: datetime
    fraction: float | None
    metrics: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunArtifact:
    key: str
    attempt: int
    name: str
    digest: str
    size: int
    media_type: str
    final: bool


@dataclass(frozen=True, slots=True)
class Blob:
    digest: str
    size: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ArtifactLabel:
    name: str | None
    media_type: str | None


@dataclass(frozen=True, slots=True)
class Producer:
    name: str
    media_type: str
    size: int
    attempt: int
    key: str
    run_id: int
    status: str
    namespace: str
    definition: str
    version: int


@dataclass(frozen=True, slots=True)
class Consumer:
    run_id: int
    key: str
    status: str
    producer: str | None  # None: it read the blob (recorded); else it depends on this step


@dataclass(frozen=True, slots=True)
class DefinitionLine:
    namespace: str
    name: str
    created_at: datetime
    retired_at: datetime | None
    latest: int
    digest: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class VersionLine:
    version: int
    digest: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class VersionDetail:
    namespace: str
    name: str
    version: int
    digest: str
    spec: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ResultPoint:
    run_id: int
    version: int
    created_at: datetime
    key: str
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkerLine:
    id: str
    capabilities: list[str]
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    leases: int


@dataclass(frozen=True, slots=True)
class ExecutorLine:
    endpoint: str
    capabilities: list[str]
    version: str
    live: bool
    worker: str
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class BacklogLine:
    capability: str
    ready: int
    due: int
    oldest: datetime | None
    running: int


@dataclass(frozen=True, slots=True)
class LiveRun:
    id: int
    status: str  # the phase, as RunDetail's
    waiting_for: list[dict[str, Any]] | None
    cancel_requested: bool
    finished_at: datetime | None
    steps_total: int
    steps_succeeded: int
    steps_failed: int
    steps_cancelled: int


@dataclass(frozen=True, slots=True)
class LiveStep:
    run_id: int
    key: str
    status: str
    wait_kind: str | None
    wait_signal: str | None
    wait_due: datetime | None
    attempt: int
    fraction: float | None


@dataclass(frozen=True, slots=True)
class RecentRun:
    id: int
    status: str


async def now(conn: AsyncConn) -> datetime:
    found = await avalue(conn, "ui_now", datetime)
    assert found is not None
    return found


async def namespaces_visible(conn: AsyncConn) -> list[str]:
    """The namespaces of the role the connection acts as (its ``SET ROLE``'s, else the
    login's); ``*`` is every namespace (``namespace_caller_list``, migration 0018)."""
    return await avalue(conn, "namespace_caller_list", list) or []


async def namespace_list(conn: AsyncConn, limit: int = 1_000) -> list[str]:
    """The namespaces the filters offer: those with a definition or a schedule."""
    return await amany(conn, "ui_namespace_list", scalar_row, limit=limit)


async def run_page(
    conn: AsyncConn,
    *,
    before: int | None,
    namespace: str | None,
    status: str | None,
    definition: str | None,
    since: datetime | None,
    until: datetime | None,
    search: str | None = None,
    limit: int = PAGE,
) -> list[RunLine]:
    return await amany(
        conn,
        "ui_run_page",
        class_row(RunLine),
        before=before,
        namespace=namespace,
        status=status,
        definition=definition,
        since=since,
        until=until,
        search=search,
        limit=limit,
    )


async def run_get(conn: AsyncConn, run_id: int) -> RunDetail | None:
    return await aone(conn, "ui_run_get", class_row(RunDetail), run_id=run_id)


async def step_list(conn: AsyncConn, run_id: int) -> list[StepLine]:
    return await amany(conn, "ui_step_list", class_row(StepLine), run_id=run_id)


async def run_approval_list(conn: AsyncConn, run_id: int) -> list[RunApproval]:
    return await amany(conn, "ui_run_approval_list", class_row(RunApproval), run_id=run_id)


async def approval_list(
    conn: AsyncConn, *, open_only: bool, namespace: str | None, limit: int = PAGE
) -> list[ApprovalRow]:
    """Approvals the connection's role reads (row-level security: a user's namespaces under
    ``--user-roles``), waiting ones first: the statement of `rara approvals list`."""
    return await amany(
        conn,
        "approval_list",
        class_row(ApprovalRow),
        open_only=open_only,
        namespace=namespace,
        limit=limit,
    )


async def map_child_list(conn: AsyncConn, run_id: int, limit: int = 10_000) -> list[MapChild]:
    return await amany(conn, "ui_map_child_list", class_row(MapChild), run_id=run_id, limit=limit)


async def attempt_list(conn: AsyncConn, run_id: int) -> list[AttemptLine]:
    return await amany(conn, "ui_attempt_list", class_row(AttemptLine), run_id=run_id)


async def metric_list(conn: AsyncConn, run_id: int, limit: int = 20_000) -> list[MetricPoint]:
    return await amany(conn, "ui_metric_list", class_row(MetricPoint), run_id=run_id, limit=limit)


async def event_list(conn: AsyncConn, run_id: int) -> list[EventRow]:
    """Every event of a run: the statement of `rara runs show --events` (events.sql)."""
    return await amany(conn, "event_list", class_row(EventRow), run_id=run_id)


async def run_artifact_list(conn: AsyncConn, run_id: int) -> list[RunArtifact]:
    return await amany(conn, "ui_run_artifact_list", class_row(RunArtifact), run_id=run_id)


async def artifact_get(conn: AsyncConn, digest: str) -> Blob | None:
    return await aone(conn, "ui_artifact_get", class_row(Blob), digest=digest)


async def artifact_label(conn: AsyncConn, digest: str, name: str | None) -> ArtifactLabel:
    found = await aone(
        conn, "ui_artifact_label", class_row(ArtifactLabel), digest=digest, name=name
    )
    return found or ArtifactLabel(None, None)


async def producer_list(conn: AsyncConn, digest: str, limit: int = 200) -> list[Producer]:
    return await amany(
        conn, "ui_artifact_producer_list", class_row(Producer), digest=digest, limit=limit
    )


async def consumer_list(conn: AsyncConn, digest: str, limit: int = 200) -> list[Consumer]:
    return await amany(
        conn, "ui_artifact_consumer_list", class_row(Consumer), digest=digest, limit=limit
    )


@dataclass(frozen=True, slots=True)
class Cursor:
    """A keyset cursor of the lists ordered by (namespace, name): the last row shown."""

    namespace: str
    name: str


def _after(cursor: Cursor | None) -> dict[str, str | None]:
    """A cursor as the statements' parameters (:after_namespace, :after)."""
    if cursor is None:
        return {"after_namespace": None, "after": None}
    return {"after_namespace": cursor.namespace, "after": cursor.name}


async def definition_page(
    conn: AsyncConn,
    *,
    after: Cursor | None,
    namespace: str | None = None,
    search: str | None = None,
    limit: int = PAGE,
) -> list[DefinitionLine]:
    return await amany(
        conn,
        "ui_definition_page",
        class_row(DefinitionLine),
        **_after(after),
        namespace=namespace,
        search=search,
        limit=limit,
    )


async def version_list(conn: AsyncConn, namespace: str, name: str) -> list[VersionLine]:
    return await amany(
        conn,
        "ui_definition_version_list",
        class_row(VersionLine),
        namespace=namespace,
        name=name,
    )


async def version_get(
    conn: AsyncConn, namespace: str, name: str, version: int
) -> VersionDetail | None:
    return await aone(
        conn,
        "ui_definition_version_get",
        class_row(VersionDetail),
        namespace=namespace,
        name=name,
        version=version,
    )


async def result_list(
    conn: AsyncConn, namespace: str, name: str, limit: int = 100
) -> list[ResultPoint]:
    return await amany(
        conn,
        "ui_definition_result_list",
        class_row(ResultPoint),
        namespace=namespace,
        name=name,
        limit=limit,
    )


async def worker_list(conn: AsyncConn, limit: int = 500) -> list[WorkerLine]:
    return await amany(conn, "ui_worker_list", class_row(WorkerLine), limit=limit)


async def executor_list(conn: AsyncConn, limit: int = 500) -> list[ExecutorLine]:
    return await amany(conn, "ui_executor_list", class_row(ExecutorLine), limit=limit)


async def backlog_list(conn: AsyncConn) -> list[BacklogLine]:
    return await amany(conn, "ui_backlog_list", class_row(BacklogLine))


async def live_run_list(conn: AsyncConn, run_ids: list[int]) -> list[LiveRun]:
    return await amany(conn, "ui_live_run_list", class_row(LiveRun), run_ids=run_ids)


async def live_step_list(conn: AsyncConn, run_ids: list[int]) -> list[LiveStep]:
    return await amany(conn, "ui_live_step_list", class_row(LiveStep), run_ids=run_ids)


async def live_metric_list(
    conn: AsyncConn, run_ids: list[int], limit: int = 20_000
) -> list[MetricPoint]:
    return await amany(
        conn, "ui_live_metric_list", class_row(MetricPoint), run_ids=run_ids, limit=limit
    )


async def live_recent_list(
    conn: AsyncConn, namespaces: frozenset[str] | None = None, limit: int = PAGE
) -> list[RecentRun]:
    """The newest runs, of ``namespaces`` only when given (None: every namespace)."""
    return await amany(
        conn,
        "ui_live_recent_list",
        class_row(RecentRun),
        namespaces=None if namespaces is None else sorted(namespaces),
        limit=limit,
    )


@dataclass(frozen=True, slots=True)
class LiveApproval:
    run_id: int
    step_key: str
    decision: str  # "" while it waits


async def live_approval_list(
    conn: AsyncConn, namespaces: frozenset[str] | None = None, limit: int = PAGE
) -> list[LiveApproval]:
    """The newest approvals, of ``namespaces`` only when given (None: every namespace)."""
    return await amany(
        conn,
        "ui_live_approval_list",
        class_row(LiveApproval),
        namespaces=None if namespaces is None else sorted(namespaces),
        limit=limit,
    )


async def schedule_page(
    conn: AsyncConn, *, after: Cursor | None, namespace: str | None = None, limit: int = PAGE
) -> list[ScheduleSummary]:
    return await amany(
        conn,
        "ui_schedule_page",
        class_row(ScheduleSummary),
        **_after(after),
        namespace=namespace,
        limit=limit,
    )


async def schedule_get(conn: AsyncConn, namespace: str, name: str) -> ScheduleRow | None:
    """A schedule whole: the statement of `rara schedules show` (schedules.sql)."""
    return await aone(conn, "schedule_get", class_row(ScheduleRow), namespace=namespace, name=name)


async def schedule_tick_list(
    conn: AsyncConn, namespace: str, name: str, limit: int = PAGE
) -> list[TickRow]:
    """A schedule's decided ticks, newest first, each with its run (started, triggered or
    backfilled) and that run's status: the history `rara schedules show` prints."""
    return await amany(
        conn,
        "schedule_tick_list",
        class_row(TickRow),
        namespace=namespace,
        name=name,
        limit=limit,
    )
