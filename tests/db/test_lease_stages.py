"""The stages of the lease and the optional parts of an end (db/functions/lease_stages.sql;
docs/lease-protocol.md, "The lease's stages"), each called directly: rows set up, the stage
called, what it decides asserted. The whole lease and end are tested as they are called
(tests/db/test_fair_share.py, test_limits.py, test_concurrency_keys.py, test_map_steps.py,
tests/worker/test_held_back_slots.py); these pin what each stage decides on its own."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara.pg import limits
from rara.pg.runs import enqueue_many
from rara.runs import start_run
from tests.db.test_fair_share import _ready
from tests.support.definitions import apply
from tests.support.leasing import lease_now

A, B = "team-a", "team-b"
WORK = "work@1"
LANE = "ROW(%s, 'inprocess', %s, %s, %s)::rara_lease_lane"
STAGES = [
    "rara_lease_room",
    "rara_lease_budget",
    "rara_lease_full_keys",
    "rara_lease_cursors",
    "rara_lease_draw",
    "rara_lease_probe",
    "rara_lease_spent",
    "rara_lease_walk",
    "rara_lease_admit_keys",
    "rara_lease_fit",
    "rara_lease_spend",
    "rara_lease_take",
    "rara_end_cache_entries",
    "rara_end_lineage",
    "rara_end_manifests",
    "rara_end_unblock",
    "rara_reap_turn",
]


def _rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()


def _ids(conn: psycopg.Connection[Any], namespace: str) -> list[int]:
    """The ready steps of ``namespace``, in lease order."""
    return [
        i
        for (i,) in _rows(
            conn,
            "SELECT id FROM rara_steps WHERE namespace = %s AND status = 'ready'"
            " ORDER BY -priority, available_at, id",
            namespace,
        )
    ]


def _candidates(conn: psycopg.Connection[Any], ids: list[int]) -> str:
    """A rara_lease_candidate[] literal of the steps ``ids``, in that order."""
    [(literal,)] = _rows(
        conn,
        "SELECT ARRAY(SELECT ROW(s.id, s.capability, s.executor, s.namespace,"
        " s.concurrency_key, s.concurrency_max)::rara_lease_candidate"
        " FROM unnest(%s::bigint[]) WITH ORDINALITY AS g(id, o)"
        " JOIN rara_steps s ON s.id = g.id ORDER BY g.o)::text",
        ids,
    )
    return str(literal)


def test_no_role_may_call_a_stage(conn: psycopg.Connection[Any]) -> None:
    rows = _rows(
        conn,
        "SELECT p.proname, r.rolname FROM pg_proc p CROSS JOIN pg_roles r"
        " WHERE p.proname = ANY (%s) AND r.rolname LIKE 'rara\\_%%'"
        " AND has_function_privilege(r.oid, p.oid, 'EXECUTE')"
        " AND r.oid <> p.proowner AND NOT r.rolsuper",
        STAGES,
    )
    assert rows == []
    [(defined,)] = _rows(
        conn, "SELECT count(DISTINCT proname) FROM pg_proc WHERE proname = ANY (%s)", STAGES
    )
    assert defined == len(STAGES)


def test_room_is_the_tightest_bound_that_applies(conn: psycopg.Connection[Any]) -> None:
    bounds = (
        "ARRAY[ROW(NULL, 'work@1', 5), ROW('team-a', 'work@1', 3), ROW('team-a', '*', 2),"
        " ROW('team-b', 'work@1', 0)]::rara_lease_bound[]"
    )
    room = f"SELECT rara_lease_room({bounds}, %s, %s)"
    assert _rows(conn, room, A, WORK) == [(2,)]
    assert _rows(conn, room, B, WORK) == [(0,)]
    assert _rows(conn, room, "team-c", WORK) == [(5,)]
    assert _rows(conn, room, "team-c", "other@1") == [(None,)]  # no bound


def test_budget_counts_what_limits_and_quotas_let_run(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 3)
    lease_now(conn, [WORK], worker="w", limit=1)
    limits.set_limit(conn, WORK, 4)
    limits.set_quota(conn, A, WORK, 2)
    limits.set_quota(conn, B, "*", 5)
    limits.set_quota(conn, A, "other@1", 1)  # not a served capability: not in the budget
    rows = _rows(
        conn,
        "SELECT b.namespace, b.capability, b.free"
        " FROM unnest(rara_lease_budget(%s)) AS b ORDER BY 1 NULLS FIRST, 2",
        [WORK],
    )
    assert rows == [(None, WORK, 3), (A, WORK, 1), (B, "*", 5)]
    # a capability without a limit or quota of its own: only the quotas on all capabilities
    assert _rows(
        conn, "SELECT b.namespace, b.free FROM unnest(rara_lease_budget(%s)) AS b", ["x@1"]
    ) == [(B, 5)]


def test_full_keys_are_those_running_at_their_max(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "crm", [{"key": "s", "capability": WORK}])
    enqueue_many(
        conn, definition="crm", version=None, runs=6, steps=1, key="s", capability=WORK,
        concurrency_keys=2, concurrency_max=2,
    )  # fmt: skip
    lease_now(conn, [WORK], worker="w", limit=3)  # one key at 2, the other at 1
    [(full,)] = _rows(conn, "SELECT rara_lease_full_keys()")
    [(at_max,)] = _rows(
        conn,
        "SELECT array_agg(concurrency_key) FROM (SELECT concurrency_key FROM rara_steps"
        " WHERE status = 'running' GROUP BY 1 HAVING count(*) >= 2) AS k",
    )
    assert len(full) == 1
    assert full == at_max


def test_cursors_are_rows_of_the_lanes_that_have_one(conn: psycopg.Connection[Any]) -> None:
    rows = _rows(
        conn,
        "SELECT c.capability, c.namespace, c.rank, c.id FROM unnest(rara_lease_cursors("
        "%s, %s, %s, %s, %s::timestamptz[], %s)) AS c",
        [WORK, WORK, "b@1"],
        ["inprocess"] * 3,
        [A, B, None],
        [0, -5, None],
        ["2026-01-01T00:00:00Z"] * 2 + [None],
        [10, 20, None],
    )
    assert rows == [(WORK, A, 0, 10), (WORK, B, -5, 20)]


def test_draw_gives_a_lone_lane_every_slot(conn: psycopg.Connection[Any]) -> None:
    draw = "SELECT l.namespace, l.drawn FROM unnest(rara_lease_draw(%s, %s, %s)) AS l"
    assert _rows(conn, draw, [WORK], ["inprocess"], 7) == []  # nothing ever queued
    _ready(conn, A, 1)
    assert _rows(conn, draw, [WORK], ["inprocess"], 7) == [(A, 7)]


def test_draw_shares_the_slots_between_lanes_by_weight(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 1)
    _ready(conn, B, 1)
    limits.set_share(conn, B, 10000)
    drawn = dict(
        _rows(
            conn,
            "SELECT l.namespace, l.drawn FROM unnest(rara_lease_draw(%s, %s, 50)) AS l",
            [WORK],
            ["inprocess"],
        )
    )
    assert sum(drawn.values()) == 50
    assert drawn[B] >= 45  # A's odds per slot: 1 in 10,001


def test_probe_takes_a_lane_s_slots_after_its_cursor_and_within_its_room(
    conn: psycopg.Connection[Any],
) -> None:
    _ready(conn, A, 5)
    _ready(conn, B, 5)
    a, b = _ids(conn, A), _ids(conn, B)
    [(rank, at)] = _rows(conn, "SELECT -priority, available_at FROM rara_steps WHERE id = %s", a[1])
    with conn.transaction():
        found = _rows(
            conn,
            f"SELECT c.id, c.namespace FROM unnest(rara_lease_probe(ARRAY[{LANE}, {LANE}],"
            " ARRAY[ROW(%s, 'inprocess', %s, %s, %s, %s)::rara_lease_cursor],"
            " ARRAY[ROW(%s, %s, 2)::rara_lease_bound], '{}')) AS c",
            WORK, A, 3, 1, WORK, B, 4, 1, WORK, A, rank, at, a[1], B, WORK,
        )  # fmt: skip
    # A: after its cursor (its first two passed), the 3 it drew; B: 2 of the 4 drawn (quota)
    assert sorted(i for i, ns in found if ns == A) == a[2:5]
    assert sorted(i for i, ns in found if ns == B) == b[:2]


def test_probe_passes_keys_at_their_max_by(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "crm", [{"key": "s", "capability": WORK}])
    enqueue_many(
        conn, definition="crm", version=None, runs=4, steps=1, key="s", capability=WORK,
        concurrency_keys=2,
    )  # fmt: skip
    [(key,)] = _rows(conn, "SELECT min(concurrency_key) FROM rara_steps")
    with conn.transaction():
        found = _rows(
            conn,
            f"SELECT c.concurrency_key FROM unnest(rara_lease_probe(ARRAY[{LANE}], '{{}}',"
            " '{}', %s)) AS c",
            WORK, "default", 10, 1, [key],
        )  # fmt: skip
    assert len(found) == 2
    assert key not in {k for (k,) in found}


def test_spent_lanes_gave_less_than_they_drew(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 1)
    _ready(conn, B, 2)
    found = _candidates(conn, _ids(conn, A) + _ids(conn, B))
    rows = _rows(
        conn,
        f"SELECT l.namespace FROM unnest(rara_lease_spent(ARRAY[{LANE}, {LANE}], %s)) AS l",
        WORK, A, 2, 1, WORK, B, 2, 1, found,
    )  # fmt: skip
    assert rows == [(A,)]


def test_walk_passes_namespaces_spent_lanes_and_steps_seen_by(
    conn: psycopg.Connection[Any],
) -> None:
    for namespace in (A, B, "team-c"):
        _ready(conn, namespace, 3)
    c = _ids(conn, "team-c")
    with conn.transaction():
        found = _rows(
            conn,
            "SELECT c.id, c.namespace FROM unnest(rara_lease_walk(%s, %s, '{}', '{}', '{}',"
            f" %s, ARRAY[{LANE}], %s, %s, 10)) AS c",
            [WORK], ["inprocess"], [A], WORK, B, 3, 1, _candidates(conn, c[:1]), c[1:2],
        )  # fmt: skip
    assert found == [(c[2], "team-c")]
    with conn.transaction():
        [(n,)] = _rows(
            conn,
            "SELECT cardinality(rara_lease_walk(%s, %s, '{}', '{}', '{}', '{}', '{}', '{}',"
            " '{}', 4))",
            [WORK], ["inprocess"],
        )  # fmt: skip
    assert n == 4  # stops at what it was asked for


def test_admit_keys_admits_no_more_per_key_than_its_max(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "crm", [{"key": "s", "capability": WORK}])
    enqueue_many(
        conn, definition="crm", version=None, runs=4, steps=1, key="s", capability=WORK,
        concurrency_keys=1, concurrency_max=2,
    )  # fmt: skip
    _ready(conn, A, 1)  # no key: always admitted
    keyed = _ids(conn, "default")
    with conn.transaction():
        [(admitted, away)] = _rows(
            conn,
            "SELECT ARRAY(SELECT c.id FROM unnest(k.admitted) AS c), k.turned_away"
            " FROM rara_lease_admit_keys(%s, %s) AS k",
            _candidates(conn, keyed[1:] + _ids(conn, A)),
            _candidates(conn, keyed[:1]),  # taken by an earlier round: one of the two
        )
    assert admitted == [keyed[1], _ids(conn, A)[0]]
    assert away == keyed[2:]


def test_fit_gives_a_shared_bound_s_slots_in_candidate_order(
    conn: psycopg.Connection[Any],
) -> None:
    _ready(conn, A, 3)
    _ready(conn, B, 3)
    a, b = _ids(conn, A), _ids(conn, B)
    order = [b[0], a[0], a[1], b[1], a[2]]
    bounds = "ARRAY[ROW(NULL, 'work@1', 4), ROW('team-a', '*', 1)]::rara_lease_bound[]"
    [(fitted,)] = _rows(
        conn,
        f"SELECT ARRAY(SELECT c.id FROM unnest(rara_lease_fit(%s, {bounds})) AS c)",
        _candidates(conn, order),
    )
    # A's quota: its first only; the limit: 4 in all, of which A's two others took none
    assert fitted == [b[0], a[0], b[1]]


def test_spend_takes_what_was_taken_off_each_bound(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 2)
    _ready(conn, B, 1)
    bounds = (
        "ARRAY[ROW(NULL, 'work@1', 4), ROW('team-a', '*', 1), ROW('team-b', 'work@1', 3)]"
        "::rara_lease_bound[]"
    )
    rows = _rows(
        conn,
        f"SELECT b.namespace, b.free FROM unnest(rara_lease_spend({bounds}, %s)) AS b",
        _candidates(conn, _ids(conn, A) + _ids(conn, B)),
    )
    assert rows == [(None, 1), (A, 0), (B, 2)]


def test_take_starts_the_attempts_and_answers_what_they_start_from(
    conn: psycopg.Connection[Any],
) -> None:
    _ready(conn, A, 3)
    a = _ids(conn, A)
    taken = _rows(
        conn,
        "SELECT id, attempt, lease_token IS NOT NULL, run_input, namespace"
        " FROM rara_lease_take('w', %s, 30)",
        a[:2],
    )
    assert sorted(taken) == [(i, 1, True, {}, A) for i in a[:2]]
    assert _rows(
        conn,
        "SELECT id, status::text, leased_by FROM rara_steps WHERE id = ANY (%s) ORDER BY id",
        a,
    ) == [(a[0], "running", "w"), (a[1], "running", "w"), (a[2], "ready", None)]
    assert _rows(conn, "SELECT step_id, worker FROM rara_attempts ORDER BY step_id") == [
        (a[0], "w"),
        (a[1], "w"),
    ]


def _ended(conn: psycopg.Connection[Any], step_id: int) -> str:
    [(literal,)] = _rows(
        conn,
        "SELECT ARRAY[ROW(id, attempt, run_id, key, capability)::rara_step_ended]::text"
        " FROM rara_steps WHERE id = %s",
        step_id,
    )
    return str(literal)


@pytest.mark.parametrize("part", ["cache_entries", "lineage", "manifests"])
def test_an_end_s_optional_part_writes_only_what_its_batch_carries(
    conn: psycopg.Connection[Any], part: str
) -> None:
    apply(conn, "c", [{"key": "s", "capability": WORK, "cache": {"ttl": "1h"}}])
    enqueue_many(conn, definition="c", version=None, runs=1, steps=1, key="s", capability=WORK)
    [step] = lease_now(conn, [WORK], worker="w", limit=1)
    # (a step of a definition with `cache:` carries its ttl in its payload)
    conn.execute("""UPDATE rara_steps SET payload = payload || '{"cache": {"ttl_ms": 60000}}'""")
    digest = "sha256:" + "a" * 64
    success = {
        "id": step.id,
        "result": {"r": 1},
        "cache": {"entry": digest, "base": digest, "reads": {}, "entry_parts": {}},
        "reads": [digest],
        "manifest": [{"name": "out", "digest": digest, "size": 3, "media_type": "text/plain"}],
    }
    tables = {
        "cache_entries": "rara_step_cache",
        "lineage": "rara_step_reads",
        "manifests": "rara_step_artifacts",
    }
    call = f"SELECT rara_end_{part}(%s::jsonb, %s)"
    others = {k: v for k, v in success.items() if k not in ("cache", "reads", "manifest")}
    conn.execute(call, (psycopg.types.json.Jsonb([others]), _ended(conn, step.id)))
    assert _rows(conn, f"SELECT count(*) FROM {tables[part]}") == [(0,)]
    conn.execute(call, (psycopg.types.json.Jsonb([success]), _ended(conn, step.id)))
    assert _rows(conn, f"SELECT count(*) FROM {tables[part]}") == [(1,)]
    for other in set(tables) - {part}:
        assert _rows(conn, f"SELECT count(*) FROM {tables[other]}") == [(0,)]


def test_unblock_readies_dependants_with_no_dependency_left(
    conn: psycopg.Connection[Any],
) -> None:
    apply(
        conn,
        "dag",
        [
            {"key": "a", "capability": WORK},
            {"key": "b", "capability": WORK},
            {"key": "ab", "capability": WORK, "depends_on": ["a", "b"]},
            {"key": "after_a", "capability": WORK, "depends_on": ["a"]},
        ],
    )
    start_run(conn, "dag", input={}, queue_anyway=True)
    ids = dict(_rows(conn, "SELECT key, id FROM rara_steps"))
    assert _rows(conn, "SELECT rara_end_unblock(%s)", [ids["a"]]) == [([],)]
    assert _rows(conn, "SELECT key, status::text, pending_deps FROM rara_steps"
                 " WHERE key IN ('ab', 'after_a') ORDER BY key") == [
        ("ab", "blocked", 1),
        ("after_a", "ready", 0),
    ]  # fmt: skip


def _expire_all(conn: psycopg.Connection[Any]) -> None:
    """The running leases expired at once (confirmed after the database's return: no grace)."""
    conn.execute("UPDATE rara_steps SET lease_expires_at = heartbeat_at WHERE status = 'running'")


def test_one_caller_a_second_is_given_the_reaper_s_turn(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _ready(conn, A, 4)
    lease_now(conn, [WORK], worker="w", limit=4)
    _expire_all(conn)
    reap = "SELECT id FROM rara_step_reap_expired(%s, 10, 0)"
    with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
        # the first's turn, not yet committed: the second does not wait, and is not given it
        assert len(first.execute(reap, ("first",)).fetchall()) == 4
        assert second.execute("SELECT rara_reap_turn('second')").fetchall() == [(False,)]
        second.rollback()
        first.commit()
        # committed: the second, in the same second, is told it is not its turn
        assert second.execute("SELECT rara_reap_turn('second')").fetchall() == [(False,)]
    assert _rows(conn, "SELECT taken_by FROM rara_reaper_turn") == [("first",)]
    # a second later (here: the turn dated back), the next caller takes it
    _ready(conn, B, 4)  # (A's reaped steps wait out their retry's backoff)
    assert len(lease_now(conn, [WORK], worker="w", limit=4)) == 4
    _expire_all(conn)
    assert _rows(conn, reap, "second") == []  # not its turn yet: nothing reaped
    conn.execute("UPDATE rara_reaper_turn SET taken_at = taken_at - interval '1 s'")
    assert len(_rows(conn, reap, "second")) == 4
    assert _rows(conn, "SELECT taken_by FROM rara_reaper_turn") == [("second",)]


def test_a_full_batch_hands_the_reaper_s_turn_back(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 5)
    lease_now(conn, [WORK], worker="w", limit=5)
    _expire_all(conn)
    reap = "SELECT id FROM rara_step_reap_expired('w', 3, 0)"
    assert len(_rows(conn, reap)) == 3  # full: more may wait, the turn is free again
    assert len(_rows(conn, reap)) == 2  # not full: the turn is kept for the second
    assert _rows(conn, "SELECT rara_reap_turn('other')") == [(False,)]
