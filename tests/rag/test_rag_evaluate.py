"""evaluate: the derived query set is deterministic, redacted and split by document."""

from __future__ import annotations

import pytest

pytest.importorskip("bm25s", reason="bm25s not installed: pip install -e examples/rag")

from rara_rag import corpus
from rara_rag import evaluate as ev


@pytest.fixture(scope="module")
def passages() -> list[corpus.Passage]:
    return corpus.clean(corpus.collect())


@pytest.fixture(scope="module")
def qs(passages: list[corpus.Passage]) -> ev.QuerySet:
    return ev.build_query_set(passages, seed=0)


def test_deterministic_by_seed(passages: list[corpus.Passage], qs: ev.QuerySet) -> None:
    assert ev.build_query_set(passages, seed=0) == qs
    assert ev.build_query_set(passages, seed=1).queries != qs.queries


def test_no_leak(qs: ev.QuerySet) -> None:
    train, test = qs.split("train"), qs.split("test")
    assert len(train) > 100
    assert len(test) > 30
    all_text = "\n".join(p.text for p in qs.passages)
    doc_of = {p.id: p.doc_id for p in qs.passages}
    for q in qs.queries:
        assert q.text not in all_text  # redacted everywhere: no exact-match shortcut
        assert {doc_of[r] in qs.test_docs for r in q.relevant} == {q.split == "test"}
    test_pool = {p.id for p in qs.pool("test")}
    train_pool = {p.id for p in qs.pool("train")}
    assert not test_pool & train_pool
    assert all(set(q.relevant) <= test_pool for q in test)
    positives = {p for _, p in qs.pairs("train")}
    assert not positives & {p.text for p in qs.pool("test")}


def test_caps(passages: list[corpus.Passage]) -> None:
    small = ev.build_query_set(passages, seed=0, max_train=10, max_test=5)
    assert (len(small.split("train")), len(small.split("test"))) == (10, 5)


def test_metrics() -> None:
    rankings = [["a", "b", "c"], ["x", "y", "z"], ["q", "r", "s"]]
    relevant = [{"b"}, {"x", "z"}, {"nope"}]
    assert ev.recall_at_k(rankings, relevant, 1) == pytest.approx((0 + 0.5 + 0) / 3)
    assert ev.recall_at_k(rankings, relevant, 3) == pytest.approx((1 + 1 + 0) / 3)
    assert ev.mrr(rankings, relevant) == pytest.approx((0.5 + 1 + 0) / 3)
    assert ev.mrr(rankings, relevant, cutoff=1) == pytest.approx(1 / 3)
    assert ev.recall_at_k([], [], 5) == 0.0
    with pytest.raises(ValueError, match="one ranking per query"):
        ev.mrr([["a"]], [])


def test_bm25_evaluation_is_sane(qs: ev.QuerySet) -> None:
    m = ev.evaluate_bm25(qs)
    assert m["queries"] == len(qs.split("test"))
    assert 0.2 < m["recall@10"] <= 1.0  # far above chance (10 / pool size) on this proxy
    assert m["recall@1"] <= m["recall@5"] <= m["recall@10"]
    assert 10 / len(qs.pool("test")) < m["recall@10"]


def test_bad_input(passages: list[corpus.Passage]) -> None:
    with pytest.raises(ValueError, match="empty"):
        ev.build_query_set([])
    with pytest.raises(ValueError, match="test_fraction"):
        ev.build_query_set(passages, test_fraction=1.0)
