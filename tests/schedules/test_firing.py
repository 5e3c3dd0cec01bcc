"""Firing against a real PostgreSQL: exactly one run per tick, missed ticks, the concurrency
policies, backfill, trigger, pause and resume. Runs as a rara_client login (what `rara
schedules run` uses), so the grants are what is tested too."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from rara.errors import InputInvalid, NotFound
from rara.pg import schedules as schedule_sql
from rara.schedules import firing, manage
from rara.schedules.model import schedule_from_object
from tests.schedules.conftest import MakeSchedule, rewind
from tests.support.waiting import wait_until


@pytest.fixture
def client(role_url: Callable[[str], str]) -> Any:
    with psycopg.connect(role_url("rara_client"), autocommit=True) as conn:
        yield conn


def _runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    return conn.execute(
        "SELECT id, idempotency_key, status::text FROM rara_runs ORDER BY id"
    ).fetchall()


def test_due_ticks_fire_once_and_the_schedule_moves_on(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(startingDeadlineSeconds=60)
    rewind(conn, name, 4)
    counts = firing.fire_due(client)
    assert counts.started >= 5  # now-4 … now
    assert firing.fire_due(client).started <= 1  # a tick may have come due meanwhile
    keys = [k for _, k, _ in _runs(conn)]
    assert len(keys) == len(set(keys))
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.next_tick > row.last_tick  # type: ignore[operator]
    assert row.last_run_id == _runs(conn)[-1][0]


def test_two_firers_in_concurrent_transactions_start_each_tick_once(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule, role_url: Any
) -> None:
    name = make_schedule(startingDeadlineSeconds=60)
    rewind(conn, name, 9)
    with psycopg.connect(role_url("rara_client"), autocommit=True) as other:
        with client.transaction():
            assert len(schedule_sql.claim(client, 10)) == 1
            assert firing.fire_due(other).schedules == 0  # skipped, not waited for
        firing.fire_due(other)
    ticks = conn.execute(
        "SELECT count(*), count(DISTINCT run_id) FROM rara_schedule_ticks WHERE schedule = %s",
        (name,),
    ).fetchone()
    assert ticks is not None
    assert ticks[0] == ticks[1] == len(_runs(conn)) >= 10


def test_ticks_past_the_deadline_are_counted_as_missed(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(startingDeadlineSeconds=5, successfulRunsHistoryLimit=100)
    rewind(conn, name, 65)
    counts = firing.fire_due(client)
    # 66 ticks (more if a second passed since the rewind); those within 5 s of now fire.
    assert counts.missed + counts.started >= 66
    assert 5 <= counts.started <= 7
    assert counts.missed >= 59
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.missed_ticks == counts.missed


def test_forbid_skips_ticks_while_the_last_run_has_not_ended(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(concurrencyPolicy="Forbid")
    rewind(conn, name, 3)
    counts = firing.fire_due(client)
    assert counts.started == 1
    assert counts.skipped >= 3
    (first,) = _runs(conn)
    # The next tick, with the run still pending: skipped, and no second run.
    wait_until(lambda: firing.fire_due(client).skipped, 5, "the next tick")
    assert _runs(conn) == [first]
    # Once it has ended, the next tick starts one.
    client.execute("SELECT rara_run_cancel(%s)", (first[0],))
    wait_until(lambda: firing.fire_due(client).started, 5, "a tick after the run ended")
    assert len(_runs(conn)) == 2


def test_replace_cancels_the_running_run_and_starts_the_tick(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(concurrencyPolicy="Replace")
    rewind(conn, name, 3)
    counts = firing.fire_due(client)
    assert (counts.started, counts.skipped) == (1, counts.skipped)  # only the newest tick
    (first,) = _runs(conn)
    wait_until(lambda: firing.fire_due(client).started, 5, "the next tick")
    runs = _runs(conn)
    assert [status for _, _, status in runs] == ["cancelled", "pending"]
    assert runs[0][0] == first[0]
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.last_run_id == runs[1][0]


def test_backfill_starts_one_run_per_tick_and_is_idempotent(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(schedule="0 * * * *", timeZone="Europe/Berlin")
    start, end = datetime(2026, 10, 24, 22, tzinfo=UTC), datetime(2026, 10, 25, 3, tzinfo=UTC)
    done = manage.backfill(client, name, start, end)
    assert [b.tick for b in done] == [start + timedelta(hours=h) for h in range(6)]
    assert all(b.created for b in done)
    again = manage.backfill(client, name, start, end)
    assert [b.run_id for b in again] == [b.run_id for b in done]
    assert not any(b.created for b in again)
    assert len(_runs(conn)) == 6


def test_backfill_is_bounded_and_never_reaches_into_the_future(
    client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(InputInvalid, match="more than 1000 ticks"):
        manage.backfill(client, name, start, start + timedelta(hours=1))
    with pytest.raises(InputInvalid, match="in the future"):
        manage.backfill(client, name, start, datetime(2999, 1, 1, tzinfo=UTC))


def test_trigger_pause_and_resume(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(schedule="0 3 * * *")
    run_id = manage.trigger(client, name)
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.last_run_id == run_id
    assert manage.set_suspended(client, name, True)
    assert not manage.set_suspended(client, name, True)
    rewind(conn, name, 3600)
    assert firing.fire_due(client).schedules == 0  # suspended: not due
    assert manage.set_suspended(client, name, False)
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.next_tick > datetime.now(UTC)  # the paused ticks are neither fired nor missed
    assert row.spec["suspend"] is False
    assert firing.fire_due(client).started == 0


def test_a_change_wakes_the_firing_loops_and_a_no_op_does_not(
    client: Any, make_schedule: MakeSchedule, role_url: Any
) -> None:
    """Apply, pause, resume and delete NOTIFY exactly when they changed a schedule
    (rara_schedule_changed): a loop sleeping to the old next tick must wake, an idle one not.
    The payload is empty: any login may LISTEN, and the name is not every login's to read."""
    name = make_schedule(schedule="0 3 * * *")
    with psycopg.connect(role_url("rara_client"), autocommit=True) as listener:
        listener.execute(f"LISTEN {firing.CHANNEL}")

        def woken_by(change: Callable[[], Any]) -> list[str]:
            change()
            # Delivered in commit order: the marker comes after whatever the change sent.
            client.execute(f"NOTIFY {firing.CHANNEL}, 'marker'")
            got = []
            for note in listener.notifies(timeout=10):
                if note.payload == "marker":
                    return got
                got.append(note.payload)
            raise AssertionError(f"no marker within 10 s (got {got})")

        row = schedule_sql.get(client, name, namespace="default")
        assert row is not None
        again = schedule_from_object(  # the stored document again: unchanged
            {
                "apiVersion": "rara.dev/v1alpha1",
                "kind": "WorkflowSchedule",
                "metadata": {"name": name},
                "spec": row.spec,
            }
        )
        assert woken_by(lambda: manage.apply_schedule(client, again)) == []
        assert woken_by(lambda: manage.set_suspended(client, name, True)) == [""]
        assert woken_by(lambda: manage.set_suspended(client, name, True)) == []
        assert woken_by(lambda: manage.set_suspended(client, name, False)) == [""]
        assert woken_by(lambda: manage.delete_schedule(client, name)) == [""]
        with pytest.raises(NotFound):
            manage.delete_schedule(client, name)


