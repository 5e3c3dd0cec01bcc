"""The RAG refresh pipeline end to end at small scale: a real worker and executor process,
the real capabilities, then bad input that must fail terminally with a clear error."""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from rara.artifacts.store import LocalArtifactStore
from rara.client import Client
from rara.errors import InputInvalid
from rara.evidence import metric_table
from rara.executor.client import ExecutorClient, make_job
from rara.releases import fetch
from rara.states import RunStatus
from rara_rag import corpus
from rara_rag.demo import refresh, release
from rara_rag.demo.__main__ import clean_shards
from rara_rag.demo.chaos import deterministic_digests
from tests.demo.support import SMALL, Fleet, running_fleet, step_of, through_the_gate

pytest.importorskip("torch", reason="the demo's adaptation step needs rara-rag's ML stack")


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    with running_fleet(database_url, tmp_path, str(tmp_path / "artifacts")) as running:
        yield running


@pytest.mark.timeout(600)
def test_pipeline_end_to_end_and_bad_input(fleet: Fleet, tmp_path: Path) -> None:
    client, artifacts = fleet.client, fleet.artifacts
    run = client.start_run("rag-refresh", input=SMALL)
    waiting = client.wait(run.run_id, timeout=420, until_person=True)
    assert waiting.status is RunStatus.RUNNING, waiting.steps  # at its gate, for a person
    _the_gate_shows_the_quality_table_and_the_digests(client, run.run_id)
    client.decide_approval(run.run_id, release.GATE, approve=True, reason="recall is up")
    final = client.wait(run.run_id, timeout=60)
    assert final.status is RunStatus.SUCCEEDED, final.steps
    _a_release_resolves_to_the_exact_bytes(client, run.run_id, artifacts, tmp_path)
    # The index-shard map expanded into one child per shard clean listed (4, the definition's
    # number), whose tokens the index step merged: byte for byte the unsharded index.
    assert {s["key"] for s in final.steps} == {
        "collect",
        "clean",
        "index-shard",
        "index",
        "evaluate",
        "adapt",
        "release",
    }  # a map is one step to people; its children are rows of their own
    assert step_of(client, run.run_id, "index-shard")["result"] == {"children": 4}
    shards = step_of(client, run.run_id, "clean")["result"]["shards"]
    assert [s["artifact"] for s in shards] == [f"passages-{i:03d}.jsonl" for i in range(4)]
    with psycopg.connect(client.url, autocommit=True) as conn:
        children = conn.execute(
            "SELECT key, status, result FROM rara_steps WHERE run_id = %s "
            "AND map_parent IS NOT NULL ORDER BY map_index",
            (run.run_id,),
        ).fetchall()
    assert [(k, st, r["artifact"]) for k, st, r in children] == [
        (f"index-shard[{i}]", "succeeded", s["artifact"]) for i, s in enumerate(shards)
    ]
    assert step_of(client, run.run_id, "index")["result"]["shards"] == 4
    digests = {(a["key"], a["name"]): a["digest"] for a in client.run_artifacts(run.run_id)}
    expected = deterministic_digests(SMALL, shards=clean_shards())
    assert {k: digests.get(k) for k in expected} == expected

    # Metrics within plausible ranges.
    bm25 = step_of(client, run.run_id, "evaluate")["result"]["bm25"]
    assert 0.0 < bm25["recall@10"] <= 1.0
    assert 0.0 < bm25["mrr@10"] <= bm25["recall@10"]
    assert bm25["mrr@10_lo"] <= bm25["mrr@10"] <= bm25["mrr@10_hi"]
    collect = step_of(client, run.run_id, "collect")["result"]
    assert collect["documents"] == 12  # the first 12 modules of the default stdlib corpus
    adapt = step_of(client, run.run_id, "adapt")["result"]
    assert adapt["steps"] >= 1
    metrics = adapt["metrics"]
    for prefix in ("before", "after", "hybrid"):
        assert 0.0 <= metrics[f"{prefix}/recall@10"] <= 1.0
        assert metrics[f"{prefix}/mrr@10_lo"] <= metrics[f"{prefix}/mrr@10_hi"]
    assert metrics["diff/mrr@10"] == pytest.approx(
        metrics["after/mrr@10"] - metrics["before/mrr@10"]
    )
    assert metrics["hard_negatives"] > 0  # mined with the index step's BM25 index
    # Every artifact verifies against its digest.
    store = LocalArtifactStore(Path(artifacts))
    produced = client.run_artifacts(run.run_id)
    assert {a["name"] for a in produced} == {
        "documents.jsonl",
        "passages.jsonl",
        *(f"passages-{i:03d}.jsonl" for i in range(4)),
        "tokens.json.gz",
        "index.bm25",
        "queries.jsonl",
        "adapter.tar.gz",
    }
    for artifact in produced:
        assert len(store.get_bytes(artifact["digest"])) == artifact["size"]

    # Bad input: a clear terminal error on the first attempt, dependants cancelled, no retries.
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("   \n")
    unreadable = tmp_path / "bad.txt"
    unreadable.write_bytes(b"\xff\xfe\x00not utf-8")
    cases = {
        "missing path": ({"paths": [str(tmp_path / "nope")]}, "does not exist"),
        "empty corpus": ({"paths": [str(empty)]}, "corpus is empty"),
        "unreadable file": ({"paths": [str(unreadable)]}, "cannot read corpus file"),
    }
    for name, (run_input, message) in cases.items():
        bad = client.start_run("rag-refresh", input=run_input)
        view = client.wait(bad.run_id, timeout=60)
        assert view.status is RunStatus.FAILED, name
        collect = step_of(client, bad.run_id, "collect")
        assert collect["attempt"] == 1, f"{name}: retried a terminal error"
        assert message in collect["error"]["message"], (name, collect["error"])
        assert {s["status"] for s in view.steps if s["key"] != "collect"} == {"cancelled"}
    # Input the collect step declares (inputSchema) is checked before a run starts: refused
    # naming the field, and no run is made.
    with pytest.raises(
        InputInvalid,
        match=r"input\.limit: -3 is less than the minimum of 1 "
        r"\(input of step 'collect'\)",
    ):
        client.start_run("rag-refresh", input={"limit": -3})
    with pytest.raises(InputInvalid, match=r"input\.corpus"):
        client.start_run("rag-refresh", input={"corpus": "wikipedia"})


