"""`rara releases` end to end (docs/releases.md): promote a real run, read it as JSON by
number and as current, fetch its blobs verified against their digests, roll back, list, the
history; bad input exits 2 with one line naming it and writes nothing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.artifacts.store import LocalArtifactStore
from rara.cli.main import app
from rara.errors import InputInvalid
from rara.releases import Release, ReleaseArtifactRow, fetch
from tests.support.runs import define, start, wait_run


def test_promote_get_fetch_rollback_list_and_history(
    conn: psycopg.Connection[Any],
    thread_worker: Any,
    database_url: str,
    tmp_path: Path,
    wide_console: None,
) -> None:
    thread_worker()
    define(
        conn,
        "p",
        [
            {"key": "make", "capability": "test.produce@1", "input": {"text": "index bytes"}},
            {"key": "tune", "capability": "test.produce@1", "input": {"text": "adapter"}},
        ],
    )
    runs = [start(conn, "p") for _ in range(2)]
    for run_id in runs:
        wait_run(conn, run_id, status="succeeded")
    cli = CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": "default"})
    store = ["--store", str(tmp_path / "artifacts")]  # the thread worker's

    def ok(*args: str) -> Any:
        result = cli.invoke(app, ["releases", *args])
        assert result.exit_code == 0, result.output + result.stderr
        return result

    out = ok("promote", "rag-index", "--from-run", str(runs[0]), "--note", "first").output
    assert "rag-index@1 promoted from run 1 (2 artifacts, 2 results); current" in out
    ok("promote", "rag-index", "--from-run", str(runs[1]), "--artifact", "make/corpus.txt",
       "--result", "make")  # fmt: skip

    current = json.loads(ok("get", "rag-index", "-o", "json").stdout)
    assert (current["number"], current["current"], current["run_id"]) == (2, True, runs[1])
    assert [a["name"] for a in current["artifacts"]] == ["corpus.txt"]
    assert json.loads(ok("get", "rag-index@current", "-o", "json").stdout) == current

    fetched = tmp_path / "served"
    first = ok("get", "rag-index@1", "--fetch", str(fetched), *store, "-o", "json")
    release = json.loads(first.stdout)
    assert release["note"] == "first"
    assert not release["current"]
    assert len(release["artifacts"]) == 2
    for artifact in release["artifacts"]:
        data = (fetched / artifact["step_key"] / artifact["name"]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == artifact["digest"]
        assert f"{artifact['digest']} verified" in first.stderr
    assert (fetched / "make" / "corpus.txt").read_bytes() == b"index bytes"
    # For people: the files written first, then the release in a few lines; no JSON.
    lines = ok("get", "rag-index@2", "--fetch", str(tmp_path / "two"), *store).stdout.splitlines()
    served = tmp_path / "two" / "make" / "corpus.txt"
    assert lines[0] == f"{served}: {current['artifacts'][0]['digest']} verified"
    assert lines[1].startswith("rag-index@2 (current): promoted by "), lines
    assert f" UTC from run {runs[1]} (p@1)" in lines[1], lines
    assert lines[-1] == "results of: make (-o json: the whole release)", lines
    assert not any(line.lstrip().startswith(("{", '"')) for line in lines), lines

    assert "rag-index: current 2 -> 1" in ok("rollback", "rag-index", "--reason", "bad").output
    assert json.loads(ok("get", "rag-index", "-o", "json").stdout)["number"] == 1
    listed = ok("list").output
    assert "rag-index@2" in listed
    assert "rag-index@1" in listed
    history = ok("history", "rag-index").output
    assert history.count("promote") == 2
    assert "rollback" in history
    assert "bad" in history

    define(conn, "q", [{"key": "make", "capability": "test.noop@1"}])
    other_run = start(conn, "q")
    wait_run(conn, other_run, status="succeeded")
    before = conn.execute(
        "SELECT (SELECT count(*) FROM rara_releases), (SELECT count(*) FROM rara_release_moves)"
    ).fetchone()
    refused = {
        ("promote", "rag-index", "--from-run", str(other_run)): (
            f"release rag-index is of definition p: run {other_run} is of definition q"
        ),
        ("promote", "rag-index", "--from-run", "99"): "no run 99 in namespace default",
        ("promote", "rag-index", "--from-run", "1", "--artifact", "make/x"): "no artifact 'make/x'",
        ("promote", "rag-index", "--from-run", "1", "--result", "nope"): "no succeeded step 'nope'",
        ("promote", "Bad", "--from-run", "1"): "release name 'Bad' is not a name",
        ("rollback", "rag-index", "--to", "7"): "no release rag-index@7 in namespace default",
        ("rollback", "rag-index", "--to", "0"): "release numbers start at 1",
        ("get", "rag-index@x"): "'x' is no release number",
        ("get", "rag-index@9"): "no release rag-index@9",
        ("history", "other"): "no release other",
        ("promote", "rag-index", "--from-run", "1", "-n", "Not_A_Namespace"): "--namespace",
    }
    for args, message in refused.items():
        result = cli.invoke(app, ["releases", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, (args, result.stderr)
    assert (
        conn.execute(
            "SELECT (SELECT count(*) FROM rara_releases), (SELECT count(*) FROM rara_release_moves)"
        ).fetchone()
        == before
    )
    # Another namespace has none of these.
    other = cli.invoke(app, ["releases", "get", "rag-index", "-n", "team-b"])
    assert other.exit_code == 2
    assert "no release team-b/rag-index" in other.stderr


def test_fetch_refuses_an_artifact_name_that_would_leave_the_folder(tmp_path: Path) -> None:
    """Manifest names may hold `/` and `..` (the name pattern allows both): --fetch writes
    DIR/STEP/NAME only where that stays under DIR, and checks every one before writing any."""
    store = LocalArtifactStore(tmp_path / "store")
    ref = store.put_bytes(b"x")
    good = ReleaseArtifactRow("s", "dir/ok.bin", ref.digest, 1, "text/plain")
    bad = ReleaseArtifactRow("s", "../../escape", ref.digest, 1, "text/plain")
    release = Release(
        "default", "r", 1, True, 1, "p", 1, {}, [good, bad], "me", datetime.now(UTC), None
    )
    with pytest.raises(InputInvalid, match=r"s/\.\./\.\./escape: its name would leave the folder"):
        fetch(release, store, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert fetch(replace(release, artifacts=[good]), store, tmp_path / "out")
    assert (tmp_path / "out" / "s" / "dir" / "ok.bin").read_bytes() == b"x"
