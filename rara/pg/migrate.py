"""Make a database rara's schema: the baseline (``db/baseline.sql``) on an empty one, then the
numbered SQL files of ``db/migrations`` in order, once each, then the function files; dump the
schema they leave (``db/schema.sql``).

Why a small runner and not a migration library: the schema is plain SQL files applied
forward-only, and what matters is (a) each file applied exactly once, (b) safe when many
processes start at once (workers, operator, CLI), (c) a changed applied file is an error. An
advisory lock held for the whole transaction gives (b); a table of applied versions with each
file's checksum gives (a) and (c). Libraries such as yoyo or alembic add a second configuration
and engine layer for no gain here.

What the checksum covers: the file's *statements*, not its bytes. Comments are dropped and
every run of whitespace outside literals becomes one space (``canonical_sql``); string literals,
quoted identifiers and dollar-quoted bodies (function bodies, ``DO`` blocks) are kept verbatim,
because PostgreSQL stores those as written. So a migration's comments can be corrected after it
was applied — they must say what the migration does, and they go stale when a later migration
replaces what an earlier one made — while any change to what the database executes is still
refused. Stored as ``stmt-sha256:<hex>``.

The runner before this one stored the sha256 of each file's bytes (a bare hex digest). A
database it migrated holds those digests for 0001-0004 of the retired chain (below);
``_RELEASED`` records each of them with the statement checksum of that same file, and the
runner accepts such a row when the file's statements are still those, then re-stamps it (as
at the baseline now). Any other bare digest is refused as a changed file. The re-stamp is
one-way, like the migrations: a ``rara migrate`` older than this runner then refuses the
database.

The baseline. No version of rara was ever tagged, and the 29 migrations that built the
schema had become its history rather than its description (0003 set what 0004 undid, functions
were redefined migration after migration). ``db/baseline.sql`` is the schema as they left it,
in one readable file, and a new database starts from it: the runner applies it as version 29,
``baseline``, and the migrations of ``db/migrations`` are numbered from 0030 on. They apply on
top of it on every database, new or upgraded, so the schema has one history from there. It
holds no function: those its defaults, triggers and policies name are stand-ins there, which
the function files replace in the same transaction.

A database an older rara built holds the rows of the retired chain (0001..0029, with their
statement checksums, or for 0001-0004 the file checksums of ``_RELEASED``); ``_RETIRED``
records each, and the files themselves stay, unchanged and never applied to a new database, in
``db/retired/``. The runner recognises such a database by those rows, applies the files of the
chain it lacks (an older rara that stopped part way, say at 0020, left a database that is no
less rara's), then replaces the chain's rows with the baseline's, one-way, in the same
transaction. Finishing the chain rather than refusing it costs 29 small files in the package
and keeps every database any checkout of rara made upgradable in one step, as it was before;
the data migrations of the chain (0011, 0017, 0018, 0019, 0026, ...) stay tested on the
databases they were written for. A row of the chain whose checksum is none of those, or a gap
in it, is refused naming the version: that database is not one rara's migrations built, and
its schema would be a guess. tests/db/test_baseline.py builds a database both ways and compares
their catalogs, and brings a filled one onto the baseline.

The functions of ``db/functions/*.sql`` (every state change, see docs/least-privilege.md) are
*repeatable*: each file says what its functions are now (``CREATE OR REPLACE``, then who may
execute them), so a change is an edit of that one file, reviewed as a diff, not a copy of the
function into a new migration. After the migrations, in the same transaction and under the same
lock, the files are run again whenever one changed or a migration was applied (grants may
name the columns a migration added); ``rara_schema_functions`` holds each file's statement
checksum. They run in the order of ``db/functions/ORDER``, the floors: each file calls only
functions of the files before it, which ``.ci/check-sql-floors.py`` (``make lint``) checks.
Every function the database has is defined in one of them, also those migrations made before
(a migration's definition is history; the file's is the current one). They run after every
migration, so a migration never calls one of them; a function that goes away is dropped by a
migration.
"""

from __future__ import annotations

import hashlib
import logging
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import psycopg

from rara.pg.embedded import find_pg_bin

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x7261726100  # "rara\0": one advisory lock for all migrators of a database
_PREFIX = "stmt-sha256:"

