"""How large a fleet one PostgreSQL carries (``make bench`` section ``fleet``).

    .venv/bin/python -m bench.fleet [--sizes 0,50,100,200,400] [--per-host 50] [--held 2]
        [--group 1] [--window 10] [--probe-hz 50] [--out FILE]

A worker costs the database even when it has nothing to do: it polls for work (``step_lease``
every ``listening_poll_seconds``, 30 s, while its listener is up), heartbeats its leases and
its row (``step_heartbeat`` every lease/3, 10 s), asks for the reaper's turn (one worker a
second fleet-wide reaps), fires waits (at most every 60 s), and its listener is woken by
every NOTIFY of the database (each ready step sends one). ``--group N`` puts N workers behind
one listener, as ``rara worker --processes N`` does (there a supervisor relays it to its
processes over pipes; here the N share the host's event loop, so the relay is a call: the
database's side, what this bench measures, is the same). This bench runs **real workers**
(``rara.worker.Worker``, default
settings, the real statements at their real cadence) — ``--per-host`` of them on one event
loop per host process, since a process each would not fit this machine — each holding exactly
``--held`` leased steps with two slots free (so it polls as a worker with room does). Each
worker serves a capability of its own (``hold_capability``; a pool's worker serves one), and
``--held`` hour-long steps of it are started before it starts: so no worker can take
another's, and every heartbeat extends real leases. For each fleet size it
measures, over ``--window`` seconds:

- **the lease**: a probe, not part of the fleet, starts a run of one step ``--probe-hz``
  times a second and leases it (``step_lease``, the worker's statement on a hot-path session),
  then ends it; the lease statement's round trip p50/p99;
- **the server's CPU** per second (its postmaster's processes, /proc), and per worker;
- **the hosts' CPU** per second: on this machine the fleet's Python shares the database's
  cores, which a real fleet does not (it runs on other machines);
- **connections** per worker (``pg_stat_activity``).

The capacity is the largest size whose lease p99 is under twice the empty fleet's. The
projection for a database server of ``--project-cores`` cores scales the server's CPU per
worker-second to the share of those cores the server reached here at that p99, with the
fleet's Python elsewhere (docs/performance.md, "A fleet on one database").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import ROOT, CpuMeter, bench_database, percentiles, scalar, wait_until
from rara.runs import start_run
from rara.states import AttemptOutcome
from tests.support.definitions import apply

# The probe's steps are of a capability no worker serves, so that only the probe leases them.
PROBE = "bench.probe@1"
HOLD_SECONDS = 3600
# Room for max_connections: a worker holding leases keeps its listener, its heartbeat's and its
# pool's one; its pool may grow for a moment under a burst.
CONNECTIONS_PER_WORKER = 5
SETTLE_S = 25.0  # after the fleet grew: its workers past their start, their pools shrunk


# -- a host process: `--per-host` real workers on one event loop -------------------------------


def hold_capability(prefix: str, i: int) -> str:
    """The capability only worker ``i`` of host ``prefix`` serves: its held steps'."""
    return f"fleet.{prefix}.{i}@1"


