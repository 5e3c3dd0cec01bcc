"""`rara artifacts get|gc`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import psycopg
import typer

from rara.artifacts import open_store
from rara.artifacts.errors import ArtifactError
from rara.artifacts.gc import collect_garbage
from rara.cli.common import console, fail, reports_errors
from rara.pg.connect import database_url

app = typer.Typer(help="Content-addressed artifacts.", no_args_is_help=True)

RootOption = Annotated[
    str | None,
    typer.Option("--store", "--root", envvar="RARA_ARTIFACT_ROOT",
                 help="artifact store: a directory or s3://bucket/prefix?endpoint=… "
                 "(default: $RARA_ARTIFACTS, else .rara/artifacts)"),
]


@app.command()
@reports_errors
def get(
    digest: str,
    output: Annotated[Path, typer.Option("-o", "--output")],
    root: RootOption = None,
) -> None:
    """Write a blob to FILE, verifying its sha256 as it writes (nothing is left on mismatch)."""
    try:
        ref = open_store(root).get_file(digest, output)
    except (ArtifactError, ValueError) as exc:
        raise fail(str(exc)) from None
    console.print(f"{output}: {ref.digest} verified")


@app.command()
@reports_errors
def gc(
    root: RootOption = None,
    grace: Annotated[
        float, typer.Option(help="keep unreferenced blobs younger than this (s)")
    ] = 86400,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
) -> None:
    """Remove blobs no manifest or checkpoint references (after a grace period)."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        report = collect_garbage(conn, open_store(root), grace_seconds=grace, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {len(report.deleted)} blobs ({report.deleted_bytes} bytes); kept "
        f"{report.kept_referenced} referenced and {report.kept_young} younger than the grace; "
        f"{report.tmp_removed} stale temp files"
    )
