"""`rara status`: live workers, backlog per capability, recent failures; a warning while
isolation between namespaces is off."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara.cli.common import console, reports_errors
from rara.pg import access, steps, workers
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
    if not isolated:
        console.print(
            "isolation between namespaces: off — every role reads and acts in every namespace"
            " (the owner turns it on: rara access isolate)",
            style="yellow",
            highlight=False,
        )
    table = Table("worker", "capabilities", "up since", "last heartbeat", title="live workers")
    for w in live:
        table.add_row(
            w.id,
            ", ".join(sorted(w.capabilities)),
            f"{w.started_at:%H:%M:%S}",
            f"{w.heartbeat_at:%H:%M:%S}",
        )
    console.print(table)
    table = Table("capability", "ready", "running", title="backlog")
    for b in backlog:
        table.add_row(b.capability, str(b.ready), str(b.running))
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
            f"{f.finished_at:%H:%M:%S}",
            message[:80],
        )
    console.print(table)
