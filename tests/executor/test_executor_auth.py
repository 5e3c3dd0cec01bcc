"""Who may call: bearer token, mutual TLS, and the loopback-only escape hatch."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from rara.executor import auth
from rara.executor.auth import AuthConfig, InsecureConfigError, TlsFiles
from rara.executor.client import ExecutorClient, make_job
from tests.executor.support import TOKEN, WAIT_S, Executor, StartExecutor, collect, kinds


async def _code_of(client: ExecutorClient) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async with asyncio.timeout(WAIT_S):
            await client.get_capabilities()
    return err.value.code()


async def test_calls_without_a_valid_token_are_refused(executor: Executor) -> None:
    for token in (None, "wrong", TOKEN + "x", ""):
        async with ExecutorClient(executor.address, token=token) as client:
            assert await _code_of(client) == grpc.StatusCode.UNAUTHENTICATED, token
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await anext(client.execute(make_job(capability="test.echo@1", idempotency_key="k")))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert not await _cancel_reaches(client), "Cancel needs the token too"
    assert (await executor.client.get_capabilities()).max_concurrency == 4


async def _cancel_reaches(client: ExecutorClient) -> bool:
    try:
        await client.cancel("k", 1)
    except grpc.aio.AioRpcError as exc:
        return bool(exc.code() != grpc.StatusCode.UNAUTHENTICATED)
    return True


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  abc \n")
    assert auth.read_token(path) == "abc"
    path.write_text("\n")
    with pytest.raises(InsecureConfigError, match="empty"):
        auth.read_token(path)


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:0", True),
        ("127.1.2.3:80", True),
        ("[::1]:50051", True),
        ("localhost:1", True),
        ("0.0.0.0:50051", False),
        ("[::]:1", False),
        ("10.0.0.1:1", False),
        ("executor.svc:1", False),
    ],
)
def test_is_loopback(listen: str, loopback: bool) -> None:
    assert auth.is_loopback(listen) is loopback


def test_unauthenticated_start_is_refused_unless_loopback_and_asked() -> None:
    with pytest.raises(InsecureConfigError, match="without authentication"):
        auth.check(AuthConfig(), "127.0.0.1:0")
    with pytest.raises(InsecureConfigError, match="loopback --listen"):
        auth.check(AuthConfig(insecure_loopback=True), "0.0.0.0:50051")
    server_only_tls = TlsFiles(Path("c"), Path("k"))  # TLS without client certs: no identity
    with pytest.raises(InsecureConfigError):
        auth.check(AuthConfig(tls=server_only_tls), "0.0.0.0:1")
    auth.check(AuthConfig(insecure_loopback=True), "127.0.0.1:0")
    with pytest.raises(InsecureConfigError, match="clear text"):
        auth.check(AuthConfig(token="t"), "0.0.0.0:1")  # tests/security has the process
    auth.check(AuthConfig(token="t"), "127.0.0.1:1")
    auth.check(AuthConfig(token="t", tls=server_only_tls), "0.0.0.0:1")
    auth.check(AuthConfig(tls=TlsFiles(Path("c"), Path("k"), Path("ca"))), "0.0.0.0:1")


async def test_insecure_loopback_serves_without_a_token(start_executor: StartExecutor) -> None:
    ex = await start_executor(auth_config=AuthConfig(insecure_loopback=True), token=None)
    events = await collect(ex.client, make_job(capability="test.echo@1", idempotency_key="k"))
    assert kinds(events)[-1] == "succeeded"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A throwaway CA, a server cert for 127.0.0.1 and a client cert, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subj = ["-nodes", "-newkey", "rsa:2048", "-days", "1"]
    _openssl(
        "req",
        "-x509",
        *subj,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=rara test CA",
        cwd=tmp_path,
    )
    for name, ext in [
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "extendedKeyUsage=clientAuth"),
    ]:
        _openssl(
            "req",
            *subj,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN=rara {name}",
            cwd=tmp_path,
        )
        (tmp_path / f"{name}.ext").write_text(ext + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.pem",
            cwd=tmp_path,
        )
    return tmp_path


async def test_mutual_tls(start_executor: StartExecutor, pki: Path) -> None:
    tls = TlsFiles(pki / "server.pem", pki / "server.key", pki / "ca.pem")
    ex = await start_executor(auth_config=AuthConfig(tls=tls), token=None, listen="127.0.0.1:0")
    port = ex.address.rsplit(":", 1)[1]
    ca = (pki / "ca.pem").read_bytes()
    async with ExecutorClient(
        f"localhost:{port}",
        root_certificates=ca,
        private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.pem").read_bytes(),
    ) as client:
        caps = await client.get_capabilities()
        assert caps.capabilities
    async with ExecutorClient(f"localhost:{port}", root_certificates=ca) as no_cert:
        assert await _code_of(no_cert) == grpc.StatusCode.UNAVAILABLE  # handshake refused
