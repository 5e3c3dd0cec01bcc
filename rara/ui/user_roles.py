"""``rara ui --user-roles``: one dashboard for many teams, each user seeing their namespaces.

PostgREST's "authenticator" pattern: the UI's database login is a member of every user's
role, and each request's database work runs in a transaction that first does ``SET LOCAL
ROLE <user>``, the user named by the authenticating proxy's header (``--auth-header``). From
there on it is the database that decides: row-level security shows the user's namespaces
only (``rara_namespace_access``), and the write functions act as, and refuse, that user. The
role ends with the transaction, so a pooled connection goes back as the login's.

A user the login may not become (no such role, or one the login is not a member of) is a
403 naming the user; a request without the header a 401."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from rara.pg.queries import AsyncConn
from rara.ui import data
from rara.ui.auth import AuthConfig

# PostgreSQL cuts a longer identifier to its first 63 bytes: a longer user would become
# whichever role those bytes name, so it is refused instead.
MAX_ROLE_BYTES = 63
EVERY_NAMESPACE = "*"


def user_of(request: Request) -> str | None:
    """The database role this request runs as: None without ``--user-roles`` (the login's
    own view, as ever), else the proxy header's user; no header is a 401."""
    auth: AuthConfig = request.app.state.config.auth
    if not auth.user_roles:
        return None
    user = request.headers.get(auth.auth_header or "", "").strip()
    if not user:
        raise HTTPException(
            401, f"no {auth.auth_header} header: this dashboard shows each user their namespaces"
        )
    return user


def no_role(user: str) -> HTTPException:
    return HTTPException(403, f"no database role {user!r} the UI's login may use")


def set_role(user: str, login: str, *, local: bool = True) -> sql.Composed:
    """``SET LOCAL ROLE "<user>"`` (``SET ROLE`` for a connection of the caller's alone);
    refused (403) for a name PostgreSQL would shorten, and for the login itself, which sees
    every user's namespaces together."""
    if len(user.encode()) > MAX_ROLE_BYTES or user == login:
        raise no_role(user)
    return sql.SQL("SET LOCAL ROLE {}" if local else "SET ROLE {}").format(sql.Identifier(user))


@contextmanager
def refused_as_403(user: str) -> Iterator[None]:
    """The role does not exist (22023), or the login is not a member of it (42501)."""
    try:
        yield
    except (psycopg.errors.InvalidParameterValue, psycopg.errors.InsufficientPrivilege):
        raise no_role(user) from None


@asynccontextmanager
async def connection(request: Request) -> AsyncIterator[AsyncConn]:
    """A pooled connection for this request's reads: as the user, in one transaction, under
    ``--user-roles``; as the login (autocommit, as ever) otherwise."""
    user = user_of(request)
    pool: AsyncConnectionPool[Any] = request.app.state.pool
    async with pool.connection() as conn:
        if user is None:
            yield conn
            return
        async with conn.transaction():
            statement = set_role(user, conn.info.user)
            with refused_as_403(user):
                await conn.execute(statement)
            yield conn


def become(conn: psycopg.Connection[Any], user: str) -> None:
    """The actions' side: ``conn``, a connection of the action's own that is closed after it,
    acts as ``user`` for the rest of its life."""
    statement = set_role(user, conn.info.user, local=False)
    with refused_as_403(user):
        conn.execute(statement)


async def visible_namespaces(conn: AsyncConn) -> frozenset[str] | None:
    """The namespaces the connection's current role has (``rara_caller_namespaces()``,
    migration 0018); None: every namespace."""
    names = frozenset(await data.namespaces_visible(conn))
    return None if EVERY_NAMESPACE in names else names
