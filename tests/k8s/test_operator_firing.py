"""The operator's firing thread outlives any error, and its liveness probe says while it is
failing (docs/schedules.md, "A schedule that cannot fire"): the error is a real one, the
firing login's EXECUTE on the claim taken away by the owner, then given back.

The first test drives the thread and the probe handler kopf calls, with no API server; the
second asks the probe over HTTP of an operator run by kopf against a real API server."""

from __future__ import annotations

import gc
import json
import socket
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from typing import Any

import kopf
import psycopg
import pytest
from kopf.testing import KopfRunner

from rara.operator import schedules
from rara.operator.app import build_registry
from rara.operator.runtime import OperatorConfig
from rara.schedules.manage import apply_schedule
from rara.schedules.model import schedule_from_object
from tests.support.definitions import noop_definition
from tests.support.waiting import wait_until

from .apiserver import KubeFixture
from .test_operator_crds import rara_crds

__all__ = ["rara_crds"]  # a fixture, used by name
Conn = psycopg.Connection[Any]
CLAIM = "rara_schedule_claim(integer)"


def _every_second(conn: Conn, namespace: str = "default") -> None:
    noop_definition(conn, namespace=namespace)
    doc = {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowSchedule",
        "metadata": {"name": "every-second"},
        "spec": {"definition": "noop", "schedule": "* * * * * *"},
    }
    apply_schedule(conn, schedule_from_object(doc), namespace=namespace)


def _runs(conn: Conn) -> int:
    return conn.execute("SELECT count(*) FROM rara_runs").fetchone()[0]  # type: ignore[index,no-any-return]


def _break_the_claim(conn: Conn) -> None:
    conn.execute(f"REVOKE EXECUTE ON FUNCTION {CLAIM} FROM rara_operator")


def _mend_the_claim(conn: Conn) -> None:
    conn.execute("SELECT rara_grant('rara_schedule_claim', 'rara_client', 'rara_operator')")


def test_the_firing_thread_starts_again_after_an_error_and_the_probe_fails_meanwhile(
    conn: Conn, role_url: Callable[[str], str]
) -> None:
    _every_second(conn)
    _break_the_claim(conn)
    fire = schedules.Firing.start(role_url("rara_operator"))
    memo = kopf.Memo()
    memo.firing = fire
    try:
        problem = wait_until(fire.problem, message="the firing's error")
        assert problem is not None
        assert "permission denied for function rara_schedule_claim" in problem
        with pytest.raises(kopf.PermanentError, match="the schedules' firing is down"):
            schedules.firing_probe(memo)
        # Tried again, with a backoff, in the same thread: nothing fired meanwhile.
        wait_until(lambda: "2 tries" in (fire.problem() or ""), message="a second try")
        assert fire.thread.is_alive()
        assert _runs(conn) == 0
        _mend_the_claim(conn)
        wait_until(lambda: _runs(conn) >= 1, timeout=60, message="a tick fired once mended")
        wait_until(lambda: fire.problem() is None, message="the probe passing again")
        assert schedules.firing_probe(memo) == {"schedules": "firing"}
    finally:
        fire.close()
    assert not fire.thread.is_alive()
    assert schedules.firing_probe(memo) == {"schedules": "firing"}  # stopped: not failing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _health(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not serving yet
        return 0, str(exc)


def _answers(url: str, status: int, what: str) -> str:
    """The body of the probe's first answer with ``status``."""
    bodies: list[str] = []

    def answered() -> bool:
        code, body = _health(url)
        bodies.append(body)
        return code == status

    wait_until(answered, 60, what)
    return bodies[-1]


@pytest.mark.k8s
def test_the_liveness_probe_fails_while_the_firing_fails(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    conn: Conn,
    role_url: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))
    _every_second(conn, namespace)
    _break_the_claim(conn)
    config = OperatorConfig(
        database_url=role_url("rara_operator"),
        namespaces=(namespace,),
        run_sync_interval=0.3,
        scale_interval=0.3,
    )
    registry = build_registry(config)
    started = threading.Event()
    kopf.on.startup(registry=registry)(lambda **_: started.set())
    url = f"http://127.0.0.1:{_free_port()}/healthz"
    args = ["run", "--standalone", "--namespace", namespace, "--liveness", url]
    runner = KopfRunner(args, registry=registry, timeout=30)
    runner.__enter__()
    try:
        assert started.wait(30), "operator did not start"
        _answers(url, 500, "the probe failing")
        _mend_the_claim(conn)
        body = _answers(url, 200, "the probe passing again")
        assert json.loads(body) == {"schedules": {"schedules": "firing"}}
        assert _runs(conn) >= 1
    finally:
        runner.__exit__(None, None, None)
        with warnings.catch_warnings():  # as tests/k8s/test_operator.py's Operator.stop
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    assert runner.exit_code == 0, runner.output