def _the_gate_shows_the_quality_table_and_the_digests(client: Client, run_id: int) -> None:
    gate = client.get_approval(run_id, release.GATE)
    shown = {e["show"]: e["value"] for e in gate.evidence["shown"]}
    quality = metric_table(shown["adapt.result.quality"], "adapt.result.quality")
    assert quality is not None
    assert [name for name, _ in quality.rows] == ["after", "before", "hybrid", "diff"]
    assert {"recall@1", "recall@5", "recall@10", "mrr@10"} <= set(quality.columns)
    assert all(cell.lo is not None for _, cells in quality.rows for cell in cells.values())
    bm25 = metric_table(shown["evaluate.result.bm25"], "evaluate.result.bm25")
    assert bm25 is not None
    assert [name for name, _ in bm25.rows] == ["bm25"]
    # The digests of what a release of this run serves, frozen with the evidence.
    frozen = {f"{a['step']}/{a['name']}": a["digest"] for a in gate.evidence["artifacts"]}
    assert {ref: frozen[ref] for ref in release.SERVED} == release.served_digests(client, run_id)


def _a_release_resolves_to_the_exact_bytes(
    client: Client, run_id: int, artifacts: str, tmp_path: Path
) -> None:
    """The demo's promote: the index and the adapter, read back by name and fetched, each
    file the bytes of its digest; the same bytes again promote nothing."""
    out = io.StringIO()
    console = Console(file=out)
    promoted = release.promote(client, run_id, console)
    assert promoted is not None
    assert promoted.number == 1
    assert [f"{a.step_key}/{a.name}" for a in promoted.artifacts] == sorted(release.SERVED)
    read = client.get_release(release.NAME)
    assert read == promoted
    written = fetch(read, LocalArtifactStore(Path(artifacts)), tmp_path / "served")
    for path, artifact in zip(written, read.artifacts, strict=True):
        assert "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == artifact.digest
    assert {str(p.relative_to(tmp_path / "served")) for p in written} == set(release.SERVED)
    assert release.promote(client, run_id, console) is None
    assert "already serves these bytes" in out.getvalue()


