"""Freshness: whether what a definition makes is older than it may be (docs/freshness.md).

A definition declares ``freshness: {maxAge: 7d}``; then it is *stale* when its newest
succeeded run finished longer ago than that (or, with none, when it was defined longer ago),
and so is each release name whose current release is a run of it, by when that release was
promoted. Read by `rara status`, `rara releases list`, the dashboard, the operator's gauges
(``rara_stale``, ``rara_freshness_age_seconds``) and `stale` triggers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg.rows import class_row

from rara.definitions.durations import parse_duration_ms
from rara.pg.queries import AsyncConn, Conn, amany, many


@dataclass(frozen=True, slots=True)
class Facts:
    kind: str  # definition, release
    namespace: str
    name: str  # the definition's, or the release's
    definition: str
    max_age: str
    defined_at: datetime
    made_at: datetime | None  # the newest succeeded run's end, the release's promotion
    run_id: int | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class Freshness:
    kind: str  # definition, release
    namespace: str
    name: str
    definition: str
    max_age: timedelta
    age: timedelta  # since made_at; with nothing made, since the definition was applied
    made_at: datetime | None
    run_id: int | None  # the run it is as old as (None: no succeeded run yet)

    @property
    def stale(self) -> bool:
        return self.age > self.max_age

    def describe(self) -> str:
        """``stale: 9d 2h old, at most 7d`` / ``fresh: 3h old, at most 7d``."""
        state = "stale" if self.stale else "fresh"
        made = "" if self.made_at is not None else " (never made)"
        return f"{state}: {age_text(self.age)} old{made}, at most {age_text(self.max_age)}"


def freshness(
    conn: Conn, *, namespace: str | None, definition: str | None = None
) -> list[Freshness]:
    """Every declared freshness of ``namespace`` (None: every namespace the caller reads), or
    only ``definition``'s and its releases'."""
    rows = many(
        conn, "freshness_list", class_row(Facts), namespace=namespace, definition=definition
    )
    return [_judged(f) for f in rows]


async def afreshness(conn: AsyncConn, *, namespace: str | None) -> list[Freshness]:
    """``freshness`` on an async connection (the dashboard's)."""
    rows = await amany(
        conn, "freshness_list", class_row(Facts), namespace=namespace, definition=None
    )
    return [_judged(f) for f in rows]


def stale(conn: Conn, *, namespace: str | None) -> list[Freshness]:
    return [f for f in freshness(conn, namespace=namespace) if f.stale]


def _judged(facts: Facts) -> Freshness:
    since = facts.made_at if facts.made_at is not None else facts.defined_at
    return Freshness(
        kind=facts.kind,
        namespace=facts.namespace,
        name=facts.name,
        definition=facts.definition,
        max_age=timedelta(milliseconds=parse_duration_ms(facts.max_age)),
        age=max(facts.db_now - since, timedelta(0)),
        made_at=facts.made_at,
        run_id=facts.run_id,
    )


def age_text(age: timedelta) -> str:
    """An age in its two largest units: ``9d 2h``, ``3h 5m``, ``42s``."""
    seconds = int(age.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)
