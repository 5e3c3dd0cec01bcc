"""Costs flat in run size (issue 17, items 2, 3 and 6): one run of N parallel no-op steps,
and one run whose map step expands into N no-op children (docs/map-steps.md), against N
one-step runs, drained by the same worker processes; and how soon a small run started behind
such a map gets its step leased.

    .venv/bin/python bench/run_size.py [--sizes 1000,10000] [--shapes single,wide,map,map_result]
                                       [--workers 2] [--backlog 100000] [--out FILE]

Shapes: ``single`` (N one-step runs), ``wide`` (one run of N parallel steps), ``map`` (one run
whose map step maps over the run input: at most 39,034 integers fit its 256 KiB limit, a larger
N is reported skipped), ``map_result`` (one run whose first step, ``bench.items@1`` in
``bench.map_handlers``, returns the list of N integers, and whose map step maps over that
result: up to 144,959 fit the worker's 1 MiB result limit).

Per size and shape: steps/s on the database clock (first lease to last completion, from the
attempts' own timestamps; of a map, its children's) and the CPU each step cost the server and
the workers (/proc, ``bench.proc_cpu``); for a map, how long its expansion took (``map``:
inside start_run, before the meters; ``map_result``: from the list step's end to the first
child leased, inside the drain and its meters, so its CPU per step includes the list step and
the expansion). The ratios <shape>/single at each size are the goal's numbers (>= 0.9), the
server CPU per step of the largest size over the smallest the other goal (<= 1.2). The drain
alone charges a map with writing its children (past the window, as slots free) and no other
shape with writing its rows (``enqueue_many``, before the meters); so each ratio is also given
with the rows' creation: N / (creation or expansion + drain) of each shape. While a
drain runs, pg_stat_activity is sampled every 10 ms: ``lock_wait`` is the share of samples in
which some backend of the database waited on a lock (a run row every completion of the run
queues on would show here), with the longest wait seen.

``--backlog N``: start-to-first-lease of small one-step runs (the run row's creation to its
step's first lease, both on the database clock), first into idle workers, then one every
0.25 s while a ``map_result`` run of N children drains on the same workers: p50/p99.

Each drain gets a fresh database cloned from the migrated one (``bench.run.Server``). The
machine is shared: run before and after back to back, and quote both. ``bench/run.py`` (``make
bench``) runs ``single,map_result`` at 1k, 10k and 100k and the backlog at 100k (``--quick``:
to 10k).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import (  # noqa: E402
    CpuMeter,
    Server,
    bench_database,
    percentiles,
    scalar,
    wait_until,
    workers,
)
from rara.definitions.parse import definition_from_object  # noqa: E402
from rara.definitions.registry import apply_definition  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.runs import MAX_INPUT_BYTES, start_run  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402

# One map step over the run input's items, each child a no-op.
MAP_DEFINITION = {
    "apiVersion": "rara.dev/v1alpha1",
    "kind": "WorkflowDefinition",
    "metadata": {"name": "fan"},
    "spec": {
        "steps": [{"key": "each", "capability": "bench.noop@1", "map": {"over": "input.items"}}]
    },
}
# A first step returning the list (run input {"n": N}), then a map step over its result.
MAP_RESULT_DEFINITION = {
    "apiVersion": "rara.dev/v1alpha1",
    "kind": "WorkflowDefinition",
    "metadata": {"name": "fanr"},
    "spec": {
        "steps": [
            {"key": "list", "capability": "bench.items@1"},
            {
                "key": "each",
                "dependsOn": ["list"],
                "capability": "bench.noop@1",
                "map": {"over": "list.result.items"},
            },
        ]
    },
}
HANDLERS = "bench.map_handlers"  # bench.items@1, served beside tests.support.bench_handlers


class LockSampler:
    """Samples pg_stat_activity of one database: how often a backend waits on a lock."""

    def __init__(self, url: str, every: float = 0.01) -> None:
        self.url, self.every = url, every
        self.samples = self.waiting = 0
        self.longest_ms = 0.0
        self.by: dict[str, int] = {}  # waiter samples by wait event and statement
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT wait_event, left(regexp_replace(query, '^(--[^\n]*\n)*', ''), 40),"
                    " extract(epoch FROM clock_timestamp() - state_change)::float8 * 1000 "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchall()
                self.samples += 1
                if rows:
                    self.waiting += 1
                    self.longest_ms = max([self.longest_ms, *(r[2] for r in rows)])
                    for event, query, _ in rows:
                        what = f"{event}: {' '.join(query.split())}"
                        self.by[what] = self.by.get(what, 0) + 1
                self._stop.wait(self.every)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "share": round(self.waiting / self.samples, 4) if self.samples else None,
            "longest_ms": round(self.longest_ms, 2),
            "by": self.by,
        }


SHAPES = ("single", "wide", "map", "map_result")


def _expanded(conn: psycopg.Connection[Any], analyze: bool) -> Callable[[], bool]:
    """A poll for the drain's wait: whether the map step ``each`` expanded; on the first poll
    that sees it, with ``analyze``, ANALYZE rara_steps (see ``drain``)."""
    seen = False

    def poll() -> bool:
        nonlocal seen
        if (
            not seen
            and scalar(conn, "SELECT map_total FROM rara_steps WHERE key = 'each' LIMIT 1")
            is not None
        ):
            seen = True
            if analyze:
                conn.execute("ANALYZE rara_steps")
        return seen

    return poll


def drain(
    server: Server, logs: Path, *, size: int, shape: str, n_workers: int, analyze: bool = True
) -> dict[str, Any]:
    """``size`` no-op steps: ``size`` runs of one step (``single``), one run of ``size``
    parallel steps (``wide``), or one run of a map step over ``size`` items of its input
    (``map``) or of its upstream step's result (``map_result``); drained by ``n_workers``
    worker processes.

    Every shape's steps are in the planner's statistics when the drain starts (VACUUM ANALYZE
    after they are written), except a ``map_result``'s children, written during the drain by
    the list step's end: with ``analyze`` the bench runs ANALYZE rara_steps as soon as it sees
    the map expanded (what autovacuum does up to autovacuum_naptime, 1 min, later), so that
    its figures compare with those taken before the lease path's plans stopped depending on
    the statistics; without it (``--stale-stats``) they cost the same since (docs/map-steps.md,
    "Planner statistics"; before, the workers' plans made while the table held two rows walked
    it, 226-280 us of server CPU per child at 100k instead of ~140)."""
    row: dict[str, Any] = {"size": size, "shape": shape, "workers": n_workers}
    if shape == "map" and len(json.dumps({"items": list(range(size))})) > MAX_INPUT_BYTES:
        return {
            **row,
            "skipped": f"a list of {size:,} items exceeds the run input limit "
            f"({MAX_INPUT_BYTES:,} bytes): see map_result",
        }
    name = f"bench_size_{shape}_{size}_{n_workers}"
    url = server.fresh(name)
    expand_seconds = create_seconds = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            if shape == "map":
                apply_definition(conn, definition_from_object(MAP_DEFINITION))
                began = time.perf_counter()
                start_run(conn, "fan", input={"items": list(range(size))}, queue_anyway=True)
                expand_seconds = round(time.perf_counter() - began, 3)
            elif shape == "map_result":
                apply_definition(conn, definition_from_object(MAP_RESULT_DEFINITION))
                start_run(conn, "fanr", input={"n": size}, queue_anyway=True)
            else:
                noop_definition(conn, "noop")
                began = time.perf_counter()
                enqueue_many(
                    conn,
                    definition="noop",
                    version=None,
                    runs=size if shape == "single" else 1,
                    steps=1 if shape == "single" else size,
                    key="s",
                    capability="bench.noop@1",
                    numbered=shape == "wide",
                )
                create_seconds = round(time.perf_counter() - began, 3)
            # Leasable only once the workers are up and the meters run (their start-up is not
            # the drain's cost); they wake for it (step_next_available).
            start = scalar(
                conn,
                "UPDATE rara_steps SET available_at = now() + interval '8 s' "
                "RETURNING extract(epoch FROM available_at)::float8",
            )
            conn.execute("VACUUM ANALYZE")
            names = [f"{name}-{i}" for i in range(n_workers)]
            handlers = HANDLERS if shape == "map_result" else None
            with workers(url, names, logs, handlers=handlers) as pids, LockSampler(url) as locks:
                cpu = CpuMeter(url, pids)
                idle = start - scalar(conn, "SELECT extract(epoch FROM clock_timestamp())::float8")
                time.sleep(max(0.0, idle - 0.1))  # the idle wait is not the drain's cost either
                cpu.start()
                metered_from = scalar(conn, "SELECT clock_timestamp()")
                expanded = _expanded(conn, analyze) if shape == "map_result" else None
                wait_until(
                    lambda: (
                        (expanded is None or expanded())
                        and scalar(
                            conn,
                            "SELECT count(*) FROM rara_runs WHERE status IN ('pending', 'running')",
                        )
                        == 0
                    ),
                    1800,
                    f"{name} to drain",
                    every=0.25,
                )
                cpu.stop()
            # A map's rate is its children's (not the list step's, nor the expansion's).
            seconds, count = conn.execute(
                "SELECT extract(epoch FROM max(a.ended_at) - min(a.started_at))::float8, "
                "count(*) FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id "
                "WHERE a.outcome = 'succeeded' AND (s.map_parent IS NOT NULL OR NOT %s)",
                (shape.startswith("map"),),
            ).fetchone() or (0.0, 0)
            if shape == "map_result":
                expand_seconds = round(
                    scalar(
                        conn,
                        "SELECT extract(epoch FROM min(a.started_at) - (SELECT l.ended_at "
                        "FROM rara_attempts l JOIN rara_steps s ON s.id = l.step_id "
                        "WHERE s.key = 'list'))::float8 FROM rara_attempts a "
                        "JOIN rara_steps s ON s.id = a.step_id "
                        "WHERE s.map_parent IS NOT NULL",
                    ),
                    3,
                )
            bad = scalar(conn, "SELECT count(*) FROM rara_runs WHERE status <> 'succeeded'")
            first = scalar(conn, "SELECT min(started_at) FROM rara_attempts")
        if first < metered_from:
            print(
                f"  (the drain began {(metered_from - first).total_seconds():.1f} s before "
                "the meters: its CPU is short by that)",
                flush=True,
            )
        assert count == size, (count, size)
        assert bad == 0, bad
        if shape == "map_result":
            row["analyzed"] = analyze
        # With creation: the steps' rows written, then drained. A map writes its children
        # itself (the window at expansion, the rest inside the drain, as slots free), while
        # the other shapes' rows are written before their drain, set-wise by enqueue_many (the
        # cheapest way to start many runs; start_run one by one costs far more).
        made = expand_seconds if create_seconds is None else create_seconds
        return {
            **row,
            "seconds": round(seconds, 3),
            "steps_per_s": round(size / seconds, 1),
            "cpu_per_step": cpu.per(size),
            "lock_wait": locks.report(),
            **({} if expand_seconds is None else {"expand_seconds": expand_seconds}),
            **({} if create_seconds is None else {"create_seconds": create_seconds}),
            **(
                {}
                if made is None
                else {"with_creation_steps_per_s": round(size / (made + seconds), 1)}
            ),
        }
    finally:
        server.drop(name)


def _first_lease_ms(conn: psycopg.Connection[Any], run_ids: list[int]) -> list[float]:
    """Per run: its row's creation (start_run's transaction) to its first attempt's lease."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT extract(epoch FROM min(a.started_at) - r.created_at)::float8 * 1000 "
            "FROM rara_runs r JOIN rara_attempts a ON a.run_id = r.id "
            "WHERE r.id = ANY(%s) GROUP BY r.id",
            (run_ids,),
        ).fetchall()
    ]


