"""The S3 store under faults, against a real server: killed mid-upload, throttled; and GC."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.artifacts.errors import ArtifactStoreUnavailable
from rara.artifacts.gc import collect_garbage
from rara.artifacts.location import S3Config
from rara.runs import start_run
from tests.support.definitions import apply

pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")

from minio import Minio
from minio.error import S3Error

from rara.artifacts.s3 import S3ArtifactStore, make_client
from tests.artifacts.s3_server import S3Server

MIB = 1 << 20


def _uploads(store: S3ArtifactStore) -> list[Any]:
    return list(store.client._list_multipart_uploads(store.bucket).uploads)


def test_server_killed_mid_upload_leaves_nothing_then_a_retry_succeeds(
    own_s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = own_s3_server
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    server.make_bucket("art")
    cfg = S3Config.parse(server.url("art", "p", part_size="5", concurrency="1", attempts="3"))

    class KillAfterTwoParts(Minio):
        """The server dies (SIGKILL) right after the second part has landed."""

        parts = 0

        def _upload_part(self, *args: Any, **kwargs: Any) -> str:
            etag: str = super()._upload_part(*args, **kwargs)  # type: ignore[misc]
            KillAfterTwoParts.parts += 1
            if KillAfterTwoParts.parts == 2:
                server.kill()
            return etag

    real = make_client(cfg)
    client = KillAfterTwoParts(
        f"127.0.0.1:{server.port}",
        secure=False,
        region=cfg.region,
        http_client=real._http,
        credentials=real._provider,
    )
    delays: list[float] = []
    store = S3ArtifactStore(cfg, client=client, sleep=delays.append)
    data = os.urandom(16 * MIB)  # four parts
    src = tmp_path / "blob"
    src.write_bytes(data)

    with pytest.raises(ArtifactStoreUnavailable, match="s3://art/p/sha256/") as err:
        store.put_file(src)
    assert err.value.retryable
    assert len(delays) == 2  # three attempts at the third part, backing off between them

    server.start()  # same port, same data directory
    ref_digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert not store.exists(ref_digest)  # no partial object is visible under the key
    assert [u.object_name for u in _uploads(store)] == [store.key_of(ref_digest)]

    ref = store.put_file(src)  # the step's retry
    assert ref.digest == ref_digest
    assert store.get_bytes(ref) == data
    # GC aborts the dead writer's upload once it is older than the grace (here: at once).
    assert store.remove_stale_temporaries(time.time() + 1, dry_run=True) == 1
    assert store.remove_stale_temporaries(time.time() + 1) == 1
    assert _uploads(store) == []


def test_throttling_is_retried_with_backoff(
    s3_url: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = S3Config.parse(s3_url())
    real = make_client(cfg)

    class Throttled(Minio):
        """Answers SlowDown (503) to the first two PUTs, as S3 does under load."""

        left = 2

        def _put_object(self, *args: Any, **kwargs: Any) -> Any:
            if Throttled.left:
                Throttled.left -= 1
                raise S3Error(
                    None,
                    "SlowDown",
                    "Please reduce your request rate.",  # type: ignore[arg-type]
                    "/",
                    "req",
                    "host",
                )
            return super()._put_object(*args, **kwargs)  # type: ignore[misc]

    client = Throttled(
        real._base_url.host,
        secure=False,
        region=cfg.region,
        http_client=real._http,
        credentials=real._provider,
    )
    delays: list[float] = []
    store = S3ArtifactStore(cfg, client=client, sleep=delays.append, backoff_base=0.1)
    ref = store.put_bytes(b"under load")
    assert store.get_bytes(ref) == b"under load"
    assert len(delays) == 2
    assert delays[0] <= 0.1
    assert delays[1] <= 0.2


def test_gc_on_s3_keeps_referenced_and_young_blobs(
    s3_url: Callable[..., str], conn: psycopg.Connection[Any]
) -> None:
    store = S3ArtifactStore(S3Config.parse(s3_url()))
    kept, orphan = store.put_bytes(b"kept"), store.put_bytes(b"orphan")
    apply(conn, "g", [{"key": "a", "capability": "x@1"}])
    run = start_run(conn, "g", queue_anyway=True).run_id
    step = conn.execute("SELECT id FROM rara_steps WHERE run_id = %s", (run,)).fetchone()
    assert step is not None
    for ref in (kept, orphan):
        conn.execute(
            "INSERT INTO rara_artifacts (digest, size) VALUES (%s, %s)", (ref.digest, ref.size)
        )
    conn.execute(
        "INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, "
        "media_type) VALUES (%s, 0, 'out', %s, %s, 'text/plain')",
        (step[0], kept.digest, kept.size),
    )

    report = collect_garbage(conn, store, grace_seconds=3600)
    assert (report.kept_referenced, report.kept_young, report.deleted) == (1, 1, [])

    # Past the grace (a negative grace puts the horizon in the future): the orphan goes.
    report = collect_garbage(conn, store, grace_seconds=-60, dry_run=True)
    assert report.deleted == [orphan.digest]
    assert store.exists(orphan)
    report = collect_garbage(conn, store, grace_seconds=-60)
    assert report.deleted == [orphan.digest]
    assert report.deleted_bytes == orphan.size
    assert not store.exists(orphan)
    assert store.exists(kept)
    assert conn.execute(
        "SELECT count(*) FROM rara_artifacts WHERE digest = %s", (orphan.digest,)
    ).fetchone() == (0,)


def test_retries_are_bounded_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store outage is ridden through for ``retry_seconds`` (default 30 s: a restarted S3 pod
    costs retries, not the step's attempt), then the request fails as unavailable, naming how
    long it tried; the tries never wait more than 2 s apart."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    # Nothing listens on port 9 here: every try is refused, a transient error.
    cfg = S3Config.parse("s3://art/p?endpoint=http://127.0.0.1:9&region=us-east-1")
    assert (cfg.retry_seconds, cfg.attempts) == (30.0, 100)
    now = [0.0]
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        now[0] += seconds

    store = S3ArtifactStore(cfg, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(ArtifactStoreUnavailable, match=r"attempts in 3\d\.\d s"):
        store.exists("sha256:" + "0" * 64)
    assert now[0] >= 30.0
    assert max(delays) <= 2.0
    with pytest.raises(ValueError, match="retry_seconds"):
        S3Config.parse("s3://art/p?retry_seconds=-1")


def test_a_404_that_is_not_an_s3_answer_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that is up but not yet serving S3 answers "404 page not found" (text/plain):
    not the store saying a key is absent (that is NoSuchKey, and stays final), so the read is
    retried, and succeeds once the server serves the blob."""
    import http.server
    import threading

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    blob = b"kept across the restart"
    answers: list[int] = []

    class NotYetServing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = len(answers) >= 2
            answers.append(200 if ready else 404)
            body = blob if ready else b"404 page not found\n"
            self.send_response(answers[-1])
            kind = "application/octet-stream" if ready else "text/plain; charset=utf-8"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotYetServing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        cfg = S3Config.parse(f"s3://art/p?endpoint=http://127.0.0.1:{port}&region=us-east-1")
        store = S3ArtifactStore(cfg, sleep=lambda _s: None)
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        assert store.get_bytes(digest) == blob
        assert answers == [404, 404, 200]
    finally:
        server.shutdown()
        server.server_close()