class SharedListener:
    """One LISTEN connection for the workers of a group on this event loop: each worker's
    notifications source (``rara.worker.listener.Notifications``) registers its callbacks,
    and every notification is handed to each, as a group's relay does."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.members: list[dict[str, Any]] = []
        self.connected = False
        self.task: asyncio.Task[None] | None = None

    def _each(self, name: str) -> Any:
        def call(*args: Any) -> None:
            if name == "on_connect":
                self.connected = True
            elif name == "on_lost":
                self.connected = False
            for member in list(self.members):
                member[name](*args)

        return call

    async def __call__(self, **callbacks: Any) -> None:
        from rara.worker.listener import listen

        self.members.append(callbacks)
        if self.task is None:
            names = ("on_ready", "on_cancel", "on_connect", "on_waits", "on_queued", "on_lost")
            self.task = asyncio.ensure_future(
                listen(self.url, **{name: self._each(name) for name in names})
            )
        elif self.connected:
            callbacks["on_connect"]()
        try:
            await asyncio.shield(self.task)
        finally:
            self.members.remove(callbacks)
            if not self.members:
                self.task.cancel()


async def _host(url: str, prefix: str, count: int, held: int, group: int) -> None:
    from rara.worker import connections
    from rara.worker.dispatch import InProcessExecutor
    from rara.worker.registry import Registry
    from rara.worker.runner import Worker
    from rara.worker.settings import WorkerSettings
    from tests.support.bench_handlers import sleep

    # A pool shrinks back to its one connection one connection per IDLE_SECONDS (a minute):
    # the workers' start-up burst (first leases, the row, the reaper's turn, each checking a
    # connection out at once) would outlast the settle time. Ten seconds here, so that each
    # window sees the fleet's steady state; not less, or a pool that grows when two loops
    # check out at once shrinks before it is used again, and each growth is a new backend
    # planning the lease anew (measured at 2 s: a poll's lease cost ~18 ms, ~4 ms at 60 s).
    connections.IDLE_SECONDS = 10.0
    workers = []
    listener: SharedListener | None = None
    for i in range(count):
        settings = WorkerSettings(database_url=url, id=f"{prefix}-{i}", concurrency=held + 2)
        registry = Registry()
        registry.register(hold_capability(prefix, i), sleep)
        if group > 1 and i % group == 0:
            listener = SharedListener(url)
        executors = [InProcessExecutor(registry)]
        workers.append(Worker(settings, executors, url, notifications=listener))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: [w.stop() for w in workers])
    await asyncio.gather(*(w.run() for w in workers))


class Fleet:
    """Host processes, grown to a size; stopped with SIGTERM."""

    def __init__(self, url: str, held: int, per_host: int, group: int, logs: Path) -> None:
        self.url, self.held, self.per_host, self.logs = url, held, per_host, logs
        self.group = group
        self.hosts: list[subprocess.Popen[bytes]] = []
        self.size = 0

    def grow(self, size: int) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while self.size < size:
                count = min(self.per_host, size - self.size)
                prefix = f"fleet{len(self.hosts)}"
                with conn.transaction():  # each worker's held steps, before it starts
                    for i in range(count):
                        name = f"hold-{prefix}-{i}"
                        apply(conn, name, [{"key": "s", "capability": hold_capability(prefix, i)}])
                        hold = {"seconds": HOLD_SECONDS}
                        for _ in range(self.held):
                            start_run(conn, name, input=hold, queue_anyway=True)
                argv = [sys.executable, "-m", "bench.fleet", "--host", self.url, prefix]
                argv += [str(count), str(self.held), str(self.group)]
                with open(self.logs / f"{prefix}.log", "wb") as log:  # the child keeps its copy
                    self.hosts.append(
                        subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
                    )
                self.size += count
            wait_until(
                lambda: scalar(conn, "SELECT count(*) FROM rara_workers") >= self.size,
                120,
                f"{self.size} workers to register",
            )
            held = self.size * self.held
            wait_until(
                lambda: (
                    scalar(conn, "SELECT count(*) FROM rara_steps WHERE status = 'running'") >= held
                ),
                120,
                f"the fleet to hold {held} leases",
            )

    @property
    def pids(self) -> list[int]:
        return [h.pid for h in self.hosts]

    def stop(self) -> None:
        for host in self.hosts:
            host.send_signal(signal.SIGTERM)
        for host in self.hosts:
            try:
                host.wait(60)
            except subprocess.TimeoutExpired:
                host.kill()
                host.wait()


# -- the probe ------------------------------------------------------------------------------


class Probe:
    """Single-step runs started ``hz`` times a second and leased at once, on connections held
    for the whole bench: a backend that exits in a window would put its whole life's CPU in
    that window (the postmaster reaps it then)."""

    def __init__(self, url: str, hz: float) -> None:
        from rara.worker.store import WorkerStore, make_pool

        self.url, self.hz = url, hz
        self.pool = make_pool(url, 2)
        self.store = WorkerStore(self.pool, "probe")
        self.conn = psycopg.connect(url, autocommit=True)

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close()
        self.conn.close()

    async def leases(self, window: float) -> list[float]:
        """The lease statement's round trips (ms) over ``window`` seconds."""
        from rara.worker.vocabulary import Ending, Fence

        samples: list[float] = []
        end = time.monotonic() + window
        while (now := time.monotonic()) < end:
            start_run(self.conn, "probe", queue_anyway=True)
            began = time.perf_counter()
            leased = await self.store.lease([(PROBE, "inprocess")], 1, 30.0)
            samples.append((time.perf_counter() - began) * 1000)
            await self.store.end_many(
                [
                    Ending(Fence(s.id, "probe", s.lease_token), s.run_id, AttemptOutcome.SUCCEEDED)
                    for s in leased
                ]
            )
            await asyncio.sleep(max(0.0, now + 1 / self.hz - time.monotonic()))
        return samples


