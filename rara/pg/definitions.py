"""Typed access to ``db/queries/definitions.sql``: definition names and immutable versions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rara.pg.queries import Conn, many, one, value


@dataclass(frozen=True, slots=True)
class RegisteredRow:
    id: int
    name: str
    version: int
    digest: str
    created_at: datetime
    created: bool  # False: this spec was already a version of the name


@dataclass(frozen=True, slots=True)
class VersionSpecRow:
    """A version with its spec, and when its definition was retired (None: live)."""

    id: int
    namespace: str
    name: str
    version: int
    digest: str
    spec: dict[str, Any]
    created_at: datetime
    retired_at: datetime | None


@dataclass(frozen=True, slots=True)
class DefinitionRow:
    namespace: str
    name: str
    latest_version: int
    versions: int
    digest: str
    retired_at: datetime | None


def register(conn: Conn, name: str, spec: dict[str, Any], *, namespace: str) -> RegisteredRow:
    """The version of ``spec`` under ``name`` in ``namespace``: the existing one, or the next
    number (``definition_register``; the database computes the digest and the runs' step
    rows)."""
    row = one(
        conn,
        "definition_register",
        class_row(RegisteredRow),
        name=name,
        spec=Jsonb(spec),
        namespace=namespace,
    )
    assert row is not None  # the function returns the found or the inserted row
    return row


def version_get(
    conn: Conn, name: str, version: int | None = None, *, namespace: str
) -> VersionSpecRow | None:
    """``version`` of ``name`` in ``namespace``, or its latest when None."""
    return one(
        conn,
        "definition_version_get",
        class_row(VersionSpecRow),
        name=name,
        version=version,
        namespace=namespace,
    )


def list_all(conn: Conn, *, namespace: str | None) -> list[DefinitionRow]:
    """The definitions of ``namespace``; of every namespace when None."""
    return many(conn, "definition_list", class_row(DefinitionRow), namespace=namespace)


def retire(conn: Conn, name: str, *, namespace: str) -> bool:
    """False: no definition of that name in ``namespace``."""
    return value(conn, "definition_retire", str, name=name, namespace=namespace) is not None
