"""Apply the numbered SQL files of ``db/migrations`` in order, once each.

Why a small runner and not a migration library: the schema is plain SQL files applied
forward-only, and what matters is (a) each file applied exactly once, (b) safe when many
processes start at once (workers, operator, CLI), (c) a changed applied file is an error. An
advisory lock held for the whole transaction gives (b); a table of applied versions with each
file's sha256 gives (a) and (c). Libraries such as yoyo or alembic add a second configuration
and engine layer for no gain here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x7261726100  # "rara\0": one advisory lock for all migrators of a database


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available() -> list[Migration]:
    folder: Traversable = files("rara.sql") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
        elif entry.name.endswith(".sql"):
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def migrate(url: str) -> list[Migration]:
    """Apply pending migrations; returns those applied now (empty when up to date)."""
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS rara_schema_migrations (
                   version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        applied: dict[int, str] = dict(
            conn.execute("SELECT version, checksum FROM rara_schema_migrations").fetchall()
        )
        done = []
        for migration in available():
            if migration.version in applied:
                if applied[migration.version] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed after it "
                        "was applied; add a new migration instead"
                    )
                continue
            conn.execute(migration.sql.encode())  # bytes: run the whole file as a script
            conn.execute(
                "INSERT INTO rara_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            done.append(migration)
        return done
