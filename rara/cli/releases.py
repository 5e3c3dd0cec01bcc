"""`rara releases promote|get|rollback|list|history` (docs/releases.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rara.artifacts import open_store
from rara.artifacts.errors import ArtifactError
from rara.cli.artifacts import RootOption
from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    Output,
    OutputOption,
    client_connection,
    console,
    err_console,
    fail,
    namespace_client,
    print_listing,
    reports_errors,
    stamp,
)
from rara.freshness import freshness
from rara.namespaces import qualified
from rara.releases import Release, fetch, parse_ref

app = typer.Typer(
    help="Releases: numbered, immutable snapshots of a run's artifacts and results.",
    no_args_is_help=True,
)


@app.command()
@reports_errors
def promote(
    name: str,
    from_run: Annotated[int, typer.Option("--from-run", metavar="RUN", help="a succeeded run")],
    artifact: Annotated[
        list[str] | None,
        typer.Option(
            "--artifact",
            metavar="STEP/NAME",
            help="an artifact to release (repeatable; default: every one of the run)",
        ),
    ] = None,
    result: Annotated[
        list[str] | None,
        typer.Option(
            "--result",
            metavar="STEP",
            help="a step whose result to release (repeatable; default: every step's)",
        ),
    ] = None,
    note: Annotated[str | None, typer.Option(help="why, for whoever reads the history")] = None,
    namespace: NamespaceOption = None,
) -> None:
    """Release run RUN as the next number of NAME and make it current."""
    client = namespace_client(namespace)
    release = client.promote_release(
        name, from_run, artifacts=artifact or None, results=result or None, note=note
    )
    console.print(
        f"{release.ref} promoted from run {release.run_id} "
        f"({len(release.artifacts)} artifacts, {len(release.results)} results); current",
        highlight=False,
    )


@app.command()
@reports_errors
def get(
    ref: Annotated[str, typer.Argument(metavar="NAME[@N|@current]")],
    fetch_to: Annotated[
        Path | None,
        typer.Option(
            "--fetch", metavar="DIR", help="download every artifact into DIR/STEP/NAME, verified"
        ),
    ] = None,
    root: RootOption = None,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TEXT,
) -> None:
    """A release (the current one unless @N): what it is and what it serves; -o json for the
    whole release (its results too). With --fetch, the files written come first."""
    name, number = parse_ref(ref)
    release = namespace_client(namespace).get_release(name, number)
    as_json = output is Output.JSON
    if as_json:  # plain JSON on stdout (a script reads it); what --fetch did goes to stderr
        typer.echo(json.dumps(release.as_json(), indent=2))
    if fetch_to is not None:
        try:
            written = fetch(release, open_store(root), fetch_to)
        except (ArtifactError, ValueError, OSError) as exc:
            raise fail(str(exc)) from None
        for path, artifact in zip(written, release.artifacts, strict=True):
            (err_console if as_json else console).print(
                f"{path}: {artifact.digest} verified", highlight=False
            )
    if not as_json:
        print_release(release)


def print_release(release: Release) -> None:
    """A release in a few lines: which, since when, from what, and each artifact's digest."""
    state = "current" if release.current else "not current"
    console.print(
        f"{release.ref} ({state}): promoted by {release.promoted_by} at"
        f" {stamp(release.promoted_at)} from run {release.run_id}"
        f" ({release.definition}@{release.definition_version})"
        + (f"; note: {release.note}" if release.note else ""),
        highlight=False,
    )
    for artifact in release.artifacts:
        console.print(
            f"  {artifact.step_key}/{artifact.name} {artifact.digest} {artifact.size}B",
            highlight=False,
        )
    results = ", ".join(sorted(release.results)) or "none"
    console.print(f"results of: {results} (-o json: the whole release)", highlight=False)


@app.command()
@reports_errors
def rollback(
    name: str,
    to: Annotated[
        int | None,
        typer.Option(
            "--to", metavar="N", help="default: the release current before the current one"
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="why, for whoever reads the history")] = None,
    namespace: NamespaceOption = None,
) -> None:
    """Make an earlier release of NAME current again (the history records it)."""
    client = namespace_client(namespace)
    moved = client.rollback_release(name, to, reason=reason)
    console.print(
        f"{qualified(client.namespace, name)}: current {moved.from_number} -> {moved.to_number}",
        highlight=False,
    )


@app.command("list")
@reports_errors
def list_(
    name: Annotated[str | None, typer.Argument(help="one name's releases")] = None,
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
) -> None:
    """The namespace's releases, newest first per name; `*` marks the current one, and its
    freshness when its definition declares one (stale: older than it may be)."""
    client = namespace_client(namespace)
    rows = client.list_releases(name, all_namespaces=all_namespaces)
    with client_connection(client) as conn:
        judged = freshness(conn, namespace=None if all_namespaces else client.namespace)
    fresh = {(f.namespace, f.name): f.describe() for f in judged if f.kind == "release"}
    print_listing(
        ("release", "current", "run", "artifacts", "promoted by", "promoted", "freshness", "note"),
        (
            (
                r.namespace,
                (
                    f"{r.name}@{r.number}",
                    "*" if r.current else "",
                    str(r.run_id),
                    str(r.artifacts),
                    r.promoted_by,
                    stamp(r.promoted_at),
                    fresh.get((r.namespace, r.name), "") if r.current else "",
                    r.note or "",
                ),
            )
            for r in rows
        ),
        all_namespaces=all_namespaces,
    )


@app.command()
@reports_errors
def history(name: str, namespace: NamespaceOption = None) -> None:
    """Every promote and rollback of NAME, oldest first."""
    moves = namespace_client(namespace).release_history(name)
    table = Table("when", "action", "from", "to", "by", "reason")
    for m in moves:
        table.add_row(
            stamp(m.moved_at),
            m.action,
            "" if m.from_number is None else str(m.from_number),
            str(m.to_number),
            m.moved_by,
            m.reason or "",
        )
    console.print(table)
