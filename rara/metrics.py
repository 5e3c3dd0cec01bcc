"""Prometheus metrics, defined once for every rara process, and the HTTP endpoint serving them.

Each process (worker, executor, operator) calls ``serve(port, ready=...)``: ``/metrics`` for
Prometheus, ``/healthz`` for liveness and ``/readyz`` for readiness probes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, make_wsgi_app

LEASES = Counter("rara_leases_total", "Step attempts leased", ["capability"])
COMPLETIONS = Counter(
    "rara_completions_total", "Attempts ended, by outcome", ["capability", "outcome"]
)
RETRIES = Counter("rara_retries_total", "Attempts that failed and will be retried", ["capability"])
LEASE_EXPIRIES = Counter("rara_lease_expiries_total", "Expired leases recovered by this reaper")
WAITS_FIRED = Counter("rara_waits_fired_total", "Waits this worker ended at their time")
LEASES_LOST = Counter("rara_leases_lost_total", "Attempts stopped because their lease was lost")
# From a millisecond in-process step to a two-hour adaptation.
DURATION_BUCKETS = (0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60, 300, 1800, 7200)
STEP_DURATION = Histogram(
    "rara_step_duration_seconds", "Attempt wall time", ["capability"], buckets=DURATION_BUCKETS
)
RUNNING = Gauge("rara_attempts_running", "Attempts running in this process")
BACKLOG = Gauge(
    "rara_backlog_steps", "Ready and running steps per capability", ["capability", "state"]
)
# Runs no step of which is ready or running, waiting for a gate's decision, a signal or a
# timer (rara_run_phase), by what they wait for (approval when any gate is open, else signal,
# else timer): set by the operator with the backlog. Alert on approval > 0 for long.
RUNS_WAITING = Gauge(
    "rara_runs_waiting", "Runs waiting for an approval, a signal or a timer", ["kind"]
)
# Freshness (rara.freshness, docs/freshness.md) of what each definition that declares one made:
# kind `definition` (its newest succeeded run) and `release` (a release name's current
# release). Set by the operator with the backlog. Alert on rara_stale == 1.
STALE = Gauge(
    "rara_stale",
    "1 when what a definition made, or a release's current release, is older than its maxAge",
    ["namespace", "kind", "name"],
)
FRESHNESS_AGE = Gauge(
    "rara_freshness_age_seconds",
    "Age of what a definition made last, or of a release's current release",
    ["namespace", "kind", "name"],
)
# The operator's WorkflowRun status sync (rara.operator.runsync): one read per tick for all
# the unfinished WorkflowRuns it mirrors, one status patch per WorkflowRun whose status changed.
RUN_SYNC_READS = Counter(
    "rara_operator_run_sync_reads_total", "Database reads of the WorkflowRun status sync"
)
RUN_SYNC_PATCHES = Counter(
    "rara_operator_run_status_patches_total", "WorkflowRun status patches of the status sync"
)
RUN_SYNC_TRACKED = Gauge(
    "rara_operator_workflow_runs_tracked",
    "Unfinished WorkflowRuns this operator mirrors (0 while paused by peering)",
)
EXECUTOR_STREAMS = Gauge("rara_executor_streams", "Open Execute streams (executor side)")
# outcome: succeeded | failed | cancelled (the terminal event), or refused (never started:
# incompatible or malformed job). capability is "unknown" when the job named none served
# here, so a caller cannot grow the label set with made-up names.
EXECUTOR_JOBS = Counter(
    "rara_executor_jobs_total", "Jobs run by this executor, by outcome", ["capability", "outcome"]
)
EXECUTOR_JOBS_RUNNING = Gauge(
    "rara_executor_jobs_running", "Job slots in use on this executor (of --max-concurrency)"
)
EXECUTOR_JOB_DURATION = Histogram(
    "rara_executor_job_duration_seconds",
    "Wall time of jobs on this executor, accepted to terminal event",
    ["capability"],
    buckets=DURATION_BUCKETS,
)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def serve(port: int, host: str = "0.0.0.0", ready: Callable[[], bool] = lambda: True) -> WSGIServer:
    """Serve /metrics, /healthz and /readyz on a daemon thread; returns the server (port 0 ok)."""
    metrics_app = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            ok = ready()
            start_response(
                "200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")]
            )
            return [b"ready\n" if ok else b"not ready\n"]
        return metrics_app(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(host, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
