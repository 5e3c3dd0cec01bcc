"""Two operator replicas, one at work (kopf peering, docs/operator.md): real ``rara operator``
processes against the real API server and the test's own PostgreSQL. The older replica works
and the younger stands by; the working one is SIGKILLed while WorkflowRuns are being created;
the standby takes over within the peering lifetime, and every WorkflowRun still has exactly
one rara run, the definition exactly one version. Prints the measured hand-over time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client

from rara.runs import cancel_run

from .apiserver import KubeFixture
from .test_operator import STEPS, Objects, condition, eventually, measure, versions
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["rara_crds"]

PEERING = "rara-operator"
# Seconds: the longest a standby waits for a SIGKILLed replica's entry to expire. Short here;
# RARA_TEST_PEERING_LIFETIME=15 measures the chart's default.
LIFETIME = int(os.environ.get("RARA_TEST_PEERING_LIFETIME", "3"))
RARA = Path(sys.executable).with_name("rara")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Metrics:
    """The operator process: its Prometheus metrics and its CPU time."""

    def __init__(self, port: int, pid: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.pid = pid

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def up(self) -> bool:
        try:
            self.scrape()
        except OSError:
            return False
        return True

    def scrape(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            text = response.read().decode()
        return {
            name: float(value)
            for name, _, value in (
                line.rpartition(" ") for line in text.splitlines() if not line.startswith("#")
            )
        }

    def value(self, name: str) -> float:
        return self.scrape().get(name, 0.0)


class Replica:
    """One ``rara operator`` process; its log (JSON lines) in a file; its metrics when the
    environment gives it a port."""

    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(RARA), "operator"],
                env={**env, "POD_ID": name},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        port = env.get("RARA_OPERATOR_METRICS_PORT")
        self.metrics = None if port is None else Metrics(int(port), self.proc.pid)

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    def started_runs(self) -> int:
        return self.log.read_text(errors="replace").count(" is rara run ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def peers(kube: KubeFixture, namespace: str) -> dict[str, Any]:
    """The peering object's status: {identity: {priority, lifetime, lastseen}}."""
    body = client.CustomObjectsApi(kube.api_client).get_namespaced_custom_object(
        "kopf.dev", "v1", namespace, "kopfpeerings", PEERING
    )
    return dict(body.get("status") or {})


def run_keys(db: psycopg.Connection[Any], keys: list[str]) -> dict[str, int]:
    rows = db.execute(
        "SELECT idempotency_key, count(*) FROM rara_runs "
        "WHERE idempotency_key = ANY(%s) GROUP BY 1",
        (keys,),
    ).fetchall()
    return {key: int(n) for key, n in rows}


@pytest.fixture
def replicas(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    tmp_path: Path,
    role_url: Callable[[str], str],
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Replica]]:
    # The peering object, as the chart creates it (templates/operator.yaml).
    client.CustomObjectsApi(kube_api.api_client).create_namespaced_custom_object(
        "kopf.dev",
        "v1",
        namespace,
        "kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RARA_")}
    env.update(
        {
            "KUBECONFIG": str(kube_api.kubeconfig),
            "RARA_OPERATOR_DATABASE_URL": role_url("rara_operator"),
            "RARA_OPERATOR_NAMESPACES": namespace,
            "RARA_OPERATOR_RUN_SYNC_INTERVAL": "1",
            "RARA_OPERATOR_LOG_JSON": "true",
        }
    )
    started: list[Replica] = []
    failed = request.session.testsfailed

    def start(name: str, lifetime: int = LIFETIME, peering: str = PEERING) -> Replica:
        started.append(
            Replica(
                name,
                {
                    **env,
                    "RARA_OPERATOR_PEERING_LIFETIME": str(lifetime),
                    "RARA_OPERATOR_PEERING_NAME": peering,
                    "RARA_OPERATOR_METRICS_PORT": str(free_port()),
                },
                tmp_path / f"{name}.log",
            )
        )
        return started[-1]

    try:
        yield start
    finally:
        for replica in started:
            replica.stop()
        for replica in started:  # their logs when the test failed (counted before teardown)
            if request.session.testsfailed > failed:
                print(
                    f"--- {replica.name} (exit {replica.proc.returncode})\n"
                    f"{replica.log.read_text(errors='replace')[-6000:]}"
                )


