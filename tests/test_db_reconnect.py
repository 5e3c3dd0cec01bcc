"""Back on the database within seconds of an outage's end (issue 30): the operator's pool and
the dashboard's (its pool and its LISTEN hub), against a PostgreSQL of the test's own that is
stopped for OUTAGE seconds and started again on the same port (rara.pg.reconnect).

Each is probed as it is used: the operator's pool as a kopf handler does
(rara.operator.runtime.connection: a connection, else try again after DB_RETRY_SECONDS), the
dashboard through its /readyz (a read on its pool) and its hub's listening connection. Before
the bound, psycopg_pool's uncapped back-off (1, 2, 4, 8, 16 s …) made the operator's first
attempt after a 20 s outage come ~11 s after the database was back; the hub's capped at 10 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg_pool import PoolTimeout
from starlette.testclient import TestClient

from rara.operator.runtime import DB_RETRY_SECONDS, open_pool
from rara.pg.embedded import EmbeddedPostgres, temporary_server
from rara.ui.app import UiConfig, create_app
from tests.support.waiting import wait_until

OUTAGE = 20.0  # seconds the database is down
BACK_WITHIN = 2.0  # the bound (rara.pg.reconnect)
SLACK = 1.0  # a loaded, shared test machine's scheduling


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    """A server of this test's own: stopping it must not touch the session's."""
    server = temporary_server(fast=True)
    server.up()
    try:
        yield server
    finally:
        server.destroy()


class Probe:
    """``attempt`` over and over in a thread: when it first worked after it first failed."""

    def __init__(self, attempt: Callable[[], bool]) -> None:
        self.attempt = attempt
        self.failed_at: float | None = None
        self.back_at: float | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            ok = self.attempt()
            now = time.monotonic()
            if not ok and self.failed_at is None:
                self.failed_at = now
            if ok and self.failed_at is not None and self.back_at is None:
                self.back_at = now
                return
            time.sleep(0.05)

    def is_back(self) -> bool:
        return self.back_at is not None

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)


@pytest.mark.timeout(180)
def test_the_operator_and_the_dashboard_are_back_within_seconds_of_the_database(
    own_server: EmbeddedPostgres,
) -> None:
    url = own_server.url()
    pool = open_pool(url, 2)
    app = create_app(UiConfig(url, live_interval=0.5))

    def operator_handler() -> bool:
        try:
            with pool.connection() as conn:
                conn.execute("SELECT 1")
            return True
        except (psycopg.OperationalError, PoolTimeout):
            time.sleep(DB_RETRY_SECONDS)  # kopf.TemporaryError(delay=DB_RETRY_SECONDS)
            return False

    try:
        with TestClient(app, raise_server_exceptions=False) as ui:
            hub = app.state.hub
            assert ui.get("/readyz").status_code == 200
            wait_until(hub.listening.is_set, timeout=30, message="the hub listening")
            operator_handler()
            probes = {
                "operator pool": Probe(operator_handler),
                "dashboard /readyz": Probe(lambda: ui.get("/readyz").status_code == 200),
                "dashboard hub": Probe(hub.listening.is_set),
            }
            try:
                own_server.restart(down_for=OUTAGE)
                returned_at = time.monotonic()  # pg_ctl start -w: accepting connections
                for name, probe in probes.items():
                    wait_until(probe.is_back, timeout=60, message=f"{name} back")
            finally:
                for probe in probes.values():
                    probe.stop()
    finally:
        pool.close()

    back = {name: (p.back_at or 0.0) - returned_at for name, p in probes.items()}
    print(
        "after a {:.0f} s outage, back (s after the database): {}".format(
            OUTAGE, ", ".join(f"{name} {seconds:.2f}" for name, seconds in back.items())
        )
    )
    for name, probe in probes.items():
        assert probe.failed_at is not None, f"{name} never saw the outage"
    for name, seconds in back.items():
        assert seconds <= BACK_WITHIN + SLACK, f"{name} back {seconds:.2f} s after the database"
