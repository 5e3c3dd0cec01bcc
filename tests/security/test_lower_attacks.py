"""The lower attacks on the newer surfaces, each tried as the weakest login that could try it.

- Releases (docs/releases.md): a client login promoted any succeeded run of the namespace
  under any release name, from any definition and past no gate. Now a name is bound to the
  definition of its first release, and a gated definition's run is released only past an
  approved gate.
- Notifications (docs/least-privilege.md, "NOTIFY is a wake-up, never an authority"): any
  login may LISTEN, and rara_run said which run ended how ("run_id:status"), rara_cancel which
  step was asked to stop, rara_schedules which schedule changed, of every namespace. Now those
  payloads are empty; rara_ready and rara_queued name a capability only.
- Lease tokens in errors (docs/lease-protocol.md): a lease that broke a constraint failed
  with PostgreSQL's detail "Failing row contains (…)", the whole step row with the token just
  drawn, which the worker logs. Now the lease raises the error less the row, and every log
  line and CLI error masks such a row (rara.secrets.redact).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara import waits
from rara.errors import InputInvalid
from rara.releases import get_release, promote
from rara.runs import cancel_run
from rara.schedules.manage import apply_schedule
from rara.schedules.model import schedule_from_object
from rara.secrets import redact
from tests.support.leasing import lease_now
from tests.support.runs import define, start, wait_run, waiting_of
from tests.support.waiting import wait_until
from tests.worker.handlers import SEEN

Login = Callable[[str | None], psycopg.Connection[Any]]
Conn = psycopg.Connection[Any]


def _succeeded(conn: Conn, definition: str) -> int:
    run_id = start(conn, definition)
    wait_run(conn, run_id, status="succeeded")
    return run_id


def test_a_client_cannot_promote_another_definitions_run_under_a_bound_release_name(
    conn: Conn, thread_worker: Any, login: Login
) -> None:
    thread_worker()
    define(conn, "refresh", [{"key": "index", "capability": "test.noop@1"}])
    define(conn, "scratch", [{"key": "index", "capability": "test.noop@1"}])
    promote(conn, "rag-index", _succeeded(conn, "refresh"), namespace="default")
    scratch = _succeeded(conn, "scratch")
    client = login("rara_client")
    with pytest.raises(InputInvalid, match="release rag-index is of definition refresh"):
        promote(client, "rag-index", scratch, namespace="default")
    assert get_release(conn, "rag-index", namespace="default").number == 1


def test_a_client_cannot_release_a_gated_definitions_run_from_a_version_without_the_gate(
    conn: Conn, thread_worker: Any, login: Login
) -> None:
    thread_worker()
    work = {"key": "index", "capability": "test.noop@1"}
    define(conn, "refresh", [work, {"key": "ok", "dependsOn": ["index"], "approval": {}}])
    define(conn, "refresh", [work])  # version 2: the gate removed
    ungated = _succeeded(conn, "refresh")
    client = login("rara_client")
    with pytest.raises(InputInvalid, match="definition refresh has an approval gate"):
        promote(client, "rag-index", ungated, namespace="default")
    assert conn.execute("SELECT count(*) FROM rara_releases").fetchone() == (0,)


CHANNELS = ("rara_run", "rara_cancel", "rara_schedules", "rara_waits", "rara_ready", "rara_queued")


def test_a_login_with_no_rara_role_hears_no_run_step_or_schedule_of_any_namespace(
    conn: Conn, thread_worker: Any, login: Login
) -> None:
    stranger = login(None)
    for channel in CHANNELS:
        stranger.execute(f"LISTEN {channel}")
    thread_worker()
    define(
        conn,
        "secret-pipeline",
        [
            {"key": "s", "capability": "test.sleep@1"},
            {"key": "gate", "dependsOn": ["s"], "approval": {}},
        ],
    )
    # A run that waits for a person at its gate, then ends approved.
    gated = start(conn, "secret-pipeline", {"seconds": 0})
    wait_until(lambda: waiting_of(conn, gated) == ["gate"], message="the gate waits")
    waits.decide(conn, gated, "gate", approve=True)
    wait_run(conn, gated, status="succeeded")
    # A run cancelled while its step runs (the worker is asked to stop it).
    cancelled = start(conn, "secret-pipeline", {"seconds": 30})
    wait_until(lambda: f"{cancelled}:s" in SEEN, message="the step runs")
    assert cancel_run(conn, cancelled)
    wait_run(conn, cancelled, status="cancelled")
    # A schedule applied.
    apply_schedule(
        conn,
        schedule_from_object(
            {
                "apiVersion": "rara.dev/v1alpha1",
                "kind": "WorkflowSchedule",
                "metadata": {"name": "secret-nightly"},
                "spec": {"definition": "secret-pipeline", "schedule": "0 3 * * *"},
            }
        ),
    )
    conn.execute("NOTIFY rara_run, 'marker'")  # delivered after all of the above

    heard: list[tuple[str, str]] = []
    for note in stranger.notifies(timeout=10):
        if note.payload == "marker":
            break
        heard.append((note.channel, note.payload))
    else:
        raise AssertionError(f"no marker within 10 s (heard {heard})")
    # Each wake-up came (the run's wait, its end, the cancel, the schedule) ...
    assert {c for c, _ in heard} >= {"rara_run", "rara_cancel", "rara_schedules"}, heard
    # ... and said nothing of what it was about: no run, no step, no name.
    for channel, payload in heard:
        if channel in ("rara_ready", "rara_queued"):
            assert payload == "test.sleep@1", (channel, payload)
        else:
            assert payload == "", (channel, payload)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_a_failed_lease_names_the_broken_constraint_and_no_lease_token(
    conn: Conn, login: Login
) -> None:
    define(conn, "one", [{"key": "a", "capability": "x.y@1"}])
    run_id = start(conn, "one")
    # A ready step already out of attempts (as the owner: no function makes one) breaks
    # rara_steps_attempts_bounded when leased.
    conn.execute("ALTER TABLE rara_steps DISABLE TRIGGER USER")
    conn.execute("UPDATE rara_steps SET attempt = max_attempts WHERE run_id = %s", (run_id,))
    conn.execute("ALTER TABLE rara_steps ENABLE TRIGGER USER")
    worker = login("rara_worker")
    with pytest.raises(psycopg.errors.CheckViolation) as failed:
        lease_now(worker, ["x.y@1"], worker="w1", limit=5)
    error = failed.value
    assert error.diag.constraint_name == "rara_steps_attempts_bounded"
    assert error.diag.message_detail == "the failing row is not shown: it holds a lease token"
    said = "\n".join(filter(None, (str(error), error.diag.message_detail, error.diag.context)))
    assert UUID.search(said) is None, said
    assert conn.execute("SELECT count(*) FROM rara_attempts").fetchone() == (0,)


def test_an_error_that_prints_a_failing_row_is_logged_without_it() -> None:
    """Any other write that breaks a constraint of a row holding a token: masked when logged."""
    row = "Failing row contains (1, a, running, w1, b01ebb0a-7110-435b-ade3-808001082235)."
    assert UUID.search(redact(f"violates check constraint\nDETAIL:  {row}")) is None
