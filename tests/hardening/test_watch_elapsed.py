"""`rara runs watch` times each step from the database's timestamps: a step first seen already
running shows how long it has run, not how long the view has watched it (it said 0:00:00)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rara.cli.watch import elapsed

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_running_step_counts_to_the_database_clock() -> None:
    step = {"started_at": T0, "finished_at": None}
    assert elapsed(step, T0 + timedelta(seconds=75)) == "0:01:15"
    assert elapsed(step, T0 + timedelta(hours=2, seconds=3)) == "2:00:03"


def test_finished_step_stops_at_its_end_and_waiting_step_shows_nothing() -> None:
    done = {"started_at": T0, "finished_at": T0 + timedelta(seconds=9.7)}
    assert elapsed(done, T0 + timedelta(days=1)) == "0:00:09"
    assert elapsed({"started_at": None, "finished_at": None}, T0) == ""
    # A viewer's clock behind the database's never shows negative time.
    assert elapsed({"started_at": T0, "finished_at": None}, T0 - timedelta(seconds=3)) == "0:00:00"
