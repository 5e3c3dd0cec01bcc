"""Releases (migration 0022, db/functions/releases.sql, docs/releases.md): a succeeded run's
artifacts and results promoted as NAME@1, @2…, never changed; the current pointer moved by
promotes and rollbacks, every move recorded; numbers without gaps under concurrent promotes;
refusals that name what is wrong and write nothing; a name bound to its first release's
definition, and a gated definition's runs released only past an approved gate; namespaces
kept apart by PostgreSQL; and GC keeps a released blob after its run is pruned. Real runs on
real workers throughout."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara import waits
from rara.artifacts.gc import collect_garbage
from rara.artifacts.store import LocalArtifactStore
from rara.errors import InputInvalid, NotFound
from rara.pg import retention
from rara.releases import get_release, list_releases, promote, release_history, rollback
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run, waiting_of
from tests.support.waiting import wait_until

Conn = psycopg.Connection[Any]
RELEASE_TABLES = (
    "rara_releases",
    "rara_release_artifacts",
    "rara_release_current",
    "rara_release_moves",
)
PIPELINE: list[dict[str, Any]] = [
    {"key": "collect", "capability": "test.produce@1", "input": {"text": "alpha"}},
    {
        "key": "index",
        "capability": "test.produce@1",
        "input": {"text": "beta"},
        "dependsOn": ["collect"],
    },
]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _succeeded_run(conn: Conn, name: str = "refresh", namespace: str = "default") -> int:
    run_id = start_run(conn, name, namespace=namespace, queue_anyway=True).run_id
    wait_run(conn, run_id, status="succeeded")
    return run_id


@pytest.fixture
def runs(conn: Conn, thread_worker: Callable[..., Any]) -> list[int]:
    """Two succeeded runs of `refresh` (collect → index), each producing corpus.txt per step."""
    thread_worker()
    apply(conn, "refresh", PIPELINE)
    return [_succeeded_run(conn), _succeeded_run(conn)]


def _counts(conn: Conn) -> dict[str, int]:
    return {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
        for t in RELEASE_TABLES
    }


def test_a_promoted_run_is_read_by_name_by_number_and_as_current(
    conn: Conn, runs: list[int]
) -> None:
    first = promote(conn, "index", runs[0], note="nightly", namespace="default")
    assert (first.number, first.current, first.run_id, first.note) == (1, True, runs[0], "nightly")
    # By default every artifact of the run's succeeded attempts and every step's result.
    assert [(a.step_key, a.name, a.digest, a.size, a.media_type) for a in first.artifacts] == [
        ("collect", "corpus.txt", _digest(b"alpha"), 5, "text/plain"),
        ("index", "corpus.txt", _digest(b"beta"), 4, "text/plain"),
    ]
    assert first.results == {
        "collect": {"digest": _digest(b"alpha")},
        "index": {"digest": _digest(b"beta")},
    }
    assert (first.definition, first.definition_version) == ("refresh", 1)
    assert first.promoted_by == conn.info.user

    second = promote(
        conn,
        "index",
        runs[1],
        artifacts=["index/corpus.txt"],
        results=["collect"],
        namespace="default",
    )
    assert second.number == 2
    assert [(a.step_key, a.name) for a in second.artifacts] == [("index", "corpus.txt")]
    assert second.results == {"collect": {"digest": _digest(b"alpha")}}
    # An empty choice is none (None is every one).
    third = promote(conn, "index", runs[1], artifacts=[], results=[], namespace="default")
    assert (third.number, third.artifacts, third.results) == (3, [], {})

    assert get_release(conn, "index", namespace="default").number == 3
    again = get_release(conn, "index", 1, namespace="default")
    assert again.artifacts == first.artifacts
    assert again.results == first.results
    assert not again.current
    listed = list_releases(conn, namespace="default")
    assert [(r.name, r.number, r.current, r.artifacts) for r in listed] == [
        ("index", 3, True, 0),
        ("index", 2, False, 1),
        ("index", 1, False, 2),
    ]
    # Another name numbers from 1 on its own.
    assert promote(conn, "adapter", runs[0], namespace="default").number == 1


def test_rollback_goes_back_a_promote_at_a_time_and_history_records_every_move(
    conn: Conn, runs: list[int]
) -> None:
    for _ in range(3):
        promote(conn, "index", runs[0], namespace="default")
    moved = rollback(conn, "index", reason="bad recall", namespace="default")
    assert (moved.from_number, moved.to_number) == (3, 2)
    # Again: further back, not to and fro.
    assert rollback(conn, "index", namespace="default").to_number == 1
    with pytest.raises(InputInvalid, match="index@1 was the first release of index"):
        rollback(conn, "index", namespace="default")
    # A promote from 1 replaces 1: rolling it back returns to 1, not to 3.
    assert promote(conn, "index", runs[1], namespace="default").number == 4
    assert rollback(conn, "index", namespace="default").to_number == 1
    assert rollback(conn, "index", 3, namespace="default").to_number == 3
    assert get_release(conn, "index", namespace="default").number == 3
    with pytest.raises(NotFound, match=r"no release index@9 in namespace default \(the newest"):
        rollback(conn, "index", 9, namespace="default")
    with pytest.raises(InputInvalid, match="index@3 is current already"):
        rollback(conn, "index", 3, namespace="default")
    with pytest.raises(NotFound, match="no release other in namespace default"):
        rollback(conn, "other", namespace="default")

    moves = release_history(conn, "index", namespace="default")
    assert [(m.action, m.from_number, m.to_number, m.reason) for m in moves] == [
        ("promote", None, 1, None),
        ("promote", 1, 2, None),
        ("promote", 2, 3, None),
        ("rollback", 3, 2, "bad recall"),
        ("rollback", 2, 1, None),
        ("promote", 1, 4, None),
        ("rollback", 4, 1, None),
        ("rollback", 1, 3, None),
    ]
    assert {m.moved_by for m in moves} == {conn.info.user}


def test_releases_and_their_history_refuse_every_change_even_the_owners(
    conn: Conn, runs: list[int], role_url: Callable[[str], str]
) -> None:
    promote(conn, "index", runs[0], namespace="default")
    promote(conn, "index", runs[1], namespace="default")
    rollback(conn, "index", namespace="default")
    before = _counts(conn), get_release(conn, "index", 2, namespace="default")
    owner_changes = (
        "UPDATE rara_releases SET note = 'rewritten'",
        "UPDATE rara_releases SET run_id = run_id + 1",
        "DELETE FROM rara_releases WHERE number = 2",
        "UPDATE rara_release_artifacts SET digest = digest",
        "DELETE FROM rara_release_artifacts",
        "UPDATE rara_release_moves SET reason = 'forgotten'",
        "DELETE FROM rara_release_moves",
        "TRUNCATE rara_releases CASCADE",
        "TRUNCATE rara_release_artifacts",
        "TRUNCATE rara_release_moves",
    )
    for statement in owner_changes:
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
            conn.execute(statement)
    # The roles the application uses hold no write on any of the tables at all.
    for group in ("rara_client", "rara_operator", "rara_worker", "rara_reader"):
        with psycopg.connect(role_url(group), autocommit=True) as login:
            for statement in (
                *owner_changes[:7],
                "UPDATE rara_release_current SET number = 1",
                "DELETE FROM rara_release_current",
                "INSERT INTO rara_release_moves (namespace, name, action, to_number) "
                "VALUES ('default', 'index', 'rollback', 1)",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    login.execute(statement)
            # ... and read them.
            assert len(list_releases(login, "index", namespace="default")) == 2
    assert (_counts(conn), get_release(conn, "index", 2, namespace="default")) == before


def test_concurrent_promotes_number_one_to_eight_without_gaps(
    conn: Conn, runs: list[int], role_url: Callable[[str], str]
) -> None:
    url = role_url("rara_client")
    start = threading.Barrier(8)
    numbers: list[int] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with psycopg.connect(url, autocommit=True) as c:
                start.wait()
                numbers.append(promote(c, "index", runs[i % 2], namespace="default").number)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(numbers) == list(range(1, 9))
    assert get_release(conn, "index", namespace="default").number == 8
    moves = release_history(conn, "index", namespace="default")
    # Each promote replaced the one before it: one chain, in number order.
    assert [(m.from_number, m.to_number) for m in moves] == [
        (None if n == 1 else n - 1, n) for n in range(1, 9)
    ]


def test_every_bad_promote_is_refused_naming_what_is_wrong_and_writes_nothing(
    conn: Conn, runs: list[int], thread_worker: Callable[..., Any]
) -> None:
    apply(conn, "broken", [{"key": "a", "capability": "test.fail@1", "retry": {"maxAttempts": 1}}])
    failed = start_run(conn, "broken", queue_anyway=True).run_id
    wait_run(conn, failed, status="failed")
    apply(conn, "waiting", [{"key": "a", "capability": "nobody.serves@1"}])
    pending = start_run(conn, "waiting", queue_anyway=True).run_id
    before = _counts(conn)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"run_id": 999}, NotFound, "no run 999 in namespace default"),
        ({"run_id": failed}, InputInvalid, f"run {failed} is failed: only a succeeded run"),
        ({"run_id": pending}, InputInvalid, f"run {pending} is pending: only a succeeded run"),
        (
            {"artifacts": ["collect/corpus.txt", "collect/nope.bin", "model"]},
            InputInvalid,
            f"run {runs[0]} has no artifact 'collect/nope.bin', 'model'",
        ),
        ({"results": ["index", "train"]}, InputInvalid, "has no succeeded step 'train'"),
        ({"name": "Bad_Name"}, InputInvalid, "release name 'Bad_Name' is not a name"),
        ({"name": "index@2"}, InputInvalid, "release name 'index@2' is not a name"),
        ({"note": "x" * 4001}, InputInvalid, "at most 4000 characters, not 4001"),
        ({"namespace": "team-z", "run_id": runs[0]}, NotFound, "no run .* in namespace team-z"),
    ]
    for change, error, message in cases:
        args: dict[str, Any] = {"name": "index", "run_id": runs[0], "namespace": "default"}
        args.update(change)
        with pytest.raises(error, match=message):
            promote(
                conn,
                args.pop("name"),
                args.pop("run_id"),
                namespace=args.pop("namespace"),
                **args,
            )
        assert _counts(conn) == before, change
    with pytest.raises(NotFound, match="no release index"):
        get_release(conn, "index", namespace="default")
    with pytest.raises(NotFound, match="no release index"):
        release_history(conn, "index", namespace="default")


GATED: list[dict[str, Any]] = [
    *PIPELINE,
    {"key": "release", "dependsOn": ["index"], "approval": {}},
]


def _gated_run(conn: Conn, *, approve: bool = True) -> int:
    """A run of `gated` (PIPELINE, then the approval gate `release`), decided as asked."""
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    wait_until(lambda: waiting_of(conn, run_id) == ["release"], message="the gate waits")
    waits.decide(conn, run_id, "release", approve=approve, reason="checked")
    wait_run(conn, run_id, status="succeeded" if approve else "failed")
    return run_id


def test_a_release_name_takes_runs_of_its_first_releases_definition_only(
    conn: Conn, runs: list[int]
) -> None:
    apply(conn, "other", [{"key": "collect", "capability": "test.noop@1"}])
    other = _succeeded_run(conn, "other")
    promote(conn, "index", runs[0], namespace="default")
    before = _counts(conn)
    with pytest.raises(
        InputInvalid,
        match=rf"release index is of definition refresh: run {other} is of definition other "
        r"\(a release name is bound",
    ):
        promote(conn, "index", other, namespace="default")
    assert _counts(conn) == before
    # A new version of the same definition is the same definition; another name binds anew.
    apply(conn, "refresh", [*PIPELINE, {"key": "extra", "capability": "test.noop@1"}])
    assert promote(conn, "index", _succeeded_run(conn), namespace="default").number == 2
    assert promote(conn, "other-index", other, namespace="default").number == 1


def test_a_gated_definitions_run_is_released_only_past_an_approved_gate(
    conn: Conn, thread_worker: Callable[..., Any]
) -> None:
    thread_worker()
    apply(conn, "gated", GATED)
    approved = _gated_run(conn)
    assert promote(conn, "index", approved, namespace="default").number == 1
    # A version without the gate is no way round it, neither for the bound name nor a new one.
    apply(conn, "gated", PIPELINE)
    ungated = _succeeded_run(conn, "gated")
    before = _counts(conn)
    for name in ("index", "fresh"):
        with pytest.raises(
            InputInvalid,
            match=rf"definition gated has an approval gate and run {ungated} \(version 2\) has "
            "none: only a run whose approval gate was approved can be released",
        ):
            promote(conn, name, ungated, namespace="default")
    assert _counts(conn) == before
    # A run whose gate was never approved (its decision forged in the table by the owner: no
    # function lets a gated run succeed otherwise) is refused, naming the gate.
    conn.execute("UPDATE rara_approvals SET decision = 'rejected' WHERE run_id = %s", (approved,))
    with pytest.raises(
        InputInvalid, match=rf"run {approved} was not approved at gate release \(rejected\): "
    ):
        promote(conn, "index", approved, namespace="default")
    assert _counts(conn) == before


def test_a_teams_login_reads_and_promotes_only_its_own_namespaces_releases(
    conn: Conn, thread_worker: Callable[..., Any], role_url: Callable[[str], str]
) -> None:
    thread_worker()
    run_of = {}
    for ns in ("team-a", "team-b"):
        apply(conn, "refresh", PIPELINE, namespace=ns)
        run_of[ns] = _succeeded_run(conn, namespace=ns)
        promote(conn, "index", run_of[ns], namespace=ns)
    logins = {}
    for ns in ("team-a", "team-b"):
        for group in ("rara_client", "rara_reader"):
            url = role_url(group)
            user = str(psycopg.conninfo.conninfo_to_dict(url)["user"])
            conn.execute(
                "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)", (user, ns)
            )
            logins[ns, group] = psycopg.connect(url, autocommit=True)
    conn.execute("SELECT rara_namespace_isolation(true)")
    try:
        a, a_reader = logins["team-a", "rara_client"], logins["team-a", "rara_reader"]
        assert promote(a, "index", run_of["team-a"], namespace="team-a").number == 2
        before = _counts(conn)
        # Another team's run is no run here; another team's namespace is not this login's.
        with pytest.raises(NotFound, match=f"no run {run_of['team-b']} in namespace team-a"):
            promote(a, "index", run_of["team-b"], namespace="team-a")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="namespace team-b"):
            promote(a, "index", run_of["team-b"], namespace="team-b")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="namespace team-b"):
            rollback(a, "index", 1, namespace="team-b")
        assert _counts(conn) == before
        # Reads: exactly its own rows of every release table, the blobs of its releases.
        for login in (a, a_reader):
            assert [(r.namespace, r.number) for r in list_releases(login, namespace=None)] == [
                ("team-a", 2),
                ("team-a", 1),
            ]
            with pytest.raises(NotFound, match="no release team-b/index"):
                get_release(login, "index", namespace="team-b")
            for table in RELEASE_TABLES:
                [[seen]] = login.execute(f"SELECT count(*) FROM {table}").fetchall()
                [[own]] = conn.execute(
                    f"SELECT count(*) FROM {table} t WHERE "
                    + (
                        "(SELECT r.namespace FROM rara_releases r WHERE r.id = t.release_id)"
                        if table == "rara_release_artifacts"
                        else "t.namespace"
                    )
                    + " = 'team-a'"
                ).fetchall()
                assert seen == own > 0, table
        # A reader cannot promote at all.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            promote(a_reader, "index", run_of["team-a"], namespace="team-a")
        # The other team still sees its own.
        b = logins["team-b", "rara_client"]
        assert get_release(b, "index", namespace="team-b").run_id == run_of["team-b"]
    finally:
        for c in logins.values():
            c.close()


def test_gc_keeps_a_released_blob_after_its_run_is_pruned(
    conn: Conn, thread_worker: Callable[..., Any], tmp_path: Path
) -> None:
    thread_worker()
    apply(conn, "refresh", PIPELINE)
    apply(conn, "other", [{"key": "a", "capability": "test.produce@1", "input": {"text": "gamma"}}])
    released, unreleased = _succeeded_run(conn), _succeeded_run(conn, "other")
    promote(conn, "index", released, artifacts=["collect/corpus.txt"], namespace="default")
    conn.execute(
        "UPDATE rara_runs SET finished_at = finished_at - interval '40 days' WHERE id = ANY(%s)",
        ([released, unreleased],),
    )
    pruned = retention.prune(conn, before=retention.horizon(conn, timedelta(days=30)), batch=100)
    assert pruned.runs == 2
    assert conn.execute("SELECT count(*) FROM rara_step_artifacts").fetchone() == (0,)

    store = LocalArtifactStore(tmp_path / "artifacts")  # the thread worker's store
    report = collect_garbage(conn, store, grace_seconds=0)
    assert sorted(report.deleted) == sorted([_digest(b"beta"), _digest(b"gamma")])
    assert store.get_bytes(_digest(b"alpha")) == b"alpha"
    assert conn.execute("SELECT digest FROM rara_artifacts ORDER BY digest").fetchall() == [
        (_digest(b"alpha"),)
    ]
    # The release still reads whole, its run gone.
    release = get_release(conn, "index", namespace="default")
    assert (release.run_id, [a.digest for a in release.artifacts]) == (
        released,
        [_digest(b"alpha")],
    )
