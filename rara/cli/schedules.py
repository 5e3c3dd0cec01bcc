"""`rara schedules apply|list|show|pause|resume|trigger|backfill|delete|run`
(docs/schedules.md)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    client_connection,
    console,
    namespace_client,
    print_listing,
    read_document_arg,
    reports_errors,
    stamp,
)
from rara.definitions.parse import MAX_DOCUMENT_BYTES
from rara.errors import InputInvalid
from rara.logs import configure
from rara.namespaces import qualified
from rara.pg import schedules as schedule_sql
from rara.pg.connect import database_url
from rara.schedules import firing, manage
from rara.schedules.model import load_schedule

app = typer.Typer(help="Schedules: a run at each tick of a cron expression.", no_args_is_help=True)


def _when(value: datetime | None) -> str:
    return stamp(value)


@app.command()
@reports_errors
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML document ('-' for stdin)")],
    namespace: NamespaceOption = None,
) -> None:
    """Create or change a schedule; the same document again changes nothing. A document's
    metadata.namespace is where it goes unless --namespace names another (refused)."""
    text, source = read_document_arg(file, MAX_DOCUMENT_BYTES)
    schedule = load_schedule(text, source)
    client = namespace_client(namespace)
    where = client.document_namespace(
        schedule.metadata.namespace, f"WorkflowSchedule {schedule.name}"
    )
    with client_connection(client) as conn:
        applied = manage.apply_schedule(conn, schedule, namespace=where)
        row = manage.get_schedule(conn, schedule.name, namespace=where)
    state = "created" if applied.created else "changed" if applied.changed else "unchanged"
    console.print(
        f"{qualified(where, schedule.name)} ({state}); next tick {_when(row.next_tick)}",
        highlight=False,
    )


@app.command("list")
@reports_errors
def list_(namespace: NamespaceOption = None, all_namespaces: AllNamespacesOption = False) -> None:
    """The namespace's schedules with their next and last ticks ("refused": the firing
    cannot fire it; `show` says why)."""
    client = namespace_client(namespace)
    namespace = None if all_namespaces else client.namespace
    with client_connection(client) as conn:
        rows = schedule_sql.list_all(conn, namespace=namespace)
        seen = schedule_sql.firing_seen(conn, namespace=namespace)
    print_listing(
        ("name", "definition", "schedule", "zone", "policy", "next tick", "last run", "missed"),
        ((row.namespace, _summary_cells(row, seen)) for row in rows),
        all_namespaces=all_namespaces,
    )
    active = [r for r in rows if not r.suspended and r.refused_reason is None]
    if active and (problem := seen.problem(stamp)):
        console.print(problem, style="yellow", highlight=False)


def _summary_cells(
    row: schedule_sql.ScheduleSummary, seen: schedule_sql.FiringSeen
) -> tuple[str, ...]:
    last = "" if row.last_run_id is None else f"{row.last_run_id} {row.last_run_status}"
    late = " (overdue: not fired)" if seen.overdue(row.next_tick) else ""
    return (
        row.name,
        row.definition + ("" if row.version is None else f" v{row.version}"),
        row.cron,
        row.time_zone,
        row.concurrency_policy,
        "paused"
        if row.suspended
        else "refused"
        if row.refused_reason
        else _when(row.next_tick) + late,
        last,
        str(row.missed_ticks),
    )


@app.command()
@reports_errors
def show(
    name: str,
    ticks: Annotated[int, typer.Option(min=1, max=1000, help="ticks shown")] = 20,
    namespace: NamespaceOption = None,
) -> None:
    """A schedule's spec, state and newest decided ticks."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        row = manage.get_schedule(conn, name, namespace=client.namespace)
        history = schedule_sql.ticks(conn, name, ticks, namespace=client.namespace)
        seen = schedule_sql.firing_seen(conn, namespace=client.namespace)
    late = " (overdue: not fired)" if seen.overdue(row.next_tick) else ""
    state = "paused" if row.suspended else f"next tick {_when(row.next_tick)}{late}"
    if row.refused_reason is not None:
        state = (
            f"refused by the firing at {_when(row.refused_at)}, not fired until applied "
            f"again: {row.refused_reason}"
        )
    console.print(
        f"{qualified(row.namespace, row.name)}: {state}; last tick {_when(row.last_tick) or '-'} "
        f"(run {row.last_run_id or '-'} {row.last_run_status or ''}); "
        f"{row.missed_ticks} missed",
        highlight=False,
    )
    if not row.suspended and row.refused_reason is None and (problem := seen.problem(stamp)):
        console.print(problem, style="yellow", highlight=False)
    console.print_json(json.dumps(row.spec))
    table = Table("tick", "outcome", "run", "status", "reason")
    for t in history:
        table.add_row(
            _when(t.tick), t.outcome, str(t.run_id or ""), t.run_status or "", t.reason or ""
        )
    console.print(table)


@app.command()
@reports_errors
def pause(name: str, namespace: NamespaceOption = None) -> None:
    """Stop firing NAME (its ticks while paused are neither fired nor missed)."""
    client = namespace_client(namespace)
    changed = client.suspend_schedule(name, True)
    console.print(
        f"{qualified(client.namespace, name)}: paused" + ("" if changed else " (already)"),
        highlight=False,
    )


@app.command()
@reports_errors
def resume(name: str, namespace: NamespaceOption = None) -> None:
    """Fire NAME again, from its next tick after now."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        changed = manage.set_suspended(conn, name, False, namespace=client.namespace)
        row = manage.get_schedule(conn, name, namespace=client.namespace)
    note = "" if changed else " (was not paused)"
    console.print(
        f"{qualified(client.namespace, name)}: resumed{note}; next tick {_when(row.next_tick)}",
        highlight=False,
    )


@app.command()
@reports_errors
def trigger(name: str, namespace: NamespaceOption = None) -> None:
    """Start a run of NAME now, whatever its concurrency policy; prints the run id."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        run_id = manage.trigger(conn, name, namespace=client.namespace)
    console.print(str(run_id), highlight=False)


@app.command()
@reports_errors
def delete(name: str, namespace: NamespaceOption = None) -> None:
    """Delete NAME and its tick history (its runs stay)."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        manage.delete_schedule(conn, name, namespace=client.namespace)
    console.print(f"{qualified(client.namespace, name)}: deleted", highlight=False)


def _instant(value: str, what: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InputInvalid(f"{what} {value!r} is not an ISO 8601 time") from None


@app.command()
@reports_errors
def backfill(
    name: str,
    start: Annotated[str, typer.Option("--from", help="first instant, ISO 8601 with offset")],
    end: Annotated[str, typer.Option("--to", help="last instant, ISO 8601 with offset")],
    namespace: NamespaceOption = None,
) -> None:
    """One run per tick of NAME in [--from, --to]; a tick that already ran keeps its run."""
    client = namespace_client(namespace)
    first, last = _instant(start, "--from"), _instant(end, "--to")
    with client_connection(client) as conn:
        done = manage.backfill(conn, name, first, last, namespace=client.namespace)
    for b in done:
        console.print(
            f"{stamp(b.tick)} run {b.run_id}" + ("" if b.created else " (existing)"),
            highlight=False,
        )
    created = sum(b.created for b in done)
    console.print(f"{len(done)} ticks: {created} runs started", highlight=False)


@app.command("run")
@reports_errors
def run_() -> None:
    """Fire every namespace's schedules until stopped: sleeps until the next tick or a
    schedule change. Run as many as you like (they never fire a tick twice); the operator
    runs one too. A failed pass is logged and tried again after a backoff."""
    configure()
    firing.run_forever(database_url())
