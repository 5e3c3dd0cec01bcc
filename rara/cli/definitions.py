"""`rara definitions apply|list|show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rara.cli.common import console, read_document_arg, reports_errors
from rara.client import Client
from rara.definitions.parse import MAX_DOCUMENT_BYTES, load_definition

app = typer.Typer(help="Workflow definitions and their immutable versions.", no_args_is_help=True)


@app.command()
@reports_errors
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML document ('-' for stdin)")],
) -> None:
    """Register a definition: the same spec gives the same version, a changed one N+1."""
    text, source = read_document_arg(file, MAX_DOCUMENT_BYTES)
    applied = Client().apply_definition(load_definition(text, source))
    state = "created" if applied.created else "unchanged"
    console.print(
        f"{applied.name} version {applied.version} {applied.digest} ({state})", highlight=False
    )


@app.command("list")
@reports_errors
def list_() -> None:
    """Every definition with its latest version."""
    table = Table("name", "latest", "versions", "digest", "retired")
    for row in Client().list_definitions():
        table.add_row(
            row["name"],
            str(row["latest_version"]),
            str(row["versions"]),
            row["digest"][:19] + "…",
            str(row["retired_at"] or ""),
        )
    console.print(table)


@app.command()
@reports_errors
def show(
    name: str, version: Annotated[int | None, typer.Option(help="default: latest")] = None
) -> None:
    """A version's canonical spec."""
    row = Client().get_definition(name, version)
    console.print(f"{row['name']} version {row['version']} {row['digest']}", highlight=False)
    console.print_json(json.dumps(row["spec"]))
