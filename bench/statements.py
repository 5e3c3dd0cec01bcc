"""Where a step's server time goes, statement by statement and plan node by plan node (issue
36: the per-statement figures of docs/performance.md, redone by a command instead of by hand).

    .venv/bin/python -m bench.statements [--batch 500] [--batches 8] [--steps 1] [--json]

``--batches`` batches of ``--batch`` ready runs (``--steps`` chained steps each) are leased
(``step_lease``) and ended as successes (``step_end_many``), as a worker does, from one
connection with the worker's session settings. Twice:

1. Plain: the server's time per step of each statement (EXPLAIN ANALYZE with TIMING OFF of the
   same call, so neither the round trip nor the rows sent count), the figure to compare; in
   batches of 1 and of ``--batch``, which splits it into a fixed part per call and a part per
   step.
2. Under auto_explain (nested statements, ANALYZE, BUFFERS, WAL) at NOTICE level, so the plans
   of the statements inside the PL/pgSQL functions come back to this client. The own share
   (its figures less its inputs') of each node that does work — a write, a table or index
   scan, a row lock — is summed per statement by what it does ("Update on rara_steps",
   "Index Scan on rara_steps (rara_steps_ready)"): µs per step (instrumented, so dearer than
   in 1: read them as shares), WAL records and bytes per step. The rest of the statement's
   time (PL/pgSQL, expressions, sorts, joins, triggers' own code) is one line.

``--against REF`` (a git commit) compares instead: a database with this tree's schema and
functions beside one built from REF's migrations and function files, the same calls
interleaved between the two in rounds (batches of 1, then of ``--batch``), medians of each side
per step. Absolute figures drift by 10-20% between runs on a shared machine; the two sides of
one comparison do not.

    .venv/bin/python -m bench.statements --against 24a468f

The bench server runs with fsync off (bench.common.bench_database): the WAL is written, not
flushed, as the peers are measured.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import Server, bench_database, server_ms  # noqa: E402
from rara.pg.queries import sql  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.worker.store import HOT_PATH_SESSION  # noqa: E402
from rara.worker.vocabulary import LeasedStep  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402
from tests.support.leasing import lease_now, lease_params  # noqa: E402
from tests.support.plans import nested_plans  # noqa: E402

CAPABILITY = "bench.noop@1"
WORKER = "bench-statements"
STATEMENTS = ("step_lease", "step_end_many")
WARM_BATCHES = 2  # not counted: plans cached, pages read


def _lease_params(limit: int) -> dict[str, Any]:
    return lease_params([CAPABILITY], worker=WORKER, limit=limit, lease_seconds=300)


def _end_params(leased: list[LeasedStep]) -> dict[str, Any]:
    successes = [{"id": s.id, "token": str(s.lease_token), "result": None} for s in leased]
    return {"worker": WORKER, "successes": json.dumps(successes), "others": "[]"}


def _lease(conn: psycopg.Connection[Any], batch: int) -> list[LeasedStep]:
    leased = lease_now(conn, [CAPABILITY], worker=WORKER, limit=batch, lease_seconds=300)
    if len(leased) != batch:
        raise RuntimeError(f"leased {len(leased)} of {batch}: the queue ran dry")
    return leased


def _timed_batch(conn: psycopg.Connection[Any], batch: int) -> tuple[float, float]:
    """One batch leased and ended, each call first measured on the queue as it is (rolled
    back, bench.common.server_ms) and then made: the server ms of the lease and of the end."""
    lease_ms = server_ms(conn, sql("step_lease"), _lease_params(batch))
    leased = _lease(conn, batch)
    end_ms = server_ms(conn, sql("step_end_many"), _end_params(leased))
    conn.execute(sql("step_end_many"), _end_params(leased))
    return lease_ms, end_ms


def _fill(conn: psycopg.Connection[Any], runs: int, steps: int) -> None:
    noop_definition(conn, "noop")
    enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=runs,
        steps=steps,
        key="s",
        capability=CAPABILITY,
        chained=steps > 1,
    )
    conn.execute("VACUUM ANALYZE")


def plain(server: Server, *, batch: int, batches: int, steps: int) -> dict[str, float]:
    """µs of server time per step of each statement, uninstrumented nodes (TIMING OFF)."""
    name = "bench_statements_plain"
    url = server.fresh(name)
    totals = dict.fromkeys(STATEMENTS, 0.0)
    counted = 0
    try:
        with psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION) as conn:
            _fill(conn, batch * (batches + WARM_BATCHES), steps)
            for i in range((batches + WARM_BATCHES) * steps):
                lease_ms, end_ms = _timed_batch(conn, batch)
                if i >= WARM_BATCHES * steps:
                    totals["step_lease"] += lease_ms
                    totals["step_end_many"] += end_ms
                    counted += batch
    finally:
        server.drop(name)
    return {k: round(v * 1000 / counted, 1) for k, v in totals.items()}


# The nodes that do a statement's work: writes, reads of tables and indexes, row locks. Their
# own share is exact (their figures less their inputs'). Every other node (Result, Sort, CTE
# Scan, Aggregate...) only moves rows, but its time also holds whatever functions it called,
# whose statements are logged on their own: those go to the "rest".
WORK = re.compile(r"^(ModifyTable|Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|LockRows)$")
CTE_SCAN = "CTE Scan"


def _label(node: dict[str, Any]) -> str:
    kind: str = node["Node Type"]
    if kind == "ModifyTable":
        kind = node["Operation"]
    if relation := node.get("Relation Name"):
        kind += f" on {relation}"
        if index := node.get("Index Name"):
            kind += f" ({index})"
    return kind


_FIGURES = ("ms", "wal_records", "wal_bytes", "buffers")


def _figures(node: dict[str, Any]) -> dict[str, float]:
    """A node's figures, its inputs' included (EXPLAIN's are cumulative)."""
    return {
        "ms": float(node.get("Actual Total Time", 0.0)) * float(node.get("Actual Loops", 1)),
        "wal_records": float(node.get("WAL Records", 0)),
        "wal_bytes": float(node.get("WAL Bytes", 0)),
        "buffers": float(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)),
    }


