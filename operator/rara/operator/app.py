"""The operator's wiring: one kopf registry built from a config, and how to run it.

A registry of our own (not kopf's global default) so that importing this package registers
nothing, tests build one per operator with their own intervals, and two operators in one
test process do not share handlers.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf

from rara import logs, metrics
from rara.operator import (
    decisions,
    definitions,
    events,
    login,
    pausing,
    peering,
    pools,
    runs,
    runsync,
    schedules,
    triggers,
)
from rara.operator.models import GROUP, VERSION
from rara.operator.peering import Peering
from rara.operator.runtime import OperatorConfig, open_runtime
from rara.operator.settings import OperatorSettings
from rara.pg.connect import database_url

FINALIZER = "rara.dev/operator"
ANNOTATION_PREFIX = "operator.rara.dev"


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    def configure(
        settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
    ) -> None:
        configure_settings(settings, config.peering)
        # Said once, because a WorkflowRun in a namespace no operator serves just sits there.
        logger.info(
            "serving "
            + (
                f"namespaces {', '.join(config.namespaces)}"
                if config.namespaces
                else "every namespace"
            )
        )
        memo.runtime = open_runtime(config)
        if config.peering is not None:
            peering.warn_if_missing(memo.runtime.kube, config.peering, config.namespaces, logger)

    def close(memo: kopf.Memo, **_: Any) -> None:
        runtime = getattr(memo, "runtime", None)
        if runtime is not None:
            runtime.close()

    async def start_run_sync(memo: kopf.Memo, **_: Any) -> None:
        runsync.start(memo, config.run_sync_interval)

    async def stop_run_sync(memo: kopf.Memo, **_: Any) -> None:
        await runsync.stop(memo)

    def start_firing(memo: kopf.Memo, **_: Any) -> None:
        if config.fire_schedules:
            memo.firing = schedules.Firing.start(config.database_url)

    def stop_firing(memo: kopf.Memo, **_: Any) -> None:
        if getattr(memo, "firing", None) is not None:
            memo.firing.close()

    kopf.on.startup(registry=registry)(configure)
    kopf.on.startup(registry=registry)(start_run_sync)
    kopf.on.startup(registry=registry)(start_firing)
    kopf.on.cleanup(registry=registry)(stop_run_sync)  # before the pool it uses is closed
    kopf.on.cleanup(registry=registry)(stop_firing)
    kopf.on.cleanup(registry=registry)(close)
    kopf.on.login(registry=registry)(login.login)
    # The liveness probe fails while the schedules' firing fails (not retried: a probe says
    # what is, now).
    kopf.on.probe(id="schedules", errors=kopf.ErrorsMode.PERMANENT, registry=registry)(
        schedules.firing_probe
    )

    wfd = (GROUP, VERSION, "workflowdefinitions")
    for register in (kopf.on.create, kopf.on.update, kopf.on.resume):
        register(*wfd, registry=registry)(definitions.reconcile_definition)
    kopf.on.delete(*wfd, registry=registry)(definitions.retire_definition)

    wfr = (GROUP, VERSION, "workflowruns")
    for register in (kopf.on.create, kopf.on.resume):
        register(*wfr, registry=registry)(runs.start_workflow_run)
    # Status: one batched sync per tick for all WorkflowRuns (rara.operator.runsync says why
    # a daemon per unfinished WorkflowRun, doing no I/O, tells the tick which to mirror).
    kopf.daemon(*wfr, when=runsync.unfinished, registry=registry)(runsync.track_workflow_run)
    # spec.paused, the one field of the spec that may change (rara.operator.pausing).
    kopf.on.update(*wfr, field="spec.paused", registry=registry)(pausing.apply_paused)
    # Not optional: kopf's finalizer makes the API server wait for the cancel.
    kopf.on.delete(*wfr, registry=registry)(runs.cancel_workflow_run)
    # Signals and decisions added with kubectl (rara.operator.decisions), after the start.
    for field, handler in (
        ("signals", decisions.apply_signals),
        ("approvals", decisions.apply_approvals),
    ):
        for register in (kopf.on.create, kopf.on.update, kopf.on.resume):
            register(*wfr, field=field, registry=registry)(handler)

    wfs = (GROUP, VERSION, "workflowschedules")
    for register in (kopf.on.create, kopf.on.update, kopf.on.resume):
        register(*wfs, registry=registry)(schedules.reconcile_schedule)
    kopf.on.delete(*wfs, registry=registry)(schedules.delete_schedule)
    kopf.timer(*wfs, interval=config.run_sync_interval, registry=registry)(schedules.sync_status)

    wft = (GROUP, VERSION, "workflowtriggers")
    for register in (kopf.on.create, kopf.on.update, kopf.on.resume):
        register(*wft, registry=registry)(triggers.reconcile_trigger)
    kopf.on.delete(*wft, registry=registry)(triggers.delete_trigger)
    kopf.timer(*wft, interval=config.run_sync_interval, registry=registry)(triggers.sync_status)

    kopf.timer(GROUP, VERSION, "workerpools", interval=config.scale_interval, registry=registry)(
        pools.scale_pool
    )
    return registry


def configure_settings(settings: kopf.OperatorSettings, peers: Peering | None = None) -> None:
    # Namespaced and strict: no cluster-wide list/watch of CRDs and namespaces (RBAC the
    # chart does not grant). Peering only among the chart's replicas, by its object's name;
    # without one, standalone (rara.operator.peering).
    settings.scanning.disabled = True
    peering.configure(settings, peers)
    # Progress and diff-base in annotations under our prefix: the CRD status schemas are
    # closed (no status.kopf), so kopf's default status storage would be pruned away.
    # Events name the operator, as the run sync's own do (rara.operator.events).
    settings.posting.reporting_component = events.COMPONENT
    settings.posting.reporting_instance = events.instance()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )


def run(
    config: OperatorConfig,
    *,
    liveness_endpoint: str | None = None,
    stop_flag: threading.Event | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or stop_flag). Blocks."""
    registry = build_registry(config)
    asyncio.run(
        kopf.operator(
            registry=registry,
            namespaces=list(config.namespaces),
            clusterwide=not config.namespaces,
            # No standalone/peering_name/priority here: configure_settings sets them all.
            liveness_endpoint=liveness_endpoint,
            stop_flag=stop_flag,
        )
    )


def serve(settings: OperatorSettings) -> int:
    """``rara operator``: logs (kopf's included) as JSON lines, metrics, then :func:`run`."""
    logs.configure(settings.log_level, json=settings.log_json)
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)
    run(
        OperatorConfig(
            database_url=database_url(settings.database_url),
            namespaces=settings.served_namespaces(),
            scale_interval=settings.scale_interval,
            run_sync_interval=settings.run_sync_interval,
            peering=settings.peering(),
        ),
        liveness_endpoint=settings.liveness,
    )
    return 0