# -- the measurement ------------------------------------------------------------------------


def measure(
    sizes: list[int],
    *,
    per_host: int = 50,
    held: int = 2,
    group: int = 1,
    window: float = 10.0,
    probe_hz: float = 50.0,
    project_cores: int = 16,
    settle: float = SETTLE_S,
    logs: Path,
    say: Any = print,
) -> dict[str, Any]:
    with bench_database(max_connections=str(CONNECTIONS_PER_WORKER * max(sizes) + 100)) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            apply(conn, "probe", [{"key": "s", "capability": PROBE}])
            conn.execute("VACUUM ANALYZE")
        rows = asyncio.run(
            _windows(
                url, sorted({0, *sizes}), per_host, held, group, window, probe_hz, settle, logs, say
            )
        )
    return {"rows": rows, "workers_per_listener": group, **_capacity(rows, project_cores)}


async def _windows(
    url: str, sizes: list[int], per_host: int, held: int, group: int, window: float,
    hz: float, settle: float, logs: Path, say: Any,
) -> list[dict[str, Any]]:  # fmt: skip
    probe = Probe(url, hz)
    await probe.open()
    fleet = Fleet(url, held, per_host, group, logs)
    rows = []
    try:
        # Warm: the probe's statements prepared, the setup's aftermath (autovacuum, the
        # checkpoint) out of the first window.
        await probe.leases(settle)
        for size in sizes:
            fleet.grow(size)  # blocks this loop: nothing else runs on it meanwhile
            await asyncio.sleep(settle)
            meter = CpuMeter(url, fleet.pids)
            meter.start()
            began = time.monotonic()
            lease_ms = await probe.leases(window)
            elapsed = time.monotonic() - began
            meter.stop()
            connections = scalar(
                probe.conn,
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
            )
            row = {
                "workers": size,
                "lease_ms": {k: round(v, 3) for k, v in percentiles(lease_ms).items()},
                "server_ms_per_s": round(meter.postgres / elapsed * 1000, 1),
                "hosts_ms_per_s": round(meter.processes / elapsed * 1000, 1),
                "connections": connections,
            }
            rows.append(row)
            say(json.dumps(row))
    finally:
        fleet.stop()
        await probe.close()
    return rows


