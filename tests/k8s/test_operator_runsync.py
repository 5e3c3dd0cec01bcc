"""Many WorkflowRuns mirrored at once (issue 15): a real ``rara operator`` process against the
real API server and the test's own PostgreSQL; the test's own thread plays the worker. Every
WorkflowRun must reach Succeeded with its step counts, while the operator reads the database
once per tick for all of them (its metrics say how often), patches only statuses that
changed, and stops reading once every run has ended. Prints the time from the first create to
the last status Succeeded: ``RARA_TEST_RUNSYNC_RUNS=100`` gives the figure in
docs/operator.md."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.states import AttemptOutcome
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence
from tests.support.definitions import apply
from tests.support.leasing import lease_now

from .apiserver import KubeFixture
from .test_operator import STEPS, Objects, eventually, measure
from .test_operator_crds import GROUP, VERSION, rara_crds
from .test_operator_peering import Metrics, Replica, free_port

pytestmark = pytest.mark.k8s
__all__ = ["rara_crds"]  # a fixture, used by name

RUNS = int(os.environ.get("RARA_TEST_RUNSYNC_RUNS", "50"))
INTERVAL = float(os.environ.get("RARA_TEST_RUNSYNC_INTERVAL", "1"))
CAPABILITIES = sorted({s["capability"] for s in STEPS})


@pytest.fixture
def operator_process(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    tmp_path: Path,
    role_url: Callable[[str], str],
    request: pytest.FixtureRequest,
) -> Iterator[Metrics]:
    """One standalone ``rara operator``, its metrics on a port of its own."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RARA_")}
    env.update(
        {
            "KUBECONFIG": str(kube_api.kubeconfig),
            "RARA_OPERATOR_DATABASE_URL": role_url("rara_operator"),
            "RARA_OPERATOR_NAMESPACES": namespace,
            "RARA_OPERATOR_RUN_SYNC_INTERVAL": str(INTERVAL),
            "RARA_OPERATOR_METRICS_PORT": str(port),
            "RARA_OPERATOR_LOG_JSON": "true",
        }
    )
    replica = Replica("op", env, tmp_path / "op.log")
    failed = request.session.testsfailed
    try:
        metrics = replica.metrics
        assert metrics is not None
        eventually(metrics.up, what="operator metrics served")
        yield metrics
        delete_all(Objects(kube_api, namespace))  # while the operator can release them
    finally:
        replica.stop()
        if request.session.testsfailed > failed:
            print(
                f"--- operator (exit {replica.proc.returncode})\n"
                f"{replica.log.read_text(errors='replace')[-6000:]}"
            )


def delete_all(objects: Objects) -> None:
    def names() -> list[str]:
        listed = objects.api.list_namespaced_custom_object(
            GROUP, VERSION, objects.namespace, "workflowruns"
        )
        return [o["metadata"]["name"] for o in listed["items"]]

    for name in names():
        objects.delete("workflowruns", name)
    eventually(lambda: not names(), timeout=120, what="WorkflowRuns deleted")


