"""Fair share between namespaces at lease time (migration 0019; docs/namespaces.md, "Fair
share"): the lease shares its slots between the namespaces with ready steps by weight, a
namespace's quotas cap what it runs, and neither needs a scheduler process — real leases on a
real PostgreSQL, as workers take them."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

from rara.pg import limits
from rara.pg.queries import many
from rara.pg.runs import enqueue_many
from rara.worker.lease_cursor import LeaseCursors
from rara.worker.store import LEASED
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply
from tests.support.leasing import lease_concurrently, lease_now

A, B, C = "team-a", "team-b", "team-c"


def _ready(
    conn: psycopg.Connection[Any],
    namespace: str,
    runs: int,
    capability: str = "work@1",
    priority: int = 0,
) -> list[int]:
    """``runs`` one-step runs of ``capability`` in ``namespace``, ready at once."""
    name = f"work-{capability.replace('@', '-').replace('.', '-')}"
    apply(conn, name, [{"key": "s", "capability": capability}], namespace=namespace)
    return enqueue_many(
        conn,
        definition=name,
        version=None,
        runs=runs,
        steps=1,
        key="s",
        capability=capability,
        priority=priority,
        namespace=namespace,
    )


def _running(conn: psycopg.Connection[Any], namespace: str, capability: str | None = None) -> int:
    [(n,)] = conn.execute(
        "SELECT count(*) FROM rara_steps WHERE status = 'running' AND namespace = %s"
        " AND (%s::text IS NULL OR capability = %s)",
        (namespace, capability, capability),
    ).fetchall()
    return int(n)


def test_a_namespace_started_behind_a_backlog_is_served_at_once(
    conn: psycopg.Connection[Any],
) -> None:
    _ready(conn, A, 2000)
    _ready(conn, B, 1)  # after A's 2,000: last in the old single order
    leased = lease_now(conn, ["work@1"], worker="w", limit=20)
    # Each of the 20 slots is B's with probability 1/2 while B has a step: missed by all 20
    # once in a million.
    assert Counter(s.namespace for s in leased) == {A: 19, B: 1}


def test_busy_namespaces_split_the_leases_by_weight(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 1500)
    _ready(conn, B, 1500)
    _ready(conn, C, 1500)
    limits.set_share(conn, B, 3)  # A and C: 1 each, unset
    leased: Counter[str] = Counter()
    for _ in range(100):
        leased.update(s.namespace for s in lease_now(conn, ["work@1"], worker="w", limit=10))
    assert sum(leased.values()) == 1000
    # Expected 200 / 600 / 200; one standard deviation of B's share is 1.5 points.
    assert leased[B] / 1000 == pytest.approx(0.6, abs=0.06)
    assert leased[A] / 1000 == pytest.approx(0.2, abs=0.05)
    assert leased[C] / 1000 == pytest.approx(0.2, abs=0.05)


def test_an_idle_namespace_leaves_its_share_to_the_busy(conn: psycopg.Connection[Any]) -> None:
    """A namespace whose lane ran dry (or never had a ready step) takes no slot from the
    others: its draw falls to them in the same lease."""
    _ready(conn, A, 50)
    _ready(conn, B, 2)
    limits.set_share(conn, B, 100)
    leased = lease_now(conn, ["work@1"], worker="w", limit=30)
    assert Counter(s.namespace for s in leased) == {A: 28, B: 2}
    assert len(lease_now(conn, ["work@1"], worker="w", limit=30)) == 22
    assert lease_now(conn, ["work@1"], worker="w", limit=30) == []


def test_priority_orders_steps_within_a_namespace(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 5, priority=0)
    [urgent] = _ready(conn, A, 1, priority=10)
    [first] = lease_now(conn, ["work@1"], worker="w", limit=1)
    assert (first.run_id, first.namespace) == (urgent, A)


def test_a_lease_passes_by_the_namespaces_it_is_told_to(conn: psycopg.Connection[Any]) -> None:
    # A held-back slot's lease (rara.worker.runner, WorkerSettings.held_back_slots): whatever
    # the draw picks, the passed namespaces' lanes give nothing, and the others fill the lease.
    _ready(conn, A, 200)
    _ready(conn, B, 3)
    _ready(conn, C, 3)
    leased = lease_now(conn, ["work@1"], worker="w", limit=10, passing=[A])
    assert Counter(s.namespace for s in leased) == {B: 3, C: 3}
    assert lease_now(conn, ["work@1"], worker="w", limit=10, passing=[A, B, C]) == []
    # With one lane in all (the draw skipped), passed by
    _ready(conn, A, 1, "solo@1")
    assert lease_now(conn, ["solo@1"], worker="w", limit=1, passing=[A]) == []
    [solo] = lease_now(conn, ["solo@1"], worker="w", limit=1, passing=[B])
    assert solo.namespace == A


def test_a_lease_passing_namespaces_by_serves_the_others_by_weight(
    conn: psycopg.Connection[Any],
) -> None:
    _ready(conn, A, 100)
    _ready(conn, B, 300)
    _ready(conn, C, 300)
    limits.set_share(conn, C, 3)
    leased = Counter(
        s.namespace
        for _ in range(200)
        for s in lease_now(conn, ["work@1"], worker="w", limit=1, passing=[A])
    )
    assert leased[A] == 0
    # The walk starts in a lane drawn by weight and goes on in namespace order: B's odds are
    # its own 1/5 and passed A's 1/5 before it — 0.4; one standard deviation is 3.5 points.
    assert leased[B] / 200 == pytest.approx(0.4, abs=0.12)


def test_quotas_cap_a_namespace_per_capability_and_in_all(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _ready(conn, A, 10, "gpu@1")
    _ready(conn, A, 10, "cpu@1")
    _ready(conn, B, 10, "gpu@1")
    limits.set_quota(conn, A, "gpu@1", 2)
    limits.set_quota(conn, A, limits.EVERY_CAPABILITY, 3)
    leased = lease_now(conn, ["gpu@1", "cpu@1"], worker="w", limit=40)
    by = Counter((s.namespace, s.capability) for s in leased)
    assert by[A, "gpu@1"] <= 2
    assert by[A, "gpu@1"] + by[A, "cpu@1"] == 3  # A's quota in all
    assert by[B, "gpu@1"] == 10  # what A may not take, B does
    assert lease_now(conn, ["gpu@1", "cpu@1"], worker="w", limit=40) == []
    _end(database_url, _won(next(s for s in leased if s.namespace == A)))  # a slot of A frees
    [again] = lease_now(conn, ["gpu@1", "cpu@1"], worker="w", limit=40)
    assert again.namespace == A
    limits.set_quota(conn, A, limits.EVERY_CAPABILITY, None)
    limits.set_quota(conn, A, "gpu@1", 0)  # paused in A: the rest of cpu@1 only
    rest = lease_now(conn, ["gpu@1", "cpu@1"], worker="w", limit=40)
    assert {(s.namespace, s.capability) for s in rest} == {(A, "cpu@1")}
    assert [(q.namespace, q.capability, q.max_running) for q in limits.list_quotas(conn)] == [
        (A, "gpu@1", 0)
    ]


def test_concurrent_leasers_never_exceed_a_quota(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _ready(conn, A, 40)
    _ready(conn, B, 40)
    limits.set_quota(conn, A, "work@1", 5)
    limits.set_limit(conn, "work@1", 20)  # the fleet's limit shared by both, too
    lease_concurrently(database_url, ["work@1"], leasers=8, rounds=5, limit=3)
    assert _running(conn, A) == 5
    assert _running(conn, A) + _running(conn, B) == 20


def test_a_limit_shared_by_namespaces_goes_by_weight(conn: psycopg.Connection[Any]) -> None:
    """The fleet's limit on a capability is taken by weight too, not by which namespace's
    steps are older."""
    counts: Counter[str] = Counter()
    for round_ in range(40):
        conn.execute("DELETE FROM rara_runs")  # steps and attempts go with their runs
        _ready(conn, A, 10)
        _ready(conn, B, 10)
        limits.set_share(conn, B, 4)
        limits.set_limit(conn, "work@1", 1)
        counts.update(s.namespace for s in lease_now(conn, ["work@1"], worker="w", limit=10))
        assert sum(counts.values()) == round_ + 1
    assert counts[B] / 40 == pytest.approx(0.8, abs=0.2)


def test_the_worker_resumes_each_lane_after_its_cursor(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, A, 6)
    _ready(conn, B, 6)
    cursors = LeaseCursors()
    seen: list[int] = []
    for _ in range(6):
        after = cursors.after([("work@1", "inprocess")], from_start=False)
        leased = many(
            conn,
            "step_lease",
            LEASED,
            limit=2,
            worker="w",
            lease_seconds=30,
            except_namespaces=None,
            **after,
        )
        cursors.advance(leased)
        seen += [s.id for s in leased]
    assert len(seen) == len(set(seen)) == 12
    after = cursors.after([("work@1", "inprocess")], from_start=False)
    assert sorted(after["after_namespaces"]) == [A, B]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: limits.set_share(c, A, 0), "rara_namespace_shares_weight_check"),
        (lambda c: limits.set_share(c, "Team_A", 2), "rara_namespace_shares_namespace_check"),
        (lambda c: limits.set_quota(c, A, "gpu", 1), "rara_namespace_quotas_capability_check"),
        (lambda c: limits.set_quota(c, A, "*", -1), "rara_namespace_quotas_max_running_check"),
    ],
)
def test_bad_weights_and_quotas_are_refused_naming_the_field(
    conn: psycopg.Connection[Any], call: Any, message: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match=message):
        call(conn)
    assert limits.list_shares(conn) == []
    assert limits.list_quotas(conn) == []


def test_only_the_fleet_sets_weights_and_quotas(
    conn: psycopg.Connection[Any], role_url: Any
) -> None:
    """A team must not raise its own share: weights and quotas need every namespace, as the
    capability limits do."""
    conn.execute("INSERT INTO rara_namespace_access (role, namespace) VALUES ('team_a', %s)", (A,))
    with psycopg.connect(role_url("rara_client"), autocommit=True) as client:
        limits.set_share(client, A, 2)  # not isolated: every role acts everywhere
        conn.execute("SELECT rara_namespace_isolation(true)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="whole fleet"):
            limits.set_share(client, A, 5)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="whole fleet"):
            limits.set_quota(client, A, "*", 100)
        # and reads see only the caller's namespaces: none here
        assert limits.list_shares(client) == []
    assert [(s.namespace, s.weight) for s in limits.list_shares(conn)] == [(A, 2)]
    with psycopg.connect(role_url("rara_operator"), autocommit=True) as operator:
        limits.set_quota(operator, A, "*", 100)
        assert [q.max_running for q in limits.list_quotas(operator)] == [100]


def _layout(
    conn: psycopg.Connection[Any], capability: str = "work@1"
) -> list[tuple[str, int, float]]:
    return [
        (n, w, low)
        for n, w, low in conn.execute(
            "SELECT namespace, weight, low FROM rara_lanes WHERE capability = %s"
            " ORDER BY namespace",
            (capability,),
        ).fetchall()
    ]


def test_the_lanes_tile_the_draw_by_weight(conn: psycopg.Connection[Any]) -> None:
    """Each lane of a pair holds an interval of [0, Σ weights) as long as its namespace's
    weight, in namespace order: the lease draws a lane with one index probe."""
    limits.set_share(conn, B, 3)  # before B has a lane: applied when it gets one
    _ready(conn, B, 1)
    _ready(conn, A, 1)
    assert _layout(conn) == [(A, 1, 0.0), (B, 3, 1.0)]
    _ready(conn, C, 1)
    limits.set_share(conn, A, 2)
    assert _layout(conn) == [(A, 2, 0.0), (B, 3, 2.0), (C, 1, 5.0)]
    limits.set_share(conn, B, None)
    assert _layout(conn) == [(A, 2, 0.0), (B, 1, 2.0), (C, 1, 3.0)]


def test_namespaces_starting_at_once_each_get_their_lane(database_url: str) -> None:
    """New lanes added by concurrent starts take turns laying the pair out: the intervals
    end up tiling it, none lost or overlapping."""
    names = [f"team-{i}" for i in range(8)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in names:  # the definitions first: the starts race on the lanes alone
            apply(conn, "work-work-1", [{"key": "s", "capability": "work@1"}], namespace=name)
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def begin(namespace: str) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as mine:
                start.wait()
                enqueue_many(
                    mine,
                    definition="work-work-1",
                    version=None,
                    runs=3,
                    steps=1,
                    key="s",
                    capability="work@1",
                    namespace=namespace,
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=begin, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _layout(conn) == [(n, 1, float(i)) for i, n in enumerate(sorted(names))]
        assert len(lease_now(conn, ["work@1"], worker="w", limit=100)) == 24
