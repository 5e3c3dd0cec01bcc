"""Errors raised by the artifact stores. Each names the digest (or bucket/key) it is about.

::

    ArtifactError                     digest it is about ("" when about the store itself)
    ├── ArtifactNotFound              permanent: no blob under the digest
    ├── ArtifactCorrupted             permanent: bytes do not hash to the digest
    └── ArtifactStoreError            the store could not be used; names bucket/key
        ├── ArtifactStoreUnavailable  retryable: transient failures outlasted the retries
        ├── ArtifactStoreAccessError  permanent: access denied, bad credentials, no bucket
        └── ArtifactStoreUnsafe       permanent: a link (or a stranger file) inside a local
                                      store; names the path inside the store

A step that meets :class:`ArtifactStoreUnavailable` may succeed when retried later; the others
need a person (or a different digest) before a retry can help.
"""

from __future__ import annotations


class ArtifactError(Exception):
    """Base class for artifact store errors."""

    def __init__(self, digest: str, message: str) -> None:
        super().__init__(message)
        self.digest = digest


class ArtifactNotFound(ArtifactError):
    """No blob is stored under the digest."""

    def __init__(self, digest: str, where: str = "") -> None:
        suffix = f" (looked in {where})" if where else ""
        super().__init__(digest, f"artifact {digest} not found{suffix}")
        self.where = where


class ArtifactCorrupted(ArtifactError):
    """The bytes stored under the digest do not hash to it (or have the wrong size)."""

    def __init__(self, digest: str, actual: str, where: str = "", detail: str = "") -> None:
        bits = [f"artifact {digest} is corrupted: content hashes to {actual}"]
        if detail:
            bits.append(detail)
        if where:
            bits.append(f"at {where}")
        super().__init__(digest, "; ".join(bits))
        self.actual = actual
        self.where = where


class ArtifactStoreError(ArtifactError):
    """The store itself failed; ``where`` is the object (``s3://bucket/key``) or bucket."""

    retryable = False

    def __init__(self, where: str, message: str, digest: str = "") -> None:
        super().__init__(digest, f"{message} ({where})")
        self.where = where


class ArtifactStoreUnavailable(ArtifactStoreError):
    """Throttling, timeouts, 5xx or a refused connection, still failing after the retries."""

    retryable = True


class ArtifactStoreAccessError(ArtifactStoreError):
    """Access denied, unknown or wrong credentials, or the bucket does not exist."""


class ArtifactStoreUnsafe(ArtifactStoreError):
    """A symbolic link, or a file of the wrong kind, where a local store keeps its own files:
    refused, never followed. ``where`` is the path inside the store (``sha256/ab/…``): never
    where a link points, nor anything read there."""
