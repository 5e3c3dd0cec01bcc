"""``rara ui --user-roles``: one dashboard for many teams, each user seeing their namespaces.

PostgREST's "authenticator" pattern: the UI's database login is a member of every user's
role, and each request's database work runs in a transaction that first does ``SET LOCAL
ROLE <user>``, the user named by the authenticating proxy's header (``--auth-header``). From
there on it is the database that decides: row-level security shows the user's namespaces
only (``rara_namespace_access``), and the write functions act as, and refuse, that user. The
role ends with the transaction, so a pooled connection goes back as the login's.

Which users the login may become is the database's answer (``ui_user_become``): a role
granted to the login directly, a member of a rara group role, and nothing more privileged. Not
``none`` (``SET ROLE "none"`` is PostgreSQL's reset: the request would run as the login, which
sees every user's namespaces), not a group role (``rara_client``, a team's), not the login or
the owner: each a 403 naming the user; a request without the header a 401."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from rara.pg.queries import AsyncConn, avalue, value
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
    return HTTPException(
        403,
        f"{user!r} is not a dashboard user: the UI's login acts only as a role granted to it"
        " directly that is a member of a rara group role (not a group role, a predefined or"
        " privileged role, the login itself or the owner)",
    )


def _checked(user: str, login: str) -> str:
    """``user`` as the statement takes it; refused (403) for a name PostgreSQL would shorten
    and for the login itself, which sees every user's namespaces together."""
    if len(user.encode()) > MAX_ROLE_BYTES or user == login:
        raise no_role(user)
    return user


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
            with refused_as_403(user):
                became = await avalue(
                    conn, "ui_user_become", str, user=_checked(user, conn.info.user), local=True
                )
            if became is None:
                raise no_role(user)
            yield conn


def become(conn: psycopg.Connection[Any], user: str) -> None:
    """The actions' side: ``conn``, a connection of the action's own that is closed after it,
    acts as ``user`` for the rest of its life."""
    with refused_as_403(user):
        became = value(
            conn, "ui_user_become", str, user=_checked(user, conn.info.user), local=False
        )
    if became is None:
        raise no_role(user)


async def visible_namespaces(conn: AsyncConn) -> frozenset[str] | None:
    """The namespaces the connection's current role has (``rara_caller_namespaces()``,
    migration 0018); None: every namespace."""
    names = frozenset(await data.namespaces_visible(conn))
    return None if EVERY_NAMESPACE in names else names
