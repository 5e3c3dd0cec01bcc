"""`rara status`: live workers, backlog per capability, recent failures."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara.cli.common import console, reports_errors
from rara.pg.connect import database_url
from rara.pg.queries import sync_queries
from rara.runs import LIVE_WORKER_SECONDS


@reports_errors
def status(
    failures: Annotated[int, typer.Option(min=0, max=1000, help="recent failures to show")] = 10,
) -> None:
    """What the fleet is doing now."""
    q = sync_queries()
    with psycopg.connect(database_url(), autocommit=True) as conn:
        workers = list(q.workers_live(conn, alive_seconds=LIVE_WORKER_SECONDS))
        backlog = list(q.backlog_by_capability(conn))
        failed = list(q.steps_recent_failures(conn, limit=failures))
    table = Table("worker", "capabilities", "up since", "last heartbeat", title="live workers")
    for wid, caps, started, beat in workers:
        table.add_row(wid, ", ".join(sorted(caps)), f"{started:%H:%M:%S}", f"{beat:%H:%M:%S}")
    console.print(table)
    table = Table("capability", "ready", "running", title="backlog")
    for cap, ready, running in backlog:
        table.add_row(cap, str(ready), str(running))
    console.print(table)
    table = Table(
        "run", "step", "capability", "attempts", "failed at", "error", title="recent failures"
    )
    for run_id, key, cap, attempt, at, error in failed:
        message = (error or {}).get("message", "") if isinstance(error, dict) else str(error)
        table.add_row(str(run_id), key, cap, str(attempt), f"{at:%H:%M:%S}", message[:80])
    console.print(table)
