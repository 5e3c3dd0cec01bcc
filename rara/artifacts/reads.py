"""Noting what step code read from the artifact store, for lineage (docs/artifacts.md).

The worker (in-process handlers) and the Python executor (its plugins) hand step code the
store through :class:`ReadsNoted`; what it noted is the step's reads (``rara_step_reads``,
written with its success; an executor reports them in ``JobSucceeded.reads``).
"""

from __future__ import annotations

from typing import Any

from rara.artifacts.ref import ArtifactRef
from rara.artifacts.store import parse_digest
from rara.context import ArtifactStoreAPI


class ReadsNoted:
    """An artifact store that notes the digest of every blob a fetch returned: what the step
    actually read. A failed fetch read nothing; ``exists`` and writes are not reads."""

    def __init__(self, store: ArtifactStoreAPI, reads: set[str]) -> None:
        self._store = store
        self._reads = reads

    def get_bytes(self, ref: ArtifactRef | str) -> bytes:
        data = self._store.get_bytes(ref)
        self._reads.add(parse_digest(ref))
        return data

    def get_file(self, ref: ArtifactRef | str, dest: str) -> ArtifactRef:
        got = self._store.get_file(ref, dest)
        self._reads.add(got.digest)
        return got

    def __getattr__(self, name: str) -> Any:  # writes and exists(): not reads
        return getattr(self._store, name)
