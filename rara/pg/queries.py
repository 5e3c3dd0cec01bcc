"""The named SQL of ``db/queries/*.sql`` (data package ``rara.sql``): loaded once, typed.

Every file of the folder is one concern (definitions, runs, steps, lease, workers, artifacts,
events); together they are one name space, each name in one form (object, then verb). aiosql
parses the files; what leaves this module is plain: ``sql(name)`` is a statement's text with
psycopg's ``%(param)s`` placeholders, and ``one``/``many``/``value``/``run`` (and their async
forms) execute it with a row factory, so a result is a typed object read by column name —
never a tuple read by position. The untyped aiosql object stays inside ``_loaded``.

The typed readers per concern build on these: ``rara.pg.definitions``, ``rara.pg.runs``,
``rara.pg.steps``, ``rara.pg.workers``, ``rara.pg.artifacts``, ``rara.pg.events``; the lease
protocol's writes are the worker's store (``rara.worker.store``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Any, TypeVar

import aiosql
import psycopg
from psycopg.rows import BaseRowFactory, scalar_row

T = TypeVar("T")

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


def query_files() -> dict[str, str]:
    """File name → text of every ``.sql`` file in ``rara.sql/queries``."""
    folder = files("rara.sql") / "queries"
    return {
        f.name: f.read_text()
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".sql")
    }


@cache
def statements() -> Mapping[str, str]:
    """Name → statement text (psycopg placeholders), from every query file. A name defined in
    two files is refused: the folder is one name space."""
    found: dict[str, str] = {}
    where: dict[str, str] = {}
    for file, text in query_files().items():
        loaded: Any = aiosql.from_str(text, "psycopg", mandatory_parameters=False)
        for name in loaded.available_queries:
            if name in where:
                raise ValueError(f"query {name} is defined in {where[name]} and in {file}")
            where[name] = file
            found[name] = str(getattr(loaded, name).sql)
    return found


def sql(name: str) -> str:
    """The statement named ``name`` (KeyError names an unknown one)."""
    return statements()[name]


def _params(params: Mapping[str, Any]) -> dict[str, Any]:
    return dict(params)


# -- sync ---------------------------------------------------------------------------------


def one(conn: Conn, name: str, row: BaseRowFactory[T], /, **params: Any) -> T | None:
    """The first row of ``name`` built by ``row`` (``class_row(X)``, ``kwargs_row(f)``, …)."""
    with conn.cursor(row_factory=row) as cur:
        cur.execute(sql(name), _params(params))
        return cur.fetchone()


def many(conn: Conn, name: str, row: BaseRowFactory[T], /, **params: Any) -> list[T]:
    with conn.cursor(row_factory=row) as cur:
        cur.execute(sql(name), _params(params))
        return cur.fetchall()


def value(conn: Conn, name: str, kind: type[T], /, **params: Any) -> T | None:
    """The one value of a one-column statement, of type ``kind`` (None: no row, or NULL)."""
    return _checked(one(conn, name, scalar_row, **params), kind, name)


def _checked(found: object, kind: type[T], name: str) -> T | None:
    if found is None or isinstance(found, kind):
        return found
    raise TypeError(f"{name} returned {type(found).__name__}, not {kind.__name__}")


def run(conn: Conn, name: str, /, **params: Any) -> None:
    """Execute ``name`` for its effect only."""
    conn.execute(sql(name), _params(params))


# -- async --------------------------------------------------------------------------------


async def aone(conn: AsyncConn, name: str, row: BaseRowFactory[T], /, **params: Any) -> T | None:
    async with conn.cursor(row_factory=row) as cur:
        await cur.execute(sql(name), _params(params))
        return await cur.fetchone()


async def amany(conn: AsyncConn, name: str, row: BaseRowFactory[T], /, **params: Any) -> list[T]:
    async with conn.cursor(row_factory=row) as cur:
        await cur.execute(sql(name), _params(params))
        return await cur.fetchall()


async def avalue(conn: AsyncConn, name: str, kind: type[T], /, **params: Any) -> T | None:
    return _checked(await aone(conn, name, scalar_row, **params), kind, name)


async def arun(conn: AsyncConn, name: str, /, **params: Any) -> None:
    await conn.execute(sql(name), _params(params))
