"""LocalArtifactStore: content addressing, dedup, atomicity, verification, concurrency."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from rara.artifacts.errors import ArtifactCorrupted, ArtifactError, ArtifactNotFound
from rara.artifacts.ref import ArtifactRef
from rara.artifacts.store import (
    TMP_PREFIX,
    BlobInfo,
    LocalArtifactStore,
    is_in_flight,
    parse_digest,
)

REPO = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "store")


def blobs(store: LocalArtifactStore) -> list[BlobInfo]:
    return sorted(store.iter_blobs())


def tmp_files(store: LocalArtifactStore) -> list[str]:
    return sorted(os.listdir(store.tmp_dir))


def corrupt(path: Path) -> None:
    """Flip one byte of a (read-only) blob in place."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


# ---- basics ---------------------------------------------------------------------------


def test_put_bytes_layout_mode_and_roundtrip(store: LocalArtifactStore) -> None:
    data = b"hello artifacts"
    ref = store.put_bytes(data)
    assert ref == ArtifactRef(sha(data), len(data))
    path = store.path_of(ref)
    assert path == store.root / "sha256" / ref.hex[:2] / ref.hex[2:]
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert store.exists(ref)
    assert store.exists(ref.digest)
    assert store.get_bytes(ref) == data
    assert store.get_bytes(ref.digest) == data
    assert tmp_files(store) == []


