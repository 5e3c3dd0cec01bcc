"""Typed access to ``db/queries/retention.sql``: pruning the history of finished runs.

``prune`` walks the finished runs that ended before a horizon in batches, each batch its own
short transaction (select and lock the next runs, then delete or count them): no lock is held
between batches, an interrupted prune loses at most the batch in flight (rolled back), and
running it again carries on. Only the schema's owner may (docs/retention.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import class_row, scalar_row

from rara.errors import RaraError
from rara.pg.queries import Conn, many, one, value

# Past the first run of a batch, at most this many steps (a run goes whole): a batch of runs
# of 100,000 steps each is one run a batch, one of one-step runs a hundred.
MAX_STEPS_PER_BATCH = 10_000


class PruneRefused(RaraError):
    """This login may not delete history: pruning is the schema owner's."""


@dataclass(frozen=True, slots=True)
class PruneCounts:
    """What a batch (or a whole prune) deleted, or would delete."""

    runs: int = 0
    steps: int = 0
    attempts: int = 0
    events: int = 0
    checkpoints: int = 0
    manifests: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def check_allowed(conn: Conn) -> None:
    """PruneRefused unless this login may delete from every table a prune touches."""
    if not value(conn, "run_prune_allowed", bool):
        raise PruneRefused(
            f"rara runs prune deletes history, which only the schema's owner may (the login "
            f"of `rara migrate`); {conn.info.user} may not"
        )


def horizon(conn: Conn, older_than: timedelta) -> datetime:
    """The database's clock less ``older_than``: runs that ended before it are pruned."""
    now = value(conn, "database_now", datetime)
    assert now is not None
    return now - older_than


def prune_batch(
    conn: Conn,
    *,
    before: datetime,
    after_id: int,
    batch: int,
    max_steps: int = MAX_STEPS_PER_BATCH,
    dry_run: bool = False,
) -> tuple[PruneCounts, int | None]:
    """One batch in one transaction: what it deleted (or, ``dry_run``, would delete) and the
    last run id it took (None: no finished run before ``before`` is left after ``after_id``)."""
    with conn.transaction():
        ids = [
            int(i)
            for i in many(
                conn,
                "run_prune_select",
                scalar_row,
                after_id=after_id,
                before=before,
                batch=batch,
                max_steps=max_steps,
            )
        ]
        if not ids:
            return PruneCounts(), None
        counts = one(
            conn,
            "run_prune_count_many" if dry_run else "run_prune_delete_many",
            class_row(PruneCounts),
            run_ids=ids,
        )
    assert counts is not None
    return counts, ids[-1]


def prune(
    conn: Conn,
    *,
    before: datetime,
    batch: int,
    max_steps: int = MAX_STEPS_PER_BATCH,
    dry_run: bool = False,
    on_batch: Callable[[PruneCounts], None] | None = None,
) -> PruneCounts:
    """Every finished run that ended before ``before``, batch by batch (``conn`` in autocommit:
    each batch commits on its own). A run that ends meanwhile and a run locked at the time
    are left to the next prune."""
    check_allowed(conn)
    total, after = PruneCounts(), 0
    try:
        while True:
            counts, last = prune_batch(
                conn,
                before=before,
                after_id=after,
                batch=batch,
                max_steps=max_steps,
                dry_run=dry_run,
            )
            if last is None:
                return total
            total, after = total + counts, last
            if on_batch is not None:
                on_batch(counts)
    except psycopg.errors.InsufficientPrivilege as exc:  # a grant changed under the check
        raise PruneRefused(f"rara runs prune was refused: {exc}") from exc
