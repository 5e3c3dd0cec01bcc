"""`rara artifacts get|gc`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import psycopg
import typer

from rara.artifacts import open_store
from rara.artifacts.errors import ArtifactError
from rara.artifacts.gc import collect_garbage
from rara.cli.common import console, fail, reports_errors
from rara.errors import InputInvalid, NotFound
from rara.pg import artifacts as artifact_sql
from rara.pg.connect import database_url

app = typer.Typer(help="Content-addressed artifacts.", no_args_is_help=True)

RootOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        "--root",
        envvar="RARA_ARTIFACT_ROOT",
        help="artifact store: a directory or s3://bucket/prefix?endpoint=… "
        "(default: $RARA_ARTIFACTS, else .rara/artifacts)",
    ),
]


FULL_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
PREFIX = re.compile(r"^(sha256:)?([0-9a-f]{4,64})…?$")


def resolve_digest(text: str) -> str:
    """A full digest from a full one or a unique prefix of at least 4 hex digits, with or
    without ``sha256:`` (what `rara runs watch` and the demo print), as git takes commits."""
    if FULL_DIGEST.match(text):
        return text
    match = PREFIX.match(text.strip())
    if match is None:
        raise InputInvalid(
            f"digest {text!r}: expected sha256:<64 hex digits> or a prefix of at least 4 hex digits"
        )
    prefix = "sha256:" + match.group(2)
    with psycopg.connect(database_url(), autocommit=True) as conn:
        found = artifact_sql.find_by_prefix(conn, prefix, limit=6)
    if not found:
        raise NotFound(f"no artifact digest starts with {prefix}")
    if len(found) > 1:
        shown = ", ".join(d[:19] + "…" for d in found[:5])
        raise InputInvalid(
            f"digest prefix {prefix} is ambiguous: {shown}"
            + (" and more" if len(found) > 5 else "")
        )
    return found[0]


@app.command()
@reports_errors
def get(
    digest: Annotated[str, typer.Argument(help="sha256:<hex>, or a unique prefix of it")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="the file to write, checked against the digest")
    ],
    root: RootOption = None,
) -> None:
    """Write a blob to FILE, verifying its sha256 as it writes (nothing is left on mismatch)."""
    digest = resolve_digest(digest)
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
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say what would be deleted; delete nothing")
    ] = False,
) -> None:
    """Remove blobs no manifest, checkpoint or release references (after a grace period)."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        report = collect_garbage(conn, open_store(root), grace_seconds=grace, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {len(report.deleted)} blobs ({report.deleted_bytes} bytes); kept "
        f"{report.kept_referenced} referenced and {report.kept_young} younger than the grace; "
        f"{report.tmp_removed} stale temp files"
    )
