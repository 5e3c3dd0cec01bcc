"""The database derives what it can (migration 0012): a version's digest is the hash of the
spec it stores, and a run's steps are built from its version's spec — whatever a caller with
EXECUTE on the functions sends."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.definitions.parse import canonical_spec, definition_from_object
from rara.definitions.registry import apply_definition
from rara.pg.migrate import migrate, retired
from rara.runs import start_run
from tests.support.databases import empty_database
from tests.support.definitions import definition

Login = Callable[[str | None], psycopg.Connection[Any]]
REAL = [
    {"key": "collect", "capability": "corpus.collect@1", "input": {"limit": 3}},
    {"key": "clean", "capability": "corpus.clean@1", "dependsOn": ["collect"]},
]


def _real() -> Any:
    return definition_from_object(definition("rag", REAL))


def _steps(conn: psycopg.Connection[Any], run_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT key, capability, priority, depends_on, payload FROM rara_steps"
        " WHERE run_id = %s ORDER BY id",
        (run_id,),
    ).fetchall()


@pytest.mark.parametrize("group", ["rara_client", "rara_operator"])
def test_a_spec_cannot_be_stored_under_another_specs_digest(
    conn: psycopg.Connection[Any], login: Login, group: str
) -> None:
    """The attack: a changed payload registered under the real file's digest, after which
    applying the real file said `unchanged` and runs ran the attacker's spec."""
    caller = login(group)
    real = apply_definition(conn, _real())
    forged = json.dumps({"steps": [{**REAL[0], "input": {"limit": 10**6}}, REAL[1]]})
    with contextlib.suppress(psycopg.errors.UndefinedFunction):  # the old signature took
        caller.execute(  # the digest from the caller
            "SELECT * FROM rara_definition_register(p_name => 'rag2', p_digest => %s,"
            " p_spec => %s::jsonb)",
            (real.digest, forged),
        )
    row = caller.execute(
        "SELECT version, digest FROM rara_definition_register('rag2', %s)", (forged,)
    ).fetchone()
    assert row is not None
    assert row[1] != real.digest
    assert (
        row[1]
        == conn.execute(
            "SELECT rara_spec_digest(spec) FROM rara_definition_versions WHERE name = 'rag2'"
        ).fetchone()[0]
    )  # type: ignore[index]
    # The real file applied under that name is a new version, and runs run it.
    applied = apply_definition(conn, definition_from_object(definition("rag2", REAL)))
    assert applied.created
    assert applied.digest == real.digest
    run_id = start_run(conn, "rag2", queue_anyway=True).run_id
    assert _steps(conn, run_id)[0][4]["input"] == {"limit": 3}


@pytest.mark.parametrize("group", ["rara_client", "rara_operator"])
def test_a_run_holds_exactly_its_specs_steps(
    conn: psycopg.Connection[Any], login: Login, group: str
) -> None:
    """The attack: rara_run_start inserted the step rows the caller sent — a step not in the
    spec, another capability, a higher priority, a dependency on nothing, or no steps at all
    (a run pending forever). Now the caller names a version and gets its spec's steps."""
    caller = login(group)
    version = apply_definition(conn, _real())
    forged_steps = json.dumps(
        [
            {
                "key": "evil",
                "depends_on": ["ghost"],
                "dependants": [],
                "capability": "adapt.lora@1",
                "executor": "grpc",
                "priority": 1000,
                "payload": {},
                "max_attempts": 1,
            }
        ]
    )
    for steps in (forged_steps, "[]"):
        with contextlib.suppress(psycopg.errors.UndefinedFunction):  # the old signature
            caller.execute(  # took the step rows from the caller
                "SELECT * FROM rara_run_start('rag', NULL, %s, %s::jsonb, '{}', NULL, false, 30)",
                (version.digest, steps),
            )
    [(run_id,)] = caller.execute(
        "SELECT run_id FROM rara_run_start('rag', NULL, %s, '{}', NULL, false, 30)",
        (version.digest,),
    ).fetchall()
    runs = conn.execute("SELECT id, steps_total FROM rara_runs ORDER BY id").fetchall()
    assert runs == [(run_id, 2)]
    assert _steps(conn, run_id) == [
        ("collect", "corpus.collect@1", 0, [], {"input": {"limit": 3}, "secrets": {}}),
        ("clean", "corpus.clean@1", 0, ["collect"], {"input": {}, "secrets": {}}),
    ]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"steps": []}, r"spec\.steps: must be a list of 1 to 1000 steps"),
        (
            {"steps": [{"key": "a", "capability": "x@1", "dependsOn": ["ghost"]}]},
            r"spec\.steps\[0\] \(step 'a'\)\.dependsOn: ghost is not another step",
        ),
        (
            {
                "steps": [
                    {"key": "a", "capability": "x@1", "dependsOn": ["b"]},
                    {"key": "b", "capability": "x@1", "dependsOn": ["a"]},
                ]
            },
            r"spec\.steps: dependency cycle among a, b",
        ),
        (
            {"steps": [{"key": "a", "capability": "x@1"}, {"key": "a", "capability": "x@1"}]},
            r"spec\.steps\[1\]: duplicate step key a",
        ),
        (
            {"steps": [{"key": "a", "capability": "X"}]},
            r"spec\.steps\[0\] \(step 'a'\)\.capability: must be name@major",
        ),
        (
            {"steps": [{"key": "a", "capability": "x@1", "priority": 10**6}]},
            r"\.priority: must be an integer from -1000 to 1000",
        ),
        (
            {"steps": [{"key": "a", "capability": "x@1", "timeout": "soon"}]},
            r"\.timeout: \"soon\" is not a duration",
        ),
        (
            {"steps": [{"key": "a", "capability": "x@1", "executor": "shell"}]},
            r"\.executor: must be inprocess or grpc",
        ),
        (
            {"steps": [{"key": "a", "capability": "x@1", "map": {"over": "b.result.items"}}]},
            r"\.map\.over: reads step b, which is not in its dependsOn",
        ),
    ],
)
def test_a_spec_no_run_could_follow_is_refused_naming_the_step(
    conn: psycopg.Connection[Any], login: Login, spec: dict[str, Any], problem: str
) -> None:
    caller = login("rara_client")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=problem):
        caller.execute("SELECT * FROM rara_definition_register('bad', %s)", (json.dumps(spec),))
    assert conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone() == (0,)


