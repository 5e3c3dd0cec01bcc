"""`rara limits [set|unset|weight]`: concurrency limits per capability (docs/limits.md), and
each namespace's quotas and weight in the lease's fair share (docs/namespaces.md, "Fair
share"). All of them are the fleet's: they need a role with every namespace."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara.cli.common import console, fail, reports_errors, stamp
from rara.definitions.model import CAPABILITY_PATTERN
from rara.namespaces import check_namespace, qualified
from rara.pg import limits
from rara.pg.connect import database_url

app = typer.Typer(
    help="Concurrency limits per capability and per namespace, and the namespaces' weights, "
    "enforced when steps are leased.",
    invoke_without_command=True,
)

# Not RARA_NAMESPACE: without the flag, `set` limits the whole fleet, as it always did; a
# quota names its namespace on purpose.
QuotaOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAME",
        show_default=False,
        help="a quota of this namespace instead of a limit of the fleet; CAPABILITY '*': all "
        "of the namespace's capabilities together",
    ),
]


def _capability(value: str, *, every: bool = False) -> str:
    if every and value == limits.EVERY_CAPABILITY:
        return value
    if not re.match(CAPABILITY_PATTERN, value):
        also = " or '*' (with --namespace)" if every else ""
        raise fail(f"capability {value!r} is not name@major (e.g. adapt.lora@1){also}")
    return value


@app.callback()
@reports_errors
def list_(ctx: typer.Context) -> None:
    """Every limit, quota and weight, with the attempts each counts running now."""
    if ctx.invoked_subcommand is not None:
        return
    with psycopg.connect(database_url(), autocommit=True) as conn:
        rows = limits.list_all(conn)
        quotas = limits.list_quotas(conn)
        shares = limits.list_shares(conn)
    if not rows:
        console.print("no limits: every capability runs as many attempts as workers take")
    _print_table(
        ("capability", "max running", "running", "set"),
        [(r.capability, r.max_running, r.running, r.updated_at) for r in rows],
    )
    _print_table(
        ("namespace", "capability", "max running", "running", "set"),
        [(q.namespace, q.capability, q.max_running, q.running, q.updated_at) for q in quotas],
    )
    _print_table(
        ("namespace", "weight", "running", "set"),
        [(w.namespace, w.weight, w.running, w.updated_at) for w in shares],
    )
    if shares:
        console.print("every other namespace: weight 1")


def _print_table(columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
    """A table of ``rows`` (nothing when empty), the last cell of each a time."""
    if not rows:
        return
    table = Table(*columns)
    for *cells, at in rows:
        table.add_row(*(str(c) for c in cells), stamp(at) if isinstance(at, datetime) else "")
    console.print(table)


def _set(capability: str, namespace: str | None, max_running: int | None) -> str:
    """A limit of the fleet (no namespace) or a quota of ``namespace``; None removes it.
    Returns how to name it."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        if namespace is None:
            limits.set_limit(conn, _capability(capability), max_running)
            return capability
        check_namespace(namespace, source="--namespace")
        limits.set_quota(conn, namespace, _capability(capability, every=True), max_running)
    return qualified(namespace, capability)


@app.command("set")
@reports_errors
def set_(
    capability: str,
    max_running: Annotated[int, typer.Argument(min=0, help="0 pauses the capability")],
    namespace: QuotaOption = None,
) -> None:
    """At most MAX_RUNNING attempts of CAPABILITY at once, across the fleet, or of one
    namespace with --namespace."""
    where = _set(capability, namespace, max_running)
    console.print(f"{where}: at most {max_running} running", highlight=False)


@app.command()
@reports_errors
def unset(capability: str, namespace: QuotaOption = None) -> None:
    """Remove CAPABILITY's limit, or a namespace's quota with --namespace."""
    console.print(f"{_set(capability, namespace, None)}: no limit", highlight=False)


@app.command()
@reports_errors
def weight(
    namespace: str,
    weight: Annotated[
        int,
        typer.Argument(min=1, max=10000, help="its share against the others' (1 unless set)"),
    ],
) -> None:
    """NAMESPACE's WEIGHT in the lease's fair share: busy namespaces split the fleet's
    leases in proportion to their weights."""
    check_namespace(namespace, source="NAMESPACE")
    with psycopg.connect(database_url(), autocommit=True) as conn:
        limits.set_share(conn, namespace, None if weight == 1 else weight)
    console.print(f"{namespace}: weight {weight}", highlight=False)
