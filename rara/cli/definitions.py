"""`rara definitions apply|list|show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    Output,
    OutputOption,
    console,
    namespace_client,
    print_listing,
    read_document_arg,
    reports_errors,
    stamp,
)
from rara.definitions.parse import MAX_DOCUMENT_BYTES, load_definition
from rara.definitions.render import definition_yaml
from rara.namespaces import qualified

app = typer.Typer(help="Workflow definitions and their immutable versions.", no_args_is_help=True)


@app.command()
@reports_errors
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML document ('-' for stdin)")],
    namespace: NamespaceOption = None,
) -> None:
    """Register a definition: the same spec gives the same version, a changed one N+1. A
    document's metadata.namespace is where it goes unless --namespace names another (refused)."""
    text, source = read_document_arg(file, MAX_DOCUMENT_BYTES)
    applied = namespace_client(namespace).apply_definition(load_definition(text, source))
    state = "created" if applied.created else "unchanged"
    console.print(
        f"{qualified(applied.namespace, applied.name)} version {applied.version} "
        f"{applied.digest} ({state})",
        highlight=False,
    )


@app.command("list")
@reports_errors
def list_(namespace: NamespaceOption = None, all_namespaces: AllNamespacesOption = False) -> None:
    """The namespace's definitions with their latest versions."""
    rows = namespace_client(namespace).list_definitions(all_namespaces=all_namespaces)
    print_listing(
        ("name", "latest", "versions", "digest", "retired"),
        (
            (
                row["namespace"],
                (
                    row["name"],
                    str(row["latest_version"]),
                    str(row["versions"]),
                    row["digest"][:19] + "…",
                    stamp(row["retired_at"]),
                ),
            )
            for row in rows
        ),
        all_namespaces=all_namespaces,
    )


@app.command()
@reports_errors
def show(
    name: str,
    version: Annotated[int | None, typer.Option(help="default: latest")] = None,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TEXT,
) -> None:
    """A version as a YAML document (applying it gives the same version): each step's fields
    that differ from their defaults. -o json: the version with its normalised spec, every
    default filled in, as the database keeps it."""
    row = namespace_client(namespace).get_definition(name, version)
    if output is Output.JSON:
        row["created_at"] = row["created_at"].isoformat()
        row["retired_at"] = row["retired_at"] and row["retired_at"].isoformat()
        typer.echo(json.dumps(row, indent=2, ensure_ascii=False))
        return
    retired = f", retired {stamp(row['retired_at'])}" if row["retired_at"] else ""
    typer.echo(
        f"# {qualified(row['namespace'], row['name'])} version {row['version']} {row['digest']}"
        f" (applied {stamp(row['created_at'])}{retired})"
    )
    typer.echo(definition_yaml(row["namespace"], row["name"], row["spec"]), nl=False)
