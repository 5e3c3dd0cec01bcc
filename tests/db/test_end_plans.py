"""A batch of ends touches each row it writes once (issue 36): ending the first steps of 200
3-step chains in one call unblocks 200 dependants, and no index scan of the statements inside
step_end_many (or step_lease) runs its whole ``= ANY(...)`` list once per row of another
side. The dependants' update once did: its generic plan probed every dependant's id for each
dependant, 250,000 probes for a batch of 500 and 8x the server time of a one-step batch
(docs/performance.md, "Fixed cost per call"). Plans and loops, not time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg

from rara.pg.queries import sql
from rara.pg.runs import enqueue_many
from rara.worker.store import HOT_PATH_SESSION
from rara.worker.vocabulary import LeasedStep
from tests.support.definitions import noop_definition
from tests.support.leasing import lease_now, lease_params
from tests.support.plans import nested_plans

Conn = psycopg.Connection[Any]
CHAINS = 200
CAPABILITY = "test.noop@1"


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _list_probes_repeated(plans: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """Index scans whose condition is a whole list (``= ANY``) and that ran more than once."""
    return [
        (node.get("Index Name", ""), int(node["Actual Loops"]), node["Index Cond"])
        for plan in plans
        for node in _nodes(plan["Plan"])
        if "ANY" in node.get("Index Cond", "") and node.get("Actual Loops", 1) > 1
    ]


def _ends(steps: list[LeasedStep]) -> dict[str, Any]:
    successes = [{"id": s.id, "token": str(s.lease_token), "result": None} for s in steps]
    return {"worker": "w", "others": "[]", "successes": json.dumps(successes)}


def test_ending_a_batch_of_chains_probes_each_dependant_once(conn: Conn, database_url: str) -> None:
    noop_definition(conn, "chains", steps=3, capability=CAPABILITY)
    enqueue_many(
        conn,
        definition="chains",
        version=None,
        runs=CHAINS + 10,
        steps=3,
        key="s",
        capability=CAPABILITY,
        chained=True,
    )
    conn.execute("ANALYZE")  # statistics of a queue this size, as autovacuum keeps them
    # The worker's session: generic plans from the first call, made on the tables as they are.
    with psycopg.connect(database_url, autocommit=True, **HOT_PATH_SESSION) as worker:
        for _ in range(10):  # plans made and cached on batches of one
            worker.execute(
                sql("step_end_many"), _ends(lease_now(worker, [CAPABILITY], worker="w", limit=1))
            )
        lease = lease_params([CAPABILITY], worker="w", limit=CHAINS)
        leasing = nested_plans(worker, sql("step_lease"), lease, analyze=True)
        leased = lease_now(worker, [CAPABILITY], worker="w", limit=CHAINS)
        assert len(leased) == CHAINS
        ending = nested_plans(worker, sql("step_end_many"), _ends(leased), analyze=True)
    assert _list_probes_repeated(leasing) == []
    assert _list_probes_repeated(ending) == []
    unblocked = [
        node
        for plan in ending
        for node in _nodes(plan["Plan"])
        if node.get("Operation") == "Update" and node.get("Relation Name") == "rara_steps"
    ]
    assert sum(int(n["Actual Rows"]) for n in unblocked) >= 2 * CHAINS, "ended and unblocked"
