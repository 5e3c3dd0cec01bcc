"""Executor settings: flags > ``RARA_EXECUTOR_*`` environment > YAML/TOML file > defaults.

The sources, the flags of ``rara executor`` and the error messages come from
:mod:`rara.settings`, shared with the worker and the operator. Secrets are files named here
(the bearer token, TLS keys), never values.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from rara.settings import ProcessSettings, StrList


class ExecutorSettings(ProcessSettings):
    model_config = SettingsConfigDict(env_prefix="RARA_EXECUTOR_")
    command_help: ClassVar = "Run the gRPC executor service until SIGTERM/SIGINT."

    listen: str = Field(
        default="127.0.0.1:50051", min_length=1, description="host:port to serve on (port 0: any)"
    )
    artifact_root: Path | None = Field(
        default=None,
        description="Shared artifact store "
        "directory (default: RARA_ARTIFACTS, a directory or "
        "s3://bucket/prefix?endpoint=…; docs/artifacts.md)",
    )
    plugins: StrList = Field(
        default_factory=list,
        description="Modules whose register(registry) adds plugins (repeatable, or commas)",
    )
    token_file: Path | None = Field(
        default=None, description="File holding the bearer token clients must send"
    )
    tls_cert: Path | None = Field(default=None, description="Server certificate (PEM)")
    tls_key: Path | None = Field(default=None, description="Server private key (PEM)")
    tls_client_ca: Path | None = Field(
        default=None, description="CA (PEM) that client certificates must chain to"
    )
    insecure_loopback: bool = Field(
        default=False, description="Allow no authentication; only with a loopback --listen address"
    )
    max_concurrency: int = Field(default=16, ge=1, description="Jobs at once")
    grace: float = Field(
        default=30.0, ge=0, description="Seconds running jobs get to finish on SIGTERM"
    )
    cancel_grace: float = Field(
        default=5.0, ge=0, description="Seconds a plugin gets to honour a cancel before a hard stop"
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve /metrics, /healthz and /readyz over HTTP here (0: any)",
    )
