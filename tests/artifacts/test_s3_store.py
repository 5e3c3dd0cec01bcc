"""The S3 store against a real S3 server (versitygw on 127.0.0.1): the local store's contract
(content-addressed, stored once, verified both ways) plus what object storage adds."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rara.artifacts import open_store
from rara.artifacts.errors import (
    ArtifactCorrupted,
    ArtifactNotFound,
    ArtifactStoreAccessError,
)
from rara.artifacts.location import S3Config

pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")

from rara.artifacts.s3 import S3ArtifactStore
from tests.artifacts.s3_server import S3Server

MIB = 1 << 20


def _store(url: str, **kwargs: object) -> S3ArtifactStore:
    return S3ArtifactStore(S3Config.parse(url), **kwargs)  # type: ignore[arg-type]


def _keys(server: S3Server, bucket: str) -> list[str]:
    return sorted(o.object_name or "" for o in server.client().list_objects(bucket, recursive=True))


def _uploads(server: S3Server, bucket: str) -> list[str]:
    return [u.object_name for u in server.client()._list_multipart_uploads(bucket).uploads]


def test_round_trip_small_and_multipart(s3_url: Callable[..., str], tmp_path: Path) -> None:
    store = open_store(s3_url())
    assert isinstance(store, S3ArtifactStore)
    small = store.put_bytes(b"hello", "text/plain")
    assert small.digest == "sha256:" + hashlib.sha256(b"hello").hexdigest()
    assert (small.size, small.media_type) == (5, "text/plain")
    assert store.exists(small)
    assert store.get_bytes(small) == b"hello"

    big = os.urandom(12 * MIB + 7)  # three parts of 5 MiB (the last short)
    src = tmp_path / "big.bin"
    src.write_bytes(big)
    ref = store.put_file(src)
    assert ref.digest == "sha256:" + hashlib.sha256(big).hexdigest()
    assert store.get_bytes(ref) == big
    assert store.get_file(ref.digest, tmp_path / "out.bin").size == len(big)
    assert (tmp_path / "out.bin").read_bytes() == big
    assert store.key_of(ref) == f"arts/sha256/{ref.hex[:2]}/{ref.hex[2:]}"
    assert not store.exists("sha256:" + "0" * 64)
    with pytest.raises(ArtifactNotFound, match="s3://"):
        store.get_bytes("sha256:" + "0" * 64)


def test_open_writer_streams_through_a_spool(s3_url: Callable[..., str]) -> None:
    store = _store(s3_url())
    data = os.urandom(11 * MIB)
    with store.open_writer("application/x-test") as w:
        for off in range(0, len(data), MIB):
            w.write(memoryview(data)[off : off + MIB])
    assert w.ref.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert w.ref.media_type == "application/x-test"
    assert store.get_bytes(w.ref) == data
    aborted = store.open_writer()
    aborted.write(b"x")
    aborted.__exit__(RuntimeError, RuntimeError("the step failed mid-write"), None)
    assert not store.exists("sha256:" + hashlib.sha256(b"x").hexdigest())


def test_stored_once_and_a_dedup_refreshes_the_gc_clock(
    s3_url: Callable[..., str], s3_env: S3Server, bucket: str
) -> None:
    store = _store(s3_url())
    ref = store.put_bytes(b"same bytes")
    [first] = list(store.iter_blobs())
    assert _keys(s3_env, bucket) == [f"arts/{ref.key}"]
    assert store.put_bytes(b"same bytes") == ref  # no second upload: a touch marker instead
    assert _keys(s3_env, bucket) == [f"arts/{ref.key}", f"arts/touch/{ref.key}"]
    [again] = list(store.iter_blobs())
    assert again.digest == first.digest
    assert again.mtime >= first.mtime


def test_concurrent_writers_of_one_digest_never_clobber(
    s3_url: Callable[..., str], s3_env: S3Server, bucket: str
) -> None:
    data = os.urandom(11 * MIB)
    stores = [_store(s3_url()) for _ in range(4)]
    # Each writer thinks the key is free (HEAD answers "absent"), so all four race to the
    # conditional create; exactly the server's If-None-Match decides.
    for s in stores:
        s._head = lambda key: None  # type: ignore[method-assign]
    refs: list[object] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def write(s: S3ArtifactStore) -> None:
        start.wait()
        try:
            refs.append(s.put_bytes(data))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(set(map(repr, refs))) == 1
    assert stores[0].get_bytes(stores[0].put_bytes(data)) == data
    assert _uploads(s3_env, bucket) == []  # the losers' uploads were aborted


def test_conditional_create_never_overwrites(
    s3_url: Callable[..., str], s3_env: S3Server, bucket: str
) -> None:
    """Even a writer that skipped the HEAD cannot replace what is there: the server refuses
    (412) and the store takes it as stored once — single PUT and multipart alike."""
    store = _store(s3_url())
    for size in (100, 11 * MIB):
        data = os.urandom(size)
        hexd = hashlib.sha256(data).hexdigest()
        key = store.key_of("sha256:" + hexd)
        s3_env.client().put_object(bucket, key, io.BytesIO(b"placeholder"), 11)
        store._head = lambda key: None  # type: ignore[method-assign]
        store._upload(data, hexd, size, "application/octet-stream")
        resp = s3_env.client().get_object(bucket, key)
        assert resp.read() == b"placeholder"
        resp.close()
        resp.release_conn()
    assert _uploads(s3_env, bucket) == []


def test_server_checks_the_sha256_of_a_single_put(s3_url: Callable[..., str]) -> None:
    store = _store(s3_url())
    hexd = hashlib.sha256(b"the real bytes").hexdigest()
    with pytest.raises(Exception, match=r"(?i)checksum|digest"):
        store._put_once(store.key_of("sha256:" + hexd), b"other bytes!!!", hexd, "x/y")
    assert not store.exists("sha256:" + hexd)


def test_a_source_that_changes_while_uploading_is_refused(
    s3_url: Callable[..., str], s3_env: S3Server, bucket: str
) -> None:
    store = _store(s3_url())
    data = os.urandom(11 * MIB)
    hexd = hashlib.sha256(data).hexdigest()
    changed = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(ArtifactCorrupted, match="changed while"):
        store._upload(io.BytesIO(changed), hexd, len(data), "application/octet-stream")
    with pytest.raises(ArtifactCorrupted, match="changed while"):
        store._upload(io.BytesIO(b"abc"), hashlib.sha256(b"abd").hexdigest(), 3, "x/y")
    assert _keys(s3_env, bucket) == []
    assert _uploads(s3_env, bucket) == []


def test_a_wrong_digest_on_read_is_refused(
    s3_url: Callable[..., str], s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    store = _store(s3_url())
    ref = store.put_bytes(b"precious")
    s3_env.client().put_object(bucket, store.key_of(ref), io.BytesIO(b"tampered"), 8)
    with pytest.raises(ArtifactCorrupted, match=f"s3://{bucket}/arts/sha256/"):
        store.get_bytes(ref)
    dest = tmp_path / "out"
    dest.write_bytes(b"old")
    with pytest.raises(ArtifactCorrupted):
        store.get_file(ref, dest)
    assert dest.read_bytes() == b"old"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp left behind


def test_missing_bucket_is_named(s3_env: S3Server) -> None:
    store = _store(s3_env.url("no-such-bucket", "p"))
    for op in (
        lambda: store.put_bytes(b"x"),
        lambda: store.exists("sha256:" + "1" * 64),
        lambda: store.get_bytes("sha256:" + "1" * 64),
        lambda: list(store.iter_blobs()),
    ):
        with pytest.raises(ArtifactStoreAccessError, match="s3://no-such-bucket/") as err:
            op()
        assert not err.value.retryable


def test_access_denied_names_bucket_and_key_and_never_the_secret(
    s3_url: Callable[..., str], bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-do-not-print")
    store = _store(s3_url())
    with pytest.raises(ArtifactStoreAccessError) as err:
        store.put_bytes(b"x")
    text = str(err.value)
    assert f"s3://{bucket}/arts/sha256/" in text
    assert "access denied" in text
    assert "wrong-secret" not in text + repr(store) + repr(err.value.__cause__)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobody")
    with pytest.raises(ArtifactStoreAccessError, match="access denied"):
        store.get_bytes("sha256:" + "2" * 64)


def test_url_refuses_credentials_and_open_store_reads_the_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="by reference"):
        S3Config.parse("s3://AKIA:secret@bucket/p")
    with pytest.raises(ValueError, match="by reference"):
        S3Config.parse("s3://bucket/p?secret_key=abc")
    with pytest.raises(ValueError, match="unknown"):
        S3Config.parse("s3://bucket/p?colour=blue")
    cfg = S3Config.parse("s3://b/a/b/?endpoint=http://127.0.0.1:9&region=r&part_size=16")
    assert (cfg.bucket, cfg.prefix, cfg.region, cfg.part_size) == ("b", "a/b/", "r", 16 * MIB)
    assert str(cfg) == "s3://b/a/b/"
    monkeypatch.setenv("RARA_ARTIFACTS", str(tmp_path / "local"))
    assert repr(open_store()) == f"LocalArtifactStore({str(tmp_path / 'local')!r})"
    monkeypatch.setenv("RARA_ARTIFACTS", "s3://bkt/pre?endpoint=http://127.0.0.1:9")
    assert repr(open_store()) == "S3ArtifactStore('s3://bkt/pre/')"
    assert repr(open_store(tmp_path)).startswith("LocalArtifactStore(")  # explicit wins
    with pytest.raises(ValueError, match="unsupported"):
        open_store("gs://bucket")


def test_empty_blob_and_a_bucket_without_prefix(s3_env: S3Server, bucket: str) -> None:
    store = open_store(s3_env.url(bucket))
    empty = store.put_bytes(b"")
    assert empty.digest == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert store.get_bytes(empty) == b""
    with store.open_writer() as w:
        pass
    assert w.ref == empty
    assert [b.digest for b in store.iter_blobs()] == [empty.digest]
    assert _keys(s3_env, bucket) == [empty.key, f"touch/{empty.key}"]
