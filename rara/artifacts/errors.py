"""Errors raised by the artifact stores. Each names the digest it is about."""

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
