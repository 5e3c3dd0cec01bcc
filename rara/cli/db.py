"""`rara db up|down|url` and `rara migrate`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from rara.cli.common import console, error_message, fail, reports_errors
from rara.pg.connect import database_url
from rara.pg.embedded import EmbeddedPostgresError, project_server
from rara.pg.migrate import MigrationError, migrate_database

app = typer.Typer(
    help="The project's embedded PostgreSQL (used when DATABASE_URL is unset).",
    no_args_is_help=True,
)


def _fail(exc: Exception) -> None:
    raise fail(error_message(exc))


@app.command()
def up() -> None:
    """Start (or reuse) the embedded server under .rara/pg and print its URL."""
    try:
        console.print(project_server().up(), highlight=False)
    except EmbeddedPostgresError as exc:
        _fail(exc)


@app.command()
def down() -> None:
    """Stop the embedded server (data is kept)."""
    console.print("stopped" if project_server().down() else "not running")


@app.command()
def url() -> None:
    """Print the URL of the database rara uses (DATABASE_URL, or the embedded server)."""
    try:
        console.print(database_url(), highlight=False, soft_wrap=True)
    except EmbeddedPostgresError as exc:
        _fail(exc)


class Isolation(StrEnum):
    on = "on"
    off = "off"


@reports_errors
def migrate_command(
    isolation: Annotated[
        Isolation | None,
        typer.Option(
            envvar="RARA_MIGRATE_ISOLATION",
            help="isolation between namespaces after migrating; default: on for a new database,"
            " as it was for an existing one (docs/namespaces.md)",
        ),
    ] = None,
) -> None:
    """Apply pending migrations (safe to run from many processes at once)."""
    wanted = None if isolation is None else isolation is Isolation.on
    try:
        migrated = migrate_database(database_url(), isolation=wanted)
    except (MigrationError, EmbeddedPostgresError) as exc:
        _fail(exc)
        return
    if migrated.onto_baseline:
        console.print("recognised the retired migrations 0001-0029: recorded as at the baseline")
    if not migrated.applied:
        console.print("schema up to date")
    for m in migrated.applied:
        console.print(f"applied {m.version:04d}_{m.name}")
    if line := migrated.isolation_line():
        console.print(line, highlight=False, soft_wrap=True)
