"""Namespaces on one fleet (``make bench`` section ``tenants``; issue 34, item 3): how soon a
run of namespace B gets its first lease while namespace A holds a backlog, how two busy
namespaces split the workers' throughput by weight, and what the lease costs with many busy
namespaces.

    .venv/bin/python -m bench.tenants [--backlog 100000] [--samples 100] [--workers 2]
        [--b-weight 1] [--busy 10000] [--ready 20000] [--namespaces 100] [--leases 200]
        [--keys 10000] [--held-back-slots 1]

The lease shares its slots between namespaces by weight (migration 0019, rara_step_lease in
db/functions/lease.sql; weights: ``rara.pg.limits.set_share``), so a namespace's backlog is no
longer everyone's wait. The goals: B's p99 behind A's backlog within 2x an idle database's; two
busy namespaces' split within 10% (relative) of their weights' shares; a lease among 100 busy
namespaces within 1.2x the cost of one among 1.

1. ``--samples`` one-step runs of B, one every IDLE_EVERY s, into idle workers: start to
   first lease.
2. A's ``--backlog`` one-step runs inserted at once (``run_enqueue_many``), then B's runs, one
   every BEHIND_EVERY s while the workers drain A: start (the run row's creation) to first
   lease. B's weight is ``--b-weight`` here (a control: far above A's, B comes first in nearly
   every lease, and what is left of its wait is the machine's, not the lease order's). Before
   each start, a ``SELECT 1``'s round trip from the same client: the machine's load alone; and
   the wait split at the start's answer: the start's own statement, in which no worker takes
   part, and the rest.
   After 3., the same with A's steps under ``--keys`` concurrency keys (KEY_MAX running of
   each). Both again on a fresh database and workers with ``--held-back-slots`` held-back
   slots (docs/namespaces.md, "Held-back slots").
3. Both busy: ``--busy`` runs of A and as many of B, inserted in one transaction; when half of
   all steps are done, each namespace's share of them. Once with equal weights (50% each is
   fair), once with A's weight 1 and B's 3 (25% / 75%). A's head start (its steps leased before
   B's were in) is reported too: it would skew both towards A.
4. No workers: five databases of ``--ready`` ready one-step runs each — in 1 namespace,
   spread evenly over ``--namespaces`` and over ten times as many, in 1 namespace beside
   ``--namespaces`` - 1 idle ones
   (lanes with nothing ready), and in 1 namespace with ``--keys`` keys; ``--leases`` leases
   of 10 and of 1 on each, in turns between the databases, rolled back so that every one sees
   the same queue: the client's time per lease and the server's (its execution time, from
   EXPLAIN ANALYZE).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import (  # noqa: E402
    Server,
    bench_database,
    percentiles,
    scalar,
    server_ms,
    wait_until,
    workers,
)
from bench.run_size import _pcts  # noqa: E402
from rara.pg.limits import set_share  # noqa: E402
from rara.pg.queries import many, sql  # noqa: E402
from rara.pg.runs import cancel, enqueue_many  # noqa: E402
from rara.runs import start_run  # noqa: E402
from rara.worker.store import HOT_PATH_SESSION, LEASED  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402
from tests.support.leasing import lease_params  # noqa: E402

A, B = "team-a", "team-b"
CAPABILITY = "bench.noop@1"  # tests.support.bench_handlers: returns at once
WEIGHTS = {A: 1, B: 3}  # the weighted split's
KEY_MAX = 2  # with keys: at most 2 running per key (issue 34, item 4: "2 per input.customer")
# B's runs: one every IDLE_EVERY s into idle workers, one every BEHIND_EVERY s behind A's
# backlog — often enough that the default 100 (a p99 that is not just the max) start while the
# backlog lasts, which ``backlog_left`` shows: the workers drain 100,000 steps in ~6 s since
# their garbage collector was settled (rara.worker.heap), and B's last runs at one every 50 ms
# started as the backlog ran out.
IDLE_EVERY, BEHIND_EVERY = 0.1, 0.025
LEASE_SIZES = (10, 1)  # a worker's batch, and a lone step (where the draw costs most)


def _ended(conn: psycopg.Connection[Any], ids: list[int]) -> bool:
    return not scalar(
        conn,
        "SELECT count(*) FROM rara_runs WHERE id = ANY(%s) AND status IN ('pending', 'running')",
        (ids,),
    )


@dataclass
class Starts:
    """B's runs started one by one, and two controls: before each start a ``SELECT 1``'s round
    trip (ms), what the machine's load alone adds to any round trip; and when each start's
    answer reached the client (epoch), which splits start -> first lease into the start's own
    statement and what follows it (``_waits``)."""

    runs: list[int]
    probe_ms: list[float]
    answered: list[float]


def _starts(conn: psycopg.Connection[Any], count: int, every: float) -> Starts:
    """``count`` runs of B, one every ``every`` s."""
    starts = Starts([], [], [])
    for _ in range(count):
        time.sleep(every)
        t0 = time.perf_counter()
        conn.execute("SELECT 1").fetchone()
        starts.probe_ms.append((time.perf_counter() - t0) * 1000)
        starts.runs.append(start_run(conn, "small", queue_anyway=True, namespace=B).run_id)
        starts.answered.append(time.time())  # the server's clock is this machine's
    return starts


def _waits(
    conn: psycopg.Connection[Any], starts: Starts
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each run's start (its row's creation, in the start's transaction) to its first
    attempt's lease, and the same split in two (``start_split_ms``): ``statement``, the start's
    own (to its answer at the client: no worker takes part) and ``after``, from that answer to
    the first lease."""
    answered = dict(zip(starts.runs, starts.answered, strict=True))
    rows = conn.execute(
        "SELECT r.id, extract(epoch FROM r.created_at)::float8,"
        " extract(epoch FROM min(a.started_at))::float8"
        " FROM rara_runs r JOIN rara_attempts a ON a.run_id = r.id"
        " WHERE r.id = ANY(%s) GROUP BY r.id",
        (starts.runs,),
    ).fetchall()
    split = {
        "statement": _pcts([(answered[i] - created) * 1000 for i, created, _ in rows]),
        "after": _pcts([(leased - answered[i]) * 1000 for i, _, leased in rows]),
    }
    return _pcts([(leased - created) * 1000 for _, created, leased in rows]), split


