"""`rara operator`: run the kopf operator (in the chart's operator Deployment, or locally).

Wire in with ``app.command("operator")(operator.operator_command)``.
"""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from rara.cli.common import reports_errors
from rara.pg.connect import database_url


@reports_errors
def operator_command(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Namespace to serve (repeatable). Default: "
                     "$RARA_NAMESPACE, else the pod's own namespace, else cluster-wide."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Serve every namespace "
                           "(needs the chart's rbac.clusterWide=true).")
    ] = False,
    database: Annotated[
        str | None, typer.Option("--database-url", envvar="DATABASE_URL", show_envvar=True,
                                 help="PostgreSQL URL.")
    ] = None,
    scale_interval: Annotated[
        float, typer.Option(min=1.0, help="Seconds between scaling decisions per WorkerPool.")
    ] = 15.0,
    run_sync_interval: Annotated[
        float, typer.Option(min=1.0, help="Seconds between WorkflowRun status refreshes.")
    ] = 5.0,
    liveness: Annotated[
        str | None, typer.Option(help="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz.")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus /metrics (backlog per capability) here.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Turn WorkflowDefinitions into versions, start WorkflowRuns, scale WorkerPools."""
    # Imported here: kopf and the kubernetes client are heavy, and other commands need neither.
    from rara.operator.app import run
    from rara.operator.runtime import OperatorConfig

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if metrics_port is not None:
        from rara import metrics

        metrics.serve(metrics_port)
    namespaces: tuple[str, ...] = ()
    if not all_namespaces:
        namespaces = tuple(namespace or ()) or _own_namespace()
    run(OperatorConfig(database_url=database_url(database), namespaces=namespaces,
                       scale_interval=scale_interval, run_sync_interval=run_sync_interval),
        liveness_endpoint=liveness)


def _own_namespace() -> tuple[str, ...]:
    if env := os.environ.get("RARA_NAMESPACE"):
        return (env,)
    try:  # the service account mount of a pod names its namespace
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return (fh.read().strip(),)
    except OSError:
        return ()