# version -> (sha256 of the file's bytes as the byte-checksum runner stamped it, the statement
# checksum of that file). Computed from the files at commit b1ae7b0; never extended: newer
# migrations are only ever stamped by statement checksum. Only the retired chain has them.
_RELEASED: dict[int, tuple[str, str]] = {
    1: (
        "c363be227bd00d5aa60536ea5fc1019d8a3d7e104687fdcc30bb5403dbc4c225",
        "stmt-sha256:79abdde967b4d93024fff4aec67541445b7e3a7759d8469b5721261407973b95",
    ),
    2: (
        "7d13475c8909672883334d20a7afc68e1bc89f01b5a4498a97d8faabcfbe50a0",
        "stmt-sha256:a008582053e4b63bbe7b1473e7c9fc8cbfaed803a8c4218a9a0544433b5cd2a0",
    ),
    3: (
        "a7fa1e1ad0b425dd35ed28f5aae0fc40b9e85f8be62bdbbff27d6a0e2847e288",
        "stmt-sha256:90bff2e118e1f12696fd930de447d9f602d948fe3a6f2de28a35acc75764cba0",
    ),
    4: (
        "e5cc6e231f41427720d1556918ecfb51231f3362d8c26a1eac4cd935b7a1358c",
        "stmt-sha256:852bf188131298e555c8880d93fd619a158322266c37ed3e45b63c73c53c2c14",
    ),
}

# The baseline (db/baseline.sql) stands for the retired chain 0001-0029 and is recorded as its
# last version; the migrations of db/migrations/ are numbered after it.
_BASELINE = 29
# version -> (name, statement checksum without its prefix) of each file of the retired chain
# (db/retired/), as every database it built holds them. Never changed: it is how such a
# database is recognised.
_RETIRED: dict[int, tuple[str, str]] = {
    1: ("workflow_state", "79abdde967b4d93024fff4aec67541445b7e3a7759d8469b5721261407973b95"),
    2: ("roles", "a008582053e4b63bbe7b1473e7c9fc8cbfaed803a8c4218a9a0544433b5cd2a0"),
    3: ("custom_plans", "90bff2e118e1f12696fd930de447d9f602d948fe3a6f2de28a35acc75764cba0"),
    4: ("hot_path", "852bf188131298e555c8880d93fd619a158322266c37ed3e45b63c73c53c2c14"),
    5: ("artifact_lineage", "4aa02d6e86cb80df74aeac5342eec89d3c911b5dceefcce4dccc95f2c4eec996"),
    6: ("run_counters", "36cd6c474e5865700587891cd247bf6d7e99889dc51fc453c3cd266d4c2409e6"),
    7: ("least_privilege", "ca11fb0fbe9b679f422f7ed0ff7181b55d172b1e56e7291bf96321d673014b3e"),
    8: ("map_steps", "dcc8145d4f9d1fc45c20e70064df7d46b507e631a067cadac6b62f6f5f6c456d"),
    9: ("capability_limits", "e565803df42e2b6677023dc88e6aacd6320b6e552106fa2029d85abe5ea058e2"),
    10: (
        "run_end_status_inlined",
        "9372143d9cdbd687584ef8d99bad5bebad2dc4454697f7c29db60b6d393aca07",
    ),
    11: ("map_lists", "91602c347864149e2e64c5533eb55bc2f2866936311bba5bdcbca98e1047c4ea"),
    12: ("trust_boundary", "ea90a1c42e087cd5558d3ce133194775fd2ae93fc9b75bf30086a3e548d968ff"),
    13: ("step_cache", "8edf2d759f0605527e33313157408fab9eecf6dfd8dbfa29688b8e1358a12a28"),
    14: ("schedules", "ae96c67a63da5e358aad6230a7ec3d54859ffccf03b9ce39fa8cd867ef1b6b5b"),
    15: (
        "fleet_executors_and_reads",
        "ed4317f2a70586042e4922a1c6bf6e34a8d51540bccdcfbea68b02a34dc88af7",
    ),
    16: (
        "cache_keyed_by_reads",
        "c414314aae528f775ab4df2f54ddf76a1cc1b31fd6aab96370dc4164fb693717",
    ),
    17: ("namespaces", "6e191b7336573e5cd18ea38b336d571beb17d5742246a1be39bd3d649141f394"),
    18: ("namespace_access", "e7fa9807a2d47bdd9c34e95c3d0cd32220ff7a9d1b7e17a5fa76a3cfffa8ff6d"),
    19: ("fair_share", "0cda0e7ee0ac0b32ab2a06417a5096975ff660fd0f3b832935c001769e814894"),
    20: ("concurrency_keys", "88e074bfe14ecfbd9abc3591d2952cfa870e0036188a0cd0b6b8eca50aad1ce1"),
    21: ("waits", "1b7280c10198023d5e78cd5f385e1390ce182c113ca67b51977bcd47f7a267b3"),
    22: ("releases", "b9a8243c3ca7b40360455586b41ba10edbca7157a91976058a8373acc798e689"),
    23: ("run_count_successes", "bc7283b803c34711f6e0081d9b3ad641c4fb3814357bd097cb48d0bb004910d2"),
    24: ("held_back_slots", "af52f4fa15b845c0470c4645e68c9141595a658fa0f02cd22edb7f64e34d2e53"),
    25: ("approval_identity", "9d1fd941fd82b71a5538d2e745b6128f37bb905afa951d4c943a5977cc725833"),
    26: (
        "cache_entries_from_steps",
        "e04d7e2069a190c2a9347576bc4b7494577657ad90bf7c9ef0ed637f6354f04d",
    ),
    27: ("access_defaults", "1a7bc55b8d95d4960cad9f5ab0f512625f3be6610f0acbd5576b7060432bab1c"),
    28: ("schedules_refused", "67df390a0177afc5bb06bfb3504aae2c2a463c745e3e207946ae3f599379bcdf"),
    29: (
        "notifications_name_nothing",
        "49eb320cc7ed18aaa0332c4ecca8c59c0cf2c80796bb3bc0530511bc9a645171",
    ),
}


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


