"""Server time per dashboard page (``rara ui``) at scale: a 1,000-step run and a 100k-run list.

    .venv/bin/python -m bench.ui_pages [--runs 100000] [--repeat 15]

An embedded PostgreSQL of its own, filled set-wise: ``--runs`` runs of three definitions over
30 days (two steps each, a mix of statuses; one definition is rare), and a 1,000-step run (50
layers of 20, each step depending on two of the layer before) part succeeded with attempts,
retries and a loss curve, part running, the rest blocked. Then a real ``rara ui`` process; each
page is fetched ``--repeat`` times and the server's own time (its ``Server-Timing`` header: the
time to the response head, pages rendered whole) is reported as p50/p95, with the bytes sent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from bench.common import bench_database
from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.pg.runs import enqueue_many
from rara.runs import start_run

WIDTH, LAYERS = 20, 50  # 1,000 steps


def _definition(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {"steps": steps},
    }


def big_run(conn: psycopg.Connection[Any]) -> int:
    steps = []
    for layer in range(LAYERS):
        for i in range(WIDTH):
            step: dict[str, Any] = {
                "key": f"l{layer:02d}-s{i:02d}",
                "capability": "bench.work@1",
                "executor": "inprocess",
            }
            if layer:
                step["dependsOn"] = sorted(
                    {f"l{layer - 1:02d}-s{i:02d}", f"l{layer - 1:02d}-s{(i + 1) % WIDTH:02d}"}
                )
            steps.append(step)
    apply_definition(conn, definition_from_object(_definition("wide", steps)))
    run_id = start_run(conn, "wide", queue_anyway=True, idempotency_key="bench-wide").run_id
    # 600 steps done (one in ten after a retry), 20 running, the rest as they were: set-wise,
    # in the rows' final shape (a fixture, not the runtime path).
    conn.execute(
        """
        WITH s AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM rara_steps
                   WHERE run_id = %(run)s)
        INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token, started_at,
                                   ended_at, ended_by, outcome, error)
        SELECT s.id, a, %(run)s, 'bench-w' || (s.n %% 8), gen_random_uuid(),
               now() - interval '1 hour' + s.n * interval '3 seconds' + a * interval '1 second',
               now() - interval '1 hour' + s.n * interval '3 seconds' + a * interval '2 seconds',
               'worker', CASE WHEN a = 1 AND s.n %% 10 = 0 THEN 'failed' ELSE 'succeeded' END
                   ::rara_attempt_outcome,
               CASE WHEN a = 1 AND s.n %% 10 = 0 THEN '{"code": "FLAKY", "message": "flaky"}'
                   ::jsonb END
        FROM s, generate_series(1, 2) a
        WHERE s.n <= 600 AND (a = 1 OR s.n %% 10 = 0)""",
        {"run": run_id},
    )
    conn.execute(
        """
        WITH s AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM rara_steps
                   WHERE run_id = %(run)s)
        INSERT INTO rara_events (step_id, attempt, seq, kind, fraction, metrics, created_at)
        SELECT s.id, 1, i, 'progress', i / 200.0,
               jsonb_build_object('loss', 2.0 / (1 + i / 20.0), 'lr', 0.0002),
               now() - interval '1 hour' + i * interval '1 second'
        FROM s, generate_series(1, 200) i WHERE s.n <= 5""",
        {"run": run_id},
    )
    conn.execute("ALTER TABLE rara_steps DISABLE TRIGGER USER")
    conn.execute(
        """
        UPDATE rara_steps SET status = 'succeeded', attempt = CASE WHEN id %% 10 = 0 THEN 2
                              ELSE 1 END, pending_deps = 0,
               result = jsonb_build_object('items', id, 'recall_at_10', 0.8),
               started_at = now() - interval '1 hour', finished_at = now() - interval '30 minutes'
        WHERE id IN (SELECT id FROM rara_steps WHERE run_id = %(run)s ORDER BY id LIMIT 600)""",
        {"run": run_id},
    )
    conn.execute(
        """
        UPDATE rara_steps SET status = 'running', attempt = 1, leased_by = 'bench-w1',
               lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour',
               started_at = now() - interval '1 minute', pending_deps = 0
        WHERE id IN (SELECT id FROM rara_steps WHERE run_id = %(run)s
                     AND status <> 'succeeded' ORDER BY id LIMIT 20)""",
        {"run": run_id},
    )
    conn.execute("ALTER TABLE rara_steps ENABLE TRIGGER USER")
    conn.execute(
        "UPDATE rara_runs SET status = 'running', started_at = now() - interval "
        "'1 hour', steps_succeeded = 600 WHERE id = %(run)s",
        {"run": run_id},
    )
    return run_id


def many_runs(conn: psycopg.Connection[Any], runs: int) -> None:
    """``runs`` runs of two steps (s0 → s1) through run_enqueue_many, 100 at a time so that
    the definitions interleave (one in a hundred batches is the rare one), then given their
    final shape set-wise: created over 30 days, 1% failed, 0.3% cancelled, the rest done."""
    for name in ("nightly-refresh", "adapt", "rare-backfill"):
        apply_definition(
            conn,
            definition_from_object(
                _definition(
                    name,
                    [
                        {"key": "s0", "capability": "bench.work@1", "executor": "inprocess"},
                        {
                            "key": "s1",
                            "capability": "bench.work@1",
                            "executor": "inprocess",
                            "dependsOn": ["s0"],
                        },
                    ],
                )
            ),
        )
    batch = 100
    for i in range(max(runs // batch, 1)):
        name = "rare-backfill" if i % 100 == 7 else ("adapt", "nightly-refresh")[i % 2]
        enqueue_many(
            conn,
            definition=name,
            version=None,
            runs=batch,
            steps=2,
            key="s",
            capability="bench.work@1",
            chained=True,
        )
    conn.execute("ALTER TABLE rara_runs DISABLE TRIGGER USER")
    conn.execute("ALTER TABLE rara_steps DISABLE TRIGGER USER")
    conn.execute(
        """
        UPDATE rara_runs r SET status = x.st::rara_run_status, idempotency_key = 'nightly-' || x.g,
               created_at = x.t, started_at = x.t, finished_at = x.t + interval '90 seconds',
               steps_succeeded = CASE WHEN x.st = 'succeeded' THEN 2 ELSE 0 END,
               steps_cancelled = CASE WHEN x.st = 'succeeded' THEN 0 ELSE 2 END
        FROM (SELECT id, g, now() - interval '30 days' * (1 - g::float / %(runs)s) AS t,
                     CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 333 = 0 THEN 'cancelled'
                          ELSE 'succeeded' END AS st
              FROM (SELECT id, row_number() OVER (ORDER BY id) AS g FROM rara_runs) n) x
        WHERE r.id = x.id""",
        {"runs": runs},
    )
    conn.execute("""
        UPDATE rara_steps s SET pending_deps = 0, attempt = 1, started_at = r.started_at,
               finished_at = r.finished_at,
               status = CASE WHEN r.status = 'succeeded' THEN 'succeeded' ELSE 'cancelled' END
                   ::rara_step_status
        FROM rara_runs r WHERE r.id = s.run_id""")
    conn.execute("ALTER TABLE rara_steps ENABLE TRIGGER USER")
    conn.execute("ALTER TABLE rara_runs ENABLE TRIGGER USER")
    # Each finished run's collect step made a corpus: one manifest and one blob per run.
    conn.execute("""
        INSERT INTO rara_artifacts (digest, size)
        SELECT 'sha256:' || encode(sha256(s.id::text::bytea), 'hex'), 1000 + s.id
        FROM rara_steps s WHERE s.key = 's0'""")
    conn.execute("""
        INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)
        SELECT s.id, 1, 'corpus.jsonl', 'sha256:' || encode(sha256(s.id::text::bytea), 'hex'),
               1000 + s.id, 'application/jsonl'
        FROM rara_steps s WHERE s.key = 's0'""")
    conn.execute("ANALYZE")


LOGINS = ("owner", "fleet", "tenant")


def ui_login(url: str, login: str) -> str:
    """The URL the UI reads with: the owner's, or, with isolation between namespaces on
    (docs/namespaces.md, "Isolation"), a new rara_reader login that sees every namespace ('*')
    or, as a team's would, only `default` (where every row here is)."""
    if login == "owner":
        return url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE ROLE bench_ui LOGIN IN ROLE rara_reader")
        conn.execute("SELECT rara_namespace_isolation(true)")
        conn.execute(
            "INSERT INTO rara_namespace_access (role, namespace) VALUES ('bench_ui', %s)",
            ("*" if login == "fleet" else "default",),
        )
    return conninfo.make_conninfo(url, user="bench_ui")


