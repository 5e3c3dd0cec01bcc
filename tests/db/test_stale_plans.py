"""A worker's statements cost the same before and after the tables are analyzed (issue 17): a
session keeps the generic plan of each statement it made while the tables were small (the
worker's hot-path sessions from the first call, ``HOT_PATH_SESSION``; any other session from
the sixth) until ANALYZE changes the statistics. A big map expanding into a fresh database, then
leased and ended by sessions that had worked there before, must not walk the table it grew
until autovacuum analyzes it: the lease once read 233,000 buffers for 100 children of a
40,000-child map (a plain session) and an end ~2,500 buffers more than after ANALYZE (the
worker's session: its dependants' update walked rara_steps' primary key). Buffers, not time
(db/functions/lease.sql, "Plans that do not depend on the statistics")."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from rara.pg.queries import sql
from rara.runs import start_run
from rara.worker.store import HOT_PATH_SESSION
from rara.worker.vocabulary import LeasedStep
from tests.support.definitions import apply
from tests.support.leasing import lease_now, lease_params
from tests.support.plans import buffers

Conn = psycopg.Connection[Any]
SPLIT = {"key": "split", "capability": "split@1"}
WORK = {
    "key": "work",
    "capability": "work@1",
    "dependsOn": ["split"],
    "map": {"over": "split.result.items"},
}
CHILDREN = 40_000
TABLES = ("rara_steps", "rara_runs", "rara_attempts", "rara_step_artifacts")


def _split(conn: Conn, worker: Conn, items: int) -> None:
    """A run of the map: its list step leased and ended with ``items`` items (the expansion)."""
    start_run(conn, "fan", queue_anyway=True)
    [split] = lease_now(worker, ["split@1"], worker="w", limit=1)
    worker.execute(sql("step_end_many"), _ends([split], {"items": list(range(items))}))


def _ends(steps: list[LeasedStep], result: Any = None) -> dict[str, Any]:
    return {
        "worker": "w",
        "others": "[]",
        "successes": json.dumps(
            [{"id": s.id, "token": str(s.lease_token), "result": result} for s in steps]
        ),
    }


def _costs(worker: Conn) -> dict[str, int]:
    """Buffers to lease 100 children, heartbeat them and end them (each measured rolled back,
    then done)."""
    lease = lease_params(["work@1"], worker="w", limit=100)
    costs = {"lease": buffers(worker, sql("step_lease"), lease)}
    leased = lease_now(worker, ["work@1"], worker="w", limit=100)
    assert len(leased) == 100
    costs["heartbeat"] = buffers(
        worker,
        sql("step_heartbeat"),
        {
            "worker": "w",
            "capabilities": ["work@1"],
            "lease_seconds": 30,
            "step_ids": [s.id for s in leased],
            "tokens": [s.lease_token for s in leased],
        },
    )
    costs["end"] = buffers(worker, sql("step_end_many"), _ends(leased))
    worker.execute(sql("step_end_many"), _ends(leased))
    return costs


@pytest.mark.parametrize("session", ["worker", "plain"])
def test_a_map_expanded_into_a_small_table_is_leased_and_ended_without_walking_it(
    conn: Conn, database_url: str, session: str
) -> None:
    for table in TABLES:  # the statistics change only when the test says so
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    apply(conn, "fan", [SPLIT, WORK])
    with psycopg.connect(
        database_url, autocommit=True, **(HOT_PATH_SESSION if session == "worker" else {})
    ) as worker:
        # A first small map, one child at a time: the session's plans are made on small tables.
        _split(conn, worker, 12)
        conn.execute("VACUUM ANALYZE")
        while children := lease_now(worker, ["work@1"], worker="w", limit=1):
            worker.execute(
                sql("step_heartbeat"),
                {
                    "worker": "w",
                    "capabilities": ["work@1"],
                    "lease_seconds": 30,
                    "step_ids": [children[0].id],
                    "tokens": [children[0].lease_token],
                },
            )
            worker.execute(sql("step_end_many"), _ends(children))
        _split(conn, worker, CHILDREN)
        stale = _costs(worker)
        conn.execute("ANALYZE")
        analyzed = _costs(worker)
    for what, cost in stale.items():
        assert cost <= analyzed[what] * 1.25 + 50, (what, stale, analyzed)
