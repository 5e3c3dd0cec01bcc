"""A database login per process (docs/least-privilege.md): a LOGIN role that is a member of one
group role of migrations 0002/0007 (rara_worker, rara_operator, rara_client, rara_reader) and
holds nothing else, so the process can do its job and no more.

Deployments create their logins themselves, with passwords from their secret store
(docs/security.md, "Database roles"); ``ensure_login`` is for a server rara runs itself (the
embedded one, whose local connections are trusted), where the demo gives each of its processes
a login of its own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

GROUPS = frozenset({"rara_worker", "rara_operator", "rara_client", "rara_reader"})
# Logins whose statements are cut off after rara_limits()' statement_timeout_ms
# (rara_login_limit, db/functions/limits.sql; docs/limits.md, "Statement timeout").
TIMED_GROUPS = frozenset({"rara_client", "rara_reader"})


def ensure_login(owner_url: str, group: str, name: str) -> str:
    """The URL of login ``name`` (created when missing, as a member of ``group`` only) on the
    server and database of ``owner_url``, without a password: for servers that trust local
    connections. Needs an owner that may create roles, on a migrated database. A client's or
    reader's login gets the statement timeout of rara_login_limit."""
    if group not in GROUPS:
        raise ValueError(f"no group role {group!r}: one of {', '.join(sorted(GROUPS))}")
    with psycopg.connect(owner_url, autocommit=True) as conn:
        member_of = _groups_of(conn, name)
        if member_of is None:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(name), sql.Identifier(group)
                )
            )
        elif member_of != {group}:
            raise ValueError(
                f"role {name} exists and is a member of {sorted(member_of)}, not of {group} alone"
            )
        if group in TIMED_GROUPS:  # a setting of the login: a group's does not reach it
            conn.execute("SELECT rara_login_limit(%s)", (name,))
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{name}@{host}"))


def _groups_of(conn: psycopg.Connection[Any], name: str) -> set[str] | None:
    """The roles ``name`` is a member of; None when there is no such role."""
    rows = conn.execute(
        "SELECT g.rolname FROM pg_roles r LEFT JOIN pg_auth_members m ON m.member = r.oid"
        " LEFT JOIN pg_roles g ON g.oid = m.roleid WHERE r.rolname = %s",
        (name,),
    ).fetchall()
    if not rows:
        return None
    return {group for (group,) in rows if group is not None}
