"""GC keeps referenced and young blobs and temp files being written; removes the rest."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg

from rara.artifacts.gc import collect_garbage
from rara.artifacts.store import LocalArtifactStore
from rara.runs import start_run
from tests.support.definitions import apply


def _age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_gc_removes_only_old_unreferenced_blobs(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    store = LocalArtifactStore(tmp_path)
    kept, checkpointed, orphan, young = (
        store.put_bytes(b) for b in (b"kept", b"ckpt", b"orphan", b"young")
    )
    apply(conn, "g", [{"key": "a", "capability": "x@1"}])
    run = start_run(conn, "g", queue_anyway=True).run_id
    step = conn.execute("SELECT id FROM rara_steps WHERE run_id = %s", (run,)).fetchone()
    assert step is not None
    # A manifest (what a succeeded attempt records with its result), written as fixture rows.
    for name, ref in (("out", kept), ("orphan-once", orphan)):
        conn.execute(
            "INSERT INTO rara_artifacts (digest, size) VALUES (%s, %s)", (ref.digest, ref.size)
        )
        conn.execute(
            "INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, "
            "media_type) VALUES (%s, 0, %s, %s, %s, 'text/plain')",
            (step[0], name, ref.digest, ref.size),
        )
    conn.execute("DELETE FROM rara_step_artifacts WHERE name = 'orphan-once'")
    conn.execute(
        "INSERT INTO rara_artifacts (digest, size) VALUES (%s, %s)", (checkpointed.digest, 4)
    )
    conn.execute(
        "INSERT INTO rara_checkpoints (step_id, attempt, seq, state, digest) "
        "VALUES (%s, 1, 1, '{}', %s)",
        (step[0], checkpointed.digest),
    )
    for ref in (kept, checkpointed, orphan):
        _age(store.path_of(ref), 7200)
    stale_tmp = store.tmp_dir / "leftover"
    stale_tmp.write_bytes(b"x")
    _age(stale_tmp, 7200)
    with store.open_writer() as writer:  # a blob being written right now
        writer.write(b"in flight")
        report = collect_garbage(conn, store, grace_seconds=3600)
        assert writer.tmp_path.exists()

    assert report.deleted == [orphan.digest]
    assert (report.kept_referenced, report.kept_young, report.tmp_removed) == (2, 1, 1)
    assert not store.exists(orphan)
    assert store.exists(kept)
    assert store.exists(checkpointed)
    assert store.exists(young)
    assert conn.execute(
        "SELECT count(*) FROM rara_artifacts WHERE digest = %s", (orphan.digest,)
    ).fetchone() == (0,)
