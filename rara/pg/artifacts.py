"""Typed access to ``db/queries/artifacts.sql``: manifests and the blobs they reference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg.rows import class_row, scalar_row

from rara.pg.queries import Conn, many, run


@dataclass(frozen=True, slots=True)
class ArtifactRow:
    """One artifact of a succeeded step of a run (its succeeded attempt's manifest)."""

    key: str
    name: str
    digest: str
    size: int
    media_type: str


def list_for_run(conn: Conn, run_id: int) -> list[ArtifactRow]:
    return many(conn, "artifact_list", class_row(ArtifactRow), run_id=run_id)


def find_by_prefix(conn: Conn, prefix: str, limit: int) -> list[str]:
    """Up to ``limit`` stored digests starting with ``prefix`` (``sha256:ab12…``)."""
    return [
        str(d)
        for d in many(conn, "artifact_find_by_prefix", scalar_row, prefix=prefix, limit=limit)
    ]


def referenced(conn: Conn) -> set[str]:
    """Every digest a manifest, a checkpoint, a live cache entry or a release still points
    at."""
    return {str(d) for d in many(conn, "artifact_list_referenced", scalar_row)}


def forget(conn: Conn, digests: Sequence[str]) -> None:
    """Forget the rows of blobs nothing references any more."""
    run(conn, "artifact_forget_many", digests=list(digests))
