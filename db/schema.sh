#!/usr/bin/env bash
# Generate db/schema.sql, the current schema, from db/ (the baseline, the migrations, the
# functions): start a throw-away embedded PostgreSQL (rara.pg.embedded, the server the tests
# use), migrate an empty database, dump it
# with that server's own pg_dump (rara.pg.migrate.schema_dump: normalised, deterministic).
#
#   db/schema.sh           regenerate db/schema.sql in place
#   db/schema.sh --check   fail with a diff if db/schema.sql is not what the migrations make
#
# db/schema.sql is committed so that the current schema can be read in one place; --check is
# what `make lint` runs to keep it honest (tests/db/test_schema.py checks the same).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"

generate() { # $1: the file to write
    "$python" - "$1" <<'PY'
import sys
from pathlib import Path

from rara.pg.embedded import temporary_server
from rara.pg.migrate import migrate, schema_dump

server = temporary_server(fast=True)
try:
    migrate(server.up())
    Path(sys.argv[1]).write_text(schema_dump(server.url()))
finally:
    server.destroy()
PY
}

case "${1:-}" in
    "")
        generate db/schema.sql
        echo "generated: db/schema.sql"
        ;;
    --check)
        tmp="$(mktemp -d)"
        trap 'rm -rf "$tmp"' EXIT
        generate "$tmp/schema.sql"
        if ! diff -u db/schema.sql "$tmp/schema.sql"; then
            echo "db/schema.sql is stale: run db/schema.sh (make schema) and commit the result" >&2
            exit 1
        fi
        echo "db/schema.sql is current"
        ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac
