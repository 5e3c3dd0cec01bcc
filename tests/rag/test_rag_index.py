"""index: BM25 finds the obvious passage, and its artifact bytes are reproducible."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("bm25s", reason="bm25s not installed: pip install -e examples/rag")

from rara_rag import corpus, index
from rara_rag.corpus import Document

DOCS = [
    Document("cats", "Cats purr when content. A cat sleeps most of the day.", "t"),
    Document("dogs", "Dogs bark at strangers. A dog needs a daily walk.", "t"),
    Document("py", "The assert statement raises AssertionError when a condition is false.", "t"),
]


@pytest.fixture
def passages() -> list[corpus.Passage]:
    return corpus.clean(DOCS)


def test_search_ranks_the_matching_passage_first(passages: list[corpus.Passage]) -> None:
    ix = index.build(passages)
    hits = ix.search("why does my dog bark", k=2)
    assert hits[0].passage_id == next(p.id for p in passages if p.doc_id == "dogs")
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert ix.search("the of and", k=3) == []  # only stopwords: no match, no crash
    assert ix.search("zebra", k=3) == []
    assert len(ix.search("a", k=0)) == 0


def test_bytes_are_deterministic_and_round_trip(
    passages: list[corpus.Passage], tmp_path: Path
) -> None:
    blob = index.build(passages).to_bytes()
    assert blob == index.build(passages).to_bytes()
    loaded = index.BM25Index.from_bytes(blob)
    assert loaded.passages == passages
    assert loaded.to_bytes() == blob
    q = "assert statement"
    assert loaded.search(q, 3) == index.build(passages).search(q, 3)
    path = index.build(passages).write(tmp_path / "ix.tar.gz")
    assert index.BM25Index.read(path).search(q, 1) == loaded.search(q, 1)


def test_real_corpus_digest_is_stable() -> None:
    passages = corpus.clean(corpus.collect())
    digests = {hashlib.sha256(index.build(passages).to_bytes()).hexdigest() for _ in range(2)}
    assert len(digests) == 1


def test_bad_bytes_and_empty_input_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="not a packed directory"):
        index.BM25Index.from_bytes(b"not gzip")
    with pytest.raises(ValueError, match="empty"):
        index.build([])


def test_index_bytes_identical_across_processes() -> None:
    """The digest of the index artifact must not depend on the process's string hashing."""
    import subprocess
    import sys

    code = (
        "import hashlib; from rara_rag import corpus, index; "
        "docs = corpus.collect()[:20]; "
        "print(hashlib.sha256(index.build(corpus.clean(docs)).to_bytes()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 7])
def test_index_merged_from_token_shards_is_the_unsharded_index(shards: int) -> None:
    """What the demo's index-shard map and index join compute (rara_rag.index_shards): the
    same bytes, so the same scores, document frequencies and digest, for any shard count."""
    from rara_rag import index_shards

    passages = corpus.clean(corpus.collect()[:40])
    parts = corpus.split_shards(passages, shards)
    assert len(parts) == shards
    assert [p for part in parts for p in part] == passages
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert b"".join(corpus.passages_to_jsonl(p) for p in parts) == corpus.passages_to_jsonl(
        passages
    )
    tokens = [index_shards.tokenize_shard(part) for part in parts]
    assert tokens == [index_shards.tokenize_shard(part) for part in parts]  # deterministic
    assert index_shards.merge(passages, tokens).to_bytes() == index.build(passages).to_bytes()


def test_shards_never_empty_and_merge_refuses_what_does_not_cover(
    passages: list[corpus.Passage],
) -> None:
    from rara_rag import index_shards

    assert [len(p) for p in corpus.split_shards(passages, 10)] == [1] * len(passages)
    with pytest.raises(ValueError, match="at least 1"):
        corpus.split_shards(passages, 0)
    tokens = [index_shards.tokenize_shard(p) for p in corpus.split_shards(passages, 3)]
    with pytest.raises(ValueError, match="cover"):
        index_shards.merge(passages, tokens[::-1])  # out of order
    with pytest.raises(ValueError, match="cover"):
        index_shards.merge(passages, tokens[:-1])  # one missing
    with pytest.raises(ValueError, match=r"not a rara\.bm25-tokens/1 artifact"):
        index_shards.merge(passages, [b"not gzip"])