@pytest.mark.parametrize(
    ("capability", "payload", "message"),
    [
        ("index.build@1", {}, "needs upstream artifact 'passages.jsonl'"),
        (
            "index.shard@1",
            {"item": {"artifact": "passages-000.jsonl"}, "index": 0},
            "needs upstream artifact 'passages-000.jsonl'",
        ),
        ("index.shard@1", {"item": 3, "index": 3}, "input 'item' must name a passages shard"),
    ],
)
def test_executor_fails_a_job_missing_its_upstream_artifact(
    fleet: Fleet, capability: str, payload: dict[str, Any], message: str
) -> None:
    """No retry storm: the missing input (or a map item naming none) is named and the failure
    is not retryable."""

    token = Path(fleet.flag("--token-file")).read_text().strip()

    async def run_job() -> list[Any]:
        async with ExecutorClient(fleet.flag("--listen"), token=token) as executor:
            job = make_job(
                capability=capability,
                idempotency_key="t:index",
                attempt=1,
                step_key="index",
                payload=payload,
            )
            return [e async for e in executor.execute(job)]

    events = asyncio.run(run_job())
    error = events[-1].failed.error
    assert events[-1].WhichOneof("event") == "failed"
    assert not error.retryable
    assert message in error.message


@pytest.mark.timeout(600)
def test_a_refresh_recomputes_only_what_a_changed_document_reaches(
    fleet: Fleet, tmp_path: Path, database_url: str
) -> None:
    """The demo's refreshes (rara_rag.demo.refresh) at small scale: the same documents again
    reuse every step but collect; one changed word recomputes collect, clean, the one shard
    child whose passages changed, and everything downstream of them."""
    client = fleet.client
    documents = tmp_path / "corpus" / "documents.jsonl"
    documents.parent.mkdir()
    documents.write_bytes(corpus.documents_to_jsonl(corpus.builtin("stdlib")[:12]))
    run_input = {**SMALL, "paths": [str(documents)]}
    del run_input["limit"]

    def run(run_input: dict[str, Any] = run_input) -> refresh.Reuse:
        started = client.start_run("rag-refresh", input=run_input)
        assert through_the_gate(client, started.run_id, 420).status is RunStatus.SUCCEEDED
        return refresh.reuse_of(database_url, started.run_id)

    first = run()
    assert first.reused == {}
    shards = [f"index-shard[{i}]" for i in range(4)]
    assert sorted(first.ran) == sorted(["collect", "clean", *shards, "index", "evaluate", "adapt"])

    unchanged = run()
    assert unchanged.ran == ["collect"]  # it reads the outside world: no cache
    assert {r["via"] for r in unchanged.reused.values()} == {"cache"}
    assert unchanged.why["collect"] == refresh.NO_CACHE
    assert unchanged.why["adapt"].startswith("reused: cache: run ")

    # The same bytes from another file and another input (`paths`, `limit`: collect's fields,
    # which no step after it reads): every step after collect is reused all the same.
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(documents.read_bytes())
    moved = run({**run_input, "paths": [str(elsewhere)], "limit": 12})
    assert moved.ran == ["collect"], moved.why

    changed_id = refresh.change_one_document(documents, None)
    changed = run()
    recomputed_shards = [k for k in changed.ran if k.startswith("index-shard[")]
    assert len(recomputed_shards) == 1, changed.ran
    assert sorted(changed.ran) == sorted(
        ["collect", "clean", *recomputed_shards, "index", "evaluate", "adapt"]
    )
    assert sorted(changed.reused) == sorted(set(shards) - set(recomputed_shards))
    # Each recomputed step says why: what it read changed (collect has no cache at all).
    assert changed.why["clean"].startswith("recomputed: reads (collect/documents.jsonl) differ")
    assert changed.why["adapt"].startswith("recomputed: reads (clean/passages.jsonl"), changed.why
    # The recomputed child is the one whose shard holds the changed document's passages.
    index = int(recomputed_shards[0][len("index-shard[") : -1])
    with psycopg.connect(database_url, autocommit=True) as conn:
        (digest,) = conn.execute(
            "SELECT a.digest FROM rara_step_artifacts a JOIN rara_steps s ON s.id = a.step_id"
            " WHERE s.run_id = (SELECT max(id) FROM rara_runs) AND s.key = 'clean'"
            " AND a.name = %s",
            (f"passages-{index:03d}.jsonl",),
        ).fetchone()
    shard = corpus.passages_from_jsonl(LocalArtifactStore(Path(fleet.artifacts)).get_bytes(digest))
    assert changed_id in {p.doc_id for p in shard}
