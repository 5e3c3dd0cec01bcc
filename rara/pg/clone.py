"""A migrated database copied for a test or a benchmark run, its settings included.

``CREATE DATABASE … TEMPLATE`` copies the files (fast), but not what ``ALTER DATABASE … SET``
attached to the template (pg_db_role_setting): without this copy a clone would run without
the settings rara's migrations give its database (no JIT, migration 0004) and so measure and
test something else than what ``rara migrate`` makes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def clone_database(admin: psycopg.Connection[Any], template: str, name: str) -> None:
    """``name`` as a copy of ``template`` (which nobody may be connected to), with the
    template's per-database settings. ``admin`` must be in autocommit mode."""
    admin.execute(
        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    )
    row = admin.execute(
        "SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase"
        " WHERE d.datname = %s AND s.setrole = 0",
        (template,),
    ).fetchone()
    for setting in (row[0] if row else None) or []:
        key, _, value = setting.partition("=")
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                sql.Identifier(name), sql.Identifier(key), sql.Literal(value)
            )
        )