def _done(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT r.namespace, count(*) FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id"
        " WHERE s.status = 'succeeded' AND r.definition_version_id IN"
        " (SELECT id FROM rara_definition_versions WHERE name = 'noop') GROUP BY 1"
    ).fetchall()
    return {ns: int(n) for ns, n in rows}


def _left(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, "SELECT count(*) FROM rara_steps WHERE status <> 'succeeded'"))


def _backlog(
    conn: psycopg.Connection[Any], namespace: str, runs: int, keys: int | None = None
) -> list[int]:
    """``runs`` ready one-step runs; with ``keys``, their steps take that many distinct
    concurrency keys in turn, at most KEY_MAX of each running (migration 0020)."""
    return enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=runs,
        steps=1,
        key="s0",
        capability=CAPABILITY,
        namespace=namespace,
        concurrency_keys=keys,
        concurrency_max=KEY_MAX,
    )


@contextmanager
def _database(server: Server, name: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A fresh database with A's and B's one-step definitions (``noop``) and B's ``small``
    that B's runs start; its URL and a connection. Dropped at the end."""
    url = server.fresh(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for namespace in (A, B):
                noop_definition(conn, "noop", namespace=namespace)
            noop_definition(conn, "small", namespace=B)
            yield url, conn
    finally:
        server.drop(name)


def _workers(
    url: str, name: str, logs: Path, n_workers: int, held_back_slots: int = 0
) -> AbstractContextManager[list[int]]:
    """``n_workers`` worker processes, ``name``-0, -1, …, on the database at ``url``."""
    names = [f"{name}-{i}" for i in range(n_workers)]
    return workers(url, names, logs, held_back_slots=held_back_slots)


@dataclass
class Behind:
    starts: Starts  # B's
    left: list[int]  # steps not yet done when B's first and last run started


def _behind(
    conn: psycopg.Connection[Any], backlog: int, samples: int, keys: int | None = None
) -> Behind:
    """A's ``backlog`` one-step runs at once (with ``keys``: keyed), then ``samples`` runs of
    B, one every BEHIND_EVERY s, while the workers drain A; waits until all are done. A's
    backlog was draining throughout when the steps left at B's last start are well above 0."""
    _backlog(conn, A, backlog, keys)
    left_before = _left(conn)
    starts = _starts(conn, samples, BEHIND_EVERY)
    left_after = _left(conn)
    wait_until(lambda: _ended(conn, starts.runs), 900, "B's runs behind A's backlog")
    wait_until(lambda: _left(conn) == 0, 900, "A's backlog drained")
    return Behind(starts, [left_before, left_after])


def _held_back(
    server: Server,
    logs: Path,
    backlog: int,
    samples: int,
    n_workers: int,
    keys: int,
    slots: int,
) -> tuple[Behind, dict[str, float], dict[str, float], dict[str, dict[str, float]]]:
    """B behind A's backlog, unkeyed then keyed, on workers with ``slots`` held-back slots: the
    unkeyed phase, both phases' start → first lease percentiles and the unkeyed one's split.
    On a database of its own, as fresh as the plain workers' was: one that already holds the
    other phases' 250,000 steps is slower to lease from, and the comparison would be off."""
    name = f"bench_tenants_held_back_{backlog}"
    with _database(server, name) as (url, conn):
        with _workers(url, name, logs, n_workers, held_back_slots=slots):
            held = _behind(conn, backlog, samples)
            keyed = _behind(conn, backlog, samples, keys)
        held_ms, held_split = _waits(conn, held.starts)
        return held, held_ms, _waits(conn, keyed.starts)[0], held_split


def split_at_half(
    conn: psycopg.Connection[Any], busy: int, keys: int | None = None
) -> tuple[dict[str, float], int]:
    """``busy`` runs of A and of B, committed together on running workers: each namespace's
    share of the steps done when half of them are, and A's head start — its steps leased before
    B's were in (none: one transaction inserts both; a head start would skew the split towards
    A by about half of it). The rest is drained before returning, so that the next split starts
    from an empty queue."""
    before = _done(conn)
    with conn.transaction():
        a_runs = _backlog(conn, A, busy, keys)
        _backlog(conn, B, busy, keys)
    head_start = scalar(
        conn,
        "SELECT count(*) FROM rara_steps WHERE run_id = ANY(%s) AND status <> 'ready'",
        (a_runs,),
    )

    def half_done() -> bool:
        return sum(_done(conn).values()) - sum(before.values()) >= busy

    wait_until(half_done, 600, "half of the two namespaces' steps")
    after = _done(conn)
    wait_until(lambda: _left(conn) == 0, 600, "the two namespaces' steps drained")
    split = {ns: after.get(ns, 0) - before.get(ns, 0) for ns in (A, B)}
    total = sum(split.values()) or 1
    return {ns: round(n / total, 3) for ns, n in split.items()}, int(head_start)


def _weight_error(split: dict[str, float], weights: dict[str, int]) -> float:
    """B's share against its weight's share, relative (0.1: 10% off)."""
    fair = weights[B] / sum(weights.values())
    return round(abs(split[B] - fair) / fair, 3)


def _namespaces(count: int) -> list[str]:
    return [A] if count == 1 else [f"team-{i:03d}" for i in range(count)]


def _fill(
    conn: psycopg.Connection[Any], namespaces: list[str], ready: int, keys: int | None = None
) -> None:
    """``ready`` ready one-step runs, as many in each namespace (with ``keys``: keyed)."""
    for namespace in namespaces:
        noop_definition(conn, "noop", namespace=namespace)
        _backlog(conn, namespace, ready // len(namespaces), keys)
    conn.execute("ANALYZE")


def _lease_params(limit: int) -> dict[str, Any]:
    return lease_params([CAPABILITY], worker="bench", limit=limit)


def _lease_us(conn: psycopg.Connection[Any], limit: int) -> float:
    with conn.transaction(force_rollback=True):  # the queue stays as it was
        t0 = time.perf_counter()
        rows = many(conn, "step_lease", LEASED, **_lease_params(limit))
        elapsed = (time.perf_counter() - t0) * 1e6
    assert len(rows) == limit
    return elapsed


def _server_us(conn: psycopg.Connection[Any], limit: int) -> float:
    """The lease's execution in the server alone: no round trip, no parse, no rows sent."""
    return server_ms(conn, sql("step_lease"), _lease_params(limit)) * 1000


def _idle_lanes(conn: psycopg.Connection[Any], count: int) -> None:
    """``count`` namespaces whose only run was cancelled: lanes with nothing ready, as teams
    that have gone quiet leave them (a lane is never removed)."""
    for i in range(count):
        namespace = f"idle-{i:03d}"
        noop_definition(conn, "noop", namespace=namespace)
        [run_id] = _backlog(conn, namespace, 1)
        cancel(conn, run_id)


@dataclass(frozen=True)
class Queue:
    """A database without workers for ``lease_costs``: ``ready`` ready steps spread over
    ``namespaces`` busy ones, beside ``idle`` namespaces with nothing ready; with ``keys``,
    the steps keyed."""

    namespaces: int
    idle: int = 0
    keys: int | None = None


SAMPLERS = {"client_us": _lease_us, "server_us": _server_us}


def lease_costs(
    server: Server, queues: dict[str, Queue], ready: int, leases: int
) -> dict[str, dict[str, Any]]:
    """µs per lease of each of LEASE_SIZES on each queue, at the client and in the server.
    The queues are measured in turns — one lease of each size and side on every queue, then
    the next, the order rotating — so that a ratio between two queues compares leases made
    side by side: the machine's drift over the run (10-20% on this shared host) falls on both
    alike instead of on whichever was measured later."""
    names = {label: f"bench_tenants_lanes_{label}" for label in queues}
    conns: dict[str, psycopg.Connection[Any]] = {}
    try:
        for label, queue in queues.items():
            conn = psycopg.connect(server.fresh(names[label]), autocommit=True, **HOT_PATH_SESSION)
            conns[label] = conn
            _idle_lanes(conn, queue.idle)
            _fill(conn, _namespaces(queue.namespaces), ready, queue.keys)
        samples: dict[str, dict[int, dict[str, list[float]]]] = {
            label: {limit: {side: [] for side in SAMPLERS} for limit in LEASE_SIZES}
            for label in queues
        }
        labels = list(queues)
        warm = min(20, leases)  # turns not counted: caches and plans warmed
        for turn in range(warm + leases):
            for label in labels[turn % len(labels) :] + labels[: turn % len(labels)]:
                for limit in LEASE_SIZES:
                    for side, sample in SAMPLERS.items():
                        elapsed = sample(conns[label], limit)
                        if turn >= warm:
                            samples[label][limit][side].append(elapsed)
    finally:
        for conn in conns.values():
            conn.close()
        for name in names.values():
            server.drop(name)
    return {
        label: {
            str(limit): {
                side: {k: round(v, 1) for k, v in percentiles(times).items()}
                for side, times in by_side.items()
            }
            for limit, by_side in by_limit.items()
        }
        for label, by_limit in samples.items()
    }


def _cost_ratios(one: dict[str, Any], many_: dict[str, Any]) -> dict[str, float]:
    """p50 with many namespaces / with one, per lease size and side."""
    return {
        f"{limit} {side}": round(many_[limit][side]["p50"] / one[limit][side]["p50"], 2)
        for limit in one
        for side in ("client_us", "server_us")
    }


def measure(
    server: Server,
    logs: Path,
    *,
    backlog: int,
    samples: int = 100,
    n_workers: int = 2,
    busy: int = 10_000,
    ready: int = 20_000,
    namespaces: int = 100,
    leases: int = 200,
    b_weight: int = 1,
    keys: int = 10_000,
    held_back_slots: int = 1,
) -> dict[str, Any]:
    name = f"bench_tenants_{backlog}"
    with _database(server, name) as (url, conn):
        with _workers(url, name, logs, n_workers):
            idle = _starts(conn, samples, IDLE_EVERY)
            wait_until(lambda: _ended(conn, idle.runs), 60, "B's runs on idle workers")
            # (a control: with B's weight far above A's, B's step comes first in nearly
            # every lease, so what is left of B's wait is not the lease's order)
            set_share(conn, B, None if b_weight == 1 else b_weight)
            behind = _behind(conn, backlog, samples)
            set_share(conn, B, None)
            equal, equal_head = split_at_half(conn, busy)
            for namespace, weight in WEIGHTS.items():
                set_share(conn, namespace, weight)
            weighted, weighted_head = split_at_half(conn, busy)
            for namespace in WEIGHTS:
                set_share(conn, namespace, None)
            # The same with A's steps keyed: ``keys`` distinct keys, KEY_MAX of each at most.
            behind_keyed = _behind(conn, backlog, samples, keys)
            keyed_split, _ = split_at_half(conn, busy, keys)
        idle_ms, idle_split = _waits(conn, idle)
        behind_ms, behind_split = _waits(conn, behind.starts)
        behind_keyed_ms, _ = _waits(conn, behind_keyed.starts)
    held, held_ms, held_keyed_ms, held_split = _held_back(
        server, logs, backlog, samples, n_workers, keys, held_back_slots
    )
    costs = lease_costs(
        server,
        {
            "one": Queue(1),
            "spread": Queue(namespaces),
            "wider": Queue(namespaces * 10),
            "beside_idle": Queue(1, idle=namespaces - 1),
            "keyed": Queue(1, keys=keys),
        },
        ready,
        leases,
    )
    one, spread, wider, beside_idle, keyed = (
        costs[label] for label in ("one", "spread", "wider", "beside_idle", "keyed")
    )
    return {
        "backlog": backlog,
        "workers": n_workers,
        "b_weight_behind_backlog": b_weight,
        "idle": idle_ms,
        "behind_backlog": behind_ms,
        "behind_vs_idle_p99": _ratio(behind_ms, idle_ms),
        # steps not yet done when B's first and last run started: A's backlog was draining
        # throughout when the second is well above 0
        "backlog_left": behind.left,
        # a SELECT 1's round trip from the same client, idle and behind: the machine's load
        "probe_ms": {
            "idle": _pcts(idle.probe_ms),
            "behind_backlog": _pcts(behind.starts.probe_ms),
        },
        # start -> first lease in two: the start's own statement (no worker takes part), and
        # from its answer to the lease
        "start_split_ms": {"idle": idle_split, "behind_backlog": behind_split},
        # the same on workers with held-back slots (WorkerSettings.held_back_slots)
        "held_back": {
            "slots": held_back_slots,
            "behind_backlog": held_ms,
            "behind_vs_idle_p99": _ratio(held_ms, idle_ms),
            "backlog_left": held.left,
            "probe_ms": _pcts(held.starts.probe_ms),
            "start_split_ms": held_split,
            "keyed_behind_backlog": held_keyed_ms,
            "keyed_behind_vs_idle_p99": _ratio(held_keyed_ms, idle_ms),
        },
        "busy": busy,
        "split_at_half": equal,
        "weights": WEIGHTS,
        "weighted_split_at_half": weighted,
        "weighted_error": _weight_error(weighted, WEIGHTS),
        "a_head_start": {"equal": equal_head, "weighted": weighted_head},
        "lease_cost": {"ready": ready, "namespaces": namespaces, "1": one, str(namespaces): spread},
        "lease_cost_ratio": _cost_ratios(one, spread),
        # ten times as many busy namespaces, against ``namespaces``: what more of them costs
        "lease_cost_wider": wider,
        "lease_cost_wider_ratio": _cost_ratios(spread, wider),
        # one busy namespace beside namespaces - 1 idle ones (lanes with nothing ready)
        "lease_cost_beside_idle": beside_idle,
        "lease_cost_beside_idle_ratio": _cost_ratios(one, beside_idle),
        # A's steps with ``keys`` distinct concurrency keys, at most KEY_MAX running of each
        "keys": {
            "keys": keys,
            "max": KEY_MAX,
            "behind_backlog": behind_keyed_ms,
            "behind_vs_idle_p99": _ratio(behind_keyed_ms, idle_ms),
            "split_at_half": keyed_split,
            "lease_cost": keyed,
            "lease_cost_ratio": _cost_ratios(one, keyed),
        },
    }


def _ratio(behind: dict[str, float], idle: dict[str, float]) -> float:
    return round(behind["p99"] / max(idle["p99"], 0.001), 2)


def line(r: dict[str, Any]) -> str:
    idle, behind, k, held = r["idle"], r["behind_backlog"], r["keys"], r["held_back"]
    split, weighted = r["split_at_half"], r["weighted_split_at_half"]
    fair = r["weights"][B] / sum(r["weights"].values())
    cost, n = r["lease_cost"], r["lease_cost"]["namespaces"]
    lease10 = {k: cost[k]["10"]["client_us"]["p50"] for k in ("1", str(n))}
    return (
        f"B's start -> first lease: idle p50 {idle['p50']:.1f} ms p99 {idle['p99']:.1f} ms; "
        f"behind A's {r['backlog']:,} p50 {behind['p50']:.0f} ms p99 {behind['p99']:.0f} ms "
        f"({r['behind_vs_idle_p99']:.1f}x), with {held['slots']} held-back slot: p50 "
        f"{held['behind_backlog']['p50']:.0f} ms p99 {held['behind_backlog']['p99']:.0f} ms "
        f"({held['behind_vs_idle_p99']:.1f}x); a SELECT 1 meanwhile: p99 "
        f"{r['probe_ms']['behind_backlog']['p99']:.1f} ms (idle "
        f"{r['probe_ms']['idle']['p99']:.1f} ms); B's start statement alone: p99 "
        f"{held['start_split_ms']['statement']['p99']:.1f} ms held back, "
        f"{r['start_split_ms']['behind_backlog']['statement']['p99']:.1f} ms plain (idle "
        f"{r['start_split_ms']['idle']['statement']['p99']:.1f} ms); two busy namespaces, at "
        "half done: "
        f"A {split[A]:.0%}, B {split[B]:.0%}; weighted 1:3: B {weighted[B]:.1%} "
        f"(fair {fair:.0%}, {r['weighted_error']:.1%} off); lease of 10 among 1 / {n} "
        f"namespaces: p50 {lease10['1']:.0f} / {lease10[str(n)]:.0f} us "
        f"({r['lease_cost_ratio']['10 client_us']:.2f}x), among {n * 10:,}: "
        f"{r['lease_cost_wider_ratio']['10 client_us']:.2f}x the {n}'s; one busy beside "
        f"{n - 1} idle: "
        f"{r['lease_cost_beside_idle_ratio']['10 client_us']:.2f}x; with {k['keys']:,} keys: "
        f"behind p99 {k['behind_backlog']['p99']:.0f} ms ({k['behind_vs_idle_p99']:.1f}x; "
        f"held back {held['keyed_behind_vs_idle_p99']:.1f}x), "
        f"split A {k['split_at_half'][A]:.0%}, B {k['split_at_half'][B]:.0%}, lease of 10 "
        f"{k['lease_cost_ratio']['10 client_us']:.2f}x unkeyed"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--busy", type=int, default=10_000, help="runs per busy namespace")
    parser.add_argument("--ready", type=int, default=20_000, help="ready steps, lease cost")
    parser.add_argument("--namespaces", type=int, default=100, help="busy ones, lease cost")
    parser.add_argument("--leases", type=int, default=200, help="timed leases per size")
    parser.add_argument(
        "--b-weight", type=int, default=1, help="B's weight behind A's backlog (a control)"
    )
    parser.add_argument("--keys", type=int, default=10_000, help="distinct concurrency keys")
    parser.add_argument(
        "--held-back-slots", type=int, default=1, help="of the second workers' (B behind A's)"
    )
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    with bench_database() as url:
        out = measure(
            Server(url),
            logs,
            backlog=args.backlog,
            samples=args.samples,
            n_workers=args.workers,
            busy=args.busy,
            ready=args.ready,
            namespaces=args.namespaces,
            leases=args.leases,
            b_weight=args.b_weight,
            keys=args.keys,
            held_back_slots=args.held_back_slots,
        )
    print(line(out))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