class Worker:
    """Leases every ready step of the test's capabilities and ends it at once, until stopped."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    async def _loop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as aconn:
                while not self.stop.is_set():
                    leased = lease_now(conn, CAPABILITIES, worker="w", limit=500, lease_seconds=60)
                    await end_many(
                        aconn,
                        [
                            Ending(
                                Fence(s.id, "w", s.lease_token),
                                s.run_id,
                                AttemptOutcome.SUCCEEDED,
                                result={},
                            )
                            for s in leased
                        ],
                    )
                    if not leased:
                        await asyncio.sleep(0.05)

    def __enter__(self) -> Worker:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert self.error is None, self.error


def phases(objects: Objects) -> dict[str, dict[str, Any]]:
    listed = objects.api.list_namespaced_custom_object(
        GROUP, VERSION, objects.namespace, "workflowruns"
    )
    return {o["metadata"]["name"]: dict(o.get("status") or {}) for o in listed["items"]}


READS = "rara_operator_run_sync_reads_total"
PATCHES = "rara_operator_run_status_patches_total"
TRACKED = "rara_operator_workflow_runs_tracked"


def test_many_workflow_runs_are_mirrored(
    operator_process: Metrics,
    kube_api: KubeFixture,
    namespace: str,
    database_url: str,
) -> None:
    objects = Objects(kube_api, namespace)
    with psycopg.connect(database_url, autocommit=True) as db:
        apply(db, "rag", STEPS, namespace=namespace)
    names = [f"run-{i:03d}" for i in range(RUNS)]
    reads0 = operator_process.value(READS)
    with Worker(database_url):
        t0 = time.monotonic()
        for name in names:
            objects.create("workflowruns", "WorkflowRun", name, {"definition": "rag"})
        created = time.monotonic() - t0
        accepted: list[float] = []  # when every status first had its runId

        def succeeded() -> dict[str, dict[str, Any]] | None:
            s = phases(objects)
            if not accepted and all(s.get(n, {}).get("runId") for n in names):
                accepted.append(time.monotonic() - t0)
            return s if all(s.get(n, {}).get("phase") == "Succeeded" for n in names) else None

        statuses = eventually(
            succeeded, timeout=60 + RUNS * 2, what=f"{RUNS} WorkflowRuns Succeeded"
        )
        done = time.monotonic() - t0
    measure(
        f"{RUNS} WorkflowRuns, run sync every {INTERVAL}s: created in {created:.2f}s, "
        f"all started {accepted[0]:.2f}s and all Succeeded {done:.2f}s after the first "
        "create"
    )
    for name in names:
        status = statuses[name]
        assert (status["stepsDone"], status["stepsTotal"], status["progress"]) == (2, 2, "2/2")
        assert status["finishedAt"]

    # One read per tick for all of them (a per-object timer made RUNS a tick), and at most
    # a patch per change each: Running, 1/2, Succeeded (the create handler wrote Pending).
    after = operator_process.scrape()
    reads, patches = after[READS] - reads0, after[PATCHES]
    ticks = done / INTERVAL
    measure(f"run sync: {reads:.0f} reads in {ticks:.1f} ticks, {patches:.0f} status patches")
    assert 1 <= reads <= ticks + 1
    assert patches <= 3 * RUNS
    # Ended: no longer tracked, read or patched.
    eventually(lambda: operator_process.value(TRACKED) == 0, what="ended runs untracked")
    settled = operator_process.scrape()
    time.sleep(3 * INTERVAL)  # a span of ticks in which nothing may happen
    final = operator_process.scrape()
    assert (final[READS], final[PATCHES]) == (settled[READS], settled[PATCHES])


def test_unchanged_runs_are_read_not_patched(
    operator_process: Metrics,
    kube_api: KubeFixture,
    namespace: str,
    database_url: str,
) -> None:
    """No worker: RUNS runs stay Pending. Every tick reads them, once; none patches them.
    Prints the operator's CPU time per tick meanwhile, and how long 10 more WorkflowRuns take
    to start beside them (the chaos run's symptom: new ones started late)."""
    objects = Objects(kube_api, namespace)
    with psycopg.connect(database_url, autocommit=True) as db:
        apply(db, "rag", STEPS, namespace=namespace)
    names = [f"idle-{i:03d}" for i in range(RUNS)]
    for name in names:
        objects.create("workflowruns", "WorkflowRun", name, {"definition": "rag"})
    eventually(
        lambda: (
            (s := phases(objects)) and all(s.get(n, {}).get("phase") == "Pending" for n in names)
        ),
        timeout=60 + RUNS,
        what="runs started",
    )
    time.sleep(INTERVAL)  # past the tick that may still be reading the last ones started
    before, cpu0, t0 = operator_process.scrape(), operator_process.cpu_seconds(), time.monotonic()
    time.sleep(5 * INTERVAL)  # a window of ticks, measured
    elapsed, cpu = time.monotonic() - t0, operator_process.cpu_seconds() - cpu0
    after = operator_process.scrape()
    measure(
        f"{RUNS} Pending WorkflowRuns, sync every {INTERVAL}s: operator CPU "
        f"{cpu / (elapsed / INTERVAL) * 1000:.0f} ms per tick over {elapsed:.1f}s, "
        f"{after.get(READS, 0) - before.get(READS, 0):.0f} sync reads"
    )

    more = [f"late-{i}" for i in range(10)]
    t1 = time.monotonic()
    for name in more:
        objects.create("workflowruns", "WorkflowRun", name, {"definition": "rag"})
    eventually(
        lambda: (s := phases(objects)) and all(s.get(n, {}).get("runId") for n in more),
        what="10 more started",
    )
    measure(
        f"10 WorkflowRuns created beside {RUNS} Pending ones: all started after "
        f"{time.monotonic() - t1:.2f}s"
    )

    assert 1 <= after[READS] - before[READS] <= elapsed / INTERVAL + 1
    assert after[PATCHES] == before[PATCHES] == 0