def _checksum(sql: str) -> str:
    return _PREFIX + hashlib.sha256(canonical_sql(sql).encode()).hexdigest()


_DOLLAR_TAG = re.compile(r"\$(?:[^\W\d][\w]*)?\$")  # $$, $body$ (a tag takes no `$`)
_WORD = re.compile(r"\w[\w$]*")


def canonical_sql(sql: str) -> str:
    """``sql`` without its comments, each run of whitespace outside literals as one space.

    A lexer for what PostgreSQL's own does between statements: ``--`` and (nested) ``/* */``
    comments count as whitespace; ``'…'`` (``''`` escapes; backslash escapes in ``E'…'``),
    ``"…"`` and ``$tag$…$tag$`` are copied as they stand.
    """
    out: list[str] = []
    gap = False  # whitespace or a comment since the last token
    i, n = 0, len(sql)

    def emit(text: str) -> None:
        nonlocal gap
        if gap and out:
            out.append(" ")
        gap = False
        out.append(text)

    while i < n:
        c = sql[i]
        if c.isspace():
            gap, i = True, i + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            gap, i = True, (n if end < 0 else end)
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while depth:
                if i >= n:
                    raise MigrationError("unterminated /* comment")
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            gap = True
        elif c in "'\"":
            backslashes = c == "'" and not gap and bool(out) and out[-1] in ("E", "e")
            j = i + 1
            while True:
                if j >= n:
                    raise MigrationError(f"unterminated {c} literal")
                if backslashes and sql[j] == "\\":
                    j += 2
                elif sql[j] == c:
                    if sql.startswith(c, j + 1):  # a doubled quote stands for itself
                        j += 2
                    else:
                        break
                else:
                    j += 1
            emit(sql[i : j + 1])
            i = j + 1
        elif tag := _DOLLAR_TAG.match(sql, i):
            end = sql.find(tag[0], tag.end())
            if end < 0:
                raise MigrationError(f"unterminated {tag[0]} quote")
            emit(sql[i : end + len(tag[0])])
            i = end + len(tag[0])
        elif word := _WORD.match(sql, i):  # keyword, name, number (`a$b` is one name)
            emit(word[0])
            i = word.end()
        else:
            emit(c)
            i += 1
    return "".join(out)


def available() -> list[Migration]:
    """What a database is made of: the baseline, then the migrations of ``db/migrations``,
    numbered from 0030 without gaps."""
    found = _numbered(files("rara.sql") / "migrations")
    versions = [m.version for m in found]
    wanted = list(range(_BASELINE + 1, _BASELINE + 1 + len(found)))
    if versions != wanted:
        raise MigrationError(
            f"migrations must be numbered {_BASELINE + 1:04d}.. without gaps, found {versions}"
        )
    return [baseline(), *found]


def baseline() -> Migration:
    """``db/baseline.sql``: the schema as the retired chain 0001-0029 left it."""
    return Migration(_BASELINE, "baseline", (files("rara.sql") / "baseline.sql").read_text())


