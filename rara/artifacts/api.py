"""What every artifact store implements: the local directory store and the S3 store.

Step code sees the narrower :class:`rara.context.ArtifactStoreAPI` (put/get/exists); the
runtime and ``rara artifacts gc`` use the whole of :class:`ArtifactStore`. Both stores are
checked against it statically (the ``_implements`` functions at the end of each module).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import TracebackType
from typing import NamedTuple, Protocol, Self

from rara.artifacts.ref import ArtifactRef


class BlobInfo(NamedTuple):
    """One stored blob, as GC sees it."""

    digest: str  # "sha256:<64 hex>"
    size: int
    mtime: float  # seconds since the epoch; bumped when a write is deduplicated onto it


class ArtifactWriterAPI(Protocol):
    """Streams a blob in; the ref (its digest) is known once committed."""

    @property
    def size(self) -> int: ...
    @property
    def ref(self) -> ArtifactRef: ...
    def write(self, data: bytes | bytearray | memoryview) -> int: ...
    def commit(self) -> ArtifactRef: ...
    def abort(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ArtifactStore(Protocol):
    """Content-addressed blob store (sha256), verified on write and on read."""

    def put_bytes(
        self, data: bytes | bytearray | memoryview, media_type: str = ...
    ) -> ArtifactRef: ...
    def put_file(self, path: str | os.PathLike[str], media_type: str = ...) -> ArtifactRef: ...
    def open_writer(self, media_type: str = ...) -> ArtifactWriterAPI: ...
    def get_bytes(self, ref: ArtifactRef | str) -> bytes: ...
    def get_file(self, ref: ArtifactRef | str, dest: str | os.PathLike[str]) -> ArtifactRef: ...
    def exists(self, ref: ArtifactRef | str) -> bool: ...

    # ---- garbage collection (rara.artifacts.gc) ---------------------------------------------
    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every stored blob; tolerates concurrent writes and deletes."""
        ...

    def delete(self, ref: ArtifactRef | str) -> bool:
        """Remove a blob; False if it was not there."""
        ...

    def remove_stale_temporaries(self, older_than: float, *, dry_run: bool = False) -> int:
        """Remove unfinished writes (temp files, multipart uploads) last touched before
        ``older_than`` (epoch seconds) whose writer cannot still be producing them; the count."""
        ...
