"""Durable waits (``make bench`` section ``waits``; issue 35, item 4): what a waiting run costs,
how late a timer ends, and how soon a signal's dependant runs.

    .venv/bin/python -m bench.waits [--idle-runs 10000] [--window 10] [--timers 2000]
        [--spread 20] [--signals 500] [--workers 2] [--out FILE]

A wait step runs nothing: it is a row in ``rara_waits`` (docs/waits.md), ended by every
worker's firing loop (``rara_waits_fire``, which sleeps until the next due time) or by a
signal's own statement (``rara_run_signal``). Each part in a fresh database, with ``--workers``
real worker processes (``python -m rara.worker``):

1. **idle**: the CPU per second of the database server (its postmaster's processes, /proc)
   and of the workers over ``--window`` seconds, twice with no run, then with ``--idle-runs``
   runs waiting (half on a timer 6 h away, half on a signal; each with a step after the
   wait). The empty fleet has run one such run through (its lane exists, as in any fleet
   in use); the pages the waiting runs' creation dirtied are written first (VACUUM ANALYZE,
   CHECKPOINT). Goal: no measurable difference: server + workers, waiting - none, within the
   noise (the two empty windows' difference, plus the meter's resolution: a clock tick per
   side per window).
2. **timers**: ``--timers`` runs of one step ``wait: {until: input.at}``, their times spread
   evenly over ``--spread`` seconds, all started before the first is due; lateness = the
   step's ``finished_at`` (the firing transaction's start) - ``result.waited_until``, both the
   database's clock. Goal: p99 <= 1 s.
3. **signals**: ``--signals`` runs ``[wait: {signal: go}] -> no-op step``, signalled one at
   a time (``rara.waits.signal``, 20 ms apart, into idle workers), each until its run
   succeeded: from the signal call (client clock, before the call) and from the signal's
   ``sent_at`` (database clock) to the dependant's ``available_at`` (ready) and to its
   attempt's ``started_at`` (leased). The server runs on this machine: one wall clock.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    CpuMeter,
    Server,
    bench_database,
    percentiles,
    scalar,
    wait_run_succeeded,
    wait_until,
    workers,
)
from bench.proc_cpu import TICK_SECONDS
from rara import waits
from rara.runs import start_run
from tests.support.definitions import apply

Conn = psycopg.Connection[Any]
Say = Callable[[str], None]
LATENESS_GOAL_MS = 1000.0
SETTLE_S = 3.0  # after workers start or runs are inserted, before a window opens

AFTER = {"key": "after", "capability": "bench.noop@1", "dependsOn": ["pause"]}


def measure(
    server: Server,
    logs: Path,
    *,
    idle_runs: int = 10_000,
    window: float = 10.0,
    timers: int = 2_000,
    spread: float = 20.0,
    signals: int = 500,
    n_workers: int = 2,
    say: Say = print,
) -> dict[str, Any]:
    names = [f"waits-{i}" for i in range(n_workers)]
    out: dict[str, Any] = {"workers": n_workers}
    parts: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        ("idle", lambda url: _idle(url, logs, names, idle_runs, window, say)),
        ("timers", lambda url: _timers(url, logs, names, timers, spread, say)),
        ("signals", lambda url: _signals(url, logs, names, signals, say)),
    ]
    for part, fn in parts:
        url = server.fresh(f"bench_waits_{part}")
        try:
            out[part] = fn(url)
        finally:
            server.drop(f"bench_waits_{part}")
    return out


def _cpu_window(url: str, pids: list[int], window: float) -> dict[str, float]:
    meter = CpuMeter(url, pids)
    meter.start()
    time.sleep(window)  # the figure is CPU over a stretch of wall time
    meter.stop()
    return {
        "server_ms_per_s": round(meter.postgres / window * 1000, 2),
        "workers_ms_per_s": round(meter.processes / window * 1000, 2),
    }


def _start_many(conn: Conn, definition: str, count: int, chunk: int = 500) -> list[int]:
    """``count`` runs of ``definition``, ``chunk`` per transaction (creating them is not what
    is measured)."""
    ids: list[int] = []
    for first in range(0, count, chunk):
        with conn.transaction():
            for _ in range(min(chunk, count - first)):
                ids.append(start_run(conn, definition, queue_anyway=True).run_id)
    return ids


def _idle(
    url: str, logs: Path, names: list[str], runs: int, window: float, say: Say
) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        apply(conn, "timer", [{"key": "pause", "wait": {"for": "6h"}}, AFTER])
        apply(conn, "signal", [{"key": "pause", "wait": {"signal": "go"}}, AFTER])
        with workers(url, names, logs) as pids:
            # One run through first, so that the empty fleet is one that has run a step: the
            # lease of a capability that never had a step (no lane, migration 0019) returns
            # before it probes anything, and a baseline of that would be cheaper than any
            # fleet in use, with or without waits (measured: ~0.35 vs ~1.0 ms per idle lease).
            with psycopg.connect(url, autocommit=True) as listener:
                listener.execute("LISTEN rara_run")
                first = start_run(conn, "signal", queue_anyway=True).run_id
                waits.signal(conn, first, "go")
                wait_run_succeeded(listener, first)
            conn.execute("CHECKPOINT")
            time.sleep(SETTLE_S)
            empty = [_cpu_window(url, pids, window) for _ in range(2)]
            started = time.monotonic()
            _start_many(conn, "timer", runs // 2)
            _start_many(conn, "signal", runs - runs // 2)
            created_s = time.monotonic() - started
            waiting = scalar(conn, "SELECT count(*) FROM rara_waits")
            assert waiting == runs, (waiting, runs)
            # The insert-triggered autovacuum now, and the pages the inserts dirtied written
            # (else the background writer does it in the window): creating is not waiting.
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
            time.sleep(SETTLE_S)
            loaded = _cpu_window(url, pids, window)
            still = scalar(conn, "SELECT count(*) FROM rara_waits")
    assert still == runs, f"{runs - still} waits ended during the window"
    none = {k: round((empty[0][k] + empty[1][k]) / 2, 2) for k in empty[0]}
    diff = {k: round(loaded[k] - none[k], 2) for k in none}
    total = round(diff["server_ms_per_s"] + diff["workers_ms_per_s"], 2)
    # What two windows of the same (empty) state differ by, plus one clock tick of each side.
    noise = round(
        abs(sum(empty[0].values()) - sum(empty[1].values())) + 2 * TICK_SECONDS / window * 1000,
        2,
    )
    say(
        f"idle, {window:.0f} s: server {none['server_ms_per_s']:.2f} -> "
        f"{loaded['server_ms_per_s']:.2f} ms/s, workers {none['workers_ms_per_s']:.2f} -> "
        f"{loaded['workers_ms_per_s']:.2f} ms/s with {runs:,} waiting runs "
        f"(created in {created_s:.1f} s): difference {total:+.2f} ms/s, noise {noise:.2f}"
    )
    return {
        "runs": runs,
        "window_s": window,
        "none": none,
        "none_windows": empty,
        "waiting": loaded,
        "difference": diff,
        "difference_ms_per_s": total,
        "noise_ms_per_s": noise,
    }


def _timers(
    url: str, logs: Path, names: list[str], count: int, spread: float, say: Say
) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        apply(conn, "at", [{"key": "pause", "wait": {"until": "input.at"}}])
        with workers(url, names, logs):
            # How long a start takes here (these are due at once: not counted), so that all
            # the runs are in before the first is due and starting them is not in the figure.
            warm = 20
            began = time.monotonic()
            for _ in range(warm):
                start_run(conn, "at", input={"at": "2000-01-01T00:00:00Z"}, queue_anyway=True)
            per_start = (time.monotonic() - began) / warm
            lead = 1.0 + 1.5 * count * per_start
            base = scalar(conn, "SELECT clock_timestamp()") + timedelta(seconds=lead)
            ids = []
            for i in range(count):
                at = (base + timedelta(seconds=spread * i / count)).astimezone(UTC).isoformat()
                ids.append(start_run(conn, "at", input={"at": at}, queue_anyway=True).run_id)
            early = scalar(conn, "SELECT clock_timestamp() < %s", (base,))
            wait_until(
                lambda: (
                    scalar(
                        conn,
                        "SELECT count(*) FROM rara_runs WHERE id = ANY(%s) AND status <> "
                        "'succeeded'",
                        (ids,),
                    )
                    == 0
                ),
                lead + spread + 120,
                f"{count} timers to fire",
                every=0.5,
            )
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - (result->>'waited_until')::timestamptz)"
            "::float8 * 1000 FROM rara_steps WHERE run_id = ANY(%s)",
            (ids,),
        ).fetchall()
    ms = [float(r[0]) for r in rows]
    assert len(ms) == count, (len(ms), count)
    late = {k: round(v, 1) for k, v in percentiles(ms).items()}
    late["max"] = round(max(ms), 1)
    late["min"] = round(min(ms), 1)
    say(
        f"timers: {count:,} over {spread:.0f} s: lateness p50 {late['p50']:.1f} ms, "
        f"p99 {late['p99']:.1f} ms, max {late['max']:.1f} ms"
    )
    return {
        "timers": count,
        "spread_s": spread,
        "started_before_first_due": bool(early),
        "lateness_ms": late,
    }


def _signals(url: str, logs: Path, names: list[str], count: int, say: Say) -> dict[str, Any]:
    warmup = 5
    with (
        psycopg.connect(url, autocommit=True) as conn,
        psycopg.connect(url, autocommit=True) as listener,
    ):
        apply(conn, "gate", [{"key": "pause", "wait": {"signal": "go"}}, AFTER])
        ids = _start_many(conn, "gate", warmup + count)
        listener.execute("LISTEN rara_run")
        sent: dict[int, float] = {}
        with workers(url, names, logs):
            time.sleep(1.0)
            for i, run_id in enumerate(ids):
                time.sleep(0.02)
                t0 = time.time()
                answer = waits.signal(conn, run_id, "go")
                assert answer.accepted
                wait_run_succeeded(listener, run_id)
                if i >= warmup:
                    sent[run_id] = t0
        rows = conn.execute(
            "SELECT s.run_id, extract(epoch FROM s.available_at)::float8,"
            " extract(epoch FROM a.started_at)::float8,"
            " extract(epoch FROM s.available_at - g.sent_at)::float8 * 1000,"
            " extract(epoch FROM a.started_at - g.sent_at)::float8 * 1000"
            " FROM rara_steps s JOIN rara_attempts a ON a.step_id = s.id AND a.attempt = 1"
            " JOIN rara_signals g ON g.run_id = s.run_id"
            " WHERE s.key = 'after' AND s.run_id = ANY(%s)",
            (list(sent),),
        ).fetchall()
    assert len(rows) == count, (len(rows), count)

    def pcts(values: list[float]) -> dict[str, float]:
        return {k: round(v, 2) for k, v in percentiles(values).items() if k != "mean"}

    out: dict[str, Any] = {
        "signals": count,
        "call_to_ready_ms": pcts([(r[1] - sent[r[0]]) * 1000 for r in rows]),
        "call_to_leased_ms": pcts([(r[2] - sent[r[0]]) * 1000 for r in rows]),
        "sent_to_ready_ms": pcts([r[3] for r in rows]),
        "sent_to_leased_ms": pcts([r[4] for r in rows]),
    }
    say(
        f"signals: {count} one at a time: call -> ready p50 {out['call_to_ready_ms']['p50']:.2f}"
        f" ms p99 {out['call_to_ready_ms']['p99']:.2f} ms; call -> leased p50 "
        f"{out['call_to_leased_ms']['p50']:.2f} ms p99 {out['call_to_leased_ms']['p99']:.2f} ms"
    )
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The report: (figure, measured, goal, met?) per line."""
    idle, timers, sig = r["idle"], r["timers"], r["signals"]
    out: list[tuple[str, str, str, str]] = []
    none, loaded, diff = idle["none"], idle["waiting"], idle["difference"]
    for side, key in (("server", "server_ms_per_s"), ("workers", "workers_ms_per_s")):
        out.append(
            (
                f"{side} CPU, 0 / {idle['runs']:,} waiting runs ({idle['window_s']:.0f} s)",
                f"{none[key]:.2f} / {loaded[key]:.2f} ms/s ({diff[key]:+.2f})",
                "",
                "",
            )
        )
    met = abs(idle["difference_ms_per_s"]) <= idle["noise_ms_per_s"]
    out.append(
        (
            "CPU difference, server + workers",
            f"{idle['difference_ms_per_s']:+.2f} ms/s",
            f"within noise {idle['noise_ms_per_s']:.2f} ms/s",
            "yes" if met else "no",
        )
    )
    late = timers["lateness_ms"]
    out.append(
        (
            f"timer lateness ({timers['timers']:,} over {timers['spread_s']:.0f} s)",
            f"p50 {late['p50']:.1f}  p99 {late['p99']:.1f}  max {late['max']:.1f} ms",
            f"p99 <= {LATENESS_GOAL_MS:.0f} ms",
            "yes" if late["p99"] <= LATENESS_GOAL_MS else "no",
        )
    )
    for key, label in (
        ("call_to_ready_ms", "signal call -> dependant ready"),
        ("call_to_leased_ms", "signal call -> dependant leased"),
        ("sent_to_ready_ms", "signal sent_at -> ready (db clock)"),
        ("sent_to_leased_ms", "signal sent_at -> leased (db clock)"),
    ):
        x = sig[key]
        out.append(
            (f"{label} ({sig['signals']})", f"p50 {x['p50']:.2f}  p99 {x['p99']:.2f} ms", "", "")
        )
    return out


def summary(r: dict[str, Any]) -> dict[str, Any]:
    """The goals' figures, for ``make bench``'s summary."""
    return {
        "waits_idle_cpu_difference_ms_per_s": r["idle"]["difference_ms_per_s"],
        "waits_timer_lateness_p99_ms": r["timers"]["lateness_ms"]["p99"],
        "waits_signal_to_leased_p99_ms": r["signals"]["call_to_leased_ms"]["p99"],
    }


def table(r: dict[str, Any]) -> str:
    lines = [("figure", "measured", "goal", "met?"), *rows(r)]
    widths = [max(len(row[i]) for row in lines) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in lines
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-runs", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=10.0, help="seconds of each CPU window")
    parser.add_argument("--timers", type=int, default=2_000)
    parser.add_argument("--spread", type=float, default=20.0, help="seconds the timers span")
    parser.add_argument("--signals", type=int, default=500)
    parser.add_argument("--workers", dest="n_workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    sizes = vars(parser.parse_args(argv))  # measure's keywords, by their dest names
    where = sizes.pop("out")
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    with bench_database() as url:
        out = measure(Server(url), logs, **sizes)
    out["measured_at"] = datetime.now(UTC).isoformat()
    print(table(out))
    if where is not None:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