def test_the_loop_sleeps_to_the_next_tick_and_a_new_schedule_wakes_it(
    conn: psycopg.Connection[Any], make_schedule: MakeSchedule, role_url: Any
) -> None:
    make_schedule("yearly", schedule="0 0 1 1 *")
    stop = threading.Event()
    url = role_url("rara_client")
    loop = threading.Thread(target=firing.run_forever, args=(url, stop), daemon=True)
    loop.start()
    try:

        def asleep() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle'"
                " AND query LIKE '%min(next_tick)%' AND pid <> pg_backend_pid()"
            ).fetchone()
            return row is not None and row[0] == 1

        wait_until(asleep, 10, "the loop asleep (its next tick is months away)")
        make_schedule("every-second")  # its NOTIFY ends the sleep; else 300 s
        wait_until(lambda: _runs(conn), 5, "a run of the new schedule")
    finally:
        stop.set()
        conn.execute(f"NOTIFY {firing.CHANNEL}")
        loop.join(10)
    assert not loop.is_alive()


def test_history_keeps_the_newest_ended_runs_within_the_limits(
    conn: psycopg.Connection[Any], client: Any, make_schedule: MakeSchedule
) -> None:
    name = make_schedule(successfulRunsHistoryLimit=2, failedRunsHistoryLimit=1)
    rewind(conn, name, 4)
    assert firing.fire_due(client).started >= 5
    for run_id, _, _ in _runs(conn):
        client.execute("SELECT rara_run_cancel(%s)", (run_id,))  # cancelled: a failed end
    wait_until(lambda: firing.fire_due(client).started, 5, "the next tick")
    kept = conn.execute(
        "SELECT r.status::text, count(*) FROM rara_schedule_ticks t"
        " JOIN rara_runs r ON r.id = t.run_id WHERE t.schedule = %s GROUP BY 1 ORDER BY 1",
        (name,),
    ).fetchall()
    newest_cancelled = max(r for r, _, s in _runs(conn) if s == "cancelled")
    assert kept[0] == ("cancelled", 1)  # of 5 or more
    assert kept[1][0] == "pending"  # runs still going are always kept
    ticks = conn.execute(
        "SELECT run_id FROM rara_schedule_ticks WHERE schedule = %s ORDER BY tick", (name,)
    ).fetchall()
    assert ticks[0][0] == newest_cancelled  # the runs themselves stay (`rara runs prune`)
    assert len(_runs(conn)) >= 6