def test_same_content_twice_stored_once(store: LocalArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(100_000)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    r1 = store.put_bytes(data)
    r2 = store.put_bytes(data)
    r3 = store.put_file(src)
    with store.open_writer() as w:
        w.write(data[:10])
        w.write(data[10:])
    assert r1 == r2 == r3 == w.ref
    assert [b.digest for b in blobs(store)] == [r1.digest]
    assert blobs(store)[0].size == len(data)
    assert tmp_files(store) == []


def test_empty_blob(store: LocalArtifactStore, tmp_path: Path) -> None:
    ref = store.put_bytes(b"")
    assert ref.digest == sha(b"")
    assert ref.size == 0
    assert store.get_bytes(ref) == b""
    assert store.get_file(ref, tmp_path / "e").size == 0
    assert (tmp_path / "e").read_bytes() == b""


def test_media_type_passes_through(store: LocalArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "a.json"
    src.write_bytes(b"{}")
    assert store.put_bytes(b"{}", media_type="application/json").media_type == "application/json"
    assert store.put_file(src, media_type="application/json").media_type == "application/json"
    with store.open_writer(media_type="text/plain") as w:
        w.write(b"{}")
    assert w.ref.media_type == "text/plain"
    assert w.ref.digest == sha(b"{}")
    got = store.get_file(w.ref, tmp_path / "out")
    assert got == w.ref
    assert store.get_file(w.ref.digest, tmp_path / "out2").media_type == "application/octet-stream"


def test_streamed_writer(store: LocalArtifactStore) -> None:
    h = hashlib.sha256()
    with store.open_writer() as w:
        with pytest.raises(RuntimeError):
            _ = w.ref
        for i in range(200):
            chunk = bytes([i % 256]) * (i * 37 + 1)
            h.update(chunk)
            assert w.write(memoryview(chunk)) == len(chunk)
        assert w.tmp_path.parent == store.tmp_dir
        assert w.tmp_path.name.startswith(TMP_PREFIX)
        assert is_in_flight(w.tmp_path)
    assert w.ref.digest == "sha256:" + h.hexdigest()
    assert w.ref.size == w.size
    assert not w.tmp_path.exists()
    assert w.commit() == w.ref  # idempotent
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x")
    assert hashlib.sha256(store.get_bytes(w.ref)).hexdigest() == h.hexdigest()


def test_writer_exception_discards(store: LocalArtifactStore) -> None:
    w = store.open_writer()

    def fail() -> None:
        with w:
            w.write(b"partial")
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail()
    assert blobs(store) == []
    assert tmp_files(store) == []
    with pytest.raises(RuntimeError):
        _ = w.ref
    w2 = store.open_writer()
    w2.write(b"x")
    w2.abort()
    w2.abort()
    assert tmp_files(store) == []


def test_not_found_names_digest(store: LocalArtifactStore, tmp_path: Path) -> None:
    digest = sha(b"never stored")
    assert not store.exists(digest)
    with pytest.raises(ArtifactNotFound, match=digest) as ei:
        store.get_bytes(digest)
    assert ei.value.digest == digest
    assert isinstance(ei.value, ArtifactError)
    with pytest.raises(ArtifactNotFound, match=digest):
        store.get_file(ArtifactRef(digest, 3), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert os.listdir(tmp_path) == ["store"]


def test_bad_digest_rejected(store: LocalArtifactStore) -> None:
    for bad in ("abc", "sha256:XYZ", "md5:" + "0" * 32, "0" * 64, "sha256:" + "A" * 64):
        with pytest.raises(ValueError, match="sha256"):
            store.get_bytes(bad)
    assert parse_digest("sha256:" + "a" * 64) == "sha256:" + "a" * 64


# ---- corruption -----------------------------------------------------------------------


def test_corruption_detected_on_get_bytes(store: LocalArtifactStore) -> None:
    data = os.urandom(10_000)
    ref = store.put_bytes(data)
    corrupt(store.path_of(ref))
    with pytest.raises(ArtifactCorrupted, match=ref.digest) as ei:
        store.get_bytes(ref)
    assert ei.value.digest == ref.digest
    assert ei.value.actual != ref.digest
    assert isinstance(ei.value, ArtifactError)
    with pytest.raises(ArtifactCorrupted):
        store.get_bytes(ref.digest)


def test_corruption_detected_on_get_file_and_partial_removed(
    store: LocalArtifactStore, tmp_path: Path
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several chunks: bytes hit dest before the check
    ref = store.put_bytes(data)
    corrupt(store.path_of(ref))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dest = out_dir / "model.bin"
    with pytest.raises(ArtifactCorrupted, match=ref.digest):
        store.get_file(ref, dest)
    assert os.listdir(out_dir) == []  # neither dest nor the temp beside it
    # An existing dest is left as it was.
    dest.write_bytes(b"old")
    with pytest.raises(ArtifactCorrupted, match=ref.digest):
        store.get_file(ref.digest, dest)
    assert os.listdir(out_dir) == ["model.bin"]
    assert dest.read_bytes() == b"old"


def test_ref_size_mismatch_is_corruption(store: LocalArtifactStore, tmp_path: Path) -> None:
    ref = store.put_bytes(b"abc")
    wrong = ArtifactRef(ref.digest, 4)
    with pytest.raises(ArtifactCorrupted, match="ref says 4 bytes"):
        store.get_bytes(wrong)
    with pytest.raises(ArtifactCorrupted):
        store.get_file(wrong, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_corrupt_blob_is_replaced_by_next_write(store: LocalArtifactStore) -> None:
    data = os.urandom(5000)
    ref = store.put_bytes(data)
    corrupt(store.path_of(ref))
    assert store.put_bytes(data) == ref
    assert store.get_bytes(ref) == data
    corrupt(store.path_of(ref))
    with store.open_writer() as w:
        w.write(data)
    assert store.get_bytes(ref) == data
    assert stat.S_IMODE(store.path_of(ref).stat().st_mode) == 0o444
    assert tmp_files(store) == []


def test_truncated_blob_is_replaced(store: LocalArtifactStore) -> None:
    data = os.urandom(5000)
    ref = store.put_bytes(data)
    path = store.path_of(ref)
    os.chmod(path, 0o644)
    os.truncate(path, 100)
    assert store.put_bytes(data) == ref
    assert store.get_bytes(ref) == data


# ---- get_file / large -----------------------------------------------------------------


def test_get_file_roundtrip(store: LocalArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(2_500_000)
    ref = store.put_bytes(data, media_type="application/x-npy")
    dest = tmp_path / "d.npy"
    dest.write_bytes(b"overwritten")
    assert store.get_file(ref, dest) == ref
    assert dest.read_bytes() == data
    assert os.access(dest, os.W_OK)  # the copy is the caller's, not read-only
    assert sorted(os.listdir(tmp_path)) == ["d.npy", "store"]


def test_large_file_streamed(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    size = 50 * 1024 * 1024
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    block = os.urandom(1024 * 1024)
    with open(src, "wb") as f:
        for i in range(size // len(block)):
            chunk = bytes([i % 256]) + block[1:]
            h.update(chunk)
            f.write(chunk)
    expected = "sha256:" + h.hexdigest()
    tracemalloc.start()
    try:
        ref = store.put_file(src)
        got = store.get_file(ref, tmp_path / "copy.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ref.digest == expected
    assert ref.size == size
    assert got == ref
    assert peak < 8 * 1024 * 1024, f"peak python allocation {peak} bytes: not streamed"
    h2 = hashlib.sha256()
    with open(tmp_path / "copy.bin", "rb") as f:
        while chunk := f.read(1 << 20):
            h2.update(chunk)
    assert "sha256:" + h2.hexdigest() == expected
    assert store.put_file(src) == ref  # dedup path on a large blob
    assert [b.digest for b in blobs(store)] == [expected]


# ---- concurrency ----------------------------------------------------------------------


def test_concurrent_threads_same_content(store: LocalArtifactStore) -> None:
    data = os.urandom(4 * 1024 * 1024)
    n = 16
    barrier = threading.Barrier(n)
    refs: list[ArtifactRef] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                if i % 2:
                    r = store.put_bytes(data)
                else:
                    with store.open_writer() as w:
                        for off in range(0, len(data), 1 << 16):
                            w.write(data[off : off + (1 << 16)])
                    r = w.ref
                with lock:
                    refs.append(r)
                assert store.get_bytes(r) == data
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {r.digest for r in refs} == {sha(data)}
    assert len(refs) == 3 * n
    assert [b.digest for b in blobs(store)] == [sha(data)]
    assert store.get_bytes(sha(data)) == data
    assert tmp_files(store) == []


_CHILD = textwrap.dedent(
    """
    import hashlib, pathlib, sys, threading, time
    from rara.artifacts.store import LocalArtifactStore

    root, ready, go = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    store = LocalArtifactStore(root)
    data = pathlib.Path(sys.argv[4]).read_bytes()
    ready.touch()
    deadline = time.monotonic() + 30
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.001)
    out = set()
    def work(i):
        for _ in range(4):
            if i % 2:
                ref = store.put_bytes(data)
            else:
                with store.open_writer() as w:
                    for off in range(0, len(data), 65536):
                        w.write(data[off:off + 65536])
                ref = w.ref
            out.add(ref.digest)
            assert store.get_bytes(ref) == data
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    print(" ".join(sorted(out)))
    """
)


def test_concurrent_processes_and_threads_same_content(
    store: LocalArtifactStore, tmp_path: Path
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(data)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    for i in range(2):
        ready = tmp_path / f"ready{i}"
        cmd = [sys.executable, "-c", _CHILD, str(store.root), str(ready), str(go), str(payload)]
        procs.append(
            (ready, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
        )
    deadline = time.monotonic() + 30
    while not all(r.exists() for r, _ in procs):
        assert time.monotonic() < deadline, "children did not start"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs]
        time.sleep(0.01)

    parent_refs: list[str] = []

    def work() -> None:
        for _ in range(3):
            parent_refs.append(store.put_bytes(data).digest)

    threads = [threading.Thread(target=work) for _ in range(4)]
    go.touch()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _, p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
        assert out.decode().split() == [sha(data)]
    assert set(parent_refs) == {sha(data)}
    assert [b.digest for b in blobs(store)] == [sha(data)]
    assert store.get_bytes(sha(data)) == data
    assert tmp_files(store) == []


# ---- GC support -----------------------------------------------------------------------


def test_iter_blobs_and_delete(store: LocalArtifactStore) -> None:
    refs = [store.put_bytes(bytes([i]) * (i + 1)) for i in range(20)]
    # Noise GC must not mistake for blobs.
    (store.blob_dir / "zz").mkdir()
    (store.blob_dir / refs[0].hex[:2] / "not-a-blob").write_bytes(b"")
    infos = {b.digest: b for b in store.iter_blobs()}
    assert set(infos) == {r.digest for r in refs}
    for r in refs:
        assert infos[r.digest].size == r.size
        assert abs(infos[r.digest].mtime - time.time()) < 60
    digest, size, mtime = infos[refs[3].digest]  # unpacks as a tuple
    assert (digest, size) == (refs[3].digest, 4)
    assert mtime > 0
    assert store.delete(refs[3]) is True
    assert store.delete(refs[3].digest) is False
    assert not store.exists(refs[3])
    with pytest.raises(ArtifactNotFound):
        store.get_bytes(refs[3])
    assert len(list(store.iter_blobs())) == 19
    # Deleted content can be stored again.
    assert store.put_bytes(bytes([3]) * 4) == refs[3]
    assert store.exists(refs[3])


def test_dedup_bumps_mtime(store: LocalArtifactStore) -> None:
    ref = store.put_bytes(b"keep me")
    path = store.path_of(ref)
    os.utime(path, (1_000_000, 1_000_000))
    store.put_bytes(b"keep me")
    assert path.stat().st_mtime > 1_000_000 + 1


def test_is_in_flight(store: LocalArtifactStore, tmp_path: Path) -> None:
    w = store.open_writer()
    w.write(b"data")
    assert store.is_in_flight(w.tmp_path)
    assert is_in_flight(w.tmp_path)
    # Same host, dead writer.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    dead_pid = int(dead.stdout)
    host = w.tmp_path.name.split(".")[1]
    stale = store.tmp_dir / f"{TMP_PREFIX}{host}.{dead_pid}.{'0' * 32}"
    stale.write_bytes(b"")
    assert not is_in_flight(stale)
    # Another host: judged by age.
    other = store.tmp_dir / f"{TMP_PREFIX}some-other-host.{os.getpid()}.{'1' * 32}"
    other.write_bytes(b"")
    assert is_in_flight(other)
    os.utime(other, (time.time() - 100, time.time() - 100))
    assert not is_in_flight(other, stale_after=50)
    assert is_in_flight(other, stale_after=500)
    # Not temp files / gone.
    assert not is_in_flight(store.tmp_dir / "something-else")
    assert not is_in_flight(store.tmp_dir / f"{TMP_PREFIX}h.{os.getpid()}.{'2' * 32}")
    w.abort()
    assert not is_in_flight(w.tmp_path)
