"""The demo on the S3 store (versitygw on 127.0.0.1): ``python -m rara_rag.demo`` given
``RARA_ARTIFACTS=s3://…`` keeps every artifact in the bucket, and the adaptation step, its
executor SIGKILLed mid-training, resumes from the checkpoint it reads back from the bucket."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.client import Client
from rara.states import RunStatus
from tests.artifacts.s3_server import S3Server
from tests.demo.support import SMALL, running_fleet, step_of, through_the_gate

pytest.importorskip("torch", reason="the demo's adaptation step needs rara-rag's ML stack")
pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")

NAMES = {
    "documents.jsonl",
    "passages.jsonl",
    "index.bm25",
    "queries.jsonl",
    "adapter.tar.gz",
    "tokens.json.gz",
    *(f"passages-{i:03d}.jsonl" for i in range(4)),
}  # 4 shards


def _blobs(server: S3Server, bucket: str, prefix: str) -> dict[str, bytes]:
    """The bucket's blobs by digest, each checked to hash to the name it is stored under."""
    blobs = {}
    for key, data in server.objects(bucket, f"{prefix}sha256/").items():
        digest = "sha256:" + key.removeprefix(f"{prefix}sha256/").replace("/", "")
        assert hashlib.sha256(data).hexdigest() == digest.removeprefix("sha256:"), key
        blobs[digest] = data
    return blobs


@pytest.mark.timeout(480)
def test_demo_keeps_every_artifact_in_the_bucket(
    database_url: str, s3_url: Callable[..., str], s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    argv = [
        "--limit",
        str(SMALL["limit"]),
        "--train",
        str(SMALL["train"]),
        "--epochs",
        str(SMALL["epochs"]),
        "--timeout",
        "300",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "rara_rag.demo", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=420,
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "RARA_ARTIFACTS": s3_url(),
            "COLUMNS": "200",
        },  # the credentials: in os.environ (s3_env), by reference
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-4000:]
    where = f"s3://{bucket}/arts/ at {s3_env.endpoint}"
    assert f"artifacts in {where}" in said
    assert f"artifacts: {where}" in said
    logs = said + "".join(p.read_text() for p in (tmp_path / ".rara/demo").glob("*.log"))
    assert s3_env.secret_key not in logs
    assert s3_env.access_key not in logs
    assert not (tmp_path / ".rara/artifacts").exists()  # nothing went to the local default

    client = Client(database_url)
    # The first run, then its two refreshes (docs/demo.md): the unchanged one reused every
    # cached step, each hit read back from the bucket first.
    run, unchanged, changed = sorted(client.list_runs(), key=lambda r: r["id"])
    assert (
        f"run {run['id']} succeeded, then refresh runs {unchanged['id']} and {changed['id']}"
        in said
    )
    assert f"run {unchanged['id']}, documents unchanged: of its 11 steps, 8 reused" in said
    assert f"run {changed['id']}, one document changed" in said
    # Each stopped at its gate, was approved as the demo's client login, and the first made
    # the release its index and adapter are served as; the same bytes again made none.
    assert f"release rag-refresh@1 promoted by rara_demo_client from run {run['id']}" in said
    assert "release rag-refresh@1 already serves these bytes: nothing to promote" in said
    released = {a.digest for a in client.get_release("rag-refresh", 1).artifacts}
    assert released <= set(_blobs(s3_env, bucket, "arts/"))
    # Under the processes' own logins (docs/least-privilege.md): the attempts were the worker
    # login's, which may only lease, report and end, and the client's started the run.
    assert "database logins: worker rara_demo_worker (rara_worker)" in said
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = 'rara_demo_worker'"
        ).fetchone() == (False, False)
    produced = client.run_artifacts(run["id"])
    assert {a["name"] for a in produced} == NAMES
    blobs = _blobs(s3_env, bucket, "arts/")
    for artifact in produced:
        assert len(blobs[artifact["digest"]]) == artifact["size"], artifact["name"]


