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


def test_validation_split_is_disjoint_and_leaves_test_alone(
    passages: list[corpus.Passage], qs: ev.QuerySet
) -> None:
    three = ev.build_query_set(passages, seed=0, val_fraction=0.2)
    val = three.split("val")
    assert len(val) > 30
    assert three.split("test") == qs.split("test")  # validation comes out of train only
    assert three.pool("test") == qs.pool("test")
    pools = {which: {p.doc_id for p in three.pool(which)} for which in ("train", "val", "test")}
    assert not pools["train"] & pools["val"]
    assert not pools["val"] & pools["test"]
    assert pools["val"] == three.val_docs
    doc_of = {p.id: p.doc_id for p in three.passages}
    for q in three.queries:
        assert {three.split_of(doc_of[r]) for r in q.relevant} == {q.split}
    assert len(three.split("train")) + len(val) <= len(qs.split("train"))
    from rara_rag import index

    negatives = ev.mine_hard_negatives(three, index.build(passages), per_query=2)
    assert not {n for negs in negatives for n in negs} & {p.text for p in three.pool("val")}


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
    with pytest.raises(ValueError, match="val_fraction"):
        ev.build_query_set(passages, test_fraction=0.6, val_fraction=0.4)


def test_per_query_means_are_the_scores(qs: ev.QuerySet) -> None:
    test = qs.split("test")
    rankings = ev.bm25_rankings(qs, "test", depth=10)
    means = {k: sum(v) / len(v) for k, v in ev.per_query(rankings, test, (1, 5, 10)).items()}
    assert means == pytest.approx({k: v for k, v in ev.evaluate_bm25(qs).items() if k != "queries"})


def test_bootstrap_intervals() -> None:
    a = {"mrr@10": [1.0, 0.0, 0.5, 0.25] * 50}
    b = {"mrr@10": [0.5, 0.0, 0.5, 0.25] * 50}
    ci = ev.bootstrap(a, seed=3)
    assert ci == ev.bootstrap(a, seed=3)  # seeded
    assert ci["mrr@10"] == pytest.approx(0.4375)
    assert ci["mrr@10_lo"] < ci["mrr@10"] < ci["mrr@10_hi"]
    assert ci["mrr@10_hi"] - ci["mrr@10_lo"] < 0.2
    diff = ev.bootstrap(a, b, seed=3)  # paired: same queries in every resample
    assert diff["mrr@10"] == pytest.approx(0.125)
    assert 0 < diff["mrr@10_lo"] < diff["mrr@10_hi"]
    same = ev.bootstrap(a, a, seed=3)
    assert same == {"mrr@10": 0.0, "mrr@10_lo": 0.0, "mrr@10_hi": 0.0}
    assert ev.bootstrap({"mrr@10": []}) == {}


def test_rrf_fuses_and_is_deterministic() -> None:
    fused = ev.rrf([[["a", "b", "c"]], [["c", "a", "d"]]], depth=3)
    assert fused == [["a", "c", "b"]]  # a: 1/61+1/62 > c: 1/63+1/61 > b: 1/62 (before d)
    assert ev.rrf([[["x"]], [["y"]]], depth=2) == [["x", "y"]]  # tie: first ranking first


def test_hard_negatives_are_unseen_safe_and_hard(qs: ev.QuerySet) -> None:
    from rara_rag import index

    ix = index.build(corpus.clean(corpus.collect()))
    negatives = ev.mine_hard_negatives(qs, ix, per_query=2)
    pairs, train = qs.pairs("train"), qs.split("train")
    assert len(negatives) == len(pairs) == len(train)
    assert sum(map(len, negatives)) > 1.5 * len(pairs)
    train_text = {p.text for p in qs.pool("train")}
    by_text = {p.text: p for p in qs.passages}
    by_id = {p.id: p for p in qs.passages}
    for q, (_, positive), negs in zip(train, pairs, negatives, strict=True):
        pos = by_id[q.relevant[0]]
        for n in negs:
            assert n in train_text
            assert n != positive
            assert by_text[n].id not in q.relevant
            assert not (
                by_text[n].doc_id == pos.doc_id and abs(by_text[n].ordinal - pos.ordinal) <= 1
            )
    assert ev.mine_hard_negatives(qs, ix, per_query=2) == negatives  # deterministic