def _own(node: dict[str, Any], into: dict[str, dict[str, float]]) -> None:
    """Each work node's figures less its inputs', summed into ``into`` by label. A CTE Scan
    reads what its CTE (a subplan beside it) makes: no work node's input, it is walked on its
    own through the plan's subplans, which every node's "Plans" hold too."""
    children = node.get("Plans", ())
    for child in children:
        _own(child, into)
    if node["Node Type"] == CTE_SCAN or not WORK.match(node["Node Type"]):
        return
    mine = _figures(node)
    for child in children:
        if child.get("Subplan Name", "").startswith("CTE "):
            continue  # run where it is scanned, not as this node's input
        theirs = _figures(child)
        for k in _FIGURES:
            mine[k] -= theirs[k]
    for k in _FIGURES:
        into[_label(node)][k] += max(mine[k], 0.0)


def _blank() -> dict[str, float]:
    return dict.fromkeys(_FIGURES, 0.0)


def by_node(server: Server, *, batch: int, batches: int, steps: int) -> dict[str, Any]:
    """Per statement: its nodes' own figures per step, and the rest (not in any node)."""
    name = "bench_statements_nodes"
    url = server.fresh(name)
    nodes: dict[str, dict[str, dict[str, float]]] = {s: defaultdict(_blank) for s in STATEMENTS}
    triggers: dict[str, dict[str, float]] = {s: defaultdict(float) for s in STATEMENTS}
    whole = dict.fromkeys(STATEMENTS, 0.0)
    counted = 0
    try:
        with psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION) as conn:
            _fill(conn, batch * (batches + WARM_BATCHES), steps)
            for i in range((batches + WARM_BATCHES) * steps):
                # Each call's plans on the queue as it is (rolled back), then the call made.
                lease_plans = nested_plans(
                    conn, sql("step_lease"), _lease_params(batch), analyze=True
                )
                leased = _lease(conn, batch)
                end_plans = nested_plans(
                    conn, sql("step_end_many"), _end_params(leased), analyze=True
                )
                conn.execute(sql("step_end_many"), _end_params(leased))
                if i < WARM_BATCHES * steps:
                    continue
                counted += batch
                for statement, plans in zip(STATEMENTS, (lease_plans, end_plans), strict=True):
                    # The statement's own plan comes last, after those nested in it.
                    *nested, top = plans
                    whole[statement] += float(top["Plan"]["Actual Total Time"])
                    for plan in nested:
                        _own(plan["Plan"], nodes[statement])
                        for trigger in plan.get("Triggers", ()):
                            triggers[statement][trigger["Trigger Name"]] += float(trigger["Time"])
    finally:
        server.drop(name)
    out: dict[str, Any] = {}
    for statement in STATEMENTS:
        rows = {
            label: {
                "us": round(f["ms"] * 1000 / counted, 2),
                "wal_records": round(f["wal_records"] / counted, 2),
                "wal_bytes": round(f["wal_bytes"] / counted, 1),
                "buffers": round(f["buffers"] / counted, 2),
            }
            for label, f in nodes[statement].items()
        }
        in_nodes = sum(r["us"] for r in rows.values())
        total = whole[statement] * 1000 / counted
        out[statement] = {
            "us_instrumented": round(total, 1),
            "rest_us": round(total - in_nodes, 1),
            "nodes": dict(sorted(rows.items(), key=lambda kv: -kv[1]["us"])),
            # (a trigger's time holds the statements it ran, which are in "nodes" too)
            "triggers_us": {
                k: round(v * 1000 / counted, 2) for k, v in triggers[statement].items()
            },
        }
    return out