def _capacity(
    rows: list[dict[str, Any]], project_cores: int, cores_here: int | None = None
) -> dict[str, Any]:
    """The largest size before the first whose lease p99 is twice the empty fleet's, and the
    projection to a database of ``project_cores`` cores (module docstring)."""
    cores = cores_here or os.cpu_count() or 1
    base = rows[0]
    limit = 2 * base["lease_ms"]["p99"]
    at, reached = base, False
    for row in rows[1:]:
        if row["lease_ms"]["p99"] >= limit:
            reached = True
            break
        at = row
    out: dict[str, Any] = {
        "empty_p99_ms": base["lease_ms"]["p99"],
        "capacity_workers": at["workers"],
        "capacity_reached": reached,
        "cores_here": cores,
    }
    largest = rows[-1]
    if largest["workers"] > 0:
        # Per worker: what the largest fleet added to the empty one's server CPU.
        per_worker = (largest["server_ms_per_s"] - base["server_ms_per_s"]) / largest["workers"]
        out["server_ms_per_s_per_worker"] = round(per_worker, 3)
        out["connections_per_worker"] = round(
            (largest["connections"] - base["connections"]) / largest["workers"], 2
        )
        # The share of this machine's cores the server used at the capacity, taken as the
        # utilisation a server of project_cores reaches before its lease p99 doubles too.
        share = at["server_ms_per_s"] / 1000 / cores
        if per_worker > 0:
            out["projected_workers"] = int(share * project_cores * 1000 / per_worker)
            out["projected_cores"] = project_cores
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The report: (figure, measured) per line."""
    out = [
        (
            f"fleet of {row['workers']} workers",
            f"lease p50 {row['lease_ms']['p50']:.2f} ms  p99 {row['lease_ms']['p99']:.2f} ms"
            f"  server {row['server_ms_per_s']:.0f} ms/s  hosts {row['hosts_ms_per_s']:.0f} ms/s"
            f"  {row['connections']} connections",
        )
        for row in r["rows"]
    ]
    reached = "" if r["capacity_reached"] else " (p99 never doubled: at least this)"
    group = r.get("workers_per_listener", 1)
    per = f", {group} workers a listener" if group > 1 else ""
    out.append(
        (
            f"fleet capacity here ({r['cores_here']} cores, fleet on the same cores{per})",
            f"{r['capacity_workers']} workers under 2x the empty lease p99 "
            f"({r['empty_p99_ms']:.2f} ms){reached}",
        )
    )
    if "projected_workers" in r:
        out.append(
            (
                f"fleet capacity, {r['projected_cores']}-core database (projected)",
                f"{r['projected_workers']:,} workers  ({r['server_ms_per_s_per_worker']:.2f} ms/s"
                f" of server CPU and {r['connections_per_worker']:.0f} connections per worker)",
            )
        )
    return out


def summary(r: dict[str, Any]) -> dict[str, Any]:
    """The figures for ``make bench``'s summary."""
    out = {"fleet_capacity_workers": r["capacity_workers"]}
    if "projected_workers" in r:
        out["fleet_projected_workers"] = r["projected_workers"]
        out["fleet_server_ms_per_s_per_worker"] = r["server_ms_per_s_per_worker"]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--host"]:
        url, prefix, count, held = args[1], args[2], int(args[3]), int(args[4])
        asyncio.run(_host(url, prefix, count, held, int(args[5])))
        return None
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--sizes", default="0,50,100,200,400")
    parser.add_argument("--per-host", type=int, default=50)
    parser.add_argument("--held", type=int, default=2)
    parser.add_argument("--group", type=int, default=1, help="workers per listener")
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--probe-hz", type=float, default=50.0)
    parser.add_argument("--project-cores", type=int, default=16)
    parser.add_argument("--logs", type=Path, default=Path(".rara/bench-fleet"))
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args(args)
    opts.logs.mkdir(parents=True, exist_ok=True)
    sizes = sorted({0, *(int(s) for s in opts.sizes.split(","))})
    result = measure(
        sizes,
        per_host=opts.per_host,
        held=opts.held,
        group=opts.group,
        window=opts.window,
        probe_hz=opts.probe_hz,
        project_cores=opts.project_cores,
        logs=opts.logs,
    )
    for figure, measured in rows(result):
        print(f"{figure:<58} {measured}")
    if opts.out is not None:
        opts.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
