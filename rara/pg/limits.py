"""Typed access to ``db/queries/limits.sql``: concurrency limits per capability (migration
0009; enforced in the lease, docs/limits.md), and the namespaces' weights and quotas
(migration 0019; docs/namespaces.md, "Fair share")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row

from rara.pg.queries import Conn, many, run

EVERY_CAPABILITY = "*"  # a quota's capability: all of the namespace's together


@dataclass(frozen=True, slots=True)
class LimitRow:
    capability: str
    max_running: int
    updated_at: datetime
    running: int  # attempts of the capability running now


@dataclass(frozen=True, slots=True)
class ShareRow:
    namespace: str
    weight: int
    updated_at: datetime
    running: int  # attempts of the namespace running now


@dataclass(frozen=True, slots=True)
class QuotaRow:
    namespace: str
    capability: str  # EVERY_CAPABILITY: all of them
    max_running: int
    updated_at: datetime
    running: int  # attempts the quota counts running now


def set_limit(conn: Conn, capability: str, max_running: int | None) -> None:
    """At most ``max_running`` attempts of ``capability`` at once; None removes the limit."""
    run(conn, "capability_limit_set", capability=capability, max_running=max_running)


def list_all(conn: Conn) -> list[LimitRow]:
    return many(conn, "capability_limit_list", class_row(LimitRow))


def set_share(conn: Conn, namespace: str, weight: int | None) -> None:
    """``namespace``'s weight in the lease's fair share; None: back to 1."""
    run(conn, "namespace_share_set", namespace=namespace, weight=weight)


def set_quota(conn: Conn, namespace: str, capability: str, max_running: int | None) -> None:
    """At most ``max_running`` attempts of ``namespace`` at once, of ``capability``
    (``EVERY_CAPABILITY``: of all together); None removes the quota."""
    run(
        conn,
        "namespace_quota_set",
        namespace=namespace,
        capability=capability,
        max_running=max_running,
    )


def list_shares(conn: Conn) -> list[ShareRow]:
    return many(conn, "namespace_share_list", class_row(ShareRow))


def list_quotas(conn: Conn) -> list[QuotaRow]:
    return many(conn, "namespace_quota_list", class_row(QuotaRow))
