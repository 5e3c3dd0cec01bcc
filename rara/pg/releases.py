"""Typed access to ``db/queries/releases.sql``: numbered, immutable releases and the pointer
to the current one per name (migration 0022; the rules in db/functions/releases.sql and
docs/releases.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from rara.pg.queries import Conn, many, one, value


@dataclass(frozen=True, slots=True)
class ReleaseRow:
    id: int
    namespace: str
    name: str
    number: int
    run_id: int
    definition: str
    definition_version: int
    definition_version_id: int
    results: dict[str, Any]
    promoted_by: str
    promoted_at: datetime
    note: str | None
    current: bool


@dataclass(frozen=True, slots=True)
class ReleaseArtifactRow:
    step_key: str
    name: str
    digest: str
    size: int
    media_type: str


@dataclass(frozen=True, slots=True)
class ReleaseSummary:
    namespace: str
    name: str
    number: int
    run_id: int
    promoted_by: str
    promoted_at: datetime
    note: str | None
    current: bool
    artifacts: int


@dataclass(frozen=True, slots=True)
class MoveRow:
    """One move of a name's current pointer."""

    action: str  # promote, rollback
    from_number: int | None  # None: the first promote
    to_number: int
    moved_by: str
    moved_at: datetime
    reason: str | None


@dataclass(frozen=True, slots=True)
class RolledBack:
    from_number: int
    to_number: int


def promote(
    conn: Conn,
    name: str,
    run_id: int,
    artifacts: Sequence[str] | None,
    results: Sequence[str] | None,
    note: str | None,
    *,
    namespace: str,
) -> int:
    number = value(
        conn,
        "release_promote",
        int,
        name=name,
        run_id=run_id,
        artifacts=None if artifacts is None else list(artifacts),
        results=None if results is None else list(results),
        note=note,
        namespace=namespace,
    )
    if number is None:
        raise AssertionError("release_promote returned no number")
    return number


def rollback(
    conn: Conn, name: str, to_number: int | None, reason: str | None, *, namespace: str
) -> RolledBack:
    row = one(
        conn,
        "release_rollback",
        class_row(RolledBack),
        name=name,
        to_number=to_number,
        reason=reason,
        namespace=namespace,
    )
    if row is None:
        raise AssertionError("release_rollback returned no row")
    return row


def get(conn: Conn, name: str, number: int | None, *, namespace: str) -> ReleaseRow | None:
    """Release ``number`` of ``name`` (None: the current one); None when there is none."""
    return one(
        conn, "release_get", class_row(ReleaseRow), name=name, number=number, namespace=namespace
    )


def artifacts(conn: Conn, release_id: int) -> list[ReleaseArtifactRow]:
    return many(conn, "release_artifact_list", class_row(ReleaseArtifactRow), release_id=release_id)


def list_all(conn: Conn, name: str | None, *, namespace: str | None) -> list[ReleaseSummary]:
    """The releases of ``namespace`` (None: every one), of ``name`` only unless None."""
    return many(conn, "release_list", class_row(ReleaseSummary), name=name, namespace=namespace)


def moves(conn: Conn, name: str, *, namespace: str) -> list[MoveRow]:
    return many(conn, "release_move_list", class_row(MoveRow), name=name, namespace=namespace)
