"""Migration 0019 (fair share) on a database filled by the schema before it, isolated: every
step takes its run's namespace, every queue that may still lease a step has its lane, nothing
else changes, the new tables are isolated as the old ones, and the fleet goes on leasing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg

from rara.pg.migrate import migrate, retired
from tests.support.databases import empty_database
from tests.support.leasing import lease_now

# (namespace, step key, capability, status): what 0018's schema held, as the owner wrote it.
_STEPS = [
    ("default", "a", "x@1", "succeeded"),
    ("default", "b", "x@1", "ready"),
    ("team-a", "a", "x@1", "ready"),
    ("team-a", "b", "y@1", "blocked"),
    ("team-b", "a", "x@1", "succeeded"),
]


def _fill_0018(conn: psycopg.Connection[Any]) -> None:
    for namespace in sorted({n for n, *_ in _STEPS}):
        conn.execute(
            "INSERT INTO rara_definitions (namespace, name) VALUES (%s, 'rag')", (namespace,)
        )
        conn.execute(
            "INSERT INTO rara_definition_versions (namespace, name, version, digest, spec, steps)"
            " VALUES (%s, 'rag', 1, %s, '{}', '[]')",
            (namespace, "sha256:" + namespace.encode().hex().ljust(64, "0")[:64]),
        )
        conn.execute(
            "INSERT INTO rara_runs (namespace, definition_version_id, input, steps_total)"
            " SELECT namespace, id, '{}', 2 FROM rara_definition_versions WHERE namespace = %s",
            (namespace,),
        )
    for namespace, key, capability, status in _STEPS:
        conn.execute(
            "INSERT INTO rara_steps (run_id, key, capability, executor, payload, status,"
            " max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient, finished_at)"
            " SELECT id, %s, %s, 'inprocess', '{}', %s, 3, 1000, 60000, 2,"
            " CASE WHEN %s = 'succeeded' THEN now() END FROM rara_runs WHERE namespace = %s",
            (key, capability, status, status, namespace),
        )


def test_0019_gives_steps_their_runs_namespace_and_queues_their_lanes(
    pg_admin_url: str,
) -> None:
    with empty_database(pg_admin_url, "rara_mig_fair_share") as url:
        migrate(url, [m for m in retired() if m.version <= 18])
        with psycopg.connect(url, autocommit=True) as conn:
            _fill_0018(conn)
            # An isolated fleet (the switch is the catalog's; a partial migration installs no
            # functions, rara_namespace_isolation among them).
            conn.execute("ALTER TABLE rara_runs ENABLE ROW LEVEL SECURITY")
            before = conn.execute(
                "SELECT id, run_id, key, status::text FROM rara_steps ORDER BY id"
            ).fetchall()
            assert migrate(url)[0].version == 19
            assert (
                conn.execute(
                    "SELECT id, run_id, key, status::text FROM rara_steps ORDER BY id"
                ).fetchall()
                == before
            )
            mismatched = conn.execute(
                "SELECT count(*) FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id"
                " WHERE s.namespace <> r.namespace"
            ).fetchone()
            assert mismatched == (0,)
            lanes = conn.execute(
                "SELECT capability, executor, namespace FROM rara_lanes ORDER BY 3, 1"
            ).fetchall()
            assert lanes == [  # not team-b's: its only step has ended
                ("x@1", "inprocess", "default"),
                ("x@1", "inprocess", "team-a"),
                ("y@1", "inprocess", "team-a"),
            ]
            isolated = conn.execute(
                "SELECT relname FROM pg_class WHERE relrowsecurity AND relname = ANY (%s)"
                " ORDER BY 1",
                (["rara_lanes", "rara_namespace_quotas", "rara_namespace_shares"],),
            ).fetchall()
            assert len(isolated) == 3
            leased = lease_now(conn, ["x@1", "y@1"], worker="w", limit=10)
            assert Counter(s.namespace for s in leased) == {"default": 1, "team-a": 1}
