"""Typed access to ``db/queries/cache.sql``: the step cache's entries (migrations 0013, 0016,
0026)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row, scalar_row
from psycopg.types.json import Jsonb

from rara.pg.queries import AsyncConn, Conn, amany, aone, avalue, many, one


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A step's result and artifact manifest, stored under its cache key (``rara.cache``)."""

    key: str
    namespace: str  # of the step that wrote it: only its namespace's steps reuse it
    base: str  # the key's parts known before a step runs (rara.cache.CacheKey.base)
    reads: Mapping[str, str]  # the upstream artifacts its step read: "<step>/<name>" -> digest
    capability: str
    step_key: str
    parts: Mapping[str, str]
    result: Any
    manifest: Sequence[Mapping[str, Any]]
    source_run: int
    source_step: int
    source_attempt: int
    created_at: datetime
    expires_at: datetime | None


def find(
    conn: Conn, base: str, upstream: Mapping[str, str], *, namespace: str, capability: str
) -> CacheEntry | None:
    """The newest live entry of ``base``, written by a step of ``namespace`` and
    ``capability``, whose step read only what ``upstream`` gives, with the same digests;
    None: a miss."""
    return one(
        conn,
        "cache_find",
        class_row(CacheEntry),
        base=base,
        upstream=Jsonb(dict(upstream)),
        namespace=namespace,
        capability=capability,
    )


async def afind(
    conn: AsyncConn, base: str, upstream: Mapping[str, str], *, namespace: str, capability: str
) -> CacheEntry | None:
    return await aone(
        conn,
        "cache_find",
        class_row(CacheEntry),
        base=base,
        upstream=Jsonb(dict(upstream)),
        namespace=namespace,
        capability=capability,
    )


def list_entries(conn: Conn, capability: str | None = None, limit: int = 100) -> list[CacheEntry]:
    """Entries, newest first."""
    return many(conn, "cache_list", class_row(CacheEntry), capability=capability, limit=limit)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry as ``rara cache explain`` compares it with a step."""

    key: str
    source_run: int
    parts: Mapping[str, str]
    reads: Mapping[str, str]
    created_at: datetime
    fields: Mapping[str, str] | None  # of the step that wrote it; None once its run is pruned


def candidates(
    conn: Conn, capability: str, step_key: str, except_key: str, limit: int = 200
) -> list[Candidate]:
    """The newest live entries of one capability and step key, but ``except_key``."""
    return many(
        conn,
        "cache_candidates_list",
        class_row(Candidate),
        capability=capability,
        step_key=step_key,
        except_key=except_key,
        limit=limit,
    )


@dataclass(frozen=True, slots=True)
class CachedStep:
    """A step of a run as the cache saw it."""

    id: int
    key: str
    capability: str
    status: str
    # {key, base, parts, upstream, fields} it was looked up under (rara.worker.cache.entry_of),
    # and for a step that ran and succeeded {entry, entry_parts, reads}: the entry it wrote
    cache: Mapping[str, Any] | None
    reused_from: Mapping[str, Any] | None
    input_declared: bool  # its inputSchema names its fields: only those are in its key


def step(conn: Conn, run_id: int, key: str) -> CachedStep | None:
    return one(conn, "cache_step_get", class_row(CachedStep), run_id=run_id, key=key)


def drop(conn: Conn, keys: Sequence[str]) -> list[str]:
    """Remove entries; returns the keys that were there."""
    return [str(k) for k in many(conn, "cache_drop_many", scalar_row, keys=list(keys))]


async def aclaim(
    conn: AsyncConn, worker: str, step_id: int, token: Any, cache: Mapping[str, Any]
) -> bool | None:
    """Single flight (``cache_claim``): True, compute; False, deferred; None, lease lost."""
    return await avalue(
        conn,
        "cache_claim",
        bool,
        worker=worker,
        step_id=step_id,
        token=token,
        cache=Jsonb(dict(cache)),
    )


async def adrop(conn: AsyncConn, keys: Sequence[str]) -> list[str]:
    return [str(k) for k in await amany(conn, "cache_drop_many", scalar_row, keys=list(keys))]