def test_the_database_builds_what_the_model_means(conn: psycopg.Connection[Any]) -> None:
    """Every field of a step reaches its row as rara.definitions.model means it (durations,
    defaults, retry, a map's source and path, dependants in spec order)."""
    apply_definition(
        conn,
        definition_from_object(
            definition(
                "full",
                [
                    {
                        "key": "collect",
                        "capability": "corpus.collect@2",
                        "timeout": "1h30m",
                        "heartbeatTimeout": "45s",
                        "priority": -5,
                        "secrets": {"tok": {"name": "s", "key": "k"}},
                        "retry": {
                            "maxAttempts": 7,
                            "initialDelay": "500ms",
                            "maxDelay": "2m",
                            "backoffCoefficient": 1.5,
                        },
                    },
                    {
                        "key": "shard",
                        "capability": "index.shard@1",
                        "executor": "grpc",
                        "dependsOn": ["collect"],
                        "map": {"over": "collect.result.parts.0", "maxParallel": 4},
                    },
                    {"key": "each", "capability": "x@1", "map": {"over": "input.items"}},
                    {"key": "done", "capability": "x@1", "dependsOn": ["shard", "collect"]},
                ],
            )
        ),
    )
    [(steps,)] = conn.execute("SELECT steps FROM rara_definition_versions").fetchall()
    assert steps[0] == {
        "key": "collect",
        "depends_on": [],
        "dependants": ["shard", "done"],
        "capability": "corpus.collect@2",
        "executor": "inprocess",
        "priority": -5,
        "payload": {"input": {}, "secrets": {"tok": {"name": "s", "key": "k"}}},
        "max_attempts": 7,
        "retry_initial_ms": 500,
        "retry_max_ms": 120_000,
        "retry_coefficient": 1.5,
        "timeout_ms": 5_400_000,
        "heartbeat_timeout_ms": 45_000,
        "map_over": None,
        "map_max_parallel": None,
        "wait": None,  # a step that runs (0021: a wait's rule)
    }
    assert (steps[1]["map_over"], steps[1]["map_max_parallel"], steps[1]["executor"]) == (
        ["collect", "parts", "0"],
        4,
        "grpc",
    )
    assert (
        steps[2]["map_over"],
        steps[2]["max_attempts"],
        steps[2]["retry_initial_ms"],
        steps[2]["retry_max_ms"],
        steps[2]["timeout_ms"],
    ) == (["$input", "items"], 3, 1000, 60_000, None)
    assert steps[3]["depends_on"] == ["shard", "collect"]
    assert steps[3]["dependants"] == []


def test_versions_from_before_get_the_databases_digest_and_steps(pg_admin_url: str) -> None:
    """0012 on a database whose versions carry the client's digests: each gets the database's
    digest and its step rows, and the same spec applied again is still that version."""
    with empty_database(pg_admin_url, "rara_mig_trust") as url:
        migrate(url, [m for m in retired() if m.version < 12])
        spec = canonical_spec(_real().spec)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO rara_definitions (name) VALUES ('rag')")
            conn.execute(
                "INSERT INTO rara_definition_versions (name, version, digest, spec)"
                " VALUES ('rag', 1, %s, %s)",
                ("sha256:" + "1" * 64, json.dumps(spec)),
            )
            migrate(url)
            [(digest, steps)] = conn.execute(
                "SELECT digest, steps FROM rara_definition_versions"
            ).fetchall()
            assert (
                digest
                == conn.execute(
                    "SELECT rara_spec_digest(%s::jsonb)", (json.dumps(spec),)
                ).fetchone()[0]
            )  # type: ignore[index]
            assert [s["key"] for s in steps] == ["collect", "clean"]
            again = apply_definition(conn, _real())
            assert (again.version, again.created, again.digest) == (1, False, digest)
            run_id = start_run(conn, "rag", queue_anyway=True).run_id
            assert [k for k, *_ in _steps(conn, run_id)] == ["collect", "clean"]
