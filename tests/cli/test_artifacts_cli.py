"""Full digests one command away: `rara runs show N --artifacts` prints them whole, and
`rara artifacts get` takes a unique prefix (the demo prints 12 hex digits), as git does."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import psycopg
from typer.testing import CliRunner

from rara.cli.main import app
from tests.support.runs import define, start, wait_run


def test_show_lists_full_digests_and_get_takes_a_unique_prefix(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str, tmp_path: Path
) -> None:
    thread_worker()
    define(
        conn,
        "p",
        [{"key": "make", "capability": "test.produce@1", "input": {"text": "hello artifacts"}}],
    )
    run_id = start(conn, "p")
    wait_run(conn, run_id)
    digest = "sha256:" + hashlib.sha256(b"hello artifacts").hexdigest()
    cli = CliRunner(env={"DATABASE_URL": database_url, "COLUMNS": "80"})

    shown = cli.invoke(app, ["runs", "show", str(run_id), "--artifacts"])
    assert shown.exit_code == 0, shown.output
    assert digest in shown.output, "the digest is printed whole even at 80 columns"

    store = ["--store", str(tmp_path / "artifacts")]
    out = tmp_path / "out.txt"
    got = cli.invoke(app, ["artifacts", "get", digest[7:19], "-o", str(out), *store])
    assert got.exit_code == 0, got.output + got.stderr
    assert out.read_bytes() == b"hello artifacts"
    assert f"{digest} verified" in got.output

    missing = cli.invoke(app, ["artifacts", "get", "sha256:0000ffff", "-o", str(out), *store])
    assert missing.exit_code == 2
    assert "no artifact digest starts with sha256:0000ffff" in missing.stderr
    short = cli.invoke(app, ["artifacts", "get", "abc", "-o", str(out), *store])
    assert short.exit_code == 2
    assert "prefix of at least 4 hex digits" in short.stderr


def test_an_ambiguous_prefix_is_refused_naming_the_candidates(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    for tail in ("1" * 60, "2" * 60):
        conn.execute(
            "INSERT INTO rara_artifacts (digest, size) VALUES (%s, 1)", ("sha256:abcd" + tail,)
        )
    result = CliRunner(env={"DATABASE_URL": database_url}).invoke(
        app, ["artifacts", "get", "abcd", "-o", str(tmp_path / "x"), "--store", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert (
        "digest prefix sha256:abcd is ambiguous: sha256:abcd11111111…, sha256:abcd22222222…"
        in result.stderr
    )
