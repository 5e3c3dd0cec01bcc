"""Typed access to ``db/queries/access.sql``: which roles may read and act in which namespaces
(migration 0018; docs/namespaces.md, "Isolation"). Written by the schema's owner only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row, scalar_row

from rara.errors import InputInvalid
from rara.pg.queries import Conn, many, value

EVERY_NAMESPACE = "*"
# rara's group roles (migrations 0002, 0007, 0025): cluster-wide, made once per server.
GROUP_ROLES = ("rara_reader", "rara_worker", "rara_operator", "rara_client", "rara_vouch")
_MEMBERS = (  # (group, member): what 0007 and 0025 grant
    ("rara_reader", "rara_worker"),
    ("rara_reader", "rara_operator"),
    ("rara_reader", "rara_client"),
    ("rara_vouch", "rara_operator"),
)


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


def set_isolation(conn: Conn, on: bool) -> bool:
    """Isolation between namespaces on or off for this database; whether it was on."""
    return bool(value(conn, "namespace_isolation_set", bool, on=on))


def isolated(conn: Conn) -> bool:
    return bool(value(conn, "namespace_isolation_get", bool))


def mine(conn: Conn) -> list[str]:
    """The namespaces of the role this session acts as (``["*"]``: every one)."""
    return list(value(conn, "namespace_caller_list", list) or [])


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def bootstrap_sql(owner: str) -> str:
    """What a superuser runs once per PostgreSQL server so that ``owner``, a login without
    CREATEROLE, can migrate rara's database (docs/least-privilege.md, "The owner"): the group
    roles, their memberships, and ADMIN OPTION on each for the owner. Safe to run again."""
    if not owner or "\0" in owner:
        raise InputInvalid(f"owner {owner!r}: a role name is needed")
    if len(owner.encode()) > 63:
        raise InputInvalid(f"owner {owner!r}: longer than PostgreSQL's 63 bytes")
    made = ", ".join(f"'{g}'" for g in GROUP_ROLES)
    lines = [
        "-- rara's group roles, made once per PostgreSQL server by a superuser",
        f'-- (docs/least-privilege.md, "The owner"). The owner, {_ident(owner)}, has no',
        "-- CREATEROLE: it may grant these roles to logins (ADMIN OPTION) and nothing else.",
        "DO $$",
        "DECLARE g text;",
        "BEGIN",
        f"    FOREACH g IN ARRAY ARRAY[{made}] LOOP",
        "        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = g) THEN",
        "            EXECUTE format('CREATE ROLE %I NOLOGIN', g);",
        "        END IF;",
        "    END LOOP;",
        "END $$;",
    ]
    lines += [f"GRANT {group} TO {member};" for group, member in _MEMBERS]
    lines.append(f"GRANT {', '.join(GROUP_ROLES)} TO {_ident(owner)} WITH ADMIN OPTION;")
    return "\n".join(lines) + "\n"
