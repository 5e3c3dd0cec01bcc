"""Operator settings: flags > ``RARA_OPERATOR_*`` environment > YAML/TOML file > defaults.

The sources, the flags of ``rara operator`` and the error messages come from
:mod:`rara.settings`, shared with the worker and the executor.
"""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from rara.operator.peering import Peering
from rara.settings import ProcessSettings, StrList

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class OperatorSettings(ProcessSettings):
    model_config = SettingsConfigDict(env_prefix="RARA_OPERATOR_")
    command_help: ClassVar = (
        "Turn WorkflowDefinitions into versions, start WorkflowRuns, scale WorkerPools."
    )
    flag_names: ClassVar = {
        "namespaces": ("--namespace", "-n"),
        "all_namespaces": ("--all-namespaces/--no-all-namespaces", "-A"),
        "verbose": ("--verbose/--no-verbose", "-v"),
    }

    database_url: str | None = Field(
        default=None, description="PostgreSQL URL (default: DATABASE_URL, else the embedded server)"
    )
    namespaces: StrList = Field(
        default_factory=list,
        description="Namespaces to serve "
        "(repeatable; default: $RARA_NAMESPACE, else the pod's own "
        "namespace, else cluster-wide)",
    )
    all_namespaces: bool = Field(
        default=False, description="Serve every namespace (needs the chart's rbac.clusterWide=true)"
    )
    scale_interval: float = Field(
        default=15.0, ge=1.0, description="Seconds between scaling decisions per WorkerPool"
    )
    run_sync_interval: float = Field(
        default=5.0, ge=1.0, description="Seconds between WorkflowRun status refreshes"
    )
    liveness: str | None = Field(
        default=None, description="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz"
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve Prometheus /metrics (backlog per capability) here",
    )
    peering_name: str | None = Field(
        default=None,
        description="Run as one of several "
        "replicas: the KopfPeering (ClusterKopfPeering when "
        "cluster-wide) they share; one works, the others stand by "
        "(default: none, standalone: run exactly one operator)",
    )
    peering_priority: int | None = Field(
        default=None,
        description="This replica's peering "
        "priority, highest works (default: below zero, the "
        "older replica wins; any priority >= 0 takes over)",
    )
    peering_lifetime: int = Field(
        default=15,
        ge=3,
        description="Seconds a replica's keep-alive "
        "holds: a standby takes over at most this long after the "
        "working replica dies",
    )
    verbose: bool = Field(default=False, description="Debug logs (log_level=debug)")

    @model_validator(mode="after")
    def _verbose_is_debug(self) -> OperatorSettings:
        if self.verbose:
            self.log_level = "debug"
        return self

    def served_namespaces(self) -> tuple[str, ...]:
        """The namespaces to watch; empty: cluster-wide (all_namespaces wins over a list)."""
        if self.all_namespaces:
            return ()
        if self.namespaces:
            return tuple(self.namespaces)
        if env := os.environ.get("RARA_NAMESPACE"):  # the name before RARA_OPERATOR_NAMESPACES
            return (env,)
        try:  # the service account mount of a pod names its namespace
            with open(SERVICE_ACCOUNT_NAMESPACE) as fh:
                return (fh.read().strip(),)
        except OSError:
            return ()

    def peering(self) -> Peering | None:
        """The peering among replicas; None: standalone."""
        if not self.peering_name:
            return None
        return Peering(self.peering_name, self.peering_priority, self.peering_lifetime)
