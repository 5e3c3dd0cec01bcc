"""Worker settings: flags > ``RARA_WORKER_*`` environment > YAML/TOML file > defaults.

The sources, the flags of ``rara worker`` and the error messages come from
:mod:`rara.settings`, shared with the executor and the operator. Durations are seconds.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import ClassVar

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from rara.settings import ProcessSettings, StrList


def default_worker_id() -> str:
    """``host:pid:<random>``: unique per process even when a pod restarts with the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class WorkerSettings(ProcessSettings):
    model_config = SettingsConfigDict(env_prefix="RARA_WORKER_")
    command_help: ClassVar = "Lease and run workflow steps until SIGTERM/SIGINT."
    flag_names: ClassVar = {
        "handlers": ("--handlers", "-H"),
        "id": ("--id",),
        "capabilities": ("--capability", "-c"),
        "executor_endpoints": ("--executor-endpoint",),
    }

    id: str = Field(
        default_factory=default_worker_id,
        min_length=1,
        max_length=200,
        description="Worker identity (default host:pid:random)",
    )
    database_url: str | None = Field(
        default=None, description="PostgreSQL URL (default: DATABASE_URL, else the embedded server)"
    )
    handlers: StrList = Field(
        default_factory=list,
        description="Dotted module paths defining `registry = Registry()` (repeatable)",
    )
    capabilities: StrList | None = Field(
        default=None, description="Serve only these (repeatable; default: all registered)"
    )
    concurrency: int = Field(default=10, ge=1, le=1000, description="Attempts run at once")
    # A worker group (rara.worker.group): N worker processes under one supervisor that holds
    # the group's only LISTEN connection and relays it, since PostgreSQL wakes every listening
    # backend of the database at each NOTIFY. `concurrency` and the rest are per process.
    processes: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Worker processes run as one group with one LISTEN connection (1: no group)",
    )
    # Held back from the other namespaces' steps: a team's first step leases at once, at its
    # start, however full the worker's other slots are with another team's backlog
    # (docs/namespaces.md, "Held-back slots"). Out of `concurrency`, never on top of it.
    held_back_slots: int = Field(
        default=0,
        ge=0,
        le=999,
        description="Of concurrency, slots only for namespaces with nothing running here",
    )
    lease_batch: int = Field(
        default=100, ge=1, le=1000, description="Most steps leased by one statement"
    )
    lease_seconds: float = Field(default=30.0, gt=0, description="Lease duration")
    heartbeat_seconds: float | None = Field(
        default=None, gt=0, description="Heartbeat interval (default lease/3)"
    )
    jitter: float = Field(default=0.2, ge=0, le=1, description="Retry delay jitter, 0..1")
    shutdown_grace_seconds: float = Field(
        default=30.0, ge=0, description="Grace for running attempts on SIGTERM"
    )
    cancel_grace_seconds: float = Field(
        default=2.0, ge=0, description="Grace after a cancel request"
    )
    poll_seconds: float = Field(
        default=1.0, gt=0, description="Polling interval while not listening (NOTIFY fallback)"
    )
    # While the LISTEN connection is up, every event that makes a step leasable sends rara_ready
    # (docs/lease-protocol.md, "Wake-ups"): the poll only covers a notification lost anyway, so
    # an idle worker polls rarely — one lease duration by default, the time the reaper takes to
    # recover a dead worker's steps. A retry's backoff is waited for exactly, however long this.
    listening_poll_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Polling interval of an idle worker while LISTEN is connected",
    )
    # How often at least a lease scans the queue from its start rather than after the last
    # step leased, NOTIFY or not (rara.worker.lease_cursor).
    lease_rescan_seconds: float = Field(
        default=1.0, gt=0, description="Longest time between lease scans from the queue's start"
    )
    reaper_seconds: float = Field(default=5.0, gt=0, description="Reaper interval")
    reaper_batch: int = Field(default=100, ge=1, description="Leases recovered per reaper pass")
    waits_batch: int = Field(
        default=500, ge=1, le=10_000, description="Due waits ended per transaction"
    )
    progress_per_second: float = Field(
        default=5.0, gt=0, description="Progress writes per attempt per second"
    )
    # Completion batching (group commit): attempts that end while a batch is being written go
    # into the next one, up to completion_batch; the window (0: none) waits for more first.
    completion_batch: int = Field(
        default=500, ge=1, le=10_000, description="Most attempt ends written per transaction"
    )
    completion_window_seconds: float = Field(
        default=0.0, ge=0, le=1.0, description="Wait for more attempt ends before a write (0: none)"
    )
    listen: bool = Field(
        default=True,
        description="LISTEN/NOTIFY wake-ups (off only to test the polling and heartbeat paths)",
    )
    artifact_root: Path = Field(
        default=Path(".rara/artifacts"), description="Local artifact store root"
    )
    executor_endpoints: StrList = Field(
        default_factory=list,
        description="gRPC executor host:port for `executor: grpc` steps (repeatable)",
    )
    executor_token_file: Path | None = Field(
        default=None, description="File holding the executors' bearer token"
    )
    executor_refresh_seconds: float = Field(
        default=10.0, gt=0, description="How often to ask executors what they serve"
    )
    executor_sessions: bool = Field(
        default=True,
        description="Send jobs on one Session stream per executor that serves it "
        "(off: an Execute call per job)",
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve /metrics, /healthz, /readyz here"
    )

    @model_validator(mode="after")
    def _slots_left_for_everyone(self) -> WorkerSettings:
        if self.held_back_slots >= self.concurrency:
            raise ValueError(
                f"held_back_slots ({self.held_back_slots}) must be fewer than concurrency "
                f"({self.concurrency}): at least one slot serves every namespace"
            )
        return self

    @model_validator(mode="after")
    def _heartbeat_inside_lease(self) -> WorkerSettings:
        if self.heartbeat_seconds is not None and self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError("heartbeat_seconds must be shorter than lease_seconds")
        return self

    @property
    def heartbeat_interval(self) -> float:
        if self.heartbeat_seconds is not None:
            return self.heartbeat_seconds
        return self.lease_seconds / 3