def _checkpoints(url: str, run_id: int) -> list[tuple[int, dict[str, Any], str | None]]:
    """The adapt step's checkpoints, oldest first: (attempt, state, digest)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT c.attempt, c.state, c.digest FROM rara_checkpoints c "
            "JOIN rara_steps s ON s.id = c.step_id WHERE s.run_id = %s AND s.key = 'adapt' "
            "ORDER BY c.attempt, c.seq",
            (run_id,),
        ).fetchall()


def _first_checkpoint(url: str, run_id: int, timeout: float) -> None:
    """Returns once adapt saved a checkpoint (the row is written after its blob is in the
    bucket). No event announces one: polled, as the demo's chaos monkey does."""
    deadline = time.monotonic() + timeout
    while not _checkpoints(url, run_id):
        assert time.monotonic() < deadline, f"adapt saved no checkpoint in {timeout}s"
        time.sleep(0.05)


@pytest.mark.timeout(480)
def test_adaptation_killed_mid_training_resumes_from_the_bucket(
    database_url: str, s3_url: Callable[..., str], s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    run_input = {**SMALL, "train": 24, "batch_size": 4, "checkpoint_every": 1}  # 6 steps
    with running_fleet(database_url, tmp_path, s3_url()) as fleet:
        assert "--artifact-root" not in fleet.executor.argv + fleet.worker.argv
        run = fleet.client.start_run("rag-refresh", input=run_input)
        _first_checkpoint(database_url, run.run_id, timeout=240)
        fleet.executor.kill()  # SIGKILL mid-training: the stream breaks, the attempt fails
        fleet.executor.start()
        final = through_the_gate(fleet.client, run.run_id, 300)
    assert final.status is RunStatus.SUCCEEDED, final.steps

    adapt = step_of(fleet.client, run.run_id, "adapt")
    result = adapt["result"]
    before = [c for c in _checkpoints(database_url, run.run_id) if c[0] < adapt["attempt"]]
    assert before, "the killed attempt left no checkpoint"
    _, state, digest = before[-1]  # what the retry was given: the latest one
    assert 0 < state["step"] < result["steps"], (state, result)  # killed mid-training
    assert result["resumed_from_step"] == state["step"]  # resumed, not restarted
    # The checkpoint the retry unpacked was read from the bucket: the executor has no other
    # store, and the blob is there, verified against its digest.
    assert digest in _blobs(s3_env, bucket, "arts/")
    said = [
        (e["attempt"], e["message"])
        for e in fleet.client.run_events(run.run_id)
        if e["key"] == "adapt" and e["message"].startswith("resuming")
    ]
    assert said == [(adapt["attempt"], f"resuming from checkpoint {len(before)} of attempt 1")]


@pytest.mark.parametrize("fault", ["no bucket", "wrong secret"])
def test_demo_refuses_a_store_it_cannot_use(
    fault: str, database_url: str, s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    """Before it starts anything: exit 2, the bucket named, no credential printed."""
    env = {**os.environ, "DATABASE_URL": database_url, "COLUMNS": "200"}
    if fault == "no bucket":
        bucket, expected = "no-such-bucket", "S3 bucket does not exist"
    else:
        expected = "access denied"
        env["AWS_SECRET_ACCESS_KEY"] = "wrong-" + s3_env.secret_key
    env["RARA_ARTIFACTS"] = s3_env.url(bucket, "arts")
    out = subprocess.run(
        [sys.executable, "-m", "rara_rag.demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = out.stdout + out.stderr
    assert out.returncode == 2, said[-4000:]
    assert f"artifact store s3://{bucket}/arts/ at {s3_env.endpoint}: " in said
    assert expected in said
    assert s3_env.secret_key not in said
    assert not list(tmp_path.glob(".rara/demo/*.log"))  # no worker or executor was started