def retired() -> list[Migration]:
    """The retired chain (``db/retired``, 0001-0029), which finishes a database an older rara
    left part way along it; each file is checked against the checksum every such database
    holds (``_RETIRED``)."""
    found = _numbered(files("rara.sql") / "retired")
    have = {m.version: (m.name, m.checksum.removeprefix(_PREFIX)) for m in found}
    if have != _RETIRED:
        wrong = sorted(set(have.items()) ^ set(_RETIRED.items()))
        raise MigrationError(
            "db/retired/ is not the retired chain: "
            + ", ".join(f"{v:04d}_{name}" for v, (name, _) in wrong)
            + " differ from the files every database of that chain was built with"
        )
    return found


def _numbered(folder: Traversable) -> list[Migration]:
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
        elif entry.name.endswith(".sql"):
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
    found.sort(key=lambda m: m.version)
    return found


@dataclass(frozen=True)
class Migrated:
    """What ``migrate_database`` did."""

    applied: list[Migration]
    fresh: bool  # no migration had been applied to the database before
    # Isolation between namespaces after it (None: a partial migration, which installs no
    # functions and leaves it alone), and whether this call changed it.
    isolated: bool | None
    isolation_changed: bool
    # A database of the retired chain, recorded as at the baseline by this call.
    onto_baseline: bool = False

    def isolation_line(self) -> str | None:
        """What to tell whoever migrated about isolation (docs/namespaces.md, "Isolation")."""
        if self.isolated is None:
            return None
        if self.isolated:
            why = " (a new database)" if self.fresh and self.isolation_changed else ""
            return (
                f"isolation between namespaces: on{why}: each role reads and acts only in the"
                " namespaces granted to it (rara access open turns it off)"
            )
        kept = "" if self.isolation_changed else ", kept"
        return (
            f"isolation between namespaces: off{kept}: every role reads and acts in every"
            " namespace (rara access isolate turns it on)"
        )


def migrate(
    url: str, migrations: Sequence[Migration] | None = None, *, isolation: bool | None = None
) -> list[Migration]:
    """Apply pending migrations (``available()`` unless given); returns those applied now
    (empty when up to date). ``isolation``: see ``migrate_database``."""
    return migrate_database(url, migrations, isolation=isolation).applied