def working_and_standby(
    kube: KubeFixture, namespace: str, replicas: Callable[..., Replica], lifetime: int = LIFETIME
) -> tuple[Replica, Replica]:
    """op-a, working (it makes the definition "ha" Ready), then op-b, standing by: younger,
    so of lower priority, it stays paused (a peered replica starts paused and resumes only
    when no live entry outranks its own)."""
    objects = Objects(kube, namespace)
    a = replicas("op-a", lifetime)
    eventually(lambda: "op-a" in peers(kube, namespace), what="op-a in the peering")
    objects.create("workflowdefinitions", "WorkflowDefinition", "ha", {"steps": STEPS})
    eventually(
        lambda: (
            condition(objects.status("workflowdefinitions", "ha"), "Ready").get("status") == "True"
        ),
        what="definition Ready (op-a)",
    )
    b = replicas("op-b", lifetime)
    status = eventually(
        lambda: (p := peers(kube, namespace)).get("op-b") and p, what="op-b in the peering"
    )
    assert status["op-a"]["priority"] > status["op-b"]["priority"], status
    return a, b


def test_killed_replica_hands_over_without_duplicates(
    kube_api: KubeFixture,
    namespace: str,
    database_url: str,
    replicas: Callable[..., Replica],
) -> None:
    objects = Objects(kube_api, namespace)
    db = psycopg.connect(database_url, autocommit=True)
    try:
        a, b = working_and_standby(kube_api, namespace, replicas)
        uids: dict[str, str] = {}
        lock = threading.Lock()

        def create_run(name: str) -> None:
            body = objects.create("workflowruns", "WorkflowRun", name, {"definition": "ha"})
            with lock:
                uids[name] = body["metadata"]["uid"]

        def keys() -> list[str]:
            with lock:
                return [f"k8s:{uid}" for uid in uids.values()]

        for i in range(3):
            create_run(f"before-{i}")
        eventually(lambda: len(run_keys(db, keys())) == 3, what="op-a starts 3 runs")
        eventually(lambda: a.started_runs() >= 3, what="op-a's log of the 3 runs")
        assert b.started_runs() == 0, "exactly one replica works"
        assert not b.logged("Resuming operations")

        # Runs keep coming while the working replica is SIGKILLed (no graceful exit: its
        # peering entry stays until it expires).
        stop = threading.Event()

        def keep_creating() -> None:
            i = 0
            while not stop.wait(0.1):
                create_run(f"during-{i}")
                i += 1

        creator = threading.Thread(target=keep_creating, daemon=True)
        creator.start()
        try:
            # Some runs in flight in op-a at the moment it dies.
            eventually(lambda: len(keys()) >= 6, what="runs being created")
            killed_at = time.time()
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(5)
            eventually(
                lambda: b.logged("Resuming operations"), timeout=LIFETIME + 15, what="op-b resumes"
            )
            resumed = len(keys())  # and some runs created after the hand-over
            eventually(lambda: len(keys()) >= resumed + 3, what="runs after the hand-over")
        finally:
            stop.set()
            creator.join(5)

        expected = keys()
        eventually(
            lambda: len(run_keys(db, expected)) == len(expected),
            timeout=LIFETIME + 30,
            what=f"all {len(expected)} WorkflowRuns started",
        )
        assert set(run_keys(db, expected).values()) == {1}
        total = db.execute("SELECT count(*) FROM rara_runs").fetchone()
        assert total == (len(expected),), "a rara run that no WorkflowRun asked for"
        # Each WorkflowRun's status names the one run its uid started.
        by_key = dict(db.execute("SELECT idempotency_key, id FROM rara_runs").fetchall())

        def mirrored() -> bool:
            return all(
                objects.status("workflowruns", name).get("runId") == by_key[f"k8s:{uid}"]
                for name, uid in uids.items()
            )

        eventually(mirrored, what="each WorkflowRun's status names its run")
        assert [v for v, _ in versions(db, "ha")] == [1], "the definition has one version"

        row = db.execute(
            "SELECT extract(epoch FROM min(created_at)) FROM rara_runs "
            "WHERE created_at > to_timestamp(%s)",
            (killed_at,),
        ).fetchone()
        assert row is not None
        assert row[0] is not None
        handover = float(row[0]) - killed_at
        measure(
            f"operator hand-over after SIGKILL: {handover:.2f}s (kill -> the standby's "
            f"first run started; peering lifetime {LIFETIME}s, "
            f"{len(expected)} WorkflowRuns, each started once)"
        )
        assert 0 < handover < LIFETIME + 5
    finally:
        db.close()


