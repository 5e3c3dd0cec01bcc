"""Isolation between namespaces is on in a new database and kept as it was on an upgrade
(rara.pg.migrate; docs/namespaces.md, "Isolation"): `rara migrate` says which, `rara status`
warns while it is off, and `--isolation on|off` (the chart's `namespaces.isolation`) sets it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql
from typer.testing import CliRunner

from rara.cli.main import app
from rara.pg.migrate import migrate, migrate_database, retired
from rara.runs import start_run
from tests.support.databases import empty_database
from tests.support.definitions import apply


@pytest.fixture
def empty(pg_admin_url: str) -> Iterator[str]:
    with empty_database(pg_admin_url, f"rara_iso_{uuid.uuid4().hex[:8]}") as url:
        yield url


@pytest.fixture
def client_login(pg_admin_url: str, template_db: str) -> Iterator[str]:
    """A login in rara_client and nothing else (roles are the cluster's, made by the template's
    migration: dropped after)."""
    name = f"t_iso_client_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE rara_client").format(sql.Identifier(name))
        )
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _isolated(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT relrowsecurity FROM pg_class WHERE oid = 'rara_runs'::regclass"
        ).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_new_database_isolates_its_namespaces(
    empty: str, client_login: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Attack, as a plain rara_client login with no namespace granted: start a run in
    `default` and set the fleet's quotas. On a freshly migrated database both worked until the
    owner ran `rara access isolate`; now both are refused, naming the role."""
    with caplog.at_level(logging.INFO, logger="rara.pg.migrate"):
        migrated = migrate_database(empty)
    assert (migrated.fresh, migrated.isolated, migrated.isolation_changed) == (True, True, True)
    assert "isolation between namespaces: on (a new database)" in caplog.text
    assert _isolated(empty)
    with psycopg.connect(empty, autocommit=True) as owner:
        apply(owner, "d", [{"key": "a", "capability": "x@1"}])
    url = conninfo.make_conninfo(empty, user=client_login)
    with psycopg.connect(url, autocommit=True) as client:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not act in namespace"):
            start_run(client, "d", queue_anyway=True)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=client_login):
            client.execute("SELECT rara_namespace_share_set('default', 5)")
    # Migrating again keeps it; an explicit setting wins (the chart's namespaces.isolation).
    again = migrate_database(empty)
    assert (again.fresh, again.isolated, again.isolation_changed) == (False, True, False)
    assert migrate_database(empty, isolation=False).isolated is False
    assert not _isolated(empty)
    assert migrate_database(empty).isolated is False  # kept off now that the owner chose it


def test_an_upgrade_keeps_isolation_as_it_was_and_says_so(
    empty: str, caplog: pytest.LogCaptureFixture
) -> None:
    migrate(empty, [m for m in retired() if m.version <= 26])  # the release before
    assert not _isolated(empty)
    with caplog.at_level(logging.INFO, logger="rara.pg.migrate"):
        migrated = migrate_database(empty)
    assert migrated.applied[0].version == 27
    assert (migrated.fresh, migrated.isolated, migrated.isolation_changed) == (False, False, False)
    assert not _isolated(empty)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "isolation between namespaces: off, kept" in warning.getMessage()
    assert "rara access isolate" in warning.getMessage()


def test_rara_migrate_and_rara_status_say_whether_namespaces_are_isolated(empty: str) -> None:
    cli = CliRunner(env={"DATABASE_URL": empty, "RARA_NAMESPACE": None})
    first = cli.invoke(app, ["migrate"])
    assert first.exit_code == 0, first.output
    assert "isolation between namespaces: on (a new database)" in first.output
    assert "isolation" not in cli.invoke(app, ["status"]).output
    opened = cli.invoke(app, ["migrate", "--isolation", "off"])
    assert opened.exit_code == 0, opened.output
    assert "schema up to date" in opened.output
    assert "isolation between namespaces: off:" in opened.output
    status = cli.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "isolation between namespaces: off" in status.output
    assert "rara access isolate" in status.output
    kept = cli.invoke(app, ["migrate"])
    assert "isolation between namespaces: off, kept" in kept.output
    bad = cli.invoke(app, ["migrate", "--isolation", "maybe"])
    assert bad.exit_code == 2
    assert "--isolation" in bad.output


def test_the_dashboard_shows_a_banner_while_isolation_is_off(
    ui_server: Any, conn: psycopg.Connection[Any]
) -> None:
    import urllib.request

    def page(server: Any) -> str:
        with urllib.request.urlopen(server.url + "/runs", timeout=10) as answer:
            return str(answer.read().decode())

    assert 'id="isolation-off"' in page(ui_server())  # the test template has it off
    conn.execute("SELECT rara_namespace_isolation(true)")
    assert 'id="isolation-off"' not in page(ui_server())
