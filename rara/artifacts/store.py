"""Content-addressed artifact store on a local (or shared, POSIX) filesystem.

Layout under ``root``::

    sha256/ab/cdef…        one read-only (0444) file per blob, named by its sha256
    tmp/rara-tmp.<host>.<pid>.<random>   blobs being written

Write protocol: bytes stream into a temp file in ``tmp/`` (same filesystem as the blobs)
while being hashed; the file is fsynced, made read-only and ``os.replace``-d onto its
content address, then the directory is fsynced. The hash computed while writing *is* the
name, so a blob can never be stored under the wrong digest. If a valid blob is already
there the temp file is discarded (stored once); if the one there is corrupt it is replaced.

Concurrent writers of the same content (threads or processes, even on different hosts
sharing the volume) are safe without locks: each writes its own temp file and the rename
is atomic, so readers see either no blob or a complete one, and every candidate has the
same bytes.

Reads verify: ``get_bytes`` and ``get_file`` re-hash what they read and raise
:class:`ArtifactCorrupted` on mismatch. ``get_file`` streams into a temp file beside the
destination and renames it into place only after the digest checked out, so ``dest`` is
never left partially written (and an existing ``dest`` is untouched on failure).

Garbage collection lives elsewhere; it gets :meth:`LocalArtifactStore.iter_blobs`,
:meth:`LocalArtifactStore.delete` and :meth:`LocalArtifactStore.remove_stale_temporaries`
(which spares temp files a live writer may still be producing: :func:`is_in_flight`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rara.artifacts.api import BlobInfo
from rara.artifacts.errors import ArtifactCorrupted, ArtifactNotFound
from rara.artifacts.ref import ArtifactRef
from rara.artifacts.writer import HashingWriter

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_MEDIA_TYPE",
    "TMP_PREFIX",
    "ArtifactWriter",
    "BlobInfo",
    "LocalArtifactStore",
    "is_in_flight",
    "parse_digest",
]

DEFAULT_MEDIA_TYPE: Final = "application/octet-stream"
CHUNK_SIZE: Final = 1 << 20
TMP_PREFIX: Final = "rara-tmp."
#: A temp file untouched for this long is considered abandoned even if its writer's pid
#: cannot be checked (another host) or has been reused.
DEFAULT_STALE_AFTER_S: Final = 24 * 3600.0

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_HEX62 = re.compile(r"^[0-9a-f]{62}$")
_TMP_NAME = re.compile(
    r"(?:^|\.)" + re.escape(TMP_PREFIX) + r"(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]{32}$"
)
_HOST: Final = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:63] or "localhost"
_BLOB_MODE: Final = 0o444


def parse_digest(ref: ArtifactRef | str) -> str:
    """Return the ``sha256:<64 hex>`` digest of a ref or digest string (ValueError if bad)."""
    if isinstance(ref, ArtifactRef):
        return ref.digest
    hexd = ref.removeprefix("sha256:")
    if not ref.startswith("sha256:") or not _HEX64.match(hexd):
        raise ValueError(f"artifact digest must look like sha256:<64 hex>, got {ref!r}")
    return ref


def _tmp_name(stem: str = "") -> str:
    return f"{stem}{TMP_PREFIX}{_HOST}.{os.getpid()}.{uuid.uuid4().hex}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_in_flight(
    path: str | os.PathLike[str], *, stale_after: float = DEFAULT_STALE_AFTER_S
) -> bool:
    """True if ``path`` is a store temp file that a writer may still be producing.

    A temp file is *not* in flight when its name is not a temp name, it is gone, its writer
    ran on this host and that process is dead, or it has not been written to for
    ``stale_after`` seconds (covers other hosts and pid reuse). GC must leave in-flight
    files alone and may delete the rest of ``tmp_dir``.
    """
    p = Path(path)
    m = _TMP_NAME.search(p.name)
    if m is None:
        return False
    try:
        mtime = p.stat().st_mtime
    except FileNotFoundError:
        return False
    if m["host"] == _HOST and not _pid_alive(int(m["pid"])):
        return False
    return time.time() - mtime < stale_after


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _open_new(path: Path) -> io.BufferedWriter:
    # O_EXCL: never clobber; 0o666 & ~umask for the mode like any new file.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    return io.BufferedWriter(io.FileIO(fd, "wb"), CHUNK_SIZE)


class ArtifactWriter(HashingWriter):
    """Streams bytes into the local store through a temp file beside the blobs; on commit the
    file is fsynced, named by its hash and moved into place (``LocalArtifactStore.open_writer``).
    """

    def __init__(self, store: LocalArtifactStore, media_type: str = DEFAULT_MEDIA_TYPE) -> None:
        self._store = store
        self._tmp_path, self._file = store._new_tmp()
        super().__init__(self._file, media_type)

    @property
    def tmp_path(self) -> Path:
        return self._tmp_path

    def _store_blob(self, hexdigest: str) -> None:
        try:
            self._file.flush()
            fd = self._file.fileno()
            os.fchmod(fd, _BLOB_MODE)
            if self._store.durable:
                os.fsync(fd)
            self._file.close()
            self._store._install(self._tmp_path, hexdigest, self._size)
        except BaseException:
            self._file.close()
            _unlink_quietly(self._tmp_path)
            raise

    def _discard(self) -> None:
        self._file.close()
        _unlink_quietly(self._tmp_path)


class LocalArtifactStore:
    """Content-addressed blob store in a directory (implements ``ArtifactStoreAPI``).

    ``durable=False`` skips the fsyncs (tests, scratch stores); everything else is the same.
    Instances hold no mutable state and are safe to share between threads.
    """

    def __init__(
        self, root: str | os.PathLike[str], *, durable: bool = True, chunk_size: int = CHUNK_SIZE
    ) -> None:
        if chunk_size <= 0:
            raise ValueError("chunk_size must be > 0")
        self.root = Path(root)
        self.blob_dir = self.root / "sha256"
        self.tmp_dir = self.root / "tmp"
        self.durable = durable
        self.chunk_size = chunk_size
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalArtifactStore({str(self.root)!r})"

    # ---- addressing ---------------------------------------------------------------------

    def path_of(self, ref: ArtifactRef | str) -> Path:
        """Where the blob for ``ref`` lives (whether or not it is there)."""
        return self._blob_path(parse_digest(ref).removeprefix("sha256:"))

    def _blob_path(self, hexd: str) -> Path:
        return self.blob_dir / hexd[:2] / hexd[2:]

    def exists(self, ref: ArtifactRef | str) -> bool:
        return self.path_of(ref).is_file()

    @staticmethod
    def is_in_flight(
        path: str | os.PathLike[str], *, stale_after: float = DEFAULT_STALE_AFTER_S
    ) -> bool:
        """See :func:`is_in_flight`."""
        return is_in_flight(path, stale_after=stale_after)

    # ---- writing ------------------------------------------------------------------------

    def open_writer(self, media_type: str = DEFAULT_MEDIA_TYPE) -> ArtifactWriter:
        """A writer to stream a blob in; commit (or leave the ``with`` block) for the ref."""
        return ArtifactWriter(self, media_type)

    def put_bytes(
        self, data: bytes | bytearray | memoryview, media_type: str = DEFAULT_MEDIA_TYPE
    ) -> ArtifactRef:
        mv = memoryview(data).cast("B")
        hexd = hashlib.sha256(mv).hexdigest()
        if self._existing_is_valid(self._blob_path(hexd), hexd, mv.nbytes):
            # Stored already: skip the write and fsync entirely.
            return ArtifactRef(f"sha256:{hexd}", mv.nbytes, media_type)
        with self.open_writer(media_type) as w:
            w.write(mv)
        return w.ref

    def put_file(
        self, path: str | os.PathLike[str], media_type: str = DEFAULT_MEDIA_TYPE
    ) -> ArtifactRef:
        """Store a file's contents, streamed in ``chunk_size`` pieces (never read whole)."""
        buf = bytearray(self.chunk_size)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as src, self.open_writer(media_type) as w:
            while n := src.readinto(view):
                w.write(view[:n])
        return w.ref

    def _new_tmp(self) -> tuple[Path, io.BufferedWriter]:
        path = self.tmp_dir / _tmp_name()
        try:
            return path, _open_new(path)
        except FileNotFoundError:  # tmp/ removed from under us: recreate once
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
            return path, _open_new(path)

    def _install(self, tmp: Path, hexd: str, size: int) -> None:
        """Move a finished, fsynced, read-only temp file onto its content address."""
        target = self._blob_path(hexd)
        if self._existing_is_valid(target, hexd, size):
            _unlink_quietly(tmp)
            return
        # Missing or corrupt: (re)place it. Racing writers of the same content each rename
        # a complete copy of the same bytes, so whichever lands last is equally good.
        parent = target.parent
        new_dir = not parent.is_dir()
        parent.mkdir(exist_ok=True)
        os.replace(tmp, target)
        if self.durable:
            _fsync_dir(parent)
            if new_dir:
                _fsync_dir(self.blob_dir)

    def _existing_is_valid(self, target: Path, hexd: str, size: int) -> bool:
        """True if ``target`` holds exactly the blob; bumps its mtime (GC grace) if so."""
        try:
            st = target.stat()
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        try:
            actual = self._hash_file(target)
        except FileNotFoundError:  # deleted meanwhile (GC): write it afresh
            return False
        if actual != hexd:
            return False
        # Tell an mtime-based GC this blob was just produced again. Best effort: needs
        # ownership of the file, which a shared volume may not give us.
        with contextlib.suppress(OSError):
            os.utime(target)
        return True

    def _hash_file(self, path: Path) -> str:
        h = hashlib.sha256()
        buf = bytearray(self.chunk_size)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                h.update(view[:n])
        return h.hexdigest()

    # ---- reading ------------------------------------------------------------------------

    def _open_blob(self, digest: str) -> tuple[Path, io.FileIO]:
        path = self._blob_path(digest.removeprefix("sha256:"))
        try:
            return path, open(path, "rb", buffering=0)  # caller closes
        except (FileNotFoundError, NotADirectoryError):
            raise ArtifactNotFound(digest, str(self.root)) from None

    @staticmethod
    def _check(ref: ArtifactRef | str, digest: str, actual_hex: str, size: int, path: Path) -> None:
        actual = f"sha256:{actual_hex}"
        if actual != digest:
            raise ArtifactCorrupted(digest, actual, str(path))
        if isinstance(ref, ArtifactRef) and ref.size != size:
            raise ArtifactCorrupted(
                digest, actual, str(path), f"ref says {ref.size} bytes, blob has {size}"
            )

    def get_bytes(self, ref: ArtifactRef | str) -> bytes:
        """The blob's bytes, verified against the digest (and the ref's size)."""
        digest = parse_digest(ref)
        path, f = self._open_blob(digest)
        with f:
            data = f.read()
        self._check(ref, digest, hashlib.sha256(data).hexdigest(), len(data), path)
        return data

    def get_file(self, ref: ArtifactRef | str, dest: str | os.PathLike[str]) -> ArtifactRef:
        """Copy the blob to ``dest``, streamed and verified; ``dest`` appears atomically.

        Returns the ref (the given one, media type included, or one built from the digest).
        On a digest mismatch raises :class:`ArtifactCorrupted` and leaves nothing behind.
        """
        digest = parse_digest(ref)
        dest_path = Path(dest)
        src_path, src = self._open_blob(digest)
        tmp = dest_path.with_name(_tmp_name(f".{dest_path.name[:100]}."))
        h = hashlib.sha256()
        size = 0
        buf = bytearray(self.chunk_size)
        view = memoryview(buf)
        try:
            with src, _open_new(tmp) as out:
                while n := src.readinto(view):
                    chunk = view[:n]
                    h.update(chunk)
                    out.write(chunk)
                    size += n
                self._check(ref, digest, h.hexdigest(), size, src_path)
                out.flush()
                if self.durable:
                    os.fsync(out.fileno())
            os.replace(tmp, dest_path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        if self.durable:
            _fsync_dir(dest_path.parent)
        if isinstance(ref, ArtifactRef):
            return ref
        return ArtifactRef(digest, size)

    # ---- GC support ---------------------------------------------------------------------

    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every stored blob (digest, size, mtime). Tolerates concurrent writes/deletes."""
        try:
            fans = list(os.scandir(self.blob_dir))
        except FileNotFoundError:
            return
        for fan in fans:
            if not _HEX2.match(fan.name) or not fan.is_dir(follow_symlinks=False):
                continue
            try:
                entries = list(os.scandir(fan.path))
            except FileNotFoundError:
                continue
            for entry in entries:
                if not _HEX62.match(entry.name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    yield BlobInfo(f"sha256:{fan.name}{entry.name}", st.st_size, st.st_mtime)

    def delete(self, ref: ArtifactRef | str) -> bool:
        """Remove a blob; False if it was not there. Fan-out directories are kept (a
        concurrent writer may be about to rename into one)."""
        try:
            self.path_of(ref).unlink()
        except FileNotFoundError:
            return False
        return True

    def remove_stale_temporaries(self, older_than: float, *, dry_run: bool = False) -> int:
        """Remove temp files untouched since ``older_than`` (epoch s) and not in flight."""
        removed = 0
        try:
            entries = list(os.scandir(self.tmp_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                old = entry.stat(follow_symlinks=False).st_mtime < older_than
            except FileNotFoundError:
                continue
            if old and not is_in_flight(entry.path):
                if not dry_run:
                    _unlink_quietly(Path(entry.path))
                removed += 1
        return removed


if TYPE_CHECKING:
    from rara.artifacts.api import ArtifactStore
    from rara.context import ArtifactStoreAPI

    def _implements_protocol(store: LocalArtifactStore) -> ArtifactStoreAPI:
        return store

    def _implements_store(store: LocalArtifactStore) -> ArtifactStore:
        return store
