"""The typed Python client applications use; the CLI is a thin layer over it.

client = Client()                       # DATABASE_URL, or the embedded server
client = Client(namespace="team-a")     # a team's namespace (else RARA_NAMESPACE, else default)
client.apply_definition(yaml_text)      # -> AppliedVersion
run = client.start_run("rag-refresh", input={...}, idempotency_key="nightly-2026-11-29")
final = client.wait(run.run_id, timeout=600)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import psycopg

from rara import pauses, waits
from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import definition_from_object, load_definition
from rara.definitions.registry import AppliedVersion, apply_definition
from rara.errors import NotFound
from rara.namespaces import document_namespace, namespace_from, qualified
from rara.pauses import PauseChange
from rara.pg import artifacts, definitions, events, runs, step_logs, steps, workers
from rara.pg import waits as wait_sql
from rara.pg.connect import database_url
from rara.pg.step_logs import LogChunk, LogCursor
from rara.pg.waits import Approval, ApprovalRow, Decided, PersonWait, Signalled
from rara.releases import (
    MoveRow,
    Release,
    ReleaseSummary,
    RolledBack,
    get_release,
    list_releases,
    promote,
    release_history,
    rollback,
)
from rara.runs import LIVE_WORKER_SECONDS, StartedRun, cancel_run, resume_run, start_run
from rara.schedules.manage import set_suspended
from rara.states import RunStatus, StepStatus

Row = dict[str, Any]


@dataclass(frozen=True)
class RunView:
    id: int
    namespace: str
    status: RunStatus
    definition: str
    version: int
    input: dict[str, Any]
    error: Any
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    steps: list[Row]
    # The phase people read (rara_run_phase): the status, "paused", or "waiting" with what for.
    phase: str = ""
    waiting_for: list[Row] | None = None

    @property
    def phase_text(self) -> str:
        """The phase as people read it: "running", "waiting for approval of gate release"."""
        return waits.run_phase_text(self.phase or self.status.value, self.waiting_for)


def load_run(conn: psycopg.Connection[Any], run_id: int) -> RunView | None:
    """A run and its steps (None: no such run): the one reader of a run's state, for the
    client and the operator alike."""
    run = runs.get(conn, run_id)
    if run is None:
        return None
    return RunView(
        id=run.id,
        namespace=run.namespace,
        status=run.status,
        definition=run.definition,
        version=run.version,
        input=run.input,
        error=run.error,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        steps=[asdict(s) for s in steps.list_for_run(conn, run_id)],
        phase=run.phase,
        waiting_for=run.waiting_for,
    )


class Client:
    """A client works in one namespace (docs/namespaces.md): what it applies, starts, lists
    and schedules by name is that namespace's. Runs are named by id, which no two namespaces
    share."""

    def __init__(self, url: str | None = None, *, namespace: str | None = None) -> None:
        self.url = database_url(url)
        self.namespace = namespace_from(namespace)
        # Told explicitly: a document naming another namespace is refused, not followed.
        self._namespace_explicit = namespace is not None

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            yield conn

    # -- definitions -------------------------------------------------------------------------
    def apply_definition(
        self, definition: str | bytes | dict[str, Any] | WorkflowDefinition
    ) -> AppliedVersion:
        if isinstance(definition, str | bytes):
            definition = load_definition(definition)
        elif isinstance(definition, dict):
            definition = definition_from_object(definition)
        namespace = self.document_namespace(
            definition.metadata.namespace, f"WorkflowDefinition {definition.name}"
        )
        with self._conn() as conn:
            return apply_definition(conn, definition, namespace=namespace)

    def document_namespace(self, declared: str | None, what: str) -> str:
        """Where a document that declares ``declared`` (None: nothing) is applied by this
        client (rara.namespaces.document_namespace)."""
        return document_namespace(
            declared, self.namespace, explicit=self._namespace_explicit, what=what
        )

    def list_definitions(self, *, all_namespaces: bool = False) -> list[Row]:
        namespace = None if all_namespaces else self.namespace
        with self._conn() as conn:
            return [asdict(d) for d in definitions.list_all(conn, namespace=namespace)]

    def get_definition(self, name: str, version: int | None = None) -> Row:
        with self._conn() as conn:
            row = definitions.version_get(conn, name, version, namespace=self.namespace)
        if row is None:
            raise NotFound(
                f"no workflow definition {qualified(self.namespace, name)}"
                + (f" version {version}" if version else "")
            )
        return asdict(row)

    # -- runs --------------------------------------------------------------------------------
    def start_run(
        self,
        definition: str,
        *,
        version: int | None = None,
        input: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        queue_anyway: bool = False,
    ) -> StartedRun:
        with self._conn() as conn:
            return start_run(
                conn,
                definition,
                version=version,
                input=input,
                idempotency_key=idempotency_key,
                queue_anyway=queue_anyway,
                namespace=self.namespace,
            )

    def resume_run(
        self,
        run_id: int,
        *,
        version: int | None = None,
        input: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        rerun_from: str | None = None,
    ) -> runs.ResumedRun:
        """A new run of ``run_id``'s version and input reusing its succeeded steps
        (``rara.runs.resume_run``), but ``rerun_from`` and every step downstream of it, which
        run again; ResumeRefused when version or input differ, or no such step."""
        with self._conn() as conn:
            return resume_run(
                conn,
                run_id,
                version=version,
                input=input,
                idempotency_key=idempotency_key,
                rerun_from=rerun_from,
            )

    def unserved_capabilities(self, run_id: int, rerun_from: str | None = None) -> list[str]:
        """The capabilities of ``run_id``'s steps that a resume would run again (every step but
        the succeeded and the waits; with ``rerun_from``, that step and every step downstream
        of it too) which no live worker serves now: what ``start_run`` refuses a new run for,
        asked of a resume before it is made."""
        with self._conn() as conn:
            served = workers.capabilities(conn, LIVE_WORKER_SECONDS)
            rows = steps.list_for_run(conn, run_id)
        again = {rerun_from} if rerun_from is not None else set()
        while grown := {s.key for s in rows if again & set(s.depends_on)} - again:
            again |= grown
        return sorted(
            {
                s.capability
                for s in rows
                if s.wait_kind is None
                and (s.status is not StepStatus.SUCCEEDED or s.key in again)
                and s.capability not in served
            }
        )

    def get_run(self, run_id: int) -> RunView:
        with self._conn() as conn:
            view = load_run(conn, run_id)
        if view is None:
            raise NotFound(f"no run {run_id}")
        return view

    def list_runs(
        self, status: RunStatus | str | None = None, limit: int = 50, *,
        all_namespaces: bool = False,
    ) -> list[Row]:  # fmt: skip
        """The newest runs; ``status``: a phase (rara.waits.RUN_PHASES: a status,
        "waiting" or "paused"), InputInvalid naming the allowed ones otherwise."""
        phase = waits.check_phase(None if status is None else str(getattr(status, "value", status)))
        namespace = None if all_namespaces else self.namespace
        with self._conn() as conn:
            return [asdict(r) for r in runs.list_recent(conn, phase, limit, namespace=namespace)]

    def run_events(self, run_id: int) -> list[Row]:
        with self._conn() as conn:
            return [asdict(r) for r in events.list_events(conn, run_id)]

    def run_attempts(self, run_id: int) -> list[Row]:
        with self._conn() as conn:
            return [asdict(r) for r in events.list_attempts(conn, run_id)]

    def run_logs(
        self, run_id: int, step_key: str | None = None, cursor: LogCursor | None = None
    ) -> list[LogChunk]:
        """What the run's steps (``step_key``'s only, if given) wrote after ``cursor``, oldest
        first (rara.pg.step_logs); the cursor moves past it."""
        with self._conn() as conn:
            return step_logs.list_chunks(conn, run_id, step_key, cursor)

    def run_artifacts(self, run_id: int) -> list[Row]:
        with self._conn() as conn:
            return [asdict(r) for r in artifacts.list_for_run(conn, run_id)]

    def cancel_run(self, run_id: int, reason: str | None = None) -> bool:
        """Cancel run ``run_id``; ``reason`` is kept with who cancelled, as the run's error."""
        with self._conn() as conn:
            return cancel_run(conn, run_id, reason)

    def pause_run(self, run_id: int) -> PauseChange:
        """Hold the run's steps that could be leased (its running ones go on) until
        ``unpause_run``; pausing a paused run changes nothing (``changed`` False). RunEnded
        when it has ended. (``resume_run`` is the resume from failure: a new run.)"""
        with self._conn() as conn:
            return pauses.set_paused(conn, run_id, True)

    def unpause_run(self, run_id: int) -> PauseChange:
        """Release a paused run's held steps, leasable at once in their place in the queue."""
        with self._conn() as conn:
            return pauses.set_paused(conn, run_id, False)

    # -- waits and approvals (docs/waits.md) ---------------------------------------------------
    def signal_run(
        self, run_id: int, name: str, payload: Any = None, key: str | None = None
    ) -> Signalled:
        """Signal ``name`` to run ``run_id``; the same ``key`` (default: the name) again is
        answered with the first signal's step and time, ``accepted`` False."""
        with self._conn() as conn:
            return waits.signal(conn, run_id, name, payload, key)

    def list_approvals(
        self, *, open_only: bool = True, all_namespaces: bool = False, limit: int = 100
    ) -> list[ApprovalRow]:
        """The namespace's approvals (every namespace the login reads with
        ``all_namespaces``), those waiting for a decision first."""
        with self._conn() as conn:
            return wait_sql.approvals(
                conn,
                open_only=open_only,
                namespace=None if all_namespaces else self.namespace,
                limit=limit,
            )

    def get_approval(self, run_id: int, step_key: str) -> Approval:
        """One approval with the evidence it shows."""
        with self._conn() as conn:
            return waits.approval(conn, run_id, step_key)

    def decide_approval(
        self, run_id: int, step_key: str, *, approve: bool, reason: str | None = None,
        identity: str | None = None,
    ) -> Decided:  # fmt: skip
        """Approve or reject, as this client's database login (the role it acts as). The same
        decision again is answered, ``recorded`` False. ``identity``: a person this client
        vouches for, recorded as ``<identity> via <login>`` — refused
        (``psycopg.errors.InsufficientPrivilege``) unless the login is a member of rara_vouch
        (the dashboard's, the operator's: docs/waits.md, "Who may decide"); leave it None."""
        with self._conn() as conn:
            return waits.decide(
                conn, run_id, step_key, approve=approve, reason=reason, identity=identity
            )

    # -- releases (docs/releases.md) ---------------------------------------------------------
    def promote_release(
        self,
        name: str,
        run_id: int,
        *,
        artifacts: list[str] | None = None,
        results: list[str] | None = None,
        note: str | None = None,
    ) -> Release:
        """Release succeeded run ``run_id`` as the next number of ``name`` and make it current;
        ``artifacts`` (``STEP/NAME``) and ``results`` (step keys) choose what it carries
        (None: everything the run produced)."""
        with self._conn() as conn:
            return promote(
                conn,
                name,
                run_id,
                artifacts=artifacts,
                results=results,
                note=note,
                namespace=self.namespace,
            )

    def get_release(self, name: str, number: int | None = None) -> Release:
        """Release ``number`` of ``name``, or the current one (None)."""
        with self._conn() as conn:
            return get_release(conn, name, number, namespace=self.namespace)

    def rollback_release(
        self, name: str, to_number: int | None = None, *, reason: str | None = None
    ) -> RolledBack:
        """Make release ``to_number`` of ``name`` current again (None: the one that was current
        when the current one was promoted)."""
        with self._conn() as conn:
            return rollback(conn, name, to_number, reason=reason, namespace=self.namespace)

    def list_releases(
        self, name: str | None = None, *, all_namespaces: bool = False
    ) -> list[ReleaseSummary]:
        with self._conn() as conn:
            return list_releases(conn, name, namespace=None if all_namespaces else self.namespace)

    def release_history(self, name: str) -> list[MoveRow]:
        """Every promote and rollback of ``name``, oldest first."""
        with self._conn() as conn:
            return release_history(conn, name, namespace=self.namespace)

    def suspend_schedule(self, name: str, suspended: bool) -> bool:
        """Pause (``suspended``) or resume a schedule, as `rara schedules pause|resume` does;
        False: it already was. NotFound for no such schedule."""
        with self._conn() as conn:
            return set_suspended(conn, name, suspended, namespace=self.namespace)

    def awaiting_person(self, run_id: int) -> list[PersonWait]:
        """The signals and approvals run ``run_id`` waits for when nothing but a person can
        move it on (empty while a step is ready or running, or a timer will fire)."""
        with self._conn() as conn:
            return wait_sql.for_person(conn, run_id)

    def wait(
        self, run_id: int, timeout: float | None = None, poll: float = 1.0, *,
        until_person: bool = False,
    ) -> RunView:  # fmt: skip
        """Block until the run is terminal, or (``until_person``) until only a signal or a
        decision can move it on (``awaiting_person`` says which): woken by NOTIFY on
        rara_run (a run ended, or began to wait for a person), polling as fallback."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with psycopg.connect(self.url, autocommit=True) as listener:
            listener.execute("LISTEN rara_run")
            while True:
                view = self.get_run(run_id)
                if view.status.terminal or (until_person and self.awaiting_person(run_id)):
                    return view
                remaining = poll if deadline is None else min(poll, deadline - time.monotonic())
                if remaining <= 0:
                    # "still waiting for approval of gate release": what it needs, not
                    # "running", when only a wait can move it on.
                    raise TimeoutError(f"run {run_id} still {view.phase_text} after {timeout}s")
                for _ in listener.notifies(timeout=remaining, stop_after=1):
                    pass
