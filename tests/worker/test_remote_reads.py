"""Lineage from what a remote executor's job read (JobSucceeded.reads; docs/artifacts.md,
"Lineage"): a real worker process dialling an executor on loopback gRPC. A map child that
reads only its own shard is recorded as reading that shard alone; an executor that does not
report its reads (an older version) leaves the worker counting every input it handed over;
a reported read that is not a digest fails the step, naming the field."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import psycopg

from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc
from tests.support.executors import executor_process, free_address
from tests.support.runs import define, start, wait_run

ITEMS = ["a", "b", "c", "d"]
BY_SHARD = [
    {"key": "split", "capability": "test.shard@1", "executor": "inprocess"},
    {
        "key": "shards",
        "capability": "test.read_shard@1",
        "executor": "grpc",
        "dependsOn": ["split"],
        "map": {"over": "input.items"},
    },
]


def _shards(conn: psycopg.Connection[Any], run_id: int) -> dict[str, str]:
    """The split step's manifest: shard-<i>.txt → digest."""
    rows = conn.execute(
        "SELECT m.name, m.digest FROM rara_step_artifacts m JOIN rara_steps s ON s.id = m.step_id"
        " WHERE s.run_id = %s AND s.key = 'split'",
        (run_id,),
    ).fetchall()
    return dict(rows)


def _reads(conn: psycopg.Connection[Any], run_id: int) -> dict[str, set[str]]:
    """Every step of the run → the digests rara_step_reads holds for it."""
    rows = conn.execute(
        "SELECT s.key, r.digest FROM rara_steps s LEFT JOIN rara_step_reads r ON r.step_id = s.id"
        " WHERE s.run_id = %s",
        (run_id,),
    ).fetchall()
    reads: dict[str, set[str]] = {}
    for key, digest in rows:
        reads.setdefault(key, set()).update([digest] if digest is not None else [])
    return reads


def _run_by_shard(
    conn: psycopg.Connection[Any], spawn: Any, address: str, status: str = "succeeded"
) -> int:
    define(conn, "remote-lineage", BY_SHARD)
    worker = spawn("w-reads", executor_endpoint=address)
    run_id = start(conn, "remote-lineage", {"items": ITEMS})
    try:
        wait_run(conn, run_id, status=status, timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the worker said:\n{worker.output()}") from None
    return run_id


def test_a_remote_map_child_reads_only_its_own_shard(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path
) -> None:
    address = free_address()
    with executor_process(address, tmp_path / "artifacts", plugins="tests.executor.plugins"):
        run_id = _run_by_shard(conn, spawn, address)
    shards = _shards(conn, run_id)
    assert len(set(shards.values())) == len(ITEMS)  # four distinct blobs
    reads = _reads(conn, run_id)
    for i in range(len(ITEMS)):
        assert reads[f"shards[{i}]"] == {shards[f"shard-{i}.txt"]}, reads
    assert reads["split"] == set()  # it wrote the shards and read nothing


class _Executor(pb_grpc.ExecutorServiceServicer):
    """An executor that answers every job with a result and ``reads`` as given: unset is what
    every executor sent before JobSucceeded.reads existed."""

    def __init__(self, reads: pb.ArtifactReads | None) -> None:
        self._reads = reads

    def GetCapabilities(self, request: Any, context: Any) -> pb.GetCapabilitiesResponse:
        capability = pb.Capability(name="test.read_shard", major=1)
        return pb.GetCapabilitiesResponse(
            capabilities=[capability], max_concurrency=4, executor_version="scripted/0"
        )

    def Execute(self, request: Any, context: Any) -> Iterator[pb.ExecuteResponse]:
        succeeded = pb.JobSucceeded(result_json=b"{}")
        if self._reads is not None:
            succeeded.reads.CopyFrom(self._reads)
        yield pb.ExecuteResponse(seq=1, accepted=pb.JobAccepted())
        yield pb.ExecuteResponse(seq=2, succeeded=succeeded)

    def Cancel(self, request: Any, context: Any) -> pb.CancelResponse:
        return pb.CancelResponse(found=False)


@contextmanager
def _serving(reads: pb.ArtifactReads | None) -> Iterator[str]:
    address = free_address()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ExecutorServiceServicer_to_server(_Executor(reads), server)
    server.add_insecure_port(address)
    server.start()
    try:
        yield address
    finally:
        stopped: threading.Event = server.stop(grace=1)
        stopped.wait(10)


def test_an_executor_that_does_not_report_reads_gets_its_inputs_counted(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    with _serving(reads=None) as address:
        run_id = _run_by_shard(conn, spawn, address)
    shards = set(_shards(conn, run_id).values())
    reads = _reads(conn, run_id)
    for i in range(len(ITEMS)):
        assert reads[f"shards[{i}]"] == shards, reads  # every input handed over


def test_a_read_that_is_not_a_digest_fails_the_step_for_good(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    with _serving(reads=pb.ArtifactReads(digests=["md5:abc"])) as address:
        run_id = _run_by_shard(conn, spawn, address, status="failed")
    (error,) = conn.execute(
        "SELECT error FROM rara_steps WHERE run_id = %s AND key = 'shards[0]'", (run_id,)
    ).fetchone() or (None,)
    assert error is not None
    assert error["code"] == "RESULT_INVALID", error
    assert error["retryable"] is False, error
    assert "step 'shards[0]'" in error["message"], error
    assert "JobSucceeded.reads.digests" in error["message"], error
    assert "'md5:abc'" in error["message"], error
    assert _reads(conn, run_id)["shards[0]"] == set()