def per_call(server: Server, *, batch: int, steps: int) -> dict[str, dict[str, float]]:
    """Each statement's cost as a fixed part per call and a part per step: server µs per step
    at batches of 1 and of ``batch`` (enough batches of each for ~2,000 steps, at least 8),
    and the line through them. A worker's leases and ends are small when it keeps up with its
    queue, so the fixed part is what most of them pay."""
    one = plain(server, batch=1, batches=400, steps=steps)
    big = plain(server, batch=batch, batches=max(8, 2000 // batch), steps=steps)
    out = {}
    for statement in STATEMENTS:
        per_step = (big[statement] * batch - one[statement]) / (batch - 1)
        out[statement] = {
            "us_per_step_at_1": one[statement],
            f"us_per_step_at_{batch}": big[statement],
            "fixed_us_per_call": round(one[statement] - per_step, 1),
            "us_per_step": round(per_step, 1),
        }
    return out


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def _database_at(server: Server, ref: str, name: str) -> str:
    """A database of REF's schema: its baseline (where it has one), its migrations, then its
    function files, in the order of its db/functions/ORDER (name order where it has none)."""
    server.drop(name)
    with psycopg.connect(server.admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = server.url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(url, autocommit=True) as conn:
        if "baseline.sql" in _git("ls-tree", "--name-only", f"{ref}:db").split():
            conn.cursor().execute(_git("show", f"{ref}:db/baseline.sql"), prepare=False)
        for folder in ("db/migrations", "db/functions"):
            files = sorted(_git("ls-tree", "--name-only", f"{ref}:{folder}").split())
            if folder == "db/functions" and "ORDER" in files:  # each file calls those above it
                files = [
                    line.split("#")[0].strip()
                    for line in _git("show", f"{ref}:{folder}/ORDER").splitlines()
                    if line.split("#")[0].strip()
                ]
            for file in files:
                if file.endswith(".sql"):
                    text = _git("show", f"{ref}:{folder}/{file}")
                    conn.cursor().execute(text, prepare=False)
    return url


def against(server: Server, ref: str, *, batch: int, steps: int) -> dict[str, Any]:
    """This tree's statements against REF's, interleaved in one server: µs per step of each,
    medians, at batches of 1 (30 rounds of 40 calls) and of ``batch`` (24 rounds of 1), the
    side that goes first alternating."""
    sides = {
        "this": server.fresh("bench_statements_this"),
        ref: _database_at(server, ref, "bench_statements_ref"),
    }
    out: dict[str, Any] = {"ref": ref}
    try:
        for size, rounds, per in ((1, 30, 40), (batch, 24, 1)):
            conns = {}
            for side, url in sides.items():
                conn = psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION)
                _fill(conn, size * (rounds * per + WARM_BATCHES) * steps, steps)
                conns[side] = conn
            times: dict[str, dict[str, list[float]]] = {
                side: {s: [] for s in STATEMENTS} for side in sides
            }
            try:
                for round_ in range(rounds):
                    # each side first in every other round: neither always runs on the
                    # other's leftovers (its dirty pages, its WAL to flush)
                    order = list(conns.items())
                    for side, conn in order if round_ % 2 else reversed(order):
                        for _ in range(per * steps):
                            lease_ms, end_ms = _timed_batch(conn, size)
                            if round_ > 0:  # the first warms plans and pages
                                times[side]["step_lease"].append(lease_ms * 1000 / size)
                                times[side]["step_end_many"].append(end_ms * 1000 / size)
            finally:
                for conn in conns.values():
                    conn.close()
            out[str(size)] = {
                side: {s: round(statistics.median(v), 1) for s, v in t.items()}
                for side, t in times.items()
            }
    finally:
        server.drop("bench_statements_this")
        server.drop("bench_statements_ref")
    return out


def against_table(r: dict[str, Any]) -> str:
    ref = r["ref"]
    lines = [f"server us per step, this tree vs {ref} (medians, interleaved in one server):"]
    for size, sides in r.items():
        if size == "ref":
            continue
        for statement in STATEMENTS:
            old, new = sides[ref][statement], sides["this"][statement]
            lines.append(
                f"  {statement:14s} at {size:>3} a call: {old:7.1f} -> {new:7.1f} "
                f"({new / old:.2f}x)"
            )
    return "\n".join(lines)


def measure(server: Server, *, batch: int, batches: int, steps: int) -> dict[str, Any]:
    return {
        "batch": batch,
        "batches": batches,
        "steps_per_run": steps,
        "per_call": per_call(server, batch=batch, steps=steps),
        "by_node": by_node(server, batch=batch, batches=batches, steps=steps),
    }


def table(r: dict[str, Any], top: int = 8) -> str:
    lines = [
        f"server time ({r['steps_per_run']}-step runs), fixed per call + per step: "
        + "; ".join(
            f"{k} {v['fixed_us_per_call']} us + {v['us_per_step']} us "
            f"({v['us_per_step_at_1']} us at one step a call)"
            for k, v in r["per_call"].items()
        ),
        f"by plan node, batches of {r['batch']}:",
    ]
    for statement, s in r["by_node"].items():
        lines.append(
            f"{statement}: {s['us_instrumented']} us instrumented, of which (own time, "
            "WAL records, WAL bytes per step):"
        )
        for label, n in list(s["nodes"].items())[:top]:
            lines.append(
                f"  {n['us']:7.2f} us  {n['wal_records']:5.2f} rec  {n['wal_bytes']:7.1f} B  "
                f"{label}"
            )
        lines.append(
            f"  {s['rest_us']:7.2f} us  the rest: PL/pgSQL, expressions, sorts and joins, "
            "triggers' own code"
        )
        for trigger, us in s["triggers_us"].items():
            lines.append(f"  (trigger {trigger}: {us} us, its statements above included)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1, help="chained steps per run")
    parser.add_argument("--top", type=int, default=8, help="nodes shown per statement")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--against", metavar="REF", help="compare with a git commit's SQL")
    args = parser.parse_args(argv)
    with bench_database() as url:
        if args.against:
            out = against(Server(url), args.against, batch=args.batch, steps=args.steps)
            print(against_table(out))
        else:
            out = measure(Server(url), batch=args.batch, batches=args.batches, steps=args.steps)
            print(table(out, args.top))
    if args.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