def fetch(url: str) -> tuple[float, int]:
    with urllib.request.urlopen(url, timeout=60) as answer:
        body = answer.read()
        timing = answer.headers.get("server-timing", "")
    return float(timing.split("dur=")[1]), len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--login",
        choices=LOGINS,
        default="owner",
        help="the UI's database login: the owner (no row-level security), a fleet reader "
        "('*': one InitPlan per policy), or a team's reader (every row through its policy)",
    )
    args = parser.parse_args()
    from tests.support.ui import UiServer  # the same server process the browser tests use

    with bench_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            many_runs(conn, args.runs)
            wide = big_run(conn)
            conn.execute("ANALYZE")
            middle = args.runs // 2
            since = conn.execute("SELECT (now() - interval '10 days')::date::text").fetchone()
            blob = conn.execute(
                "SELECT digest FROM rara_step_artifacts ORDER BY step_id OFFSET %s LIMIT 1",
                (args.runs // 3,),
            ).fetchone()
        print(f"filled in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        day = since[0] if since else "2026-01-01"
        pages = {
            "runs, first page": "/runs",
            "runs, page at 50k (keyset)": f"/runs?before={middle}",
            "runs, last page": "/runs?before=60",
            "runs, status=failed": "/runs?status=failed",
            "runs, status=failed, deep": f"/runs?status=failed&before={middle}",
            # A phase (rara_run_phase), found from the open waits (none here).
            "runs, status=waiting": "/runs?status=waiting",
            "runs, definition (1%)": "/runs?definition=rare-backfill",
            "runs, time window": f"/runs?since={day}&until={day}T06:00",
            "run, 1,000 steps": f"/runs/{wide}",
            "run state (live poll), 1,000 steps": f"/runs/{wide}/state",
            "definition + results chart": "/definitions/wide",
            "definitions": "/definitions",
            "artifact lineage (100k manifests)": f"/artifacts/{blob[0] if blob else ''}",
            "fleet": "/fleet",
        }
        log = Path(".rara") / "bench-ui.log"
        log.parent.mkdir(exist_ok=True)
        server = UiServer(ui_login(url, args.login), log)
        try:
            results = {}
            for name, path in pages.items():
                fetch(server.url + path)  # warm: plans, templates
                samples, size = [], 0
                for _ in range(args.repeat):
                    took, size = fetch(server.url + path)
                    samples.append(took)
                samples.sort()
                results[name] = {
                    "p50_ms": round(statistics.median(samples), 1),
                    "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 1),
                    "kib": round(size / 1024, 1),
                }
                print(
                    f"{name:38} p50 {results[name]['p50_ms']:7.1f} ms  "
                    f"p95 {results[name]['p95_ms']:7.1f} ms  {results[name]['kib']:7.1f} KiB"
                )
        finally:
            server.stop()
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "steps_in_big_run": WIDTH * LAYERS,
                    "login": args.login,
                    "pages": results,
                }
            )
        )


if __name__ == "__main__":
    main()
