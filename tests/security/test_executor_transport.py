"""The executors' transport: where the bearer token may travel, and what a caller without it
learns.

- A token is a password sent with every call: an executor given one on an address other
  hosts can reach must serve TLS, or it refuses to start naming the flags that fix it. A
  wildcard (0.0.0.0, [::]) is reachable from other hosts, so it counts as remote.
- A caller without a valid token is refused as UNAUTHENTICATED before anything else is
  looked at: an oversized request does not tell it the size limit, nor get decoded.

Both executors, as real processes (the Python one also in-process, as tests/executor starts
it), over real gRPC on loopback.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from rara.executor.client import ExecutorClient, make_job
from rara.executor.limits import MAX_MESSAGE_BYTES
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc
from tests.executor.support import TOKEN, WAIT_S, StartExecutor
from tests.executor.test_executor_auth import pki  # noqa: F401 - the fixture, reused
from tests.executor.test_go_executor import _listening, build_go_executor, running

STARTUP_S = 30.0  # a cold interpreter importing grpc and protobuf on a busy CI machine
REMOTE = ["0.0.0.0:0", "[::]:0"]  # wildcards: every interface, so other hosts too
BIG = "x" * (MAX_MESSAGE_BYTES + 1)


@pytest.fixture(scope="module")
def go_executor() -> Path:
    if shutil.which("go") is None:
        pytest.skip("go is not installed: the Go executor (executor/go) cannot be built")
    return build_go_executor()


def _python_executor() -> list[str]:
    return [sys.executable, "-m", "rara.executor.main"]


def _assert_refused_naming_the_flags(done: subprocess.CompletedProcess[str], listen: str) -> None:
    assert done.returncode == 2, done
    for named in ("--token-file", "--listen", listen, "--tls-cert", "clear text"):
        assert named in done.stderr, done.stderr
    assert TOKEN not in done.stderr + done.stdout, "the token itself is never printed"


@pytest.mark.parametrize("listen", REMOTE)
def test_python_executor_refuses_a_clear_text_token_off_loopback(
    tmp_path: Path, listen: str
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    done = subprocess.run(
        [
            *_python_executor(),
            "--listen",
            listen,
            "--token-file",
            str(tmp_path / "token"),
            "--artifact-root",
            str(tmp_path / "artifacts"),
        ],
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    _assert_refused_naming_the_flags(done, listen)


@pytest.mark.parametrize("listen", REMOTE)
def test_go_executor_refuses_a_clear_text_token_off_loopback(
    go_executor: Path, tmp_path: Path, listen: str
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    done = subprocess.run(
        [
            str(go_executor),
            "--listen",
            listen,
            "--token-file",
            str(tmp_path / "token"),
            "--artifact-root",
            str(tmp_path / "artifacts"),
        ],
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    _assert_refused_naming_the_flags(done, listen)


@contextmanager
def _python_process(tmp: Path, *args: str) -> Iterator[str]:
    """`python -m rara.executor.main` with a token; yields its address; stopped after."""
    (tmp / "token").write_text(TOKEN)
    argv = [
        *_python_executor(),
        "--token-file",
        str(tmp / "token"),
        "--artifact-root",
        str(tmp / "artifacts"),
        "--plugins",
        "rara.executor.conformance_plugins",
        *args,
    ]
    with (
        open(tmp / "executor.log", "w+") as log,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True) as proc,
    ):
        try:
            yield _listening(proc, STARTUP_S)
        finally:
            proc.kill()
            proc.wait()


async def _capabilities_over_tls(port: str, pki: Path) -> pb.GetCapabilitiesResponse:  # noqa: F811
    ca = (pki / "ca.pem").read_bytes()
    async with ExecutorClient(f"localhost:{port}", token=TOKEN, root_certificates=ca) as client:
        return await client.get_capabilities()


async def test_a_token_over_tls_may_listen_on_every_interface(
    go_executor: Path,
    tmp_path: Path,
    pki: Path,  # noqa: F811
) -> None:
    tls = (
        "--listen",
        "0.0.0.0:0",
        "--tls-cert",
        str(pki / "server.pem"),
        "--tls-key",
        str(pki / "server.key"),
    )
    with _python_process(tmp_path, *tls) as address:
        assert (await _capabilities_over_tls(address.rsplit(":", 1)[1], pki)).capabilities
    go_tmp = tmp_path / "go"
    go_tmp.mkdir()
    # `running` starts it on loopback; the later --listen wins (the flag package's rule).
    with running(go_executor, go_tmp, *tls) as (address, _):
        assert (await _capabilities_over_tls(address.rsplit(":", 1)[1], pki)).capabilities


async def _oversized_calls(address: str, token: str | None) -> list[grpc.aio.AioRpcError]:
    """An oversized Cancel (unary) and Execute (stream) from a client with no send limit of
    its own (another implementation, an old rara); the error each got."""
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    options = [("grpc.max_send_message_length", -1)]
    errors = []
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = pb_grpc.ExecutorServiceStub(channel)
        job = make_job(capability="test.echo@1", idempotency_key="k", payload={"blob": BIG})
        calls = [
            stub.Cancel(
                pb.CancelRequest(idempotency_key="k", attempt=1, reason=BIG), metadata=metadata
            ),
            stub.Execute(pb.ExecuteRequest(job=job), metadata=metadata),
        ]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _finish(call)
            errors.append(err.value)
    return errors


async def _finish(call: grpc.aio.Call) -> None:
    async with asyncio.timeout(WAIT_S):
        if isinstance(call, grpc.aio.UnaryStreamCall):
            _ = [e async for e in call]
        else:
            await call


async def _assert_auth_before_size(address: str) -> None:
    for token in (None, "wrong"):
        errors = await _oversized_calls(address, token)
        assert [e.code() for e in errors] == [grpc.StatusCode.UNAUTHENTICATED] * 2, [
            (e.code(), e.details()) for e in errors
        ]
        assert not any(str(MAX_MESSAGE_BYTES) in (e.details() or "") for e in errors), (
            "a caller without the token is not told the size limit"
        )
    # With the token, the same requests meet the size limit, which names itself.
    for error in await _oversized_calls(address, TOKEN):
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert str(MAX_MESSAGE_BYTES) in (error.details() or ""), error.details()


async def test_python_executor_checks_the_token_before_the_size(
    start_executor: StartExecutor,
) -> None:
    executor = await start_executor()
    await _assert_auth_before_size(executor.address)
    assert executor.server.servicer._jobs == {}


async def test_go_executor_checks_the_token_before_the_size(
    go_executor: Path, tmp_path: Path
) -> None:
    with running(go_executor, tmp_path) as (address, _):
        await _assert_auth_before_size(address)