def migrate_database(
    url: str, migrations: Sequence[Migration] | None = None, *, isolation: bool | None = None
) -> Migrated:
    """Apply pending migrations, then set isolation between namespaces: ``isolation`` when
    given, else on for a new database (none of its migrations applied before) and as it was for
    an existing one, which is logged when off (docs/namespaces.md, "Isolation")."""
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
        fresh = not applied
        done: list[Migration] = []
        onto = migrations is None and not fresh and _chain_rows(applied)
        if onto:
            done = _onto_baseline(conn, applied)
        for migration in available() if migrations is None else migrations:
            if migration.version in applied:
                if applied[migration.version] == migration.checksum:
                    continue
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} was changed after it "
                    "was applied; add a new migration instead"
                )
            conn.execute(migration.sql.encode())  # bytes: run the whole file as a script
            conn.execute(
                "INSERT INTO rara_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            done.append(migration)
        if migrations is None:  # the functions are written for the latest schema only
            _apply_functions(conn, force=bool(done))
            migrated = replace(_isolation(conn, done, fresh, isolation), onto_baseline=onto)
        else:
            migrated = Migrated(done, fresh, None, False)
    line = migrated.isolation_line()
    if line is not None and migrated.applied and not migrated.isolated:
        log.warning("%s", line)  # an upgrade that kept it off, or an owner who turned it off
    elif line is not None and migrated.isolation_changed:
        log.info("%s", line)
    return migrated


def _chain_rows(applied: dict[int, str]) -> bool:
    """Whether ``applied`` holds rows of the retired chain rather than the baseline's (or
    none): a database an older rara built."""
    chain = [v for v in applied if v <= _BASELINE]
    retired_last = _PREFIX + _RETIRED[_BASELINE][1]
    return bool(chain) and (chain != [_BASELINE] or applied[_BASELINE] == retired_last)


def _onto_baseline(conn: psycopg.Connection[Any], applied: dict[int, str]) -> list[Migration]:
    """A database the retired chain built (rows for 0001.. with their checksums): the files of
    the chain it lacks applied, then its rows 0001-0029 replaced by the baseline's, in
    ``applied`` too. Returns the retired migrations applied now."""
    chain = sorted(v for v in applied if v <= _BASELINE)
    base = baseline()
    for version in chain:
        name, checksum = _RETIRED[version]
        if applied[version] not in (_PREFIX + checksum, _RELEASED.get(version, ("",))[0]):
            raise MigrationError(
                f"migration {version:04d}_{name} of the retired chain (db/retired/) was changed "
                "after it was applied: this database is not one rara's migrations built, and "
                "rara will not guess its schema; restore it from a backup taken before the change"
            )
    if chain != list(range(1, len(chain) + 1)):
        missing = min(set(range(1, chain[-1] + 1)) - set(chain))
        raise MigrationError(
            f"migration {missing:04d}_{_RETIRED[missing][0]} of the retired chain was never "
            f"applied, though later ones were ({chain[-1]:04d} is): this database is not one "
            "rara's migrations built; restore it from a backup"
        )
    done = []
    for migration in retired()[len(chain) :]:  # where an older rara stopped: finish the chain
        conn.execute(migration.sql.encode())
        done.append(migration)
    conn.execute("DELETE FROM rara_schema_migrations WHERE version <= %s", (_BASELINE,))
    conn.execute(
        "INSERT INTO rara_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
        (base.version, base.name, base.checksum),
    )
    for version in chain:
        del applied[version]
    applied[base.version] = base.checksum
    log.info(
        "the retired migrations 0001-%04d %s; recorded as at the baseline",
        _BASELINE,
        f"finished from {len(chain) + 1:04d}" if done else "all applied",
    )
    return done


def _isolation(
    conn: psycopg.Connection[Any], done: list[Migration], fresh: bool, wanted: bool | None
) -> Migrated:
    """Isolation between namespaces as ``wanted``, else on for a ``fresh`` database and kept
    for an existing one (rara_namespace_isolation, db/functions/access.sql)."""
    row = conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'rara_runs'::regclass")
    found = row.fetchone()
    isolated = bool(found and found[0])
    if wanted is None:
        wanted = True if fresh else isolated
    if wanted != isolated:
        conn.execute("SELECT rara_namespace_isolation(%s)", (wanted,))
    return Migrated(done, fresh, wanted, wanted != isolated)


def function_files() -> dict[str, str]:
    """File name → text of every ``.sql`` file in ``rara.sql/functions``, in the order of its
    ``ORDER`` file: lowest floor first, each file calling only functions of the files before
    it (``.ci/check-sql-floors.py``). A ``LANGUAGE sql`` body names its callees when it is
    created, so they must exist by then. A file the list leaves out, or names but lacks, is an
    error: its place would be a guess."""
    folder: Traversable = files("rara.sql") / "functions"
    present = {f.name for f in folder.iterdir() if f.name.endswith(".sql")}
    order = [
        name
        for line in (folder / "ORDER").read_text().splitlines()
        if (name := line.split("#", 1)[0].strip())
    ]
    wrong = [
        *(f"{name} is not listed" for name in sorted(present - set(order))),
        *(f"{name} is no file" for name in sorted(set(order) - present)),
        *(f"{name} is listed twice" for name in sorted({n for n in order if order.count(n) > 1})),
    ]
    if wrong:
        raise MigrationError(
            f"db/functions/ORDER lists each function file once: {'; '.join(wrong)}"
        )
    return {name: (folder / name).read_text() for name in order}


def _apply_functions(conn: psycopg.Connection[Any], *, force: bool) -> None:
    """Run the function files again when one changed (or ``force``: a migration was applied)."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS rara_schema_functions (
               file text PRIMARY KEY, checksum text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    texts = function_files()  # read once: checksummed, then run
    wanted = {name: _checksum(text) for name, text in texts.items()}
    stored = dict(conn.execute("SELECT file, checksum FROM rara_schema_functions").fetchall())
    if stored == wanted and not force:
        return
    # SECURITY DEFINER functions take their search_path from here (SET search_path FROM
    # CURRENT): this schema, then pg_temp last, so no caller's object can stand in for ours.
    conn.execute(
        "SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true)"
    )
    for text in texts.values():
        conn.execute(text.encode())  # bytes: the whole file as one script
    conn.execute("DELETE FROM rara_schema_functions")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO rara_schema_functions (file, checksum) VALUES (%s, %s)",
            list(wanted.items()),
        )


_SCHEMA_HEADER = """\
-- The current schema of rara's database: what db/baseline.sql, then db/migrations/*.sql in
-- order, then the function files of db/functions/ leave.
--
-- Generated by db/schema.sh (`make schema`) from a freshly migrated database with pg_dump
-- --schema-only; never edited by hand. Change the schema with a new migration, then
-- regenerate. `make lint` (db/schema.sh --check) and tests/db/test_schema.py fail while this
-- file and the migrations disagree. Why each object is as it is: the comments of the baseline,
-- the migrations and the function files. The GRANTs name the cluster-wide roles the baseline
-- creates.
"""

# Lines of pg_dump's output that say how it ran, not what the schema is: version lines, the
# random key of \restrict (PostgreSQL 13.22, 14.19, 15.14, 16.10, 17.6 and later), and the
# session settings of a restore (which also differ between versions).
_DUMP_NOISE = re.compile(
    r"^(-- Dumped (from|by) .*|\\(un)?restrict \w+"
    r"|SET (statement_timeout|lock_timeout|idle_in_transaction_session_timeout"
    r"|transaction_timeout|client_encoding|standard_conforming_strings|check_function_bodies"
    r"|xmloption|client_min_messages|row_security|default_table_access_method"
    r"|default_tablespace|default_with_oids) = .*;"
    r"|SELECT pg_catalog\.set_config\('search_path', '', false\);)$"
)
# pg_dump's heading of each object, three lines, becomes `-- TYPE: name`; its title goes.
_TOC = re.compile(
    r"^--\n-- Name: (?P<name>.*); Type: (?P<type>[^;\n]*); Schema: [^;\n]*; Owner: .*\n--$",
    re.MULTILINE,
)
_TITLE = re.compile(r"^--\n-- PostgreSQL database dump( complete)?\n--$", re.MULTILINE)


def schema_dump(url: str) -> str:
    """The schema of the database at ``url`` as ``db/schema.sql`` holds it: ``pg_dump
    --schema-only`` without owners and without the lines that vary between runs and versions,
    each object under a one-line ``-- TYPE: name`` heading, then the per-database settings
    (``ALTER DATABASE … SET``, which pg_dump leaves out) as statements.

    pg_dump comes from the same directory as the embedded server's binaries and must be of the
    server's major version (an older one refuses a newer server, a newer one writes other SQL).
    """
    pg_dump = find_pg_bin() / "pg_dump"
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone()
        server_major = int(row[0]) if row else 0
        settings = conn.execute(
            "SELECT unnest(s.setconfig) FROM pg_db_role_setting s JOIN pg_database d"
            " ON d.oid = s.setdatabase WHERE d.datname = current_database() AND s.setrole = 0"
            " ORDER BY 1"
        ).fetchall()
    version = subprocess.run(
        [str(pg_dump), "--version"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"\(PostgreSQL\) (\d+)", version)
    dump_major = int(found[1]) if found else 0
    if dump_major != server_major:
        raise MigrationError(
            f"{pg_dump} is PostgreSQL {dump_major}, the server {server_major}: dump the schema "
            "with the server's own major version (RARA_PG_BIN names the binaries' directory)"
        )
    dumped = subprocess.run(
        [str(pg_dump), "--schema-only", "--no-owner", "--no-tablespaces", "--dbname", url],
        capture_output=True,
        text=True,
        check=False,
    )
    if dumped.returncode != 0:
        raise MigrationError(f"pg_dump failed: {dumped.stderr.strip()}")
    return _normalise(dumped.stdout, [s for (s,) in settings])


def _normalise(dump: str, settings: list[str]) -> str:
    dump = _TITLE.sub("", _TOC.sub(lambda m: f"-- {m['type']}: {m['name']}", dump))
    lines: list[str] = []
    for line in dump.splitlines():
        if _DUMP_NOISE.match(line):
            continue
        if line == "" and (not lines or lines[-1] == ""):
            continue  # one blank line between objects
        lines.append(line)
    while lines and lines[-1] == "":
        lines.pop()
    body = "\n".join(lines)
    if settings:
        body += "\n\n-- DATABASE SETTINGS: ALTER DATABASE (rara's database) SET …\n\n"
        body += "\n".join(_setting_statement(setting) for setting in settings)
    return f"{_SCHEMA_HEADER}\n{body}\n"


def _setting_statement(setting: str) -> str:
    """``key=value`` of pg_db_role_setting as a statement that sets it on the current database
    (``ALTER DATABASE`` takes no ``current_database()``: a DO block names it)."""
    key, _, value = setting.partition("=")
    literal = "'" + value.replace("'", "''") + "'"
    return (
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET %s = %L', current_database(), "
        f"'{key}', {literal}); END $$;"
    )