def test_stopped_replica_hands_over_at_once(
    kube_api: KubeFixture,
    namespace: str,
    database_url: str,
    replicas: Callable[..., Replica],
) -> None:
    """SIGTERM (a rollout, a drain): the leaving replica deletes its peering entry, so the
    standby resumes at once, not after the lifetime (long here, to tell the two apart)."""
    lifetime = 60
    objects = Objects(kube_api, namespace)
    with psycopg.connect(database_url, autocommit=True) as db:
        a, b = working_and_standby(kube_api, namespace, replicas, lifetime)
        assert a.metrics is not None
        assert b.metrics is not None
        # A run that stays Pending (no worker): op-a mirrors it, the paused op-b does not.
        waiting = objects.create("workflowruns", "WorkflowRun", "waiting", {"definition": "ha"})
        eventually(
            lambda: objects.status("workflowruns", "waiting").get("phase") == "Pending",
            what="op-a starts the waiting run",
        )
        reads = a.metrics.value("rara_operator_run_sync_reads_total")
        eventually(
            lambda: a.metrics.value("rara_operator_run_sync_reads_total") >= reads + 2,
            what="op-a syncs it",
        )
        assert b.metrics.value("rara_operator_run_sync_reads_total") == 0, "op-b is paused"
        assert b.metrics.value("rara_operator_workflow_runs_tracked") == 0

        stopped_at = time.monotonic()
        a.stop()
        assert a.proc.returncode == 0
        assert "op-a" not in peers(kube_api, namespace), "op-a left its entry behind"
        body = objects.create("workflowruns", "WorkflowRun", "after", {"definition": "ha"})
        eventually(
            lambda: run_keys(db, [f"k8s:{body['metadata']['uid']}"]),
            timeout=lifetime / 2,
            what="op-b starts the run",
        )
        handover = time.monotonic() - stopped_at
        measure(
            f"operator hand-over after SIGTERM: {handover:.2f}s (stop -> the standby's "
            f"first run started; peering lifetime {lifetime}s)"
        )
        assert b.logged("Resuming operations")
        assert handover < lifetime / 4
        # op-b mirrors now: the waiting run, cancelled in PostgreSQL, shows Cancelled.
        run_id = objects.status("workflowruns", "waiting")["runId"]
        assert run_keys(db, [f"k8s:{waiting['metadata']['uid']}"]) == {
            f"k8s:{waiting['metadata']['uid']}": 1
        }
        cancel_run(db, int(run_id))
        eventually(
            lambda: objects.status("workflowruns", "waiting").get("phase") == "Cancelled",
            what="op-b mirrors the cancel",
        )
        assert b.metrics.value("rara_operator_run_sync_reads_total") >= 1


def test_replica_waits_for_its_peering_object(
    kube_api: KubeFixture,
    namespace: str,
    replicas: Callable[..., Replica],
) -> None:
    """No peering object yet (helm creates it after the Deployment): the replica says so and
    stays paused, and works as soon as the object exists."""
    objects = Objects(kube_api, namespace)
    a = replicas("op-a", peering="late")
    eventually(
        lambda: a.logged("KopfPeering") and a.logged("not found"),
        what="the missing object named in op-a's log",
    )
    objects.create("workflowdefinitions", "WorkflowDefinition", "ha", {"steps": STEPS})
    assert not a.logged("Resuming operations")
    assert not condition(objects.status("workflowdefinitions", "ha"), "Ready")
    client.CustomObjectsApi(kube_api.api_client).create_namespaced_custom_object(
        "kopf.dev",
        "v1",
        namespace,
        "kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "late"}},
    )
    eventually(
        lambda: (
            condition(objects.status("workflowdefinitions", "ha"), "Ready").get("status") == "True"
        ),
        what="definition Ready once the object exists",
    )
