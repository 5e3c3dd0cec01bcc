"""`rara status`: which processes are alive (workers, schedule firing, the operator's firing),
live workers, backlog per capability, what is stale (rara.freshness), recent failures; a
warning while isolation between namespaces is off."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara import freshness
from rara.cli.common import console, reports_errors, stamp
from rara.pg import access, steps, workers
from rara.pg import schedules as schedule_sql
from rara.pg.connect import database_url
from rara.runs import LIVE_WORKER_SECONDS


@reports_errors
def status(
    failures: Annotated[int, typer.Option(min=0, max=1000, help="recent failures to show")] = 10,
) -> None:
    """What the fleet is doing now."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        live = workers.list_live(conn, LIVE_WORKER_SECONDS)
        backlog = steps.backlog(conn)
        failed = steps.list_failed(conn, failures)
        isolated = access.isolated(conn)
        firing = schedule_sql.firing_seen(conn, namespace=None)
        stale = freshness.stale(conn, namespace=None)
    if not isolated:
        console.print(
            "isolation between namespaces: off — every role reads and acts in every namespace"
            " (the owner turns it on: rara access isolate)",
            style="yellow",
            highlight=False,
        )
    console.print(_processes(len(live), firing))
    table = Table("worker", "capabilities", "up since", "last heartbeat", title="live workers")
    for w in live:
        table.add_row(
            w.id, ", ".join(sorted(w.capabilities)), stamp(w.started_at), stamp(w.heartbeat_at)
        )
    console.print(table)
    table = Table("capability", "ready", "running", title="backlog")
    for b in backlog:
        table.add_row(b.capability, str(b.ready), str(b.running))
    console.print(table)
    if stale:
        table = Table("namespace", "stale", "definition", "made by run", "freshness", title="stale")
        for old in stale:
            table.add_row(
                old.namespace,
                f"{old.kind} {old.name}",
                old.definition,
                str(old.run_id or "-"),
                old.describe(),
            )
        console.print(table)
    table = Table(
        "run", "step", "capability", "attempts", "failed at", "error", title="recent failures"
    )
    for f in failed:
        error = f.error
        message = (error or {}).get("message", "") if isinstance(error, dict) else str(error)
        table.add_row(
            str(f.run_id),
            f.key,
            f.capability,
            str(f.attempt),
            stamp(f.finished_at),
            message[:80],
        )
    console.print(table)


def _processes(workers_alive: int, firing: schedule_sql.FiringSeen) -> Table:
    """Which of rara's processes are alive, as the database sees them: workers by their
    heartbeats (within LIVE_WORKER_SECONDS), schedule firing by its named connection — the
    operator's included, the one trace an operator leaves in the database."""
    table = Table("process", "alive", "how it is seen", title="processes")
    table.add_row(
        "workers", str(workers_alive), f"a heartbeat in the last {LIVE_WORKER_SECONDS:.0f} s"
    )
    for name in sorted(set(firing.processes)):
        table.add_row(name, str(firing.processes.count(name)), "its connection to the database")
    if not firing.processes:
        table.add_row("schedule firing", "0", f"none connected: {firing.last_seen(stamp)}")
    if not any(name.startswith("rara operator") for name in firing.processes):
        table.add_row("rara operator", "not seen", "seen while its schedule firing is connected")
    return table
