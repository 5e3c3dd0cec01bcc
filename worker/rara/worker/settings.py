"""Worker settings: flags > ``RARA_WORKER_*`` environment > optional YAML/TOML file > defaults.

Durations are seconds (floats). List settings accept JSON or a comma-separated string in the
environment (``RARA_WORKER_HANDLERS=mypkg.handlers,other.handlers``).
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)


def default_worker_id() -> str:
    """``host:pid:<random>``: unique per process even when a pod restarts with the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


StrList = Annotated[list[str], NoDecode]


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RARA_WORKER_", extra="forbid")

    id: str = Field(default_factory=default_worker_id, min_length=1, max_length=200)
    database_url: str | None = None  # None: rara.pg.connect.database_url() decides
    handlers: StrList = Field(default_factory=list)  # dotted module paths exposing `registry`
    capabilities: StrList | None = None  # None: everything the executors serve
    concurrency: int = Field(default=10, ge=1, le=1000)
    lease_batch: int = Field(default=100, ge=1, le=1000)  # most steps leased by one statement
    lease_seconds: float = Field(default=30.0, gt=0)
    heartbeat_seconds: float | None = Field(default=None, gt=0)  # None: lease / 3
    jitter: float = Field(default=0.2, ge=0, le=1)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    cancel_grace_seconds: float = Field(default=2.0, ge=0)
    poll_seconds: float = Field(default=1.0, gt=0)
    # How often at least a lease scans the queue from its start rather than after the last
    # step leased, NOTIFY or not (rara.worker.lease_cursor).
    lease_rescan_seconds: float = Field(default=1.0, gt=0)
    reaper_seconds: float = Field(default=5.0, gt=0)
    reaper_batch: int = Field(default=100, ge=1)
    progress_per_second: float = Field(default=5.0, gt=0)
    # Completion batching (group commit): attempts that end while a batch is being written go
    # into the next one, up to completion_batch; the window (0: none) waits for more first.
    completion_batch: int = Field(default=500, ge=1, le=10_000)
    completion_window_seconds: float = Field(default=0.0, ge=0, le=1.0)
    listen: bool = True  # LISTEN/NOTIFY wake-ups (off only to test the polling/heartbeat paths)
    artifact_root: Path = Path(".rara/artifacts")
    # gRPC executors (host:port each) for `executor: grpc` steps, and the bearer token file.
    executor_endpoints: StrList = Field(default_factory=list)
    executor_token_file: Path | None = None
    executor_refresh_seconds: float = Field(default=10.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)  # /metrics, /healthz, /readyz
    log_level: str = "info"
    log_json: bool | None = None  # None: JSON when stderr is not a TTY

    @field_validator("handlers", "capabilities", "executor_endpoints", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

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


def load_settings(file: Path | None = None, **flags: Any) -> WorkerSettings:
    """Settings from flags (None values are "not given"), the environment and ``file``."""
    given = {key: value for key, value in flags.items() if value is not None}
    if file is None:
        return WorkerSettings(**given)

    class _FromFile(WorkerSettings):
        # The file sits below the environment: a deployment's env overrides a shared file.
        @classmethod
        def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            assert file is not None
            source: PydanticBaseSettingsSource = (
                TomlConfigSettingsSource(settings_cls, toml_file=file)
                if file.suffix == ".toml"
                else YamlConfigSettingsSource(settings_cls, yaml_file=file)
            )
            return init_settings, env_settings, source

    if not file.exists():
        raise FileNotFoundError(f"worker settings file {file} does not exist")
    return _FromFile(**given)
