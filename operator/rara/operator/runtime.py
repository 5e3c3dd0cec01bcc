"""What the handlers share: the database pool and a Kubernetes client, kept in kopf's memo.

The handlers are sync functions (kopf runs them in its thread pool), so a thread-safe
psycopg pool serves them; a broken connection is replaced on checkout, and a database that is
down surfaces as kopf.TemporaryError, which kopf retries after DB_RETRY_SECONDS. The pool's
reconnect back-off is bounded (rara.pg.reconnect: an attempt about every second), so after an
outage the handlers, the timers and the run sync are back within ~2 s of the database: a
handler waiting for a connection gets the first one made, one between tries tries again
within DB_RETRY_SECONDS.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kopf
import psycopg
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from psycopg_pool import ConnectionPool, PoolTimeout

from rara.operator.peering import Peering
from rara.pg import reconnect

# A handler that found the database down tries again this soon (kopf's TemporaryError delay):
# at most this long after the database is back, on top of the pool's ~1 s between attempts.
DB_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class OperatorConfig:
    database_url: str
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide (needs a ClusterRole)
    run_sync_interval: float = 5.0  # seconds between WorkflowRun status refreshes
    scale_interval: float = 15.0  # seconds between scaling decisions per WorkerPool
    pool_size: int = 4
    peering: Peering | None = None  # None: standalone, the only operator (no other replica)
    fire_schedules: bool = True  # run the schedules' firing loop (rara.schedules.firing)


@dataclass
class Runtime:
    config: OperatorConfig
    pool: ConnectionPool[psycopg.Connection[Any]]
    kube: client.ApiClient

    def close(self) -> None:
        self.pool.close()
        self.kube.close()  # type: ignore[no-untyped-call]  # kubernetes ships no annotations


def open_runtime(cfg: OperatorConfig) -> Runtime:
    return Runtime(cfg, open_pool(cfg.database_url, cfg.pool_size), kube_client())


def open_pool(database_url: str, size: int) -> ConnectionPool[psycopg.Connection[Any]]:
    # open=True, but do not wait: an operator whose database is briefly down still starts,
    # and its handlers retry.
    return ConnectionPool(
        database_url,
        min_size=1,
        max_size=size,
        open=True,
        timeout=10.0,
        kwargs={"autocommit": True, "connect_timeout": reconnect.CONNECT_TIMEOUT_SECONDS},
        check=ConnectionPool.check_connection,
        name="rara-operator",
        **reconnect.pool_settings(),
    )


def kube_client() -> client.ApiClient:
    return client.ApiClient(kube_configuration())


def kube_configuration() -> client.Configuration:
    """In a pod: its service account; elsewhere: $KUBECONFIG / ~/.kube/config.

    One source for both kopf's login (rara.operator.login) and our own API calls, so the two
    can never talk to different clusters.
    """
    configuration = client.Configuration()
    try:
        # The kubernetes package's loaders are unannotated (not only untyped stubs missing).
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    except ConfigException:
        # Read $KUBECONFIG now: the kubernetes package reads it once, at import.
        path = os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.path.expanduser(path),
            client_configuration=configuration,
            persist_config=False,
        )
    return configuration


def runtime_of(memo: Any) -> Runtime:
    runtime = getattr(memo, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise kopf.PermanentError("operator runtime missing: the startup handler did not run")
    return runtime


@contextlib.contextmanager
def connection(memo: Any) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection; database outages become kopf.TemporaryError (retried later)."""
    try:
        with runtime_of(memo).pool.connection() as conn:
            yield conn
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise kopf.TemporaryError(f"database unavailable: {exc}", delay=DB_RETRY_SECONDS) from exc
