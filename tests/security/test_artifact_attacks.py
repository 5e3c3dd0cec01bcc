"""Attacks through artifacts (issue 29): a hostile media type in a manifest, downloads that
leave copies of blobs behind, and links planted in a local artifact store.

Real parts throughout: a real PostgreSQL, workers (in a thread and as a process), a real
gRPC executor on loopback (the hostile one speaks the real protocol), ``rara ui`` served as a
process, and real files and links in temporary folders."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import signal
import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from psycopg import sql

from rara.artifacts.errors import ArtifactStoreUnsafe
from rara.artifacts.media_type import is_valid_media_type
from rara.artifacts.store import LocalArtifactStore
from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.executor.auth import AuthConfig
from rara.executor.client import ExecutorClient, make_job
from rara.executor.plugins import PluginRegistry
from rara.executor.server import create_server
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc
from tests.executor.support import TOKEN, collect
from tests.support.runs import define, start, wait_run
from tests.support.ui import UiServer
from tests.support.workers import ThreadWorker, WorkerProcess

CRLF = "text/plain\r\nSet-Cookie: session=stolen"


@pytest.fixture
def worker_in_thread(
    database_url: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> Iterator[ThreadWorker]:
    """A worker (tests/worker/handlers.py) whose store is ``tmp_path / "artifacts"``."""
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    yield worker
    worker.stop()


@pytest.fixture
def ui_tmp(tmp_path: Path) -> Path:
    """The UI's TMPDIR: every temporary file of a download would be here."""
    folder = tmp_path / "ui-tmp"
    folder.mkdir()
    return folder


@pytest.fixture
def ui(database_url: str, tmp_path: Path, ui_tmp: Path) -> Iterator[UiServer]:
    """``rara ui`` on the workers' store, its temporary files in ``ui_tmp``."""
    server = UiServer(
        database_url,
        tmp_path / "ui.log",
        "--artifacts",
        str(tmp_path / "artifacts"),
        env={"TMPDIR": str(ui_tmp)},
    )
    yield server
    server.stop()


# ---- the media type rule -------------------------------------------------------------------

VALID = [
    "text/plain",
    "application/octet-stream",
    "application/vnd.rara.bm25",
    "application/x-ndjson",
    "text/plain; charset=utf-8",
    "text/plain;charset=utf-8",
    'multipart/mixed; boundary="a b:c"',
    "a/b; x=1 ;  y=2",
    'a/b; q=""',
    "x" * 127 + "/" + "y" * 127,
]
INVALID = [
    CRLF,
    "text/plain\n",
    "text/plain\r",
    "text/plain\t",
    "",
    "text",
    "/plain",
    "text/",
    "text/plain; charset",
    'text/plain; q="a\\b"',
    'text/plain; q="a\x7fb"',
    'text/plain; q="café"',
    "tëxt/plain",
    'text/plain; q="x\nSet-Cookie: a=b"',
    "x" * 128 + "/y",
    "a/b; " + "c=d; " * 60,
    " text/plain",
    "text/plain ",
]


def test_the_media_type_rule_and_its_sql_spelling_agree(conn: psycopg.Connection[Any]) -> None:
    """The CHECK constraint the database carries (0012) means what the writers check."""
    assert len("a/b; " + "c=d; " * 60) > 255
    [(definition,)] = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conname = 'rara_step_artifacts_media_type_check'"
    ).fetchall()
    check = re.fullmatch(r"CHECK (.*?)( NOT VALID)?", definition, re.DOTALL)
    assert check is not None, definition
    for value in VALID + INVALID:
        in_sql = conn.execute(
            sql.SQL("SELECT {} FROM (SELECT %s::text AS media_type) t").format(sql.SQL(check[1])),
            (value,),
        ).fetchone()
        assert in_sql is not None
        assert bool(in_sql[0]) is is_valid_media_type(value), value
        assert is_valid_media_type(value) is (value in VALID), value


