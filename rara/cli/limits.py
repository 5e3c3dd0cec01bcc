"""`rara limits [set|unset]`: concurrency limits per capability (docs/limits.md)."""

from __future__ import annotations

import re
from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara.cli.common import console, fail, reports_errors
from rara.definitions.model import CAPABILITY_PATTERN
from rara.pg import limits
from rara.pg.connect import database_url

app = typer.Typer(
    help="Concurrency limits per capability, enforced when steps are leased.",
    invoke_without_command=True,
)


def _capability(value: str) -> str:
    if not re.match(CAPABILITY_PATTERN, value):
        raise fail(f"capability {value!r} is not name@major (e.g. adapt.lora@1)")
    return value


@app.callback()
@reports_errors
def list_(ctx: typer.Context) -> None:
    """Every limit, with the attempts of its capability running now."""
    if ctx.invoked_subcommand is not None:
        return
    with psycopg.connect(database_url(), autocommit=True) as conn:
        rows = limits.list_all(conn)
    if not rows:
        console.print("no limits: every capability runs as many attempts as workers take")
        return
    table = Table("capability", "max running", "running", "set")
    for row in rows:
        table.add_row(
            row.capability,
            str(row.max_running),
            str(row.running),
            f"{row.updated_at:%Y-%m-%d %H:%M:%S}",
        )
    console.print(table)


@app.command("set")
@reports_errors
def set_(
    capability: str,
    max_running: Annotated[int, typer.Argument(min=0, help="0 pauses the capability")],
) -> None:
    """At most MAX_RUNNING attempts of CAPABILITY at once, across the fleet."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        limits.set_limit(conn, _capability(capability), max_running)
    console.print(f"{capability}: at most {max_running} running", highlight=False)


@app.command()
@reports_errors
def unset(capability: str) -> None:
    """Remove CAPABILITY's limit."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        limits.set_limit(conn, _capability(capability), None)
    console.print(f"{capability}: no limit", highlight=False)
