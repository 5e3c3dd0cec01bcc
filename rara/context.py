"""The execution contract a step's code sees, wherever it runs.

In-process handlers (worker registry) and executor plugins (gRPC service) both receive a
``StepContext``. Its methods are safe to call from the event loop *and* from a worker thread
(sync handlers run in threads so heartbeats go on), which is why they are plain methods that
hand work to the owner of the lease. The one coroutine, ``asave_checkpoint``, is the async
form of ``save_checkpoint``, the only method that waits for the database: async code awaits it
rather than block the loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rara.artifacts.ref import ArtifactRef

JSON = Any  # a JSON-serialisable value; validated where it crosses into storage


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The latest checkpoint a previous attempt saved: small JSON state plus an optional blob."""

    attempt: int
    seq: int
    state: Mapping[str, JSON]
    artifact: ArtifactRef | None = None


@dataclass(frozen=True, slots=True)
class OutputArtifact:
    """An artifact a step declares as output; it lands in the manifest with the result."""

    name: str
    ref: ArtifactRef
    media_type: str = "application/octet-stream"


@dataclass(slots=True)
class StepOutcome:
    """What a handler returns: a JSON result and the artifacts it produced."""

    result: JSON = None
    artifacts: list[OutputArtifact] = field(default_factory=list)


class ArtifactStoreAPI(Protocol):
    """Content-addressed blob store (sha256). See ``rara.artifacts.store``."""

    def put_bytes(self, data: bytes, media_type: str = ...) -> ArtifactRef: ...
    def put_file(self, path: str, media_type: str = ...) -> ArtifactRef: ...
    def get_bytes(self, ref: ArtifactRef | str) -> bytes: ...
    def get_file(self, ref: ArtifactRef | str, dest: str) -> ArtifactRef: ...
    def exists(self, ref: ArtifactRef | str) -> bool: ...


class StepContext(Protocol):
    """What a running attempt knows and may do. Everything is fenced by the attempt's lease."""

    @property
    def run_id(self) -> int: ...
    @property
    def step_id(self) -> int: ...
    @property
    def step_key(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def capability(self) -> str: ...
    @property
    def input(self) -> Mapping[str, JSON]: ...
    @property
    def inputs(self) -> Mapping[str, ArtifactRef]:
        """Upstream artifacts by name (``"<step key>/<artifact name>"`` and, when unique,
        the bare artifact name)."""
        ...

    @property
    def deadline(self) -> datetime | None: ...
    @property
    def checkpoint(self) -> Checkpoint | None: ...
    @property
    def artifacts(self) -> ArtifactStoreAPI: ...

    def cancelled(self) -> bool:
        """True once cancel was asked, the lease was lost or the deadline passed."""
        ...

    def progress(
        self,
        fraction: float | None = None,
        message: str = "",
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Report progress. Cheap: coalesced, never blocks on the database."""
        ...

    def save_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        """Durably record a checkpoint before returning (blocks until written). Async code
        awaits ``asave_checkpoint`` instead: the loop is never blocked."""
        ...

    async def asave_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        """Durably record a checkpoint; returns once it is written."""
        ...
