"""What both stores' writers share: bytes streamed in, hashed as they come, one commit.

A writer takes bytes into a sink of its store's choosing (a temp file beside the blobs, a
spool before an upload), hashes them on the way, and on commit hands the store the digest
to name the blob by; the ref exists only once that worked. A clean ``with`` exit commits, an
exception discards what was written::

    with store.open_writer(media_type="text/plain") as w:
        w.write(b"hello ")
        w.write(b"world")
    ref = w.ref
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from types import TracebackType
from typing import IO, Self

from rara.artifacts.ref import ArtifactRef


class HashingWriter(ABC):
    def __init__(self, sink: IO[bytes], media_type: str) -> None:
        self._sink = sink
        self._media_type = media_type
        self._hash = hashlib.sha256()
        self._size = 0
        self._ref: ArtifactRef | None = None
        self._done = False

    @abstractmethod
    def _store_blob(self, hexdigest: str) -> None:
        """Make the sink's bytes the blob ``sha256:<hexdigest>``; release the sink whatever
        happens (on failure nothing of it may be left)."""

    @abstractmethod
    def _discard(self) -> None:
        """Release the sink and everything written to it."""

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._size

    @property
    def ref(self) -> ArtifactRef:
        if self._ref is None:
            raise RuntimeError("artifact writer has not been committed")
        return self._ref

    def writable(self) -> bool:
        return not self._done

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._done:
            raise ValueError("write to a closed artifact writer")
        mv = memoryview(data).cast("B")
        self._hash.update(mv)
        self._sink.write(mv)
        self._size += mv.nbytes
        return mv.nbytes

    def commit(self) -> ArtifactRef:
        """Store the blob and return its ref. Idempotent; refused after ``abort``."""
        if self._ref is not None:
            return self._ref
        if self._done:
            raise ValueError("artifact writer was aborted")
        self._done = True
        hexdigest = self._hash.hexdigest()
        self._store_blob(hexdigest)
        self._ref = ArtifactRef(f"sha256:{hexdigest}", self._size, self._media_type)
        return self._ref

    def abort(self) -> None:
        """Discard what was written. Safe to call more than once; no-op after commit."""
        if self._done:
            return
        self._done = True
        self._discard()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
