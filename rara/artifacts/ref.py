"""A reference to a content-addressed blob."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    digest: str  # "sha256:<64 hex>"
    size: int
    media_type: str = "application/octet-stream"

    def __post_init__(self) -> None:
        if not _DIGEST.match(self.digest):
            raise ValueError(f"artifact digest must look like sha256:<64 hex>, got {self.digest!r}")
        if self.size < 0:
            raise ValueError(f"artifact size must be >= 0, got {self.size}")

    @property
    def hex(self) -> str:
        return self.digest.removeprefix("sha256:")

    @property
    def key(self) -> str:
        """Storage key: ``sha256/ab/cdef…``."""
        return f"sha256/{self.hex[:2]}/{self.hex[2:]}"
