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
