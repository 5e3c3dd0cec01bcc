"""`rara access [grant|revoke|isolate|open|mine]`: which roles may read and act in which
namespaces, and whether that is enforced (docs/namespaces.md, "Isolation"). All but `mine`
need the schema owner's login (the DATABASE_URL `rara migrate` uses)."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara.cli.common import console, reports_errors, stamp
from rara.namespaces import check_namespace
from rara.pg import access
from rara.pg.connect import database_url

app = typer.Typer(
    help="Which database roles may read and act in which namespaces ('*': every one).",
    invoke_without_command=True,
)

Namespaces = Annotated[
    list[str], typer.Argument(help="namespace names, or '*' for every namespace")
]


def _namespaces(values: list[str]) -> list[str]:
    return [v if v == access.EVERY_NAMESPACE else check_namespace(v) for v in values]


@app.callback()
@reports_errors
def list_(ctx: typer.Context) -> None:
    """Every grant (what the owner set; needs a login that sees every namespace)."""
    if ctx.invoked_subcommand is not None:
        return
    with psycopg.connect(database_url(), autocommit=True) as conn:
        on = access.isolated(conn)
        rows = access.list_all(conn)
    console.print(
        "isolation: on — each role reads and acts in the namespaces granted to it"
        if on
        else "isolation: off — every role reads and acts in every namespace (rara access isolate)"
    )
    if not rows:
        console.print("no grants")
        return
    table = Table("role", "namespace", "granted")
    for row in rows:
        role = row.role if row.role_exists else f"{row.role} (dropped: grants nobody)"
        table.add_row(role, row.namespace, stamp(row.granted_at))
    console.print(table)


@app.command()
@reports_errors
def grant(role: str, namespaces: Namespaces) -> None:
    """ROLE, and every role that is a member of it, may read and act in NAMESPACES."""
    wanted = _namespaces(namespaces)
    with psycopg.connect(database_url(), autocommit=True) as conn:
        added = access.grant(conn, role, wanted)
    kept = [n for n in wanted if n not in added]
    console.print(
        f"{role}: granted {', '.join(added) or 'nothing new'}"
        + (f" (already had {', '.join(kept)})" if kept else ""),
        highlight=False,
    )


@app.command()
@reports_errors
def revoke(role: str, namespaces: Namespaces) -> None:
    """ROLE no longer reads or acts in NAMESPACES (through this grant: a group it is a member
    of may still grant them)."""
    wanted = _namespaces(namespaces)
    with psycopg.connect(database_url(), autocommit=True) as conn:
        removed = access.revoke(conn, role, wanted)
    console.print(f"{role}: revoked {', '.join(removed) or 'nothing (it had none of them)'}")


@app.command()
@reports_errors
def isolate() -> None:
    """Turn isolation on: from now on each role reads and acts only in its namespaces (grant
    the teams theirs first; workers and operators have '*')."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        was = access.set_isolation(conn, True)
    console.print("isolation: on" + (" (it already was)" if was else ""))


@app.command("open")
@reports_errors
def open_() -> None:
    """Turn isolation off: every role reads and acts in every namespace again."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        was = access.set_isolation(conn, False)
    console.print("isolation: off" + ("" if was else " (it already was)"))


@app.command()
@reports_errors
def mine() -> None:
    """The namespaces this login reads and acts in."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        namespaces = access.mine(conn)
    if namespaces == [access.EVERY_NAMESPACE]:
        console.print("every namespace")
    else:
        console.print("\n".join(namespaces) or "none", highlight=False)


@app.command("bootstrap-sql")
@reports_errors
def bootstrap_sql(
    owner: Annotated[
        str, typer.Argument(help="the login that will own and migrate rara's database")
    ],
) -> None:
    """Print what a superuser runs once per server so that OWNER, a login without CREATEROLE,
    can migrate rara: the group roles, and ADMIN OPTION on each for OWNER (pipe it to
    `psql -v ON_ERROR_STOP=1` as a superuser). Needs no database."""
    console.print(
        access.bootstrap_sql(owner), highlight=False, markup=False, soft_wrap=True, end=""
    )