def _refused_for_good(conn: psycopg.Connection[Any], run_id: int) -> None:
    """The attempt failed once and for good, naming the artifact and the field; no manifest
    row and no blob row were written."""
    wait_run(conn, run_id, status="failed")
    attempts, error = conn.execute(
        "SELECT attempt, error FROM rara_steps WHERE run_id = %s", (run_id,)
    ).fetchone()
    assert attempts == 1
    assert error["code"] == "RESULT_INVALID", error
    assert error["retryable"] is False
    assert "'corpus.txt'" in error["message"], error
    assert "media_type" in error["message"]
    assert "\r" not in error["message"]
    assert "\n" not in error["message"]
    assert conn.execute("SELECT count(*) FROM rara_step_artifacts").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM rara_artifacts").fetchone() == (0,)


def test_an_in_process_handler_cannot_write_a_crlf_media_type(
    conn: psycopg.Connection[Any], worker_in_thread: ThreadWorker
) -> None:
    define(conn, "evil", [{"key": "a", "capability": "test.produce@1", "executor": "inprocess"}])
    run_id = start(conn, "evil", {"text": "hi", "media_type": CRLF})
    _refused_for_good(conn, run_id)


class _HostileExecutor(pb_grpc.ExecutorServiceServicer):
    """An executor (a compromised pod, an older build) whose report names a CRLF media type:
    the worker writes the manifest, so the worker must refuse it."""

    def GetCapabilities(self, request: Any, context: Any) -> pb.GetCapabilitiesResponse:
        return pb.GetCapabilitiesResponse(
            capabilities=[pb.Capability(name="test.hostile", major=1)],
            max_concurrency=4,
            executor_version="hostile",
        )

    def Execute(self, request: Any, context: Any) -> Iterator[pb.ExecuteResponse]:
        yield pb.ExecuteResponse(seq=1, accepted=pb.JobAccepted())
        digest = "sha256:" + hashlib.sha256(b"hi").hexdigest()
        ref = pb.ArtifactRef(name="corpus.txt", digest=digest, size=2, media_type=CRLF)
        yield pb.ExecuteResponse(seq=2, succeeded=pb.JobSucceeded(artifacts=[ref]))


