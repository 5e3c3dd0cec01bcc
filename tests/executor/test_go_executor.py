"""The Go executor (executor/go) speaks the same contract: the conformance suite passes
against it by address, its auth and drain behave like the Python executor's, it shares the
artifact store's layout, and its own tests pass under the race detector.

The binary is built by ``executor/go/build.sh`` (cached by a hash of its sources under
~/.cache/rara/go-executor/, so only the first run after a change pays the build).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rara.artifacts.store import LocalArtifactStore
from rara.executor.client import ExecutorClient, make_job
from rara.executor.conformance import run_conformance_async
from rara.executor.conformance_checks import CHECKS
from rara.v1 import executor_pb2 as pb
from tests.executor.support import BIG_WAIT_S, TOKEN, collect, kinds
from tests.executor.test_executor_auth import pki  # noqa: F401 - the fixture, reused

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "executor" / "go"

pytestmark = [
    pytest.mark.skipif(
        shutil.which("go") is None,
        reason="go is not installed: the Go executor (executor/go) cannot be built or tested",
    ),
    # The first test pays a cold build (about 2 min on 2 busy cores; a cached one: 0.02 s).
    pytest.mark.timeout(900),
]


def build_go_executor() -> Path:
    """The cached binary for the current sources (built now if they changed)."""
    out = subprocess.run(
        [str(GO_MODULE / "build.sh")], check=True, capture_output=True, text=True, timeout=600
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def go_executor() -> Path:
    return build_go_executor()


@contextmanager
def running(
    binary: Path, tmp: Path, *args: str, token: str | None = TOKEN, expect_exit: int = 0
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the binary on loopback (port 0); yield its address; SIGTERM it after."""
    argv = [
        str(binary),
        "--listen",
        "127.0.0.1:0",
        "--artifact-root",
        str(tmp / "artifacts"),
        "--plugins",
        "builtin,conformance",
        "--max-concurrency",
        "4",
        "--cancel-grace",
        "0.3",
        "--durable=false",
        *args,
    ]
    if token is not None:
        (tmp / "token").write_text(token)
        argv += ["--token-file", str(tmp / "token")]
    # stderr (JSON logs) to a file: a pipe nobody reads would block the executor once full.
    with (
        open(tmp / "go-executor.log", "w+") as log,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True) as proc,
    ):
        try:
            address = _listening(proc)
            yield address, proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        log.seek(0)
        assert code == expect_exit, f"exit {code}: {log.read()[-2000:]}"


