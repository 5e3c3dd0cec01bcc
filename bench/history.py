"""History that grows without slowing the present (issue 17, item 4): lease latency and drain
throughput with 10 million rows of history against an empty database.

    .venv/bin/python -m bench.history [--rows 10000000] [--rounds 3] [--runs 20000] [--workers 2]

Fills one database (cloned from the migrated template) with ``--rows`` finished attempts plus
events (``tests/support/history_fill.py``, set-wise: half attempts, half events; 5 steps a
run, 2 attempts a step — 10M rows: 500k runs, 2.5M steps, 5M attempts, 5M events, ~3 GB),
then per round against a fresh empty database:

lease    p50/p99 ms of a lease of 10 from 10,000 ready steps (rolled back, so every sample
         sees the same queue; a session set up as the worker's lease connection), 1,000
         samples a database, the two databases' samples interleaved one by one (so the load
         of a shared machine falls on both alike); and the shared buffers a lease and an end
         of those 10 touch (auto_explain of the statements inside the functions: the
         machine's noise does not move these)
drain    ``--runs`` no-op single-step runs drained by ``--workers`` worker processes in each
         database, both databases at once (the same machine load on both): steps/s on the
         database clock over the window in which both drained, and the CPU per step of the
         server and the workers of both

and the ratios history/empty (goals: lease p50 <= 1.2x, drain >= 0.8x). Last, in the history
database, ``rara runs prune --older-than 30d`` (``rara.pg.retention``) for up to 30 s while
leases are timed as above: how fast it deletes, its longest batch, and the leases meanwhile.
``make bench`` runs it as its ``history`` section (``--skip history`` leaves it out; 2M rows
with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
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
    bulk_ready_steps,
    percentiles,
    scalar,
)
from bench.lease_depth import PARAMS  # noqa: E402
from rara.pg import retention  # noqa: E402
from rara.pg.queries import many, sql  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.worker.store import HOT_PATH_SESSION, LEASED  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402
from tests.support.history_fill import fill  # noqa: E402
from tests.support.plans import nested_plans  # noqa: E402
from tests.support.workers import worker_processes  # noqa: E402

Conn = psycopg.Connection[Any]
LEASE_CAPABILITY = "bench.lease@1"  # the lease samples' own queue: no worker serves it
LEASE_QUEUE = 10_000


def log(message: str) -> None:
    print(message, flush=True)


def _buffers(plans: list[dict[str, Any]]) -> int:
    """Shared buffers hit or read by the nested statements (each plan's top node counts its
    children)."""
    return sum(
        p["Plan"].get("Shared Hit Blocks", 0) + p["Plan"].get("Shared Read Blocks", 0)
        for p in plans
        if "Plan" in p
    )


def _lease_once(conn: Conn, params: dict[str, Any]) -> float:
    """ms of one lease of 10 from the lease queue, rolled back (the queue stays as it was)."""
    with conn.transaction(force_rollback=True):
        t0 = time.perf_counter()
        rows = many(conn, "step_lease", LEASED, **params)
        elapsed = (time.perf_counter() - t0) * 1000
    assert len(rows) == 10
    return elapsed


def _lease_queue(conn: Conn) -> int:
    """LEASE_QUEUE ready steps of the lease capability in a run of their own; the run id
    before it (``_drop_queue`` takes it away)."""
    after = int(scalar(conn, "SELECT coalesce(max(id), 0) FROM rara_runs"))
    bulk_ready_steps(conn, LEASE_QUEUE, capability=LEASE_CAPABILITY)
    return after


def _drop_queue(conn: Conn, after_run: int) -> None:
    """The lease queue's run deleted, and its dead index entries with it: the next round's
    leases must not walk them (the history database serves every round)."""
    conn.execute("DELETE FROM rara_runs WHERE id > %s", (after_run,))
    conn.execute("VACUUM rara_steps")


def lease(urls: dict[str, str], samples: int) -> dict[str, dict[str, Any]]:
    """Per database (``urls``: kind → URL), lease latency — batches of 10 out of LEASE_QUEUE
    ready steps, the databases' samples interleaved one by one (the order alternating), so
    that the machine's load falls on both alike — and the shared buffers one lease and the end
    of what it leased touch."""
    params = {**PARAMS, "capabilities": [LEASE_CAPABILITY]}
    conns = {
        kind: psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION)
        for kind, url in urls.items()
    }
    queues: dict[str, int] = {}
    out: dict[str, dict[str, Any]] = {}
    try:
        for kind, conn in conns.items():
            queues[kind] = _lease_queue(conn)
            for _ in range(20):  # caches and plans warm
                _lease_once(conn, params)
        times: dict[str, list[float]] = {kind: [] for kind in conns}
        order = list(conns)
        for i in range(samples):
            for kind in order if i % 2 == 0 else reversed(order):
                times[kind].append(_lease_once(conns[kind], params))
        for kind, conn in conns.items():
            lease_plans = nested_plans(conn, sql("step_lease"), params, analyze=True)
            leased = many(conn, "step_lease", LEASED, **params)  # (the queue goes after)
            wins = json.dumps(
                [{"id": s.id, "token": str(s.lease_token), "result": None} for s in leased]
            )
            end_plans = nested_plans(
                conn,
                sql("step_end_many"),
                {"worker": "bench", "successes": wins, "others": "[]"},
                analyze=True,
            )
            out[kind] = {
                **{k: round(v, 3) for k, v in percentiles(times[kind]).items()},
                "lease_buffers": _buffers(lease_plans),
                "end_buffers": _buffers(end_plans),
            }
    finally:
        for kind, conn in conns.items():
            if kind in queues:
                _drop_queue(conn, queues[kind])
            conn.close()
    return out


def drain(
    urls: dict[str, str], logs: Path, *, runs: int, n_workers: int, name: str
) -> dict[str, dict[str, Any]]:
    """``runs`` no-op single-step runs in each database (``urls``: kind → URL), drained by
    ``n_workers`` worker processes of its own, the databases at the same time (so that the
    load of a shared machine falls on both alike): per database, steps/s over the window in
    which both drained (from the later first lease to the earlier last end, database clock),
    and over its whole drain; the CPU per step, server and workers, of both together."""
    conns = {kind: psycopg.connect(url, autocommit=True) for kind, url in urls.items()}
    after: dict[str, tuple[int, int]] = {}
    try:
        for kind, conn in conns.items():
            after[kind] = (
                scalar(conn, "SELECT coalesce(max(id), 0) FROM rara_runs"),
                scalar(conn, "SELECT coalesce(max(id), 0) FROM rara_steps"),
            )
            enqueue_many(
                conn,
                definition="noop",
                version=None,
                runs=runs,
                steps=1,
                key="s",
                capability="bench.noop@1",
            )
            conn.execute("VACUUM ANALYZE rara_runs, rara_steps, rara_attempts")
        with contextlib.ExitStack() as stack:
            # Every worker process started at once (as bench/run.py configures them), and
            # then waited for: the databases' drains start together.
            procs = [
                proc
                for kind, url in urls.items()
                for proc in stack.enter_context(
                    worker_processes(
                        url,
                        [f"{name}-{kind}-{i}" for i in range(n_workers)],
                        logs,
                        env={"RARA_WORKER_LEASE_BATCH": str(LEASE_BATCH)},
                        concurrency=CONCURRENCY,
                    )
                )
            ]
            cpu = CpuMeter(next(iter(urls.values())), [p.pid for p in procs])  # one server
            cpu.start()
            deadline = time.monotonic() + 900
            while any(
                scalar(
                    conn,
                    "SELECT count(*) FROM rara_runs WHERE id > %s AND status "
                    "IN ('pending', 'running')",
                    (after[kind][0],),
                )
                for kind, conn in conns.items()
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not drain")
                time.sleep(0.5)  # seldom: the rates come from the attempts' timestamps
            cpu.stop()
        spans = {
            kind: conn.execute(
                "SELECT min(started_at), max(ended_at), count(*) FROM rara_attempts "
                "WHERE step_id > %s AND outcome = 'succeeded'",
                (after[kind][1],),
            ).fetchone()
            for kind, conn in conns.items()
        }
        start = max(span[0] for span in spans.values() if span is not None)
        end = min(span[1] for span in spans.values() if span is not None)
        out: dict[str, dict[str, Any]] = {}
        for kind, conn in conns.items():
            span = spans[kind]
            assert span is not None
            assert span[2] == runs, (kind, span, runs)
            both = scalar(
                conn,
                "SELECT count(*) FROM rara_attempts WHERE step_id > %s "
                "AND outcome = 'succeeded' AND ended_at BETWEEN %s AND %s",
                (after[kind][1], start, end),
            )
            seconds = (span[1] - span[0]).total_seconds()
            out[kind] = {
                "steps": runs,
                "seconds": round(seconds, 3),
                "steps_per_s_alone": round(runs / seconds, 1),
                "steps_in_window": both,
                "steps_per_s": round(both / (end - start).total_seconds(), 1),
                "cpu_per_step_both": cpu.per(runs * len(urls)),
            }
        return out
    finally:
        for conn in conns.values():
            conn.close()


def prune_while_leasing(
    url: str, *, days: int = 30, seconds: float = 30.0, batch: int = 100
) -> dict[str, Any]:
    """``rara runs prune --older-than {days}d --batch {batch}`` for up to ``seconds`` in a
    thread, and leases timed meanwhile on another connection: the prune's rate, its longest
    batch (its longest transaction) and what the leases saw."""
    stop = threading.Event()
    batches: list[float] = []
    done = retention.PruneCounts()

    def prune() -> None:
        nonlocal done
        last = time.perf_counter()

        def each(counts: retention.PruneCounts) -> None:
            nonlocal done, last
            now = time.perf_counter()
            batches.append((now - last) * 1000)
            last, done = now, done + counts
            if stop.is_set():
                raise InterruptedError

        # (InterruptedError: stopped by each())
        with psycopg.connect(url, autocommit=True) as conn, contextlib.suppress(InterruptedError):
            retention.prune(
                conn,
                before=retention.horizon(conn, timedelta(days=days)),
                batch=batch,
                on_batch=each,
            )
        stop.set()

    params = {**PARAMS, "capabilities": [LEASE_CAPABILITY]}
    times: list[float] = []
    with psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION) as conn:
        after = _lease_queue(conn)
        for _ in range(20):
            _lease_once(conn, params)
        pruner = threading.Thread(target=prune, name="prune")
        t0 = time.monotonic()
        pruner.start()
        try:
            threading.Timer(seconds, stop.set).start()
            while not stop.is_set():
                times.append(_lease_once(conn, params))
        finally:
            stop.set()
            pruner.join()
            _drop_queue(conn, after)
    elapsed = time.monotonic() - t0
    return {
        "seconds": round(elapsed, 1),
        "runs": done.runs,
        "rows": done.steps + done.attempts + done.events + done.runs,
        "runs_per_s": round(done.runs / elapsed, 1),
        "batch_ms": {k: round(v, 1) for k, v in percentiles(batches or [0.0]).items()},
        "batch_max_ms": round(max(batches, default=0.0), 1),
        "lease": {k: round(v, 3) for k, v in percentiles(times).items()},
    }


def measure(
    server: Server,
    logs: Path,
    *,
    rows: int,
    rounds: int,
    runs: int,
    n_workers: int,
    samples: int = 1000,
    say: Callable[[str], None] = log,
) -> dict[str, Any]:
    """The history database filled once; per round an empty one and the full one measured in
    turn (the order alternates, so that neither always runs first on a shared machine)."""
    out: dict[str, Any] = {"rows": rows, "rounds": [], "workers": n_workers, "runs": runs}
    full = server.fresh("bench_history_full")
    try:
        with psycopg.connect(full, autocommit=True) as conn:
            noop_definition(conn)
            out["history"] = fill(conn, rows)
        h = out["history"]
        say(
            f"  history: {h['rows']['rara_attempts']:,} attempts, {h['rows']['rara_events']:,} "
            f"events, {h['rows']['rara_steps']:,} steps, {h['rows']['rara_runs']:,} runs; "
            f"{h['database_bytes'] / 2**30:.2f} GiB; filled in {h['fill_seconds']:.0f} s, "
            f"vacuumed in {h['vacuum_seconds']:.0f} s"
        )
        for i in range(rounds):
            empty = server.fresh("bench_history_empty")
            try:
                with psycopg.connect(empty, autocommit=True) as conn:
                    noop_definition(conn)
                urls = {"empty": empty, "history": full}
                result: dict[str, Any] = {
                    kind: {"lease": x} for kind, x in lease(urls, samples).items()
                }
                for kind, x in drain(
                    urls, logs, runs=runs, n_workers=n_workers, name=f"history-{i}"
                ).items():
                    result[kind]["drain"] = x
            finally:
                server.drop("bench_history_empty")
            for kind in ("empty", "history"):
                x = result[kind]
                say(
                    f"  round {i + 1}, {kind:<7}: lease p50 {x['lease']['p50']:.3f} ms "
                    f"p99 {x['lease']['p99']:.3f} ms ({x['lease']['lease_buffers']} buffers; "
                    f"end {x['lease']['end_buffers']}); drain {x['drain']['steps_per_s']:.0f} "
                    f"steps/s while both drained ({x['drain']['steps_per_s_alone']:.0f} over "
                    f"its whole drain)"
                )
            cpu = result["empty"]["drain"]["cpu_per_step_both"]
            say(
                f"  round {i + 1}, CPU per step of both drains: PostgreSQL "
                f"{cpu['postgres_us']:.0f} us, workers {cpu['workers_us']:.0f} us"
            )
            out["rounds"].append(result)
        out["prune"] = p = prune_while_leasing(full)
        say(
            f"  prune --older-than 30d, {p['seconds']:.0f} s while leasing: {p['runs']:,} runs "
            f"({p['rows']:,} rows; {p['runs_per_s']:.0f} runs/s), batch of 100 p50 "
            f"{p['batch_ms']['p50']:.0f} ms, p99 {p['batch_ms']['p99']:.0f} ms, longest "
            f"{p['batch_max_ms']:.0f} ms; lease meanwhile p50 {p['lease']['p50']:.3f} ms, "
            f"p99 {p['lease']['p99']:.3f} ms"
        )
    finally:
        server.drop("bench_history_full")
    out.update(ratios(out["rounds"]))
    say(
        f"  history/empty (medians over rounds): lease p50 {out['lease_p50_ratio']:.2f}x "
        f"(goal: <= 1.2x), p99 {out['lease_p99_ratio']:.2f}x; drain {out['drain_ratio']:.2f}x "
        f"(goal: >= 0.8x)"
    )
    return out


def ratios(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """history/empty, the median of each round's ratio (a round measures both back to back)."""

    def median(f: Callable[[dict[str, Any]], float]) -> float:
        return round(statistics.median(f(r["history"]) / f(r["empty"]) for r in rounds), 3)

    return {
        "lease_p50_ratio": median(lambda x: x["lease"]["p50"]),
        "lease_p99_ratio": median(lambda x: x["lease"]["p99"]),
        "drain_ratio": median(lambda x: x["drain"]["steps_per_s"]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rows", type=int, default=10_000_000, help="finished attempts + events of the history"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20_000, help="single-step runs per drain")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    with bench_database() as url:
        results = measure(
            Server(url),
            logs,
            rows=args.rows,
            rounds=args.rounds,
            runs=args.runs,
            n_workers=args.workers,
        )
    return results


if __name__ == "__main__":
    main()
