"""`rara triggers apply|list|show|pause|resume|delete|serve` (docs/triggers.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    client_connection,
    console,
    fail,
    namespace_client,
    print_listing,
    read_document_arg,
    reports_errors,
    stamp,
)
from rara.definitions.parse import MAX_DOCUMENT_BYTES
from rara.logs import configure
from rara.namespaces import qualified
from rara.pg.connect import database_url
from rara.pg.triggers import TriggerSummary
from rara.triggers import manage
from rara.triggers.model import load_trigger

app = typer.Typer(
    help="Triggers: a run when an event comes (a webhook, a change of objects).",
    no_args_is_help=True,
)


def _when(value: datetime | None) -> str:
    return stamp(value) or "-"


@app.command()
@reports_errors
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML document ('-' for stdin)")],
    namespace: NamespaceOption = None,
) -> None:
    """Create or change a trigger; the same document again changes nothing. A document's
    metadata.namespace is where it goes unless --namespace names another (refused)."""
    text, source = read_document_arg(file, MAX_DOCUMENT_BYTES)
    trigger = load_trigger(text, source)
    client = namespace_client(namespace)
    where = client.document_namespace(trigger.metadata.namespace, f"WorkflowTrigger {trigger.name}")
    with client_connection(client) as conn:
        applied = manage.apply_trigger(conn, trigger, namespace=where)
    state = "created" if applied.created else "changed" if applied.changed else "unchanged"
    if trigger.spec.webhook is not None:
        what = f"deliveries go to POST /hooks/{where}/{trigger.name}"
    else:
        what = _watching(trigger.spec.kind, trigger.spec.config)
    console.print(
        f"{qualified(where, trigger.name)} ({state}); {what}"
        + (" (paused)" if trigger.spec.suspend else ""),
        highlight=False,
    )


@app.command("list")
@reports_errors
def list_(namespace: NamespaceOption = None, all_namespaces: AllNamespacesOption = False) -> None:
    """The namespace's triggers, each with its newest event and that event's run."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        rows = manage.list_triggers(conn, namespace=None if all_namespaces else client.namespace)
    print_listing(
        ("name", "kind", "definition", "state", "events", "last event", "last run"),
        ((row.namespace, _summary_cells(row)) for row in rows),
        all_namespaces=all_namespaces,
    )


def _summary_cells(row: TriggerSummary) -> tuple[str, ...]:
    if row.last_outcome is None:
        last_run = ""
    elif row.last_run_id is None:
        last_run = row.last_outcome
    else:
        last_run = f"{row.last_run_id} {row.last_run_status or ''}".rstrip()
    return (
        row.name,
        row.kind,
        row.definition + ("" if row.version is None else f" v{row.version}"),
        "paused" if row.suspended else "active",
        str(row.events),
        _when(row.last_event_at),
        last_run,
    )


@app.command()
@reports_errors
def show(
    name: str,
    events: Annotated[int, typer.Option(min=1, max=1000, help="events shown")] = 20,
    namespace: NamespaceOption = None,
) -> None:
    """A trigger's spec as applied, its state and its newest events."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        row = manage.get_trigger(conn, name, namespace=client.namespace)
        history = manage.trigger_events(conn, name, namespace=client.namespace, limit=events)
    state = "paused" if row.suspended else "active"
    if row.kind == "webhook":
        where = f"POST /hooks/{row.namespace}/{row.name}"
    else:
        seen = f" ({row.objects} objects seen)" if row.kind == "objects" else ""
        where = f"{_watching(row.kind, row.config)}{seen}; next pass {_when(row.next_poll)}"
    console.print(
        f"{qualified(row.namespace, row.name)}: {row.kind}, {state}; {where}; "
        f"changed {_when(row.updated_at)}",
        highlight=False,
    )
    if row.watch_error is not None:
        console.print(
            f"cannot watch since {_when(row.watch_error_at)}: {row.watch_error}",
            style="yellow",
            highlight=False,
            markup=False,
        )
    console.print(yaml.safe_dump({"spec": row.spec}, sort_keys=False).rstrip(), markup=False)
    table = Table("event", "outcome", "run", "status", "deliveries", "last", "reason")
    for e in history:
        table.add_row(
            e.event_key,
            e.outcome,
            str(e.run_id or ""),
            e.run_status or "",
            str(e.seen),
            _when(e.last_at),
            e.reason or "",
        )
    console.print(table)


def _watching(kind: str, config: dict[str, Any]) -> str:
    if kind == "objects":
        return f"watching {config.get('location')}"
    if kind == "release":
        rollbacks = " and rollbacks" if config.get("onRollback") else ""
        return f"watching the promotions{rollbacks} of release {config.get('name')}"
    if kind == "stale":
        return f"watching whether {config.get('definition')} goes stale"
    states = "/".join(config.get("states", []))
    return f"watching the runs of {config.get('definition')} that end {states}"


def _set_suspended(name: str, suspended: bool, namespace: str | None) -> None:
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        changed = manage.set_suspended(conn, name, suspended, namespace=client.namespace)
    word = "paused" if suspended else "resumed"
    note = "" if changed else (" (already)" if suspended else " (was not paused)")
    console.print(f"{qualified(client.namespace, name)}: {word}{note}", highlight=False)


@app.command()
@reports_errors
def pause(name: str, namespace: NamespaceOption = None) -> None:
    """Refuse NAME's events until resumed (each sender is told: HTTP 409)."""
    _set_suspended(name, True, namespace)


@app.command()
@reports_errors
def resume(name: str, namespace: NamespaceOption = None) -> None:
    """Take NAME's events again."""
    _set_suspended(name, False, namespace)


@app.command()
@reports_errors
def delete(name: str, namespace: NamespaceOption = None) -> None:
    """Delete NAME and its event history (its runs stay)."""
    client = namespace_client(namespace)
    with client_connection(client) as conn:
        manage.delete_trigger(conn, name, namespace=client.namespace)
    console.print(f"{qualified(client.namespace, name)}: deleted", highlight=False)


@app.command()
@reports_errors
def serve(
    host: Annotated[
        str, typer.Option(envvar="RARA_TRIGGERS_HOST", help="address to bind (loopback by default)")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, envvar="RARA_TRIGGERS_PORT", help="port to listen on")
    ] = 8090,
    pool_size: Annotated[
        int, typer.Option(min=1, max=100, help="database connections kept at most")
    ] = 8,
    objects_root: Annotated[
        Path | None,
        typer.Option(
            envvar="RARA_TRIGGERS_OBJECTS_ROOT",
            help="folder below which objects triggers may watch folders (default: none)",
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option("--watch/--no-watch", help="watch the objects triggers too"),
    ] = True,
) -> None:
    """Serve every namespace's triggers: webhooks at POST /hooks/NAMESPACE/NAME, and the
    objects triggers watched. Secrets come from $RARA_SECRETS_DIR/NAME/KEY or
    $RARA_SECRET_NAME_KEY; S3 credentials as the artifact store takes them. Run as many as
    you like: an event starts one run whichever of them takes it."""
    import uvicorn

    from rara.triggers.webhook import WebhookConfig, create_app

    configure()
    if objects_root is not None and not objects_root.is_dir():
        raise fail(f"--objects-root: {objects_root} is not a folder")
    config = WebhookConfig(
        database_url=database_url(),
        pool_size=pool_size,
        watch_objects=watch,
        objects_root=objects_root,
    )
    console.print(f"rara triggers on http://{host}:{port}/hooks/", highlight=False)
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=3,
        proxy_headers=False,
    )