def _listening(proc: subprocess.Popen[str], within: float = 30.0) -> str:
    """The address from the executor's "listening on" line (the same line as `rara executor`)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left) and (line := proc.stdout.readline()):
                if m := re.search(r"listening on (\S+)$", line.strip()):
                    return m.group(1)
            elif proc.poll() is not None:
                break
    raise AssertionError(f"the Go executor did not start (exit {proc.poll()}); see its log")


async def test_conformance_with_token(go_executor: Path, tmp_path: Path) -> None:
    with running(go_executor, tmp_path) as (address, _):
        report = await run_conformance_async(address, TOKEN, check_timeout=20)
    assert [r.name for r in report.results] == [name for name, _ in CHECKS]
    assert all(r.outcome == "passed" for r in report.results), report.summary()


async def test_the_go_executor_advertises_sessions(go_executor: Path, tmp_path: Path) -> None:
    with running(go_executor, tmp_path) as (address, _):
        caps = await _capabilities(address)
    assert list(caps.protocols) == ["session"]


async def test_sigkill_mid_session_fails_every_job(go_executor: Path, tmp_path: Path) -> None:
    """Jobs on one session to the Go executor, which dies: each ends UNAVAILABLE, as a broken
    Execute call does; a session to the next executor there works."""
    with running(go_executor, tmp_path, expect_exit=-signal.SIGKILL) as (address, proc):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = "session"
            jobs = [
                client.execute(make_job(capability="test.hang@1", idempotency_key=f"h{i}"))
                for i in range(3)
            ]
            async with asyncio.timeout(10):
                for job in jobs:
                    async for event in job:
                        if event.HasField("running"):
                            break
            proc.send_signal(signal.SIGKILL)
            for job in jobs:
                with pytest.raises(grpc.aio.AioRpcError) as broken:
                    await asyncio.wait_for(_to_the_end(job), 10)
                assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = "session"
            events = await collect(client, make_job(capability="test.echo@1", idempotency_key="n"))
    assert kinds(events) == ["accepted", "running", "succeeded"]


@pytest.mark.parametrize("protocol", ["execute", "session"])
async def test_what_an_operation_logs_goes_out_before_its_verdict(
    go_executor: Path, tmp_path: Path, protocol: str
) -> None:
    """Job.Log: JobLog events, in order, all of them before the verdict (masking: a payload
    cannot carry a credential, so the Go unit tests of stepLog cover it)."""
    said = "loading\nshard 1 of 2 \u00e9t\u00e9\nno newline"
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = protocol
            job = make_job(capability="test.echo@1", idempotency_key="l", payload={"log": said})
            events = await collect(client, job)
    assert kinds(events)[-1] == "succeeded"
    assert set(kinds(events)[2:-1]) == {"log"}, kinds(events)
    assert "".join(e.log.text for e in events if e.WhichOneof("event") == "log") == said


async def test_big_session_events_go_in_messages_of_their_own(
    go_executor: Path, tmp_path: Path
) -> None:
    """Two 9 MB results at once would pass the 16 MB wire limit together: one message each."""
    blobs = ["a" * (9 << 20), "b" * (9 << 20)]
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = "session"
            results = await asyncio.gather(
                *(
                    collect(
                        client,
                        make_job(
                            capability="test.echo@1", idempotency_key=f"big{i}", payload={"b": b}
                        ),
                        BIG_WAIT_S,
                    )
                    for i, b in enumerate(blobs)
                )
            )
    for blob, events in zip(blobs, results, strict=True):
        assert kinds(events) == ["accepted", "running", "succeeded"]
        assert json.loads(events[-1].succeeded.result_json)["input"] == {"b": blob}


async def test_a_verdict_frees_the_slot_before_the_worker_hears_it(
    go_executor: Path, tmp_path: Path
) -> None:
    """4 slots, 4 chains of jobs each sent the moment the last verdict is read: none full."""
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = "session"

            async def chain(c: int) -> None:
                for i in range(150):
                    job = make_job(capability="test.echo@1", idempotency_key=f"c{c}-{i}")
                    assert kinds(await collect(client, job))[-1] == "succeeded"

            await asyncio.gather(*(chain(c) for c in range(4)))


async def test_an_idle_session_does_not_hold_up_shutdown(go_executor: Path, tmp_path: Path) -> None:
    with running(go_executor, tmp_path) as (address, proc):
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = "session"
            await collect(client, make_job(capability="test.echo@1", idempotency_key="x"))
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
    assert time.monotonic() - started < 5


async def _to_the_end(events: AsyncIterator[pb.ExecuteResponse]) -> None:
    async for _ in events:
        pass


async def _capabilities(address: str) -> pb.GetCapabilitiesResponse:
    async with ExecutorClient(address, token=TOKEN) as client:
        return await client.get_capabilities()


@pytest.mark.parametrize("protocol", ["execute", "session"])
def test_the_conformance_command_passes(go_executor: Path, tmp_path: Path, protocol: str) -> None:
    """`rara executor-conformance ADDRESS` as an implementer runs it, exit code 0."""
    rara = Path(sys.executable).with_name("rara")
    token = str(tmp_path / "token")
    with running(go_executor, tmp_path) as (address, _):
        done = subprocess.run(
            [
                str(rara),
                "executor-conformance",
                address,
                "--token-file",
                token,
                "--protocol",
                protocol,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{address}: {len(CHECKS)} passed, 0 failed, 0 skipped" in done.stdout


async def test_conformance_insecure_loopback(go_executor: Path, tmp_path: Path) -> None:
    with running(go_executor, tmp_path, "--insecure-loopback", token=None) as (address, _):
        report = await run_conformance_async(address, None, check_timeout=20)
    assert report.passed, report.summary()
    assert [r.name for r in report.results if r.outcome == "skipped"] == ["unauthenticated"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "without authentication"),
        (("--insecure-loopback", "--listen", "0.0.0.0:0"), "loopback --listen"),
        (("--tls-cert", "c.pem", "--insecure-loopback"), "go together"),
        (("--plugins", "nope", "--insecure-loopback"), "unknown operation set"),
    ],
)
def test_refuses_unsafe_or_wrong_settings(
    go_executor: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    argv = [str(go_executor), "--listen", "127.0.0.1:0", "--artifact-root", str(tmp_path)]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done
    assert message in done.stderr


def test_settings_from_the_environment(go_executor: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RARA_EXECUTOR_INSECURE_LOOPBACK": "true",
        "RARA_EXECUTOR_LISTEN": "0.0.0.0:0",
        "RARA_ARTIFACTS": str(tmp_path),
    }
    done = subprocess.run([str(go_executor)], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 2, done
    assert "loopback --listen" in done.stderr


async def test_mutual_tls(go_executor: Path, tmp_path: Path, pki: Path) -> None:  # noqa: F811
    tls = [
        "--tls-cert",
        str(pki / "server.pem"),
        "--tls-key",
        str(pki / "server.key"),
        "--tls-client-ca",
        str(pki / "ca.pem"),
    ]
    with running(go_executor, tmp_path, *tls, token=None) as (address, _):
        port = address.rsplit(":", 1)[1]
        ca = (pki / "ca.pem").read_bytes()
        async with ExecutorClient(
            f"localhost:{port}",
            root_certificates=ca,
            private_key=(pki / "client.key").read_bytes(),
            certificate_chain=(pki / "client.pem").read_bytes(),
        ) as client:
            assert (await client.get_capabilities()).executor_version.startswith(
                "rara-executor-go/"
            )
        async with ExecutorClient(f"localhost:{port}", root_certificates=ca) as no_cert:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await no_cert.get_capabilities(rpc_timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # handshake refused


async def test_sigterm_drains(go_executor: Path, tmp_path: Path) -> None:
    """NOT_SERVING first, then running jobs end as retryable UNAVAILABLE, then exit 0."""
    with running(go_executor, tmp_path, "--grace", "0.5") as (address, proc):
        async with (
            ExecutorClient(address, token=TOKEN) as client,
            grpc.aio.insecure_channel(address) as channel,
        ):
            health = health_pb2_grpc.HealthStub(channel)
            stream = client.execute(make_job(capability="test.hang@1", idempotency_key="h"))
            async for event in stream:
                if event.HasField("running"):
                    break
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                async for status in health.Watch(health_pb2.HealthCheckRequest()):
                    if status.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        break
                rest = [e async for e in stream]
            error = rest[-1].failed.error
            assert error.code == pb.ERROR_CODE_UNAVAILABLE, rest[-1]
            assert error.retryable


async def test_a_payload_holding_a_credential_is_refused(go_executor: Path, tmp_path: Path) -> None:
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            job = make_job(capability="test.echo@1", idempotency_key="s")
            job.payload_json = b'{"db": "postgres://app:hunter2@db/rara"}'
            events = await collect(client, job)
    assert kinds(events) == ["failed"]
    error = events[0].failed.error
    assert error.code == pb.ERROR_CODE_INVALID_ARGUMENT
    assert not error.retryable
    assert "$.db (looks like a password in URL)" in error.message
    assert "hunter2" not in str(events)


async def test_operations_share_the_python_artifact_store(
    go_executor: Path, tmp_path: Path
) -> None:
    """A blob the Python store wrote is chunked by Go; Go's output reads back verified. Each
    success reports what the job read (lineage): the chunked input, not the one left alone."""
    store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
    data = b"rara " * 1000
    ref = store.put_bytes(data, "text/plain")
    unread = store.put_bytes(b"left alone", "text/plain")
    with running(go_executor, tmp_path) as (address, _):
        async with ExecutorClient(address, token=TOKEN) as client:
            events = await collect(
                client,
                make_job(
                    capability="artifact.chunk@1",
                    idempotency_key="c",
                    inputs={"prep/doc": ref, "prep/other": unread},
                    payload={"artifact": "prep/doc", "chunk_size": 1024, "checkpoint_every": 2},
                ),
            )
            assert kinds(events)[-1] == "succeeded", events[-1]
            assert "checkpoint" in kinds(events)
            assert list(events[-1].succeeded.reads.digests) == [ref.digest]
            manifest = events[-1].succeeded.artifacts
            index = json.loads(store.get_bytes(manifest[0].digest))
            assert [c["size"] for c in index["chunks"]] == [1024, 1024, 1024, 1024, 904]
            text = await collect(
                client,
                make_job(
                    capability="text.normalize@1",
                    idempotency_key="n",
                    payload={"text": "  Ｒａｒａ\t\tflows ", "lower": True},
                ),
            )
            assert json.loads(text[-1].succeeded.result_json)["text"] == "rara flows"
            assert text[-1].succeeded.HasField("reads")  # present: it read nothing
            assert list(text[-1].succeeded.reads.digests) == []
            noop = await collect(client, make_job(capability="bench.noop@1", idempotency_key="o"))
            assert kinds(noop) == ["accepted", "running", "succeeded"]


def test_go_tests_under_the_race_detector() -> None:
    """`go test -race ./...` of the Go executor (needs cgo and a C compiler)."""
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler: go test -race needs cgo")
    done = subprocess.run(
        ["go", "test", "-race", "-count=1", "./..."],
        cwd=GO_MODULE,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CGO_ENABLED": "1"},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
