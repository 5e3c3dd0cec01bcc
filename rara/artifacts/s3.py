"""Content-addressed artifact store in an S3-compatible bucket (AWS, MinIO, Ceph RGW, GCS…).

Layout under ``s3://bucket/prefix/``::

    sha256/ab/cdef…         one object per blob, named by its sha256
    touch/sha256/ab/cdef…   empty; rewritten when a write is deduplicated onto the blob, so
                            GC's grace counts from the latest write (S3 cannot bump mtimes)

Write protocol: the sha256 is computed while the bytes stream (``open_writer`` spools to a
local temp file past one part; ``put_file`` hashes the file, then uploads it), so the key is
known before anything is sent. Then:

1. HEAD the key: already there with the right size → stored once, only the marker is touched.
2. Up to one part: a single PUT with ``If-None-Match: *`` and ``x-amz-checksum-sha256`` (the
   server refuses a body that does not hash to it).
3. Larger: a multipart upload, parts read one at a time and ``concurrency`` in flight (memory
   about ``(concurrency + 1) x part_size``); the parts are re-hashed as they are read and the
   upload is completed — with ``If-None-Match: *`` — only if they hash to the key, else
   aborted. Until completion nothing is visible under the key.

``412 Precondition Failed`` means another writer stored the same bytes first: the blob is
there, which is all a content-addressed write wants, and nothing is overwritten. Reads stream
and re-hash; a mismatch raises :class:`ArtifactCorrupted` and leaves nothing behind.

Every request is retried with exponential backoff (2 s at most between tries, full jitter) on
throttling, timeouts, 5xx and connection errors for ``retry_seconds`` (30 s by default: a
restarted S3 pod or a failover costs retries, not the step's attempt), within ``attempts``
tries (:class:`ArtifactStoreUnavailable` once either is spent);
access denied, bad credentials and a missing bucket raise
:class:`ArtifactStoreAccessError` at once, naming bucket and key.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import os
import random
import re
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, TypeVar
from xml.sax.saxutils import escape

import structlog
import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

from rara.artifacts.api import BlobInfo
from rara.artifacts.errors import (
    ArtifactCorrupted,
    ArtifactNotFound,
    ArtifactStoreAccessError,
    ArtifactStoreUnavailable,
)
from rara.artifacts.location import S3Config
from rara.artifacts.ref import ArtifactRef
from rara.artifacts.s3_client import error_code, is_access_error, is_transient, make_client
from rara.artifacts.store import CHUNK_SIZE, DEFAULT_MEDIA_TYPE, parse_digest
from rara.artifacts.writer import HashingWriter

__all__ = ["S3ArtifactStore", "S3ArtifactWriter", "make_client"]

# minio's private request methods, and why (minio 7.2.20, the latest, pinned exactly; the tests
# against a real server guard each). The public API has no equivalent that keeps what the store
# needs — a create that never overwrites, and a blob verified before it becomes visible:
# - ``_put_object``: ``put_object`` turns every header that is not ``x-amz-*`` or a content
#   header into user metadata, so ``If-None-Match: *`` would arrive as ``x-amz-meta-if-none-
#   match`` and the create would no longer be conditional.
# - ``_create_multipart_upload``, ``_upload_part``, ``_abort_multipart_upload``: no public
#   form; ``put_object`` uses them inside and completes the upload by itself when the input
#   ends (unconditionally, before the store has checked the parts' digest).
# - ``_list_multipart_uploads``: no public form; GC lists the uploads a killed writer left.
# - ``_execute`` for CompleteMultipartUpload: ``_complete_multipart_upload`` (private too)
#   takes no headers, so it cannot send ``If-None-Match``.
# The touch marker needs none of that and uses the public ``put_object``.

log = structlog.get_logger("rara.artifacts.s3")
T = TypeVar("T")

MAX_PARTS: Final = 10_000
_PAGE: Final = 1000
_BLOB_KEY = re.compile(r"^([0-9a-f]{2})/([0-9a-f]{62})$")


class S3ArtifactWriter(HashingWriter):
    """Streams a blob in, hashing as it goes; uploads on commit (``S3ArtifactStore.open_writer``).

    Spools in memory up to one part, then in an anonymous local temp file (gone with the
    process, whatever happens), so memory stays bounded however large the blob.
    """

    def __init__(self, store: S3ArtifactStore, media_type: str = DEFAULT_MEDIA_TYPE) -> None:
        self._store = store
        self._spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - closed by commit/abort
            max_size=store.cfg.part_size, dir=store.spool_dir
        )
        super().__init__(self._spool, media_type)

    def _store_blob(self, hexdigest: str) -> None:
        try:
            self._spool.seek(0)
            self._store._upload(self._spool, hexdigest, self._size, self._media_type)
        finally:
            self._spool.close()

    def _discard(self) -> None:
        self._spool.close()


class S3ArtifactStore:
    """Content-addressed blob store in ``s3://bucket/prefix`` (implements ``ArtifactStore``).

    Thread safe; holds a connection pool. ``client`` and ``sleep`` are for tests.
    """

    def __init__(
        self,
        cfg: S3Config,
        *,
        client: Minio | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        backoff_base: float = 0.1,
        backoff_cap: float = 2.0,
    ) -> None:
        self.cfg = cfg
        self.bucket = cfg.bucket
        self.prefix = cfg.prefix
        self.client = client if client is not None else make_client(cfg)
        self.spool_dir = os.fspath(spool_dir) if spool_dir is not None else None
        self._sleep = sleep
        self._clock = clock
        self._backoff = (backoff_base, backoff_cap)
        self._bucket_checked = threading.Event()

    def __repr__(self) -> str:
        return f"S3ArtifactStore({str(self.cfg)!r})"

    # ---- addressing -------------------------------------------------------------------------

    def key_of(self, ref: ArtifactRef | str) -> str:
        hexd = parse_digest(ref).removeprefix("sha256:")
        return f"{self.prefix}sha256/{hexd[:2]}/{hexd[2:]}"

    def _touch_key(self, key: str) -> str:
        return f"{self.prefix}touch/{key.removeprefix(self.prefix)}"

    def _where(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    # ---- the one place requests are retried -------------------------------------------------

    def _call(self, op: str, key: str, fn: Callable[[], T], digest: str = "") -> T:
        """``fn()`` with retries on transient errors; S3 errors mapped to rara's at this one
        boundary (others, e.g. NoSuchKey or PreconditionFailed, are the caller's to read)."""
        base, cap = self._backoff
        attempts = self.cfg.attempts
        started = self._clock()
        for attempt in range(attempts):
            try:
                return fn()
            except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
                code = error_code(exc)
                if is_access_error(exc):
                    what = (
                        "bucket does not exist"
                        if code == "NoSuchBucket"
                        else (
                            f"access denied ({code or 'HTTP 403'}): check the credentials and the "
                            "policy"
                        )
                    )
                    raise ArtifactStoreAccessError(
                        self._where(key), f"S3 {op} failed: {what}", digest
                    ) from exc
                if not is_transient(exc):
                    raise
                spent = self._clock() - started
                if attempt + 1 == attempts or spent >= self.cfg.retry_seconds:
                    raise ArtifactStoreUnavailable(
                        self._where(key),
                        f"S3 {op} failed after {attempt + 1} attempts in {spent:.1f} s: "
                        f"{type(exc).__name__}: {code or exc}",
                        digest,
                    ) from exc
                delay = random.uniform(0, min(cap, base * 2**attempt))  # full jitter
                log.warning(
                    "s3 request failed; retrying",
                    op=op,
                    key=key,
                    attempt=attempt + 1,
                    error=code or type(exc).__name__,
                    delay=round(delay, 3),
                )
                self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _head(self, key: str) -> int | None:
        """The object's size, or None if there is none (bucket checked once per store)."""
        try:
            st = self._call("HEAD", key, lambda: self.client.stat_object(self.bucket, key))
        except S3Error as exc:
            if exc.code not in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
                raise
            self._check_bucket()  # a HEAD's 404 does not say whether the bucket exists
            return None
        return int(st.size or 0)

    def _check_bucket(self) -> None:
        if self._bucket_checked.is_set():
            return
        if not self._call("HEAD bucket", "", lambda: self.client.bucket_exists(self.bucket)):
            raise ArtifactStoreAccessError(self._where(), "S3 bucket does not exist")
        self._bucket_checked.set()

    def exists(self, ref: ArtifactRef | str) -> bool:
        return self._head(self.key_of(ref)) is not None

    # ---- writing ----------------------------------------------------------------------------

    def open_writer(self, media_type: str = DEFAULT_MEDIA_TYPE) -> S3ArtifactWriter:
        return S3ArtifactWriter(self, media_type)

    def put_bytes(
        self, data: bytes | bytearray | memoryview, media_type: str = DEFAULT_MEDIA_TYPE
    ) -> ArtifactRef:
        mv = memoryview(data).cast("B")
        hexd = hashlib.sha256(mv).hexdigest()
        self._upload(
            mv.obj if isinstance(mv.obj, bytes) else bytes(mv), hexd, mv.nbytes, media_type
        )
        return ArtifactRef(f"sha256:{hexd}", mv.nbytes, media_type)

    def put_file(
        self, path: str | os.PathLike[str], media_type: str = DEFAULT_MEDIA_TYPE
    ) -> ArtifactRef:
        """Hash the file streaming, then upload it (re-hashed as it is sent: a file changed
        in between is refused, never stored under the wrong name)."""
        h = hashlib.sha256()
        size = 0
        buf = bytearray(CHUNK_SIZE)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as src:
            while n := src.readinto(view):
                h.update(view[:n])
                size += n
            src.seek(0)
            hexd = h.hexdigest()
            self._upload(src, hexd, size, media_type)
        return ArtifactRef(f"sha256:{hexd}", size, media_type)

    def _part_size(self, size: int) -> int:
        need = -(-size // MAX_PARTS)  # ceil
        mib = 1 << 20
        return max(self.cfg.part_size, -(-need // mib) * mib)

    def _upload(self, src: IO[bytes] | bytes, hexd: str, size: int, media_type: str) -> None:
        key = self.key_of(f"sha256:{hexd}")
        digest = f"sha256:{hexd}"
        existing = self._head(key)
        if existing == size:
            self._touch(key)  # stored once: only tell GC it was just produced again
            return
        if existing is not None:  # a truncated or foreign object under our name: replace it
            log.warning("replacing a wrong-sized object", key=key, size=existing, want=size)
            self._call("DELETE", key, lambda: self.client.remove_object(self.bucket, key), digest)
        part = self._part_size(size)
        if size <= part:
            data = src if isinstance(src, bytes) else src.read(size)
            self._verify_source(data, hexd, size, key)
            self._put_once(key, data, hexd, media_type)
        else:
            stream = io.BytesIO(src) if isinstance(src, bytes) else src  # BytesIO shares bytes
            self._put_multipart(key, stream, hexd, size, part, media_type)

    def _verify_source(self, data: bytes, hexd: str, size: int, key: str) -> None:
        actual = hashlib.sha256(data).hexdigest()
        if len(data) != size or actual != hexd:
            raise ArtifactCorrupted(
                f"sha256:{hexd}",
                f"sha256:{actual}",
                self._where(key),
                "the source changed while it was being stored",
            )

    def _put_once(self, key: str, data: bytes, hexd: str, media_type: str) -> None:
        headers = {
            "Content-Type": media_type,
            "If-None-Match": "*",
            "x-amz-checksum-sha256": base64.b64encode(bytes.fromhex(hexd)).decode(),
        }
        try:
            self._call(
                "PUT",
                key,
                lambda: self.client._put_object(self.bucket, key, data, headers=dict(headers)),
                f"sha256:{hexd}",
            )
        except S3Error as exc:
            if exc.code != "PreconditionFailed":
                raise
            self._touch(key)  # another writer stored the same bytes first

    def _put_part(self, key: str, upload_id: str, number: int, data: bytes) -> str:
        return self._call(
            "UploadPart",
            key,
            lambda: self.client._upload_part(self.bucket, key, data, None, upload_id, number),
        )

    def _put_multipart(
        self, key: str, src: IO[bytes], hexd: str, size: int, part: int, media_type: str
    ) -> None:
        digest = f"sha256:{hexd}"
        upload_id = self._call(
            "CreateMultipartUpload",
            key,
            lambda: self.client._create_multipart_upload(
                self.bucket, key, {"Content-Type": media_type}
            ),
            digest,
        )
        try:
            h = hashlib.sha256()
            total = 0
            etags: list[tuple[int, str]] = []
            inflight: deque[tuple[int, Future[str]]] = deque()
            with ThreadPoolExecutor(self.cfg.concurrency, "rara-s3-part") as pool:
                number = 1
                while data := src.read(part):
                    h.update(data)
                    total += len(data)
                    inflight.append(
                        (number, pool.submit(self._put_part, key, upload_id, number, data))
                    )
                    del data  # the pool's copy is the only one: memory stays bounded
                    number += 1
                    while len(inflight) >= self.cfg.concurrency:
                        n, fut = inflight.popleft()
                        etags.append((n, fut.result()))
                while inflight:
                    n, fut = inflight.popleft()
                    etags.append((n, fut.result()))
            actual = h.hexdigest()
            if total != size or actual != hexd:
                raise ArtifactCorrupted(
                    digest,
                    f"sha256:{actual}",
                    self._where(key),
                    "the source changed while it was being stored",
                )
            self._complete(key, upload_id, etags, digest)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort; GC aborts what is left
                self.client._abort_multipart_upload(self.bucket, key, upload_id)
            raise

    def _complete(
        self, key: str, upload_id: str, etags: list[tuple[int, str]], digest: str
    ) -> None:
        body = "".join(
            f'<Part><PartNumber>{n}</PartNumber><ETag>"{escape(etag)}"</ETag></Part>'
            for n, etag in etags
        )
        xml = f"<CompleteMultipartUpload>{body}</CompleteMultipartUpload>".encode()
        headers = {
            "Content-Type": "application/xml",
            "If-None-Match": "*",
            "Content-MD5": base64.b64encode(hashlib.md5(xml).digest()).decode(),
        }

        def complete() -> None:
            resp = self.client._execute(
                "POST",
                self.bucket,
                key,
                body=xml,
                headers=dict(headers),
                query_params={"uploadId": upload_id},
            )
            # 200 with an <Error> body is how S3 reports a failure after a slow assembly.
            if b"<Error>" in resp.data[:512]:
                raise S3Error.fromxml(resp)

        try:
            self._call("CompleteMultipartUpload", key, complete, digest)
        except S3Error as exc:
            if exc.code == "PreconditionFailed":  # another writer stored it first
                with contextlib.suppress(Exception):
                    self.client._abort_multipart_upload(self.bucket, key, upload_id)
                self._touch(key)
                return
            # A retried complete whose first try landed (answer lost) finds no upload.
            if exc.code == "NoSuchUpload" and self._head(key) is not None:
                return
            raise

    def _touch(self, key: str) -> None:
        tkey = self._touch_key(key)
        self._call(
            "PUT", tkey, lambda: self.client.put_object(self.bucket, tkey, io.BytesIO(b""), 0)
        )

    # ---- reading ----------------------------------------------------------------------------

    def _read_into(
        self, ref: ArtifactRef | str, sink: Callable[[bytes], object], restart: Callable[[], None]
    ) -> tuple[str, int]:
        """Stream the blob into ``sink``, hashing; on a transient failure mid-body ``restart``
        and read again (bounded by the attempts). Returns (digest, size) once verified."""
        digest = parse_digest(ref)
        key = self.key_of(digest)
        hexd = digest.removeprefix("sha256:")

        def read() -> tuple[str, int]:
            restart()
            try:
                resp = self.client.get_object(self.bucket, key)
            except S3Error as exc:
                if exc.code in ("NoSuchKey", "NoSuchObject"):
                    raise ArtifactNotFound(digest, self._where(key)) from None
                raise
            h = hashlib.sha256()
            size = 0
            try:
                for chunk in resp.stream(CHUNK_SIZE):
                    h.update(chunk)
                    sink(chunk)
                    size += len(chunk)
            finally:
                resp.close()
                resp.release_conn()
            return h.hexdigest(), size

        actual, size = self._call("GET", key, read, digest)
        if actual != hexd:
            raise ArtifactCorrupted(digest, f"sha256:{actual}", self._where(key))
        if isinstance(ref, ArtifactRef) and ref.size != size:
            raise ArtifactCorrupted(
                digest,
                f"sha256:{actual}",
                self._where(key),
                f"ref says {ref.size} bytes, blob has {size}",
            )
        return digest, size

    def get_bytes(self, ref: ArtifactRef | str) -> bytes:
        buf = bytearray()
        self._read_into(ref, buf.extend, buf.clear)
        return bytes(buf)

    def get_file(self, ref: ArtifactRef | str, dest: str | os.PathLike[str]) -> ArtifactRef:
        """Download to ``dest``, streamed and verified; ``dest`` appears atomically (a temp
        file beside it is renamed into place only once the digest checked out)."""
        dest_path = Path(dest)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest_path.name[:100]}.", dir=dest_path.parent)
        tmp = Path(tmp_name)
        try:
            with open(fd, "wb") as out:

                def restart() -> None:
                    out.seek(0)
                    out.truncate()

                digest, size = self._read_into(ref, out.write, restart)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dest_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return ref if isinstance(ref, ArtifactRef) else ArtifactRef(digest, size)

    # ---- GC support -------------------------------------------------------------------------

    def _page(self, prefix: str, after: str | None) -> list[tuple[str, int, float]]:
        out: list[tuple[str, int, float]] = []
        for obj in self.client.list_objects(self.bucket, prefix, recursive=True, start_after=after):
            mtime = obj.last_modified.timestamp() if obj.last_modified else 0.0
            out.append((obj.object_name or "", int(obj.size or 0), mtime))
            if len(out) == _PAGE:
                break
        return out

    def _list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        """(key, size, mtime) under ``prefix``, a page at a time; a page cut by a transient
        error is asked again from after the last key already returned."""
        after: str | None = None
        while True:
            batch = self._call("LIST", prefix, functools.partial(self._page, prefix, after))
            yield from batch
            if len(batch) < _PAGE:
                return
            after = batch[-1][0]

    def iter_blobs(self) -> Iterator[BlobInfo]:
        root = f"{self.prefix}sha256/"
        touched = {
            k.removeprefix(f"{self.prefix}touch/"): m
            for k, _, m in self._list(f"{self.prefix}touch/sha256/")
        }
        for key, size, mtime in self._list(root):
            m = _BLOB_KEY.match(key.removeprefix(root))
            if m is None:
                continue
            rel = key.removeprefix(self.prefix)
            yield BlobInfo(f"sha256:{m[1]}{m[2]}", size, max(mtime, touched.get(rel, 0.0)))

    def delete(self, ref: ArtifactRef | str) -> bool:
        key = self.key_of(ref)
        there = self._head(key) is not None
        self._call("DELETE", key, lambda: self.client.remove_object(self.bucket, key))
        tkey = self._touch_key(key)
        self._call("DELETE", tkey, lambda: self.client.remove_object(self.bucket, tkey))
        return there

    def remove_stale_temporaries(self, older_than: float, *, dry_run: bool = False) -> int:
        """Abort multipart uploads under the prefix begun before ``older_than`` (a writer
        killed mid-upload leaves one; nothing of it is visible under the key meanwhile)."""
        removed = 0
        markers: tuple[str | None, str | None] = (None, None)
        while True:
            page = self._call(
                "ListMultipartUploads",
                self.prefix,
                functools.partial(
                    self.client._list_multipart_uploads,
                    self.bucket,
                    prefix=f"{self.prefix}sha256/",
                    key_marker=markers[0],
                    upload_id_marker=markers[1],
                ),
            )
            for up in page.uploads:
                began = up.initiated_time.timestamp() if up.initiated_time else 0.0
                if began >= older_than or not up.upload_id:
                    continue
                if not dry_run:
                    abort = functools.partial(
                        self.client._abort_multipart_upload,
                        self.bucket,
                        up.object_name,
                        up.upload_id,
                    )
                    with contextlib.suppress(S3Error):  # finished or aborted meanwhile
                        self._call("AbortMultipartUpload", up.object_name, abort)
                removed += 1
            if not page.is_truncated:
                return removed
            markers = (page.next_key_marker, page.next_upload_id_marker)


if TYPE_CHECKING:
    from rara.artifacts.api import ArtifactStore
    from rara.context import ArtifactStoreAPI

    def _implements_store(store: S3ArtifactStore) -> ArtifactStore:
        return store

    def _implements_protocol(store: S3ArtifactStore) -> ArtifactStoreAPI:
        return store