@pytest.fixture
def hostile_executor() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ExecutorServiceServicer_to_server(_HostileExecutor(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(1).wait()


def test_an_executor_report_cannot_write_a_crlf_media_type(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path, hostile_executor: str
) -> None:
    define(conn, "evil", [{"key": "a", "capability": "test.hostile@1", "executor": "grpc"}])
    worker = WorkerProcess(
        database_url,
        "w1",
        tmp_path / "w1.log",
        artifact_root=tmp_path / "artifacts",
        executor_endpoint=hostile_executor,
    )
    try:
        run_id = start(conn, "evil")
        _refused_for_good(conn, run_id)
    finally:
        worker.signal(signal.SIGKILL)
        worker.wait(10)


async def _crlf_plugin(ctx: StepContext) -> StepOutcome:
    ref = ctx.artifacts.put_bytes(b"hi")
    return StepOutcome(artifacts=[OutputArtifact("corpus.txt", ref, CRLF)])


async def test_the_executor_refuses_a_plugin_s_crlf_media_type(tmp_path: Path) -> None:
    """The executor checks the same rule before it reports: a clear, terminal error."""
    registry = PluginRegistry()
    registry.register("t.crlf", 1, _crlf_plugin)
    store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
    server, port = create_server(registry, store, auth_config=AuthConfig(token=TOKEN))
    await server.start()
    client = ExecutorClient(f"127.0.0.1:{port}", token=TOKEN)
    try:
        events = await collect(client, make_job(capability="t.crlf@1", idempotency_key="k"))
    finally:
        await client.close()
        await server.stop(1.0)
    last = events[-1]
    assert last.WhichOneof("event") == "failed", events
    error = last.failed.error
    assert error.code == pb.ERROR_CODE_HANDLER_ERROR
    assert not error.retryable
    assert "'corpus.txt'" in error.message
    assert "media_type" in error.message


# ---- downloads leave nothing behind --------------------------------------------------------


def _produced(conn: psycopg.Connection[Any], **input: Any) -> str:
    """Run test.produce@1 (a worker in a thread is running) and return its artifact's digest."""
    define(conn, "make", [{"key": "a", "capability": "test.produce@1", "executor": "inprocess"}])
    run_id = start(conn, "make", input)
    wait_run(conn, run_id, status="succeeded")
    digest = conn.execute("SELECT digest FROM rara_step_artifacts").fetchone()
    assert digest is not None
    return str(digest[0])


def _as_an_older_row(conn: psycopg.Connection[Any], media_type: str) -> None:
    """Give the manifest row a media type the writers now refuse, as a database written before
    the rule holds (its CHECK constraint, where this one has it, dropped first)."""
    for (name,) in conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = "
        "'rara_step_artifacts'::regclass AND contype = 'c'"
    ).fetchall():
        conn.execute(
            sql.SQL("ALTER TABLE rara_step_artifacts DROP CONSTRAINT {}").format(
                sql.Identifier(name)
            )
        )
    conn.execute("UPDATE rara_step_artifacts SET media_type = %s", (media_type,))


def _get(ui: UiServer, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_an_older_row_s_crlf_media_type_downloads_as_octet_stream(
    conn: psycopg.Connection[Any],
    worker_in_thread: ThreadWorker,
    ui: UiServer,
    tmp_path: Path,
    ui_tmp: Path,
) -> None:
    digest = _produced(conn, text="a corpus")
    _as_an_older_row(conn, CRLF)
    status, headers, body = _get(ui, f"/artifacts/{digest}/download")
    assert status == 200, ui.output()
    assert headers["content-type"] == "application/octet-stream"
    assert "set-cookie" not in headers
    # Named after the artifact (one header, no CR/LF from the row reached it).
    assert headers["content-disposition"] == (
        "attachment; filename=\"corpus.txt\"; filename*=UTF-8''corpus.txt"
    )
    assert body == b"a corpus"
    assert os.listdir(ui_tmp) == []


def test_a_failed_download_leaves_no_copy(
    conn: psycopg.Connection[Any],
    worker_in_thread: ThreadWorker,
    ui: UiServer,
    tmp_path: Path,
    ui_tmp: Path,
) -> None:
    """A blob missing from the store, a corrupted one: an error page, nothing left behind."""
    digest = _produced(conn, text="a corpus")
    store = LocalArtifactStore(tmp_path / "artifacts")
    blob = store.path_of(digest)
    blob.chmod(0o644)
    blob.write_bytes(b"A CORPUS")
    status, _, _ = _get(ui, f"/artifacts/{digest}/download")
    assert status == 500
    assert os.listdir(ui_tmp) == []
    blob.unlink()
    status, _, body = _get(ui, f"/artifacts/{digest}/download")
    assert status == 404, body
    assert os.listdir(ui_tmp) == []


def test_a_download_broken_mid_stream_leaves_no_copy(
    conn: psycopg.Connection[Any],
    worker_in_thread: ThreadWorker,
    ui: UiServer,
    tmp_path: Path,
    ui_tmp: Path,
) -> None:
    """While the bytes flow no copy of the blob has a name any more, so nothing that breaks
    the stream (the client leaving, an error, the server killed outright) can leave one in
    the temp folder: each would be the whole blob, and anonymous readers can ask for many."""
    digest = _produced(conn, text="0123456789abcdef", repeat=1 << 20)  # 16 MiB
    with socket.socket() as client:
        # A small window: the server cannot finish sending before this client reads on.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        client.settimeout(30)
        client.connect(("127.0.0.1", ui.port))
        client.sendall(f"GET /artifacts/{digest}/download HTTP/1.1\r\nHost: ui\r\n\r\n".encode())
        received = b""
        while len(received) < 256 * 1024:
            chunk = client.recv(64 * 1024)
            assert chunk, "the server closed the stream early"
            received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        assert os.listdir(ui_tmp) == []  # mid-stream: the copy it reads from has no name
        ui.proc.kill()  # the worst break: no cleanup of any kind runs
        ui.proc.wait(10)
    assert os.listdir(ui_tmp) == []


# ---- links planted in a local store --------------------------------------------------------

SECRET = b"the contents of a file outside the store\n"
SECRET_HEX = hashlib.sha256(SECRET).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "store", durable=False)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret").write_bytes(SECRET)
    return folder


def _assert_names_only_the_inside(error: BaseException, inside: str, outside: Path) -> None:
    text = str(error)
    assert inside in text, text
    assert str(outside) not in text, text
    assert SECRET_HEX not in text, text


def test_a_blob_linked_to_an_outside_file_is_never_read(
    store: LocalArtifactStore, outside: Path, tmp_path: Path
) -> None:
    # Under its own digest (it would "verify") and under another one (a corruption error
    # would print the outside file's hash).
    other = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    for digest in ("sha256:" + SECRET_HEX, other):
        blob = store.path_of(digest)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.symlink_to(outside / "secret")
        inside = f"sha256/{digest[7:9]}/{digest[9:]}"
        assert not store.exists(digest)
        with pytest.raises(ArtifactStoreUnsafe) as refused:
            store.get_bytes(digest)
        _assert_names_only_the_inside(refused.value, inside, outside)
        dest = tmp_path / "copied-out"
        with pytest.raises(ArtifactStoreUnsafe) as refused:
            store.get_file(digest, dest)
        _assert_names_only_the_inside(refused.value, inside, outside)
        assert not dest.exists()
    # Writing the content again replaces the link with the store's own blob; the outside
    # file is untouched.
    ref = store.put_bytes(SECRET)
    assert not store.path_of(ref).is_symlink()
    assert store.get_bytes(ref) == SECRET
    assert (outside / "secret").read_bytes() == SECRET
    assert sorted(os.listdir(outside)) == ["secret"]


def test_a_shard_directory_linked_outside_is_never_written_through(
    store: LocalArtifactStore, outside: Path
) -> None:
    data = b"a blob for a linked shard"
    hexd = hashlib.sha256(data).hexdigest()
    (store.blob_dir / hexd[:2]).symlink_to(outside, target_is_directory=True)
    inside = f"sha256/{hexd[:2]}"
    with pytest.raises(ArtifactStoreUnsafe) as refused:
        store.put_bytes(data)
    _assert_names_only_the_inside(refused.value, inside, outside)
    with pytest.raises(ArtifactStoreUnsafe), store.open_writer() as writer:
        writer.write(data)
    assert sorted(os.listdir(outside)) == ["secret"]
    assert os.listdir(store.tmp_dir) == []  # no temp file left either
    # Reads and deletes through it are refused too; a listing skips it.
    (outside / hexd[2:]).write_bytes(data)
    with pytest.raises(ArtifactStoreUnsafe):
        store.get_bytes("sha256:" + hexd)
    with pytest.raises(ArtifactStoreUnsafe):
        store.delete("sha256:" + hexd)
    assert (outside / hexd[2:]).exists()
    assert list(store.iter_blobs()) == []


def test_a_linked_temp_folder_is_never_written_or_cleaned_through(
    store: LocalArtifactStore, outside: Path
) -> None:
    store.tmp_dir.rmdir()
    store.tmp_dir.symlink_to(outside, target_is_directory=True)
    os.utime(outside / "secret", (0, 0))  # as old as a stale temp file
    with pytest.raises(ArtifactStoreUnsafe) as refused:
        store.put_bytes(b"through a linked tmp/")
    _assert_names_only_the_inside(refused.value, "tmp", outside)
    with pytest.raises(ArtifactStoreUnsafe):
        store.remove_stale_temporaries(older_than=10**10)
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_bytes() == SECRET
