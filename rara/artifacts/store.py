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

Nothing below ``root`` is followed through a link: every blob, shard and temp file is opened
relative to a directory descriptor walked down from ``root`` with ``O_NOFOLLOW``, so a symlink
planted in the store (a blob, a shard directory, ``tmp/``) is refused with
:class:`ArtifactStoreUnsafe` naming the path inside the store, never read, hashed, written
through or deleted through. (``root`` itself is configuration and may be a link.) A link where
a blob belongs is replaced by the real blob when that content is written again: a rename never
follows its target's link.

Garbage collection lives elsewhere; it gets :meth:`LocalArtifactStore.iter_blobs`,
:meth:`LocalArtifactStore.delete` and :meth:`LocalArtifactStore.remove_stale_temporaries`
(which spares temp files a live writer may still be producing: :func:`is_in_flight`).
"""

from __future__ import annotations

import contextlib
import errno
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
from rara.artifacts.errors import ArtifactCorrupted, ArtifactNotFound, ArtifactStoreUnsafe
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
# Below the root nothing is followed through a link (the module's docstring).
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted where a blob belongs must not hang the open; fstat refuses it.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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
    try:
        mtime = p.lstat().st_mtime
    except FileNotFoundError:
        return False
    return _in_flight(p.name, mtime, stale_after)


def _in_flight(name: str, mtime: float, stale_after: float) -> bool:
    m = _TMP_NAME.search(name)
    if m is None:
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


def _unsafe(where: str) -> ArtifactStoreUnsafe:
    return ArtifactStoreUnsafe(
        where,
        "a symbolic link or a file of the wrong kind where the "
        "artifact store keeps its own; refused, not followed",
    )


def _open_below(dir_fd: int | None, name: str, where: str) -> int:
    """The directory ``name`` (in ``dir_fd``, or a path), never through a link at its last
    component (``where``: its path in the store, for the error)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe(where) from None
        raise


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
        # tmp/ stays open for the writer's life: the file is created, renamed and removed
        # relative to it, whatever becomes of the path meanwhile.
        self._tmp_dir_fd, self._tmp_name, self._file = store._new_tmp()
        super().__init__(self._file, media_type)

    @property
    def tmp_path(self) -> Path:
        return self._store.tmp_dir / self._tmp_name

    def _store_blob(self, hexdigest: str) -> None:
        try:
            self._file.flush()
            fd = self._file.fileno()
            os.fchmod(fd, _BLOB_MODE)
            if self._store.durable:
                os.fsync(fd)
            self._check_still_ours(os.fstat(fd))
            self._file.close()
            self._store._install(self._tmp_dir_fd, self._tmp_name, hexdigest, self._size)
        except BaseException:
            self._discard()
            raise
        os.close(self._tmp_dir_fd)

    def _check_still_ours(self, mine: os.stat_result) -> None:
        """The name about to be renamed onto the blob is still the file written (not a link
        or another file swapped in under it)."""
        try:
            there = os.stat(self._tmp_name, dir_fd=self._tmp_dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            raise ArtifactStoreUnsafe(
                f"tmp/{self._tmp_name}", "the temp file was replaced while being written; refused"
            )

    def _discard(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp_name, dir_fd=self._tmp_dir_fd)  # a link is removed, not followed
        os.close(self._tmp_dir_fd)


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
        """True if the blob is there as the store's own regular file (a link is not)."""
        hexd = parse_digest(ref).removeprefix("sha256:")
        try:
            shard = self._open_dir("sha256", hexd[:2])
        except FileNotFoundError:
            return False
        try:
            st = os.stat(hexd[2:], dir_fd=shard, follow_symlinks=False)
        except FileNotFoundError:
            return False
        finally:
            os.close(shard)
        return stat.S_ISREG(st.st_mode)

    # ---- walking below the root, links refused ------------------------------------------

    def _open_dir(self, *parts: str, create: bool = False) -> int:
        """A descriptor of ``root/<parts>``: see :meth:`_walk`."""
        return self._walk(parts, create)[0]

    def _walk(self, parts: tuple[str, ...], create: bool) -> tuple[int, bool]:
        """(a descriptor of ``root/<parts>``, whether a part was made). The first part is
        opened by its path (the root's own components are configuration, followed), each
        next one relative to the one above, all with ``O_NOFOLLOW``: a link swapped in
        meanwhile is refused too. ``create``: make missing parts. FileNotFoundError if one
        is missing; :class:`ArtifactStoreUnsafe` if one is a link or not a directory."""
        made = False
        fd: int | None = None
        try:
            for i, part in enumerate(parts):
                where = "/".join(parts[: i + 1])
                parent = os.path.join(self.root, part) if fd is None else part
                try:
                    child = _open_below(fd, parent, where)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(parent, dir_fd=fd)
                        made = True
                    child = _open_below(fd, parent, where)
                if fd is not None:
                    os.close(fd)
                fd = child
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        assert fd is not None, "no parts to walk"
        return fd, made

    def _open_blob_fd(self, hexd: str) -> int:
        """The blob opened read-only, never through a link. FileNotFoundError if it is not
        there; :class:`ArtifactStoreUnsafe` (naming the path inside the store) if it or a
        directory above it is a link or not what the store puts there."""
        where = f"sha256/{hexd[:2]}/{hexd[2:]}"
        shard = self._open_dir("sha256", hexd[:2])
        try:
            fd = os.open(hexd[2:], _READ_FLAGS, dir_fd=shard)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _unsafe(where) from None
            raise
        finally:
            os.close(shard)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _unsafe(where)
        return fd

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
        if self._existing_is_valid(hexd, mv.nbytes):
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

    def _new_tmp(self) -> tuple[int, str, io.BufferedWriter]:
        """(descriptor of tmp/, the new temp file's name in it, the file open for writing)."""
        dir_fd = self._open_dir("tmp", create=True)  # recreated if removed from under us
        name = _tmp_name()
        try:
            # O_EXCL: never clobber, nor open through a link; 0o666 & ~umask like any file.
            fd = os.open(name, _NEW_FLAGS, 0o666, dir_fd=dir_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        return dir_fd, name, io.BufferedWriter(io.FileIO(fd, "wb"), CHUNK_SIZE)

    def _install(self, tmp_dir_fd: int, tmp_name: str, hexd: str, size: int) -> None:
        """Move a finished, fsynced, read-only temp file onto its content address."""
        shard, new_dir = self._walk(("sha256", hexd[:2]), create=True)
        try:
            if self._valid_in(shard, hexd, size):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_name, dir_fd=tmp_dir_fd)
                return
            # Missing, corrupt or a link: (re)place it (a rename replaces a link, never
            # follows it). Racing writers of the same content each rename a complete copy of
            # the same bytes, so whichever lands last is equally good.
            os.replace(tmp_name, hexd[2:], src_dir_fd=tmp_dir_fd, dst_dir_fd=shard)
            if self.durable:
                os.fsync(shard)
        finally:
            os.close(shard)
        if self.durable and new_dir:
            blobs = self._open_dir("sha256")
            try:
                os.fsync(blobs)
            finally:
                os.close(blobs)

    def _existing_is_valid(self, hexd: str, size: int) -> bool:
        """True if the blob is stored, exactly; bumps its mtime (GC grace) if so."""
        try:
            shard = self._open_dir("sha256", hexd[:2])
        except FileNotFoundError:
            return False
        try:
            return self._valid_in(shard, hexd, size)
        finally:
            os.close(shard)

    def _valid_in(self, shard: int, hexd: str, size: int) -> bool:
        """True if the shard directory ``shard`` holds exactly the blob ``hexd`` as a regular
        file (a link there is not valid: it is replaced, never read)."""
        try:
            fd = os.open(hexd[2:], _READ_FLAGS, dir_fd=shard)
        except FileNotFoundError:  # not there, or deleted meanwhile (GC): write it afresh
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return False
            raise
        with io.FileIO(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return False
            if self._hash(f) != hexd:
                return False
            # Tell an mtime-based GC this blob was just produced again. Best effort: needs
            # ownership of the file, which a shared volume may not give us.
            with contextlib.suppress(OSError):
                os.utime(fd)
        return True

    def _hash(self, f: io.FileIO) -> str:
        h = hashlib.sha256()
        buf = bytearray(self.chunk_size)
        view = memoryview(buf)
        while n := f.readinto(view):
            h.update(view[:n])
        return h.hexdigest()

    # ---- reading ------------------------------------------------------------------------

    def _open_blob(self, digest: str) -> tuple[Path, io.FileIO]:
        hexd = digest.removeprefix("sha256:")
        try:
            fd = self._open_blob_fd(hexd)
        except FileNotFoundError:
            raise ArtifactNotFound(digest, str(self.root)) from None
        return self._blob_path(hexd), io.FileIO(fd, "rb")  # caller closes

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
            blobs = self._open_dir("sha256")
        except FileNotFoundError:
            return
        try:
            fans = [
                f.name
                for f in os.scandir(blobs)
                if _HEX2.match(f.name) and f.is_dir(follow_symlinks=False)
            ]
            for fan in fans:
                try:
                    fan_fd = _open_below(blobs, fan, f"sha256/{fan}")
                except (FileNotFoundError, ArtifactStoreUnsafe):  # gone, or a link: not ours
                    continue
                try:
                    found = []
                    for entry in os.scandir(fan_fd):
                        if not _HEX62.match(entry.name):
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            found.append(
                                BlobInfo(f"sha256:{fan}{entry.name}", st.st_size, st.st_mtime)
                            )
                finally:
                    os.close(fan_fd)
                yield from found
        finally:
            os.close(blobs)

    def delete(self, ref: ArtifactRef | str) -> bool:
        """Remove a blob; False if it was not there. Fan-out directories are kept (a
        concurrent writer may be about to rename into one)."""
        hexd = parse_digest(ref).removeprefix("sha256:")
        try:
            shard = self._open_dir("sha256", hexd[:2])
        except FileNotFoundError:
            return False
        try:
            os.unlink(hexd[2:], dir_fd=shard)  # a link is removed, never followed
        except FileNotFoundError:
            return False
        finally:
            os.close(shard)
        return True

    def remove_stale_temporaries(self, older_than: float, *, dry_run: bool = False) -> int:
        """Remove temp files untouched since ``older_than`` (epoch s) and not in flight."""
        removed = 0
        try:
            tmp = self._open_dir("tmp")
        except FileNotFoundError:
            return 0
        try:
            for entry in list(os.scandir(tmp)):
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue
                if mtime < older_than and not _in_flight(entry.name, mtime, DEFAULT_STALE_AFTER_S):
                    if not dry_run:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.name, dir_fd=tmp)
                    removed += 1
        finally:
            os.close(tmp)
        return removed


if TYPE_CHECKING:
    from rara.artifacts.api import ArtifactStore
    from rara.context import ArtifactStoreAPI

    def _implements_protocol(store: LocalArtifactStore) -> ArtifactStoreAPI:
        return store

    def _implements_store(store: LocalArtifactStore) -> ArtifactStore:
        return store
