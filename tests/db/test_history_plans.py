"""Costs flat in the size of a run stay flat next to a history of small runs (issue 17, items 2
and 4). With many small finished runs in the statistics, the planner believes every run is
small: a statement that joins "the steps of this run" on run_id and filters the step key then
walks a large run on every call instead of probing (run_id, key) (docs/retention.md, "What the
history changes"). Both tests are expected to fail until db/functions/lease.sql probes by key
(the fix docs/retention.md gives); strict, so that the fix turns them into failures to
un-mark."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from rara.pg.queries import sql
from rara.pg.runs import enqueue_many
from rara.worker.vocabulary import LeasedStep
from tests.support.definitions import noop_definition
from tests.support.history_fill import fill
from tests.support.leasing import lease_now, lease_params
from tests.support.plans import buffers

Conn = psycopg.Connection[Any]


def _history(conn: Conn) -> None:
    """10,000 finished runs of 5 steps (bench/history.py's history)."""
    noop_definition(conn)
    fill(conn, 200_000)


def _successes(steps: list[LeasedStep], manifest: bool = False) -> str:
    art = [{"name": "out", "digest": "sha256:" + "a" * 64, "size": 1, "media_type": "text/plain"}]
    return json.dumps(
        [
            {
                "id": s.id,
                "token": str(s.lease_token),
                "result": None,
                **({"manifest": art} if manifest else {}),
            }
            for s in steps
        ]
    )


def test_an_end_in_a_big_run_costs_the_same_next_to_history(conn: Conn) -> None:
    _history(conn)
    enqueue_many(conn, definition="noop", version=None, runs=10, steps=1, key="s", capability="x@1")
    enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=1,
        steps=10_000,
        key="s",
        capability="y@1",
        numbered=True,
    )
    conn.execute("VACUUM ANALYZE")
    small = lease_now(conn, ["x@1"], worker="w", limit=10)
    big = lease_now(conn, ["y@1"], worker="w", limit=10)
    in_small, in_big = (
        buffers(
            conn,
            sql("step_end_many"),
            {"worker": "w", "successes": _successes(steps), "others": "[]"},
        )
        for steps in (small, big)
    )
    assert in_big <= in_small * 1.5 + 20, (in_big, in_small)


def test_a_lease_in_a_big_run_reads_its_inputs_by_key_next_to_history(conn: Conn) -> None:
    """The lease of a step whose upstream succeeded, in 2-step chains and in a 10,000-step
    chain: the upstream manifests are found by (run_id, key), whatever the run's size."""
    _history(conn)
    enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=10,
        steps=2,
        key="s",
        capability="x@1",
        chained=True,
        numbered=True,
    )
    enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=1,
        steps=10_000,
        key="s",
        capability="y@1",
        chained=True,
        numbered=True,
    )
    conn.execute("VACUUM ANALYZE")
    for capability, limit in (("x@1", 10), ("y@1", 1)):
        firsts = lease_now(conn, [capability], worker="w", limit=limit)
        conn.execute(
            sql("step_end_many"),
            {"worker": "w", "others": "[]", "successes": _successes(firsts, manifest=True)},
        )

    def lease_buffers(capability: str) -> int:
        return buffers(
            conn,
            sql("step_lease"),
            lease_params([capability], worker="w", limit=1),
        )

    in_small, in_big = lease_buffers("x@1"), lease_buffers("y@1")
    assert in_big <= in_small * 1.5 + 20, (in_big, in_small)
