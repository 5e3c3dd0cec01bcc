"""rara's benchmark, side by side with its peers, in one run (``make bench``).

    .venv/bin/python bench/run.py [--quick] [--skip peers,depth,...] [--out FILE]

Starts its own PostgreSQL (``bench.common.bench_database``: fsync off, as the peers are run),
then measures, each scenario in a fresh database cloned from the migrated one:

throughput   no-op single-step runs and the no-op steps of 3- and 10-step chains, drained by
             1, 2 and 4 worker processes (steps/s on the database clock, first lease to last
             completion); the same through the gRPC path (an executor process, no-op plugin);
             with the CPU per step of the server's and of the worker processes (/proc)
refresh      the step cache: a one-step run's start to its cached step's end (database
             clock), a hit against a miss, one at a time into an idle worker: p50/p99 ms;
             the demo's first run and its two refreshes (unchanged, one document changed):
             wall and CPU seconds (``--quick``: 60 documents) (``bench.refresh``)
latency      start of a run (client clock before ``start_run``) to its handler running
             (``bench.stamp@1`` reports CLOCK_MONOTONIC), into an idle worker: p50/p99 ms
grpc         attempt time (lease to completion, database clock) of a no-op step in process
             and through the gRPC executor, one at a time: p50/p99 ms and the difference
size         one run whose map step expands into N no-op children (over its first step's
             result) vs N one-step runs, at N = 1k, 10k, 100k (``--quick``: 1k, 10k), 2
             workers: steps/s, the ratio, server CPU per step and its 100k/1k ratio; then a
             small run's start to first lease, idle and behind a 100k-child map (p50/p99 of
             20; ``--quick``: behind 10k) (``bench.run_size``)
tenants      namespaces on one fleet, shared by weight: B's start to first lease, idle and
             behind A's 100k-step backlog (``--quick``: 10k); the split of two busy
             namespaces' throughput at half done, equal weights and 1:3; the lease's cost
             among 1 vs 100 busy namespaces (``bench.tenants``)
statements   where a step's server time goes: each hot statement's (step_lease,
             step_end_many) fixed cost per call and cost per step, and by plan node at 500
             per call: own time and WAL per step (``bench.statements``; the same in ``--quick``)
depth        lease cost (batch of 10) with 1k / 100k / 1M ready steps (``--quick``: to 100k)
horizon      throughput while another connection holds the xmin horizon (an open REPEATABLE
             READ transaction that did a SELECT) for 60 s (``--quick``: 15 s) vs without
history      lease latency and drain throughput with 10M rows of finished attempts and
             events vs an empty database (``bench.history``; ``--quick``: 2M rows, one round)
outage       database outages of 5, 20 and 45 s (a server of its own stopped at once, lease
             60 s) under a stream of runs: the time from the database's return to the worker's
             first heartbeat and to its first lease, and the leases that expired
             (``bench.outage``; the same in ``--quick``)
schedules    10,000 idle schedules and two `rara schedules run` firers: their and the server's
             CPU over 30 s while asleep (``--quick``: 10 s); then a 1 s schedule beside
             them: tick -> run started p50/p99 ms over 60 ticks (``--quick``: 20)
             (``bench.schedules``)
triggers     1,000 idle objects triggers and two `rara triggers serve` processes: their and
             the server's CPU over 30 s (``--quick``: 10 s); signed webhook delivery -> run
             started p50/p99 ms over 200 deliveries (``--quick``: 50); file written -> run
             started with 1 s polls over 40 files (``--quick``: 10) (``bench.triggers``)
waits        durable waits, 2 workers: server and worker CPU/s with 10,000 runs waiting (half
             on timers 6 h away, half on signals) vs none, over 10 s (``--quick``: 2,000, 5 s);
             timer lateness (finished_at - due) of 2,000 timers over 20 s (``--quick``: 500
             over 10 s); signal -> dependant ready / leased p50/p99 of 500 (``--quick``: 100)
             (``bench.waits``)
fleet        how many real workers (many per host process, default cadence, 2 leases held
             each) one PostgreSQL carries before a probe's lease p99 doubles: fleets of 0,
             25, 50, 100, 150 and 200 (``--quick``: 0, 25, 50), the server's CPU per worker,
             connections, and the capacity projected for a 16-core database (``bench.fleet``)
peers        PgQueuer (asyncpg, psycopg), Procrastinate, DBOS and Temporal (1- and 3-step
             workflows; Temporal's server built once from the Go module proxy) and River (a
             Go driver) on the same server (``bench.peers.run_all``; a peer that cannot be
             installed or built here is reported skipped, with why), and the pgbench
             single-row UPDATE ceiling; the summary gives rara/peer ratios of drain rate
             and start latency

Prints a table and writes everything as JSON to ``bench/results/<timestamp>.json``. The
machine is shared: the load average before and after is recorded; treat one run as noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import (  # noqa: E402
    CONCURRENCY,
    LEASE_BATCH,
    CpuMeter,
    Server,
    bench_database,
    percentiles,
    scalar,
    wait_run_succeeded,
    wait_until,
    workers,
)
from bench.lease_depth import measure_depths  # noqa: E402
from bench.peers import run_all  # noqa: E402
from bench.pgbench_ceiling import measure_ceiling  # noqa: E402
from bench.refresh import cache_hit_latency, demo_refresh, describe_demo  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.runs import start_run  # noqa: E402
from rara.worker.store import HOT_PATH_SESSION  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402

Conn = psycopg.Connection[Any]
TOKEN = "bench-token"


def log(message: str) -> None:
    print(message, flush=True)


@contextmanager
def executor_process(tmp: Path, streams: int = 512) -> Iterator[str]:
    """``python -m rara.executor.main`` with the no-op test plugins; yields its address."""
    (tmp / "token").write_text(TOKEN)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rara.executor.main",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            str(tmp / "token"),
            "--artifact-root",
            str(tmp / "artifacts"),
            "--plugins",
            "rara.executor.conformance_plugins",
            "--max-concurrency",
            str(streams),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        address = None
        deadline = time.monotonic() + 60
        while address is None and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                if "listening on " in line:
                    address = line.strip().rsplit("listening on ", 1)[1].split()[0]
        if address is None:
            raise RuntimeError("the executor did not start")
        # Keep its stdout drained so its logging never blocks on a full pipe.
        drain = subprocess.Popen(["cat"], stdin=proc.stdout, stdout=subprocess.DEVNULL)
        try:
            yield address
        finally:
            drain.kill()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _enqueue(conn: Conn, name: str, runs: int, steps: int, capability: str, executor: str) -> None:
    # Keys s0, s1, … (s when one step): the chain noop_definition declares.
    enqueue_many(
        conn,
        definition=name,
        version=None,
        runs=runs,
        steps=steps,
        key="s",
        capability=capability,
        executor=executor,
        chained=True,
    )
    # Statistics, and the insert-triggered autovacuum done now rather than during the measure.
    conn.execute("VACUUM ANALYZE")


def drain(
    server: Server,
    logs: Path,
    *,
    n_workers: int,
    runs: int,
    steps: int,
    executor: str = "inprocess",
    endpoint: str | None = None,
    tmp: Path | None = None,
) -> dict[str, Any]:
    """``runs`` runs of ``steps`` chained no-op steps, drained by ``n_workers`` processes."""
    name = f"bench_drain_{executor}_{steps}_{n_workers}"
    url = server.fresh(name)
    capability = "bench.noop@1" if executor == "inprocess" else "test.echo@1"
    total = runs * steps
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            noop_definition(conn, "noop", steps=steps, capability=capability, executor=executor)
            _enqueue(conn, "noop", runs, steps, capability, executor)
            names = [f"{name}-{i}" for i in range(n_workers)]
            with workers(url, names, logs, endpoint=endpoint, tmp=tmp) as pids:
                cpu = CpuMeter(url, pids)  # the workers' (not the executor's) and the server's
                cpu.start()
                # The rate comes from the attempts' own timestamps, not from this poll: poll
                # seldom, so that counting the runs left takes no CPU from the drain.
                wait_until(
                    lambda: (
                        scalar(
                            conn,
                            "SELECT count(*) FROM rara_runs WHERE status IN ('pending', 'running')",
                        )
                        == 0
                    ),
                    900,
                    f"{name} to drain",
                    every=0.5,
                )
                cpu.stop()
            seconds, count = conn.execute(
                "SELECT extract(epoch FROM max(ended_at) - min(started_at))::float8, count(*) "
                "FROM rara_attempts WHERE outcome = 'succeeded'"
            ).fetchone() or (0.0, 0)
            failed = scalar(conn, "SELECT count(*) FROM rara_steps WHERE status <> 'succeeded'")
        assert count == total, (count, total)
        assert failed == 0, failed
        return {
            "workers": n_workers,
            "steps": total,
            "seconds": round(seconds, 3),
            "steps_per_s": round(total / seconds, 1),
            "cpu_per_step": cpu.per(total),
        }
    finally:
        server.drop(name)


def start_latency(server: Server, logs: Path, samples: int, warmup: int = 5) -> dict[str, Any]:
    """Client clock before start_run → the handler's clock when it runs, one run at a time
    into an idle worker (as the peers' latency mode: 20 ms of idle before each)."""
    url = server.fresh("bench_latency")
    try:
        with (
            psycopg.connect(url, autocommit=True) as conn,
            psycopg.connect(url, autocommit=True) as listener,
        ):
            noop_definition(conn, "stamp", capability="bench.stamp@1")
            listener.execute("LISTEN rara_run")
            ms, client, worker = [], [], []
            with workers(url, ["latency"], logs, concurrency=10):
                time.sleep(1.0)
                for i in range(warmup + samples):
                    time.sleep(0.02)
                    t0 = time.monotonic()
                    run_id = start_run(conn, "stamp", queue_anyway=True).run_id
                    t1 = time.monotonic()
                    wait_run_succeeded(listener, run_id)
                    started = scalar(
                        conn,
                        "SELECT (result->>'started')::float8 FROM rara_steps WHERE run_id = %s",
                        (run_id,),
                    )
                    if i >= warmup:
                        ms.append((started - t0) * 1000)
                        client.append((t1 - t0) * 1000)
                        worker.append((started - t1) * 1000)
        # The parts: start_run itself (the client's transaction), then commit → handler.
        return {
            "samples": samples,
            **{k: round(v, 3) for k, v in percentiles(ms).items()},
            "start_run": {k: round(v, 3) for k, v in percentiles(client).items()},
            "commit_to_handler": {k: round(v, 3) for k, v in percentiles(worker).items()},
        }
    finally:
        server.drop("bench_latency")


def grpc_overhead(
    server: Server, logs: Path, tmp: Path, endpoint: str, samples: int
) -> dict[str, Any]:
    """Attempt time (database clock, lease to completion) of a no-op step in process and
    through the gRPC executor, one run at a time on an idle worker."""
    url = server.fresh("bench_grpc_overhead")
    out: dict[str, Any] = {}
    try:
        with (
            psycopg.connect(url, autocommit=True) as conn,
            psycopg.connect(url, autocommit=True) as listener,
        ):
            noop_definition(conn, "local", capability="bench.noop@1")
            noop_definition(conn, "remote", capability="test.echo@1", executor="grpc")
            listener.execute("LISTEN rara_run")
            with workers(url, ["grpc-overhead"], logs, endpoint=endpoint, tmp=tmp, concurrency=10):
                time.sleep(1.0)
                for name in ("local", "remote"):
                    ids = []
                    for i in range(samples + 5):
                        time.sleep(0.01)
                        run_id = start_run(conn, name, queue_anyway=True).run_id
                        wait_run_succeeded(listener, run_id)
                        if i >= 5:
                            ids.append(run_id)
                    ms = [
                        row[0]
                        for row in conn.execute(
                            "SELECT extract(epoch FROM ended_at - started_at)::float8 * 1000 "
                            "FROM rara_attempts WHERE run_id = ANY(%s)",
                            (ids,),
                        ).fetchall()
                    ]
                    out["inprocess" if name == "local" else "grpc"] = {
                        k: round(v, 3) for k, v in percentiles(ms).items()
                    }
        out["overhead_p50_ms"] = round(out["grpc"]["p50"] - out["inprocess"]["p50"], 3)
        out["overhead_p99_ms"] = round(out["grpc"]["p99"] - out["inprocess"]["p99"], 3)
        return out
    finally:
        server.drop("bench_grpc_overhead")


def horizon(
    server: Server, logs: Path, seconds: float, rate_hint: float, n_workers: int
) -> dict[str, Any]:
    """Steps/s over ``seconds`` of a deep queue, without and then with an open REPEATABLE READ
    transaction (that did a SELECT) holding back the xmin horizon of the database."""
    out: dict[str, Any] = {"seconds": seconds, "workers": n_workers}
    # Enough not to drain within the window (a deep queue is slower than a drain's 20k, so the
    # drain's rate over-provisions), capped: filling the queue is not what is measured.
    runs = min(int(rate_hint * (seconds + 15) * 1.2) + 1000, 300_000)
    out["queue_depth"] = runs
    for held in (False, True):
        name = f"bench_horizon_{'held' if held else 'normal'}"
        url = server.fresh(name)
        try:
            with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as holder:
                noop_definition(conn, "noop")
                _enqueue(conn, "noop", runs, 1, "bench.noop@1", "inprocess")
                if held:
                    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    holder.execute("SELECT count(*) FROM rara_runs").fetchone()
                names = [f"{name}-{i}" for i in range(n_workers)]
                with workers(url, names, logs):
                    time.sleep(2.0)  # past start-up
                    t0 = scalar(conn, "SELECT clock_timestamp()")
                    time.sleep(seconds)
                    t1 = scalar(conn, "SELECT clock_timestamp()")
                    done = scalar(
                        conn,
                        "SELECT count(*) FROM rara_attempts WHERE ended_at BETWEEN %s AND %s",
                        (t0, t1),
                    )
                    left = scalar(conn, "SELECT count(*) FROM rara_steps WHERE status = 'ready'")
                if held:
                    dead = scalar(
                        conn,
                        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'rara_steps'",
                    )
                    holder.rollback()
                    out["dead_tuples_steps"] = dead
            rate = done / (t1 - t0).total_seconds()
            out["held" if held else "normal"] = {"steps_per_s": round(rate, 1), "queue_left": left}
        finally:
            server.drop(name)
    out["ratio"] = round(out["held"]["steps_per_s"] / out["normal"]["steps_per_s"], 3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller everything (~4 minutes)")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated: throughput,latency,grpc,size,depth,horizon,history,outage,"
        "schedules,triggers,waits,fleet,peers",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    quick = args.quick
    single_runs = 5_000 if quick else 20_000
    chain_runs = 300 if quick else 1_500
    chain3_runs = 1_000 if quick else 4_000  # the 3-step chains DBOS's 3-step workflows face
    grpc_runs = 2_000 if quick else 5_000
    worker_counts = [1, 2] if quick else [1, 2, 4]
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "quick": quick,
        "machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()},
        "config": {"concurrency": CONCURRENCY, "lease_batch": LEASE_BATCH},
    }
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    tmp = Path(tempfile.mkdtemp(prefix="rara-bench-"))
    t_start = time.monotonic()
    with bench_database() as url:
        server = Server(url)
        if "throughput" not in skip:
            log("== throughput (steps/s)")
            tp: dict[str, Any] = {"single": [], "chain3": [], "chain10": [], "grpc": []}
            for n in worker_counts:
                tp["single"].append(drain(server, logs, n_workers=n, runs=single_runs, steps=1))
                log(f"  single-step no-op, {n} worker(s): {_rate(tp['single'][-1])}")
            for n in worker_counts:
                tp["chain3"].append(drain(server, logs, n_workers=n, runs=chain3_runs, steps=3))
                log(f"  3-step chain,      {n} worker(s): {_rate(tp['chain3'][-1])}")
            for n in worker_counts:
                tp["chain10"].append(drain(server, logs, n_workers=n, runs=chain_runs, steps=10))
                log(f"  10-step chain,     {n} worker(s): {_rate(tp['chain10'][-1])}")
            with executor_process(tmp) as endpoint:
                for n in worker_counts[:2]:
                    tp["grpc"].append(
                        drain(
                            server,
                            logs,
                            n_workers=n,
                            runs=grpc_runs,
                            steps=1,
                            executor="grpc",
                            endpoint=endpoint,
                            tmp=tmp,
                        )
                    )
                    log(f"  gRPC no-op,        {n} worker(s): {_rate(tp['grpc'][-1])}")
            results["throughput"] = tp
        if "latency" not in skip:
            results["latency"] = start_latency(server, logs, 50 if quick else 200)
            log(
                f"== start latency into an idle worker: p50 {results['latency']['p50']:.2f} ms, "
                f"p99 {results['latency']['p99']:.2f} ms"
            )
        if "refresh" not in skip:
            results["refresh"] = cache_hit_latency(server, logs, 50 if quick else 200)
            hit = results["refresh"]["hit"]
            log(f"== cache hit start → succeeded: p50 {hit['p50']:.2f} ms, p99 {hit['p99']:.2f} ms")
            results["refresh"]["demo"] = demo_refresh(server, logs, 60 if quick else None)
            for line in describe_demo(results["refresh"]["demo"]):
                log(f"== {line}")
        if "grpc" not in skip:
            with executor_process(tmp) as endpoint:
                results["grpc_overhead"] = grpc_overhead(
                    server, logs, tmp, endpoint, 50 if quick else 200
                )
            g = results["grpc_overhead"]
            log(
                f"== attempt time, in process p50 {g['inprocess']['p50']:.2f} / p99 "
                f"{g['inprocess']['p99']:.2f} ms; gRPC p50 {g['grpc']['p50']:.2f} / p99 "
                f"{g['grpc']['p99']:.2f} ms; overhead p50 {g['overhead_p50_ms']:.2f} ms"
            )
        if "size" not in skip:
            from bench.run_size import measure as measure_size

            sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
            log("== run size: one map of N children vs N one-step runs (2 workers)")
            results["run_size"] = measure_size(
                server,
                logs,
                sizes=sizes,
                shapes=["single", "map_result"],
                n_workers=2,
                backlog=sizes[-1],
                say=lambda m: log("  " + m),
            )
        if "tenants" not in skip:
            from bench.tenants import line as tenants_line
            from bench.tenants import measure as measure_tenants

            backlog = 10_000 if quick else 100_000
            log(
                f"== tenants: namespace B's runs beside namespace A's {backlog:,}-step backlog,"
                " two busy namespaces' split, the lease among 1 vs 100 namespaces"
            )
            results["tenants"] = measure_tenants(server, logs, backlog=backlog, n_workers=2)
            log("  " + tenants_line(results["tenants"]))
        if "statements" not in skip:
            from bench.statements import measure as measure_statements
            from bench.statements import table as statements_table

            log("== statements: where a step's server time goes")
            results["statements"] = measure_statements(server, batch=500, batches=8, steps=1)
            log("  " + statements_table(results["statements"]).replace("\n", "\n  "))
        if "depth" not in skip:
            log("== lease cost vs queue depth")
            depths = [1_000, 100_000] if quick else [1_000, 100_000, 1_000_000]
            url_depth = server.fresh("bench_depth")
            try:
                with psycopg.connect(url_depth, autocommit=True, **HOT_PATH_SESSION) as conn:
                    results["lease_depth"] = measure_depths(
                        conn, depths, 100 if quick else 200, log=lambda m: log("  " + m)
                    )
            finally:
                server.drop("bench_depth")
            log(f"  ratio p50 deepest / 1k: {results['lease_depth']['ratio']:.2f}")
        if "horizon" not in skip:
            best = max(
                results.get("throughput", {}).get("single", []),
                key=lambda r: r["steps_per_s"],
                default={"workers": 1, "steps_per_s": 2000.0},
            )
            results["horizon"] = horizon(
                server, logs, 15.0 if quick else 60.0, best["steps_per_s"], best["workers"]
            )
            h = results["horizon"]
            log(
                f"== held xmin horizon ({h['seconds']:.0f} s, {h['workers']} worker(s)): "
                f"{h['held']['steps_per_s']:.0f} vs {h['normal']['steps_per_s']:.0f} steps/s "
                f"normal (ratio {h['ratio']:.2f})"
            )
        if "history" not in skip:
            from bench.history import measure as measure_history

            rows = 2_000_000 if quick else 10_000_000
            log(f"== history: {rows:,} rows of finished attempts and events vs none")
            results["history"] = measure_history(
                server,
                logs,
                rows=rows,
                rounds=1 if quick else 3,
                runs=single_runs,
                n_workers=2,
                say=log,
            )
        if "outage" not in skip:
            from bench.outage import measure as measure_outage

            log("== database outage (lease 60 s; a server of its own, stopped at once)")
            results["outage"] = measure_outage(say=lambda m: log("  " + m), logs=logs)
        if "schedules" not in skip:
            from bench.schedules import measure as measure_schedules

            log("== schedules (two firing processes)")
            results["schedules"] = measure_schedules(
                server, logs, quick=quick, say=lambda m: log("  " + m)
            )
        if "triggers" not in skip:
            from bench.triggers import measure as measure_triggers

            log("== triggers (two `rara triggers serve` processes)")
            results["triggers"] = measure_triggers(
                server, logs, quick=quick, say=lambda m: log("  " + m)
            )
        if "waits" not in skip:
            from bench.waits import measure as measure_waits

            log("== waits (two workers): idle cost, timer lateness, signal -> dependant")
            results["waits"] = measure_waits(
                server,
                logs,
                idle_runs=2_000 if quick else 10_000,
                window=5.0 if quick else 10.0,
                timers=500 if quick else 2_000,
                spread=10.0 if quick else 20.0,
                signals=100 if quick else 500,
                say=lambda m: log("  " + m),
            )
        if "fleet" not in skip:
            from bench.fleet import measure as measure_fleet

            log("== fleet: real workers at their cadence, a probe's lease p99")
            results["fleet"] = measure_fleet(
                [0, 25, 50] if quick else [0, 25, 50, 100, 150, 200],
                window=5.0 if quick else 20.0,
                logs=logs,
                say=lambda m: log("  " + m),
            )
        if "peers" not in skip:
            log("== peers (same server)")
            jobs = (
                {
                    "pgqueuer-asyncpg": 5_000,
                    "pgqueuer-psycopg": 5_000,
                    "procrastinate": 1_000,
                    "dbos-1step": 1_000,
                    "dbos-3step": 500,
                    "temporal-1step": 500,
                    "temporal-3step": 300,
                    "river": 50_000,
                }
                if quick
                else None
            )
            lat = (
                {
                    "pgqueuer-asyncpg": 50,
                    "pgqueuer-psycopg": 10,
                    "procrastinate": 50,
                    "dbos-1step": 30,
                    "dbos-3step": 30,
                    "temporal-1step": 30,
                    "temporal-3step": 30,
                    "river": 50,
                }
                if quick
                else None
            )
            results["peers"] = run_all(url, jobs=jobs, latency_samples=lat)
            for row in results["peers"]:
                if "skipped" in row:
                    log(f"  {row['peer']:<18} skipped: {row['skipped']}")
                    continue
                log(
                    f"  {row['peer']:<18} {row.get('jobs_per_s', float('nan')):>8.0f} jobs/s "
                    f"({row.get('workers', '?')} workers)  start p50 "
                    f"{row.get('p50_ms', float('nan')):.2f} ms p99 "
                    f"{row.get('p99_ms', float('nan')):.2f} ms"
                    + _peer_cpu(row)
                    + (f"  error: {row['error'][:200]}" if "error" in row else "")
                )
            results["pgbench"] = measure_ceiling(url, seconds=5 if quick else 10)
            log(f"  pgbench single-row UPDATE ceiling: {results['pgbench'].get('tps', 0):.0f} tps")
    results["machine"]["loadavg_after"] = os.getloadavg()
    results["wall_seconds"] = round(time.monotonic() - t_start, 1)
    results["summary"] = summary(results)
    print_table(results)
    out = args.out or ROOT / "bench" / "results" / (
        datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + ".json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    log(f"\nwrote {out} (worker logs: {logs})")
    return results


def _rate(x: dict[str, Any]) -> str:
    """A drain's steps/s and where each step's CPU went (server, worker processes)."""
    cpu = x["cpu_per_step"]
    return (
        f"{x['steps_per_s']:>8.0f} steps/s  (CPU per step: PostgreSQL "
        f"{cpu['postgres_us']:.0f} us, workers {cpu['workers_us']:.0f} us)"
    )


def _peer_cpu(row: dict[str, Any]) -> str:
    cpu = row.get("cpu_per_job")
    return (
        f"  (CPU per job: PostgreSQL {cpu['postgres_us']:.0f} us, "
        + (f"its server {cpu['peer_server_us']:.0f} us, " if "peer_server_us" in cpu else "")
        + f"workers {cpu['workers_us']:.0f} us)"
        if cpu
        else ""
    )


def _count(n: str) -> str:
    """1000 → 1k, 100000 → 100k (a size in a summary key)."""
    return f"{int(n) // 1000}k" if int(n) % 1000 == 0 else n


def summary(r: dict[str, Any]) -> dict[str, Any]:
    """The goals, as ratios (None where a part was skipped or failed)."""
    out: dict[str, Any] = {}
    peers = {row["peer"]: row for row in r.get("peers", [])}
    best_peer = max((row.get("jobs_per_s", 0.0) for row in peers.values()), default=0.0)
    single = r.get("throughput", {}).get("single", [])
    if single and best_peer:
        out["drain_vs_best_peer"] = round(max(x["steps_per_s"] for x in single) / best_peer, 3)
    pgq = peers.get("pgqueuer-asyncpg", {})
    if "latency" in r and pgq.get("p50_ms"):
        out["latency_p50_vs_pgqueuer"] = round(r["latency"]["p50"] / pgq["p50_ms"], 3)
        out["latency_p99_vs_pgqueuer"] = round(r["latency"]["p99"] / pgq["p99_ms"], 3)
    out["vs_peers"] = vs_peers(r, peers)
    if "lease_depth" in r:
        out["lease_depth_ratio"] = round(r["lease_depth"]["ratio"], 3)
    if "horizon" in r:
        out["horizon_ratio"] = r["horizon"]["ratio"]
    size = r.get("run_size", {})
    for key, ratio in size.get("ratios", {}).items():  # "<shape>/single <n>"
        out[f"map_vs_single_{_count(key.rsplit(' ', 1)[1])}"] = ratio
    for key, ratio in size.get("ratios_with_creation", {}).items():
        out[f"map_vs_single_{_count(key.rsplit(' ', 1)[1])}_with_creation"] = ratio
    for key, ratio in size.get("server_cpu_ratio", {}).items():  # "<shape> <big>/<small>"
        if key.startswith("map_result "):
            big, small = key.split(" ", 1)[1].split("/")
            out[f"map_server_cpu_{_count(big)}_vs_{_count(small)}"] = ratio
    if "backlog" in size:
        b = size["backlog"]["behind_map"]
        out["first_lease_behind_map_ms"] = {"p50": b["p50"], "p99": b["p99"]}
    if "schedules" in r:
        lag = r["schedules"]["tick_to_run_ms"]
        out["schedule_tick_to_run_ms"] = {"p50": lag["p50"], "p99": lag["p99"]}
        out["idle_schedules_cpu_ms_per_s"] = r["schedules"]["idle"]["cpu_ms_per_s"]
    if "triggers" in r:
        hook, files = r["triggers"]["delivery_to_run_ms"], r["triggers"]["file_to_run_ms"]
        out["trigger_delivery_to_run_ms"] = {"p50": hook["p50"], "p99": hook["p99"]}
        out["trigger_file_to_run_ms"] = {"p50": files["p50"], "p99": files["p99"]}
        out["idle_triggers_cpu_ms_per_s"] = r["triggers"]["idle"]["cpu_ms_per_s"]
    if "tenants" in r:
        t = r["tenants"]
        out["tenants_behind_backlog_p99_vs_idle"] = t["behind_vs_idle_p99"]
        out["tenants_held_back_behind_backlog_p99_vs_idle"] = t["held_back"]["behind_vs_idle_p99"]
        out["tenants_weighted_error"] = t["weighted_error"]
        out["tenants_lease_100_vs_1_namespaces"] = t["lease_cost_ratio"]["10 client_us"]
        out["tenants_lease_1000_vs_100_namespaces"] = t["lease_cost_wider_ratio"]["10 client_us"]
        out["tenants_lease_beside_99_idle_vs_1"] = t["lease_cost_beside_idle_ratio"]["10 client_us"]
        out["tenants_keyed_lease_vs_unkeyed"] = t["keys"]["lease_cost_ratio"]["10 client_us"]
    if "waits" in r:
        from bench.waits import summary as waits_summary

        out.update(waits_summary(r["waits"]))
    if "statements" in r:
        for statement, c in r["statements"]["per_call"].items():
            out[f"{statement}_fixed_us_per_call"] = c["fixed_us_per_call"]
            out[f"{statement}_us_per_step"] = c["us_per_step"]
    if "fleet" in r:
        from bench.fleet import summary as fleet_summary

        out.update(fleet_summary(r["fleet"]))
    if "history" in r:
        out["history_lease_p50_ratio"] = r["history"]["lease_p50_ratio"]
        out["history_drain_ratio"] = r["history"]["drain_ratio"]
    return out


def vs_peers(r: dict[str, Any], peers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """rara / peer, per peer: drain rate (best worker count of each side; a 3-step DBOS or
    Temporal workflow against a 3-step rara run, both per run) and start latency p50/p99 (rara's
    start → handler against the peer's enqueue → job start: below 1 rara is faster)."""
    tp = r.get("throughput", {})
    out: dict[str, Any] = {}
    for name, row in peers.items():
        ratios: dict[str, float] = {}
        three = name.endswith("-3step")
        ours = [
            x["steps_per_s"] / (3 if three else 1)
            for x in tp.get("chain3" if three else "single", [])
        ]
        if ours and row.get("jobs_per_s"):
            ratios["drain"] = round(max(ours) / row["jobs_per_s"], 3)
        if "latency" in r and row.get("p50_ms"):
            ratios["start_p50"] = round(r["latency"]["p50"] / row["p50_ms"], 3)
            ratios["start_p99"] = round(r["latency"]["p99"] / row["p99_ms"], 3)
        if ratios:
            out[name] = ratios
    return out


def print_table(r: dict[str, Any]) -> None:
    rows: list[tuple[str, str]] = []
    tp = r.get("throughput", {})
    for kind, label in (
        ("single", "no-op single-step"),
        ("chain3", "no-op 3-step chain"),
        ("chain10", "no-op 10-step chain"),
        ("grpc", "gRPC no-op single-step"),
    ):
        for x in tp.get(kind, []):
            rows.append((f"{label}, {x['workers']} worker(s)", _rate(x).strip()))
    if "refresh" in r:
        for kind in ("hit", "miss"):
            x = r["refresh"][kind]
            rows.append(
                (
                    f"cache {kind}, start → succeeded",
                    f"p50 {x['p50']:.2f} ms  p99 {x['p99']:.2f} ms",
                )
            )
    if "latency" in r:
        lat = r["latency"]
        rows.append(
            ("start latency, idle worker", f"p50 {lat['p50']:.2f} ms  p99 {lat['p99']:.2f} ms")
        )
        rows.append(
            (
                "  of which start_run (client)",
                f"p50 {lat['start_run']['p50']:.2f} ms  p99 {lat['start_run']['p99']:.2f} ms",
            )
        )
        part = lat["commit_to_handler"]
        rows.append(
            ("  of which commit → handler", f"p50 {part['p50']:.2f} ms  p99 {part['p99']:.2f} ms")
        )
    if "grpc_overhead" in r:
        g = r["grpc_overhead"]
        rows.append(
            (
                "attempt time in process",
                f"p50 {g['inprocess']['p50']:.2f} ms  p99 {g['inprocess']['p99']:.2f} ms",
            )
        )
        rows.append(
            (
                "attempt time via gRPC",
                f"p50 {g['grpc']['p50']:.2f} ms  p99 {g['grpc']['p99']:.2f} ms",
            )
        )
        rows.append(
            (
                "gRPC overhead per step",
                f"p50 {g['overhead_p50_ms']:.2f} ms  p99 {g['overhead_p99_ms']:.2f} ms",
            )
        )
    if "tenants" in r:
        from bench.tenants import line as tenants_line

        rows.append(("tenants (namespace B beside A)", tenants_line(r["tenants"])))
    size = r.get("run_size", {})
    for x in size.get("drains", []):
        shape = {
            "single": "one-step runs",
            "wide": "one run, parallel steps",
            "map": "one map over its input",
            "map_result": "one map over a result",
        }
        rows.append(
            (f"{x['size']:,} steps, {shape[x['shape']]}", x.get("skipped") or _rate(x).strip())
        )
    if "backlog" in size:
        b = size["backlog"]
        for kind, label in (
            ("idle", "idle workers"),
            ("behind_map", f"behind a {b['backlog']:,}-child map"),
        ):
            rows.append(
                (
                    f"small run start → first lease, {label}",
                    f"p50 {b[kind]['p50']:.1f} ms  p99 {b[kind]['p99']:.1f} ms "
                    f"(of {b[kind]['samples']})",
                )
            )
    for depth, x in r.get("lease_depth", {}).items():
        if isinstance(x, dict):
            rows.append(
                (
                    f"lease (10) at depth {int(depth):,}",
                    f"p50 {x['p50']:.3f} ms  p99 {x['p99']:.3f} ms",
                )
            )
    if "horizon" in r:
        h = r["horizon"]
        rows.append(("throughput, normal", f"{h['normal']['steps_per_s']:.0f} steps/s"))
        rows.append(
            (
                f"throughput, xmin held {h['seconds']:.0f} s",
                f"{h['held']['steps_per_s']:.0f} steps/s",
            )
        )
    for i, rnd in enumerate(r.get("history", {}).get("rounds", [])):
        for kind in ("empty", "history"):
            x = rnd[kind]
            rows.append(
                (
                    f"{kind} database, round {i + 1}",
                    f"lease p50 {x['lease']['p50']:.3f} ms  p99 {x['lease']['p99']:.3f} ms  "
                    f"drain {x['drain']['steps_per_s']:.0f} steps/s",
                )
            )
    for x in r.get("outage", {}).get("outages", []):
        rows.append(
            (
                f"database outage {x['outage_s']:.0f} s, lease 60 s",
                f"after its return: first heartbeat {x['return_to_first_heartbeat_s']:.2f}"
                f" s, first lease {x['return_to_first_lease_s']:.2f} s  "
                f"expired leases {x['expired_leases']}",
            )
        )
    if "schedules" in r:
        idle, lag = r["schedules"]["idle"], r["schedules"]["tick_to_run_ms"]
        rows.append(
            (
                f"{idle['schedules']:,} idle schedules, {idle['window_s']:.0f} s",
                f"firers {idle['firers_cpu_s']:.3f} s CPU  server {idle['server_cpu_s']:.3f} s CPU",
            )
        )
        rows.append(
            (
                f"schedule tick -> run started ({lag['ticks']} ticks)",
                f"p50 {lag['p50']:.1f} ms  p99 {lag['p99']:.1f} ms",
            )
        )
    if "waits" in r:
        from bench.waits import rows as waits_rows

        for figure, measured, goal, met in waits_rows(r["waits"]):
            rows.append((figure, measured + (f"  (goal {goal}: {met})" if goal else "")))
    if "statements" in r:
        for statement, c in r["statements"]["per_call"].items():
            rows.append(
                (
                    f"{statement}, server",
                    f"{c['fixed_us_per_call']:.0f} us per call + {c['us_per_step']:.1f} us a step",
                )
            )
    if "fleet" in r:
        from bench.fleet import rows as fleet_rows

        rows.extend(fleet_rows(r["fleet"]))
    for row in r.get("peers", []):
        if "skipped" in row:
            rows.append((f"peer {row['peer']}", f"skipped: {row['skipped'].splitlines()[0]}"))
            continue
        value = f"{row['jobs_per_s']:.0f} jobs/s" if "jobs_per_s" in row else "error"
        if "p50_ms" in row:
            value += f"  start p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms"
        value += _peer_cpu(row)
        rows.append((f"peer {row['peer']} ({row.get('workers', '?')} workers)", value))
    if "pgbench" in r:
        rows.append(("pgbench 1-row UPDATE ceiling", f"{r['pgbench'].get('tps', 0):.0f} tps"))
    for key, value in r.get("summary", {}).items():
        if key == "vs_peers":
            for name, ratios in value.items():
                rows.append(
                    (f"rara / {name}", "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
                )
            continue
        rows.append((key, f"{value}"))
    rows.append(
        (
            "load average before / after",
            " / ".join(
                f"{a:.2f}"
                for a in (r["machine"]["loadavg_before"][0], r["machine"]["loadavg_after"][0])
            ),
        )
    )
    width = max(len(a) for a, _ in rows)
    print("\n" + "-" * (width + 40))
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    print("-" * (width + 40))


if __name__ == "__main__":
    main()
