"""Links planted in the artifact store the Go executor (executor/go) shares with workers: the
attacks of test_artifact_attacks.py's "links planted in a local artifact store", made through
a real Go executor on loopback. The attacker holds the executor's token (a worker's, or a
compromised one) and can write to the shared store volume (another pod, a plugin of another
executor): it plants a link and asks for a job that reads or writes through it.

The Go store walks down from its root with O_NOFOLLOW, so each attempt fails with an error
naming the path inside the store only: never where the link points, and never the digest of
the bytes found there (which would tell the caller the sha256 of any file it could name)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rara.artifacts.ref import ArtifactRef
from rara.executor.client import ExecutorClient, make_job
from rara.v1 import executor_pb2 as pb
from tests.executor.support import TOKEN, collect, kinds
from tests.executor.test_go_executor import build_go_executor, running
from tests.executor.test_go_executor import pytestmark as go_marks

pytestmark = go_marks

SECRET = b"the contents of a file outside the store\n"
SECRET_HEX = hashlib.sha256(SECRET).hexdigest()
OTHER_HEX = hashlib.sha256(b"something else").hexdigest()


@pytest.fixture(scope="module")
def go_executor() -> Path:
    return build_go_executor()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret").write_bytes(SECRET)
    return folder


@pytest.fixture
def executor(go_executor: Path, tmp_path: Path) -> Iterator[str]:
    """A Go executor on loopback whose store is ``tmp_path / "artifacts"`` (it makes the
    layout as it starts)."""
    with running(go_executor, tmp_path) as (address, _):
        yield address


def _store(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


def _blob(tmp_path: Path, hexd: str) -> Path:
    return _store(tmp_path) / "sha256" / hexd[:2] / hexd[2:]


async def _run(address: str, key: str, capability: str, **job: Any) -> list[pb.ExecuteResponse]:
    async with ExecutorClient(address, token=TOKEN) as client:
        return await collect(client, make_job(capability=capability, idempotency_key=key, **job))


def _refused(events: list[pb.ExecuteResponse], inside: str, outside: Path) -> str:
    """The job failed, naming ``inside`` and neither the outside folder nor the secret's hash."""
    assert kinds(events)[-1] == "failed", events[-1]
    text = str(events)
    assert inside in events[-1].failed.error.message, events[-1]
    assert "refused, not followed" in events[-1].failed.error.message
    assert str(outside) not in text
    assert SECRET_HEX not in text
    return events[-1].failed.error.message


def _untouched(outside: Path) -> None:
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_bytes() == SECRET


@pytest.mark.parametrize("capability", ["text.normalize@1", "artifact.chunk@1"])
async def test_a_go_job_never_reads_an_input_linked_to_an_outside_file(
    executor: str, tmp_path: Path, outside: Path, capability: str
) -> None:
    """Under the secret's own digest the link would "verify" and the job would hand the
    secret back as its output; under another digest the corruption error printed the
    secret's sha256."""
    for hexd in (SECRET_HEX, OTHER_HEX):
        blob = _blob(tmp_path, hexd)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.symlink_to(outside / "secret")
        ref = ArtifactRef(f"sha256:{hexd}", len(SECRET), "text/plain")
        events = await _run(
            executor,
            f"read-{hexd[:8]}",
            capability,
            inputs={"prep/doc": ref},
            payload={"artifact": "prep/doc"},
        )
        _refused(events, f"sha256/{hexd[:2]}/{hexd[2:]}", outside)
        assert blob.is_symlink()  # left as found: a read removes nothing
    _untouched(outside)


async def test_a_go_job_never_writes_through_a_shard_linked_outside(
    executor: str, tmp_path: Path, outside: Path
) -> None:
    text = "a blob for a linked shard"
    hexd = hashlib.sha256(text.encode()).hexdigest()
    (_store(tmp_path) / "sha256" / hexd[:2]).symlink_to(outside, target_is_directory=True)
    events = await _run(executor, "shard", "test.echo@1", payload={"artifact_text": text})
    _refused(events, f"sha256/{hexd[:2]}", outside)
    _untouched(outside)
    assert os.listdir(_store(tmp_path) / "tmp") == []  # no temp file left either


async def test_a_go_job_never_writes_through_a_linked_temp_folder(
    executor: str, tmp_path: Path, outside: Path
) -> None:
    tmp = _store(tmp_path) / "tmp"
    tmp.rmdir()
    tmp.symlink_to(outside, target_is_directory=True)
    events = await _run(executor, "tmp", "test.echo@1", payload={"artifact_text": "via tmp/"})
    message = _refused(events, "(tmp)", outside)
    assert "rara-tmp" not in message
    _untouched(outside)


async def test_a_go_job_replaces_a_linked_blob_with_its_own(
    executor: str, tmp_path: Path, outside: Path
) -> None:
    """Storing the secret's content again must not keep the link as "already stored" (it
    would then serve every later read from the outside file): the real blob replaces it."""
    blob = _blob(tmp_path, SECRET_HEX)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.symlink_to(outside / "secret")
    events = await _run(
        executor, "rewrite", "test.echo@1", payload={"artifact_text": SECRET.decode()}
    )
    assert kinds(events)[-1] == "succeeded", events[-1]
    assert [a.digest for a in events[-1].succeeded.artifacts] == [f"sha256:{SECRET_HEX}"]
    assert not blob.is_symlink()
    assert blob.read_bytes() == SECRET
    _untouched(outside)