def _pcts(samples: list[float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in percentiles(samples).items()} | {
        "max": round(max(samples), 2),
        "samples": len(samples),
    }


def backlog_latency(
    server: Server,
    logs: Path,
    *,
    backlog: int,
    samples: int = 20,
    n_workers: int = 2,
    every: float = 0.25,
    analyze: bool = True,
) -> dict[str, Any]:
    """Start-to-first-lease of one-step runs (issue 17, item 3): ``samples`` of them into idle
    workers, then one every ``every`` s while a ``map_result`` run of ``backlog`` children
    drains on the same workers (default maxParallel: at most 1,000 of them ready at once);
    ``analyze`` as in ``drain``."""
    name = f"bench_backlog_{backlog}_{n_workers}"
    url = server.fresh(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            apply_definition(conn, definition_from_object(MAP_RESULT_DEFINITION))
            noop_definition(conn, "small")
            names = [f"{name}-{i}" for i in range(n_workers)]

            def ended(ids: list[int]) -> bool:
                running = scalar(
                    conn,
                    "SELECT count(*) FROM rara_runs WHERE id = ANY(%s) AND "
                    "status IN ('pending', 'running')",
                    (ids,),
                )
                return bool(running == 0)

            with workers(url, names, logs, handlers=HANDLERS):
                time.sleep(1.0)
                idle = []
                for _ in range(samples):
                    time.sleep(0.1)
                    idle.append(start_run(conn, "small", queue_anyway=True).run_id)
                wait_until(lambda: ended(idle), 60, "the small runs on idle workers")
                big = start_run(conn, "fanr", input={"n": backlog}, queue_anyway=True).run_id
                left = (
                    "SELECT map_total - map_succeeded FROM rara_steps "
                    "WHERE run_id = %s AND key = 'each'"
                )
                wait_until(_expanded(conn, analyze), 300, "the map to expand")
                time.sleep(1.0)  # into the drain
                left_before = scalar(conn, left, (big,))
                behind = []
                for _ in range(samples):
                    time.sleep(every)
                    behind.append(start_run(conn, "small", queue_anyway=True).run_id)
                left_after = scalar(conn, left, (big,))
                wait_until(lambda: ended(behind), 300, "the small runs behind the map")
            bad = scalar(
                conn,
                "SELECT count(*) FROM rara_runs WHERE id = ANY(%s) AND status <> 'succeeded'",
                (idle + behind,),
            )
            assert bad == 0, bad
            out = {
                "backlog": backlog,
                "workers": n_workers,
                "every_s": every,
                "analyzed": analyze,
                "idle": _pcts(_first_lease_ms(conn, idle)),
                "behind_map": _pcts(_first_lease_ms(conn, behind)),
                # children not yet done when the first and the last small run started: the
                # map was draining throughout when the second is well above 0
                "map_left": [left_before, left_after],
            }
        return out
    finally:
        server.drop(name)


def measure(
    server: Server,
    logs: Path,
    *,
    sizes: list[int],
    shapes: list[str],
    n_workers: int = 2,
    backlog: int | None = None,
    analyze: bool = True,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every shape at every size, the ratios to ``single``, the server CPU ratio of the largest
    size to the smallest, and with ``backlog`` the start latency behind a map of that size."""
    out: dict[str, Any] = {"workers": n_workers, "drains": [], "ratios": {}, "server_cpu_ratio": {}}
    for size in sizes:
        by_shape = {}
        for shape in shapes:
            row = drain(server, logs, size=size, shape=shape, n_workers=n_workers, analyze=analyze)
            out["drains"].append(row)
            if "skipped" in row:
                say(f"{size:>7,} steps, {shape:<10} skipped: {row['skipped']}")
                continue
            by_shape[shape] = row
            say(f"{size:>7,} steps, {shape:<10} {_line(row)}")
        for shape in sorted(set(by_shape) - {"single"}):
            if "single" in by_shape:
                ratio = by_shape[shape]["steps_per_s"] / by_shape["single"]["steps_per_s"]
                out["ratios"][f"{shape}/single {size}"] = round(ratio, 3)
                made = (
                    by_shape[shape]["with_creation_steps_per_s"]
                    / by_shape["single"]["with_creation_steps_per_s"]
                )
                out.setdefault("ratios_with_creation", {})[f"{shape}/single {size}"] = round(
                    made, 3
                )
                say(
                    f"{size:>7,} steps: {shape}/single {ratio:.2f} (with the rows' creation "
                    f"{made:.2f})"
                )
    for shape in shapes:
        rows = {r["size"]: r for r in out["drains"] if r["shape"] == shape and "skipped" not in r}
        if len(rows) > 1:
            lo, hi = rows[min(rows)], rows[max(rows)]
            ratio = hi["cpu_per_step"]["postgres_us"] / lo["cpu_per_step"]["postgres_us"]
            out["server_cpu_ratio"][f"{shape} {max(rows)}/{min(rows)}"] = round(ratio, 3)
            say(f"server CPU per step, {shape} {max(rows):,} / {min(rows):,}: {ratio:.2f}")
    if backlog:
        b = out["backlog"] = backlog_latency(
            server, logs, backlog=backlog, n_workers=n_workers, analyze=analyze
        )
        say(
            f"small run, start to first lease: idle p50 {b['idle']['p50']:.1f} ms p99 "
            f"{b['idle']['p99']:.1f} ms; behind a {backlog:,}-child map p50 "
            f"{b['behind_map']['p50']:.1f} ms p99 {b['behind_map']['p99']:.1f} ms "
            f"(children left {b['map_left'][0]:,} → {b['map_left'][1]:,})"
        )
    return out


def _line(row: dict[str, Any]) -> str:
    cpu = row["cpu_per_step"]
    expand = (
        f"  expanded in {row['expand_seconds']:.2f} s"
        if "expand_seconds" in row
        else f"  created in {row['create_seconds']:.2f} s"
        if "create_seconds" in row
        else ""
    )
    return (
        f"{row['steps_per_s']:>8.0f} steps/s  CPU/step PostgreSQL {cpu['postgres_us']:>6.0f}"
        f" us, workers {cpu['workers_us']:>5.0f} us  lock waits {row['lock_wait']['share']}"
        f" (longest {row['lock_wait']['longest_ms']} ms){expand}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ", ".join(SHAPES))
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="children of the map the small runs start behind (0: none)",
    )
    parser.add_argument(
        "--stale-stats",
        action="store_true",
        help="no ANALYZE once a map_result expanded (see drain)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    began = time.monotonic()
    out: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    with bench_database() as url:
        out |= measure(
            Server(url),
            logs,
            sizes=[int(s) for s in args.sizes.split(",")],
            shapes=args.shapes.split(","),
            n_workers=args.workers,
            backlog=args.backlog or None,
            analyze=not args.stale_stats,
            say=lambda m: print(m, flush=True),
        )
    out["loadavg_after"] = os.getloadavg()
    out["wall_seconds"] = round(time.monotonic() - began, 1)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
