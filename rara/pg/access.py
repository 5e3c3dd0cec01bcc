"""Typed access to ``db/queries/access.sql``: which roles may read and act in which namespaces
(migration 0018; docs/namespaces.md, "Isolation"). Written by the schema's owner only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row, scalar_row

from rara.errors import InputInvalid
from rara.pg.queries import Conn, many, value

EVERY_NAMESPACE = "*"


@dataclass(frozen=True, slots=True)
class AccessRow:
    role: str
    namespace: str  # or EVERY_NAMESPACE
    granted_at: datetime
    role_exists: bool  # a dropped role's rows grant nobody


def list_all(conn: Conn) -> list[AccessRow]:
    return many(conn, "namespace_access_list", class_row(AccessRow))


def _existing(conn: Conn, role: str) -> str:
    if not value(conn, "role_exists", bool, role=role):
        raise InputInvalid(f"role {role!r} does not exist (CREATE ROLE it first)")
    return role


def grant(conn: Conn, role: str, namespaces: list[str]) -> list[str]:
    """``role`` (and every role that is a member of it) may read and act in ``namespaces``;
    returns the ones it did not have."""
    return many(
        conn,
        "namespace_access_grant_many",
        scalar_row,
        role=_existing(conn, role),
        namespaces=namespaces,
    )


def revoke(conn: Conn, role: str, namespaces: list[str]) -> list[str]:
    """Returns the namespaces ``role`` had of ``namespaces``."""
    return many(conn, "namespace_access_revoke_many", scalar_row, role=role, namespaces=namespaces)


def mine(conn: Conn) -> list[str]:
    """The namespaces of the role this session acts as (``["*"]``: every one)."""
    return list(value(conn, "namespace_caller_list", list) or [])
