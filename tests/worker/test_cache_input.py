"""The step cache counts only the run input a step can read (docs/step-cache.md, "The run
input in the key"): a real worker, a real database, the local artifact store. test.tally
records each call of its handler, so a reused step shows as a call that did not happen."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.runs import define, start, wait_run
from tests.worker.handlers import TALLY

CACHED = {"cache": {"ttl": "1h"}}
READS_A = {"type": "object", "properties": {"a": {"type": "integer"}}}
READS_NOTHING: dict[str, Any] = {"type": "object", "properties": {}}


def _calls(run_id: int) -> list[str]:
    """The step keys of ``run_id`` whose handler was called."""
    return sorted(k.split(":", 1)[1] for k in TALLY if k.split(":", 1)[0] == str(run_id))


def _reused_from_run(conn: psycopg.Connection[Any], run_id: int) -> dict[str, int | None]:
    """Each step of the run: the run its result came from, None when it computed."""
    rows = conn.execute(
        "SELECT key, (reused_from ->> 'run')::bigint FROM rara_steps WHERE run_id = %s",
        (run_id,),
    ).fetchall()
    return dict(rows)


def _run(conn: psycopg.Connection[Any], name: str, run_input: dict[str, Any]) -> int:
    run_id = start(conn, name, run_input)
    wait_run(conn, run_id, status="succeeded")
    return run_id


def test_a_step_keys_on_the_fields_its_schema_names(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    """`declared` reads `a` only: another `b` is a hit, another `a` a miss. `undeclared` (no
    inputSchema) is given, and keyed on, the whole run input: any field differs, it misses."""
    define(
        conn,
        "fields",
        [
            {"key": "declared", "capability": "test.tally@1", "inputSchema": READS_A, **CACHED},
            {"key": "undeclared", "capability": "test.tally@1", **CACHED},
        ],
    )
    thread_worker()
    first = _run(conn, "fields", {"a": 1, "b": 1})
    other_b = _run(conn, "fields", {"a": 1, "b": 2})
    other_a = _run(conn, "fields", {"a": 2, "b": 2})

    assert _calls(first) == ["declared", "undeclared"]
    assert _calls(other_b) == ["undeclared"]
    assert _reused_from_run(conn, other_b) == {"declared": first, "undeclared": None}
    assert _calls(other_a) == ["declared", "undeclared"]
    # A field the run does not have is not read either: `a` absent is its own key.
    absent = _run(conn, "fields", {"b": 1})
    assert _calls(absent) == ["declared", "undeclared"]
    again = _run(conn, "fields", {"b": 3})
    assert _reused_from_run(conn, again)["declared"] == absent


def test_same_bytes_from_a_recomputed_upstream_are_a_hit(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    """Early cutoff: `make` reads the whole run input, so another `noise` recomputes it, but
    its artifact has the same bytes; `use` reads no run input and only `make`'s artifact, by
    digest: it is reused."""
    define(
        conn,
        "cutoff",
        [
            {"key": "make", "capability": "test.tally@1", **CACHED},
            {
                "key": "use",
                "capability": "test.tally@1",
                "dependsOn": ["make"],
                "inputSchema": READS_NOTHING,
                **CACHED,
            },
        ],
    )
    thread_worker()
    first = _run(conn, "cutoff", {"text": "x", "noise": 1})
    again = _run(conn, "cutoff", {"text": "x", "noise": 2})
    changed = _run(conn, "cutoff", {"text": "y", "noise": 2})

    assert _calls(again) == ["make"]
    assert _reused_from_run(conn, again) == {"make": None, "use": first}
    assert _calls(changed) == ["make", "use"]  # other bytes from make: use computes
