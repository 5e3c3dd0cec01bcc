"""A labelled query set derived from the corpus itself, and retrieval metrics over it.

How the labels are made (an inverse-cloze task, as in Lee et al. 2019, "Latent Retrieval for
Weakly Supervised Open Domain QA"):

1. For every passage, pick one of its prose sentences (6 to 40 words, mostly alphabetic words, so
   not code or grammar lines) with an RNG seeded by ``(seed, passage id)``. That sentence is the
   query. Its relevant passages are *all* passages whose text contains it (the overlap between
   neighbouring passages means there can be two). Identical sentences become one query.
2. Documents (not passages) are split into train/test (and validation): ordered by
   ``sha256(seed:doc id)``, moved to test until ``test_fraction`` of the queries are there,
   then to validation until ``val_fraction`` more are; the rest are train. The test split
   does not depend on ``val_fraction``. A query whose relevant passages span two splits is
   dropped.
3. Every query sentence is then *removed* from every passage that contained it. Retrieval and
   training both see only these redacted passages.

Why this does not leak:

* No exact-match shortcut: the query string occurs nowhere in the searchable text, so BM25 has
  to win on vocabulary shared with the surrounding context and the embedder on meaning.
* No train/test overlap: adaptation trains only on train-document pairs; the test pool is the
  redacted passages of test documents only, which training never sees, not even as
  negatives; sentences shared across the split are dropped rather than assigned.
* Hyper-parameters are chosen on the validation split (documents disjoint from both), so the
  test split is scored once, by a configuration it had no say in (``rara_rag.tune``).
* No model in the loop: labels are fixed mechanically from text and seed before any retriever
  runs, so neither retriever can bias its own test.

What it is not: a measure of answering user questions. Queries are declarative sentences and
a neighbouring passage that covers the same topic counts as a miss unless it contained the
sentence. It is a stable, cheap proxy that moves when retrieval gets better on this corpus,
which is what a refresh pipeline needs to decide "no worse than before".
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from rara_rag.corpus import Passage, split_sentences
from rara_rag.index import BM25Index

if TYPE_CHECKING:
    import torch

    from rara_rag.embed import Encoder

Split = Literal["train", "val", "test"]
DEFAULT_KS = (1, 5, 10)
_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*[.,;:!?)]*$")


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    id: str
    text: str
    relevant: tuple[str, ...]  # passage ids
    doc_id: str
    split: Split


@dataclass(frozen=True, slots=True)
class QuerySet:
    queries: tuple[LabelledQuery, ...]
    passages: tuple[Passage, ...]  # every passage, query sentences redacted
    test_docs: frozenset[str]
    val_docs: frozenset[str] = frozenset()

    def split(self, which: Split) -> list[LabelledQuery]:
        return [q for q in self.queries if q.split == which]

    def split_of(self, doc_id: str) -> Split:
        if doc_id in self.test_docs:
            return "test"
        return "val" if doc_id in self.val_docs else "train"

    def pool(self, which: Split) -> list[Passage]:
        """The passages of ``which``'s documents: the search space for that split."""
        return [p for p in self.passages if self.split_of(p.doc_id) == which]

    def pairs(self, which: Split = "train") -> list[tuple[str, str]]:
        """(query, positive passage text) for contrastive training; first relevant passage."""
        by_id = {p.id: p for p in self.passages}
        return [(q.text, by_id[q.relevant[0]].text) for q in self.split(which)]


def _h(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256(":".join(parts).encode()).digest()[:8], "big")


def _is_prose(sentence: str, min_words: int, max_words: int) -> bool:
    words = sentence.split()
    if not min_words <= len(words) <= max_words:
        return False
    return sum(bool(_WORD.match(w)) for w in words) >= 0.7 * len(words)


def build_query_set(
    passages: Sequence[Passage],
    *,
    seed: int = 0,
    test_fraction: float = 0.25,
    val_fraction: float = 0.0,
    max_train: int | None = None,
    max_test: int | None = None,
    min_words: int = 6,
    max_words: int = 40,
) -> QuerySet:
    """Derive labelled queries as described in the module docstring (deterministic by seed)."""
    if not passages:
        raise ValueError("cannot derive queries from an empty passage list")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if not 0.0 <= val_fraction < 1.0 - test_fraction:
        raise ValueError(f"val_fraction must be in [0, 1 - test_fraction), got {val_fraction}")
    chosen: dict[str, Passage] = {}  # query text -> the passage it was drawn from
    for p in passages:
        sentences = split_sentences(p.text)
        candidates = [s for s in sentences if _is_prose(s, min_words, max_words)]
        if len(sentences) < 2 or not candidates:
            continue
        sentence = random.Random(_h(str(seed), p.id)).choice(candidates)
        chosen.setdefault(sentence, p)
    relevant = {text: tuple(p.id for p in passages if text in p.text) for text in chosen}
    doc_of = {p.id: p.doc_id for p in passages}

    per_doc: dict[str, int] = {}
    for p in chosen.values():
        per_doc[p.doc_id] = per_doc.get(p.doc_id, 0) + 1
    test_docs: set[str] = set()
    val_docs: set[str] = set()
    in_held = 0
    for doc in sorted({p.doc_id for p in passages}, key=lambda d: (_h(str(seed), d), d)):
        if in_held < test_fraction * len(chosen):
            test_docs.add(doc)
        elif in_held < (test_fraction + val_fraction) * len(chosen):
            val_docs.add(doc)
        else:
            break
        in_held += per_doc.get(doc, 0)
    qs = QuerySet((), (), frozenset(test_docs), frozenset(val_docs))

    queries: list[LabelledQuery] = []
    for text, src in chosen.items():
        splits = {qs.split_of(doc_of[pid]) for pid in relevant[text]}
        if len(splits) != 1:
            continue  # the sentence lives on two sides of the split: drop, don't leak
        split = splits.pop()
        qid = f"q{hashlib.sha256(f'{seed}:{text}'.encode()).hexdigest()[:16]}"
        queries.append(LabelledQuery(qid, text, relevant[text], src.doc_id, split))
    queries.sort(key=lambda q: (_h(str(seed), q.id), q.id))
    capped: list[LabelledQuery] = []
    for which, cap in (("train", max_train), ("val", None), ("test", max_test)):
        some = [q for q in queries if q.split == which]
        capped.extend(some if cap is None else some[:cap])
    redact: dict[str, list[str]] = {}
    for q in capped:
        for pid in q.relevant:
            redact.setdefault(pid, []).append(q.text)
    redacted = tuple(_redact(p, redact.get(p.id, ())) for p in passages)
    return replace(qs, queries=tuple(capped), passages=redacted)


def _redact(p: Passage, sentences: Iterable[str]) -> Passage:
    text = p.text
    for s in sentences:
        text = text.replace(s, " ")
    return p if text == p.text else replace(p, text=" ".join(text.split()))


# --- metrics -------------------------------------------------------------------------------


def recall_at_k(
    rankings: Sequence[Sequence[str]], relevant: Sequence[Collection[str]], k: int
) -> float:
    """Mean over queries of |relevant ∩ top-k| / |relevant|."""
    if len(rankings) != len(relevant):
        raise ValueError("one ranking per query")
    if not rankings:
        return 0.0
    total = sum(
        len(set(r[:k]) & set(rel)) / len(rel) for r, rel in zip(rankings, relevant, strict=True)
    )
    return total / len(rankings)


def mrr(
    rankings: Sequence[Sequence[str]], relevant: Sequence[Collection[str]], cutoff: int = 10
) -> float:
    """Mean reciprocal rank of the first relevant passage in the top ``cutoff`` (else 0)."""
    if len(rankings) != len(relevant):
        raise ValueError("one ranking per query")
    if not rankings:
        return 0.0
    total = 0.0
    for ranking, rel in zip(rankings, relevant, strict=True):
        for rank, pid in enumerate(ranking[:cutoff], start=1):
            if pid in rel:
                total += 1.0 / rank
                break
    return total / len(rankings)


def score(
    rankings: Sequence[Sequence[str]], queries: Sequence[LabelledQuery], ks: Sequence[int]
) -> dict[str, float]:
    rel = [q.relevant for q in queries]
    out = {f"recall@{k}": recall_at_k(rankings, rel, k) for k in ks}
    out["mrr@10"] = mrr(rankings, rel, 10)
    out["queries"] = float(len(queries))
    return out


def evaluate_bm25(
    qs: QuerySet, split: Split = "test", ks: Sequence[int] = DEFAULT_KS
) -> dict[str, float]:
    """BM25 over the split's redacted pool."""
    pool = qs.pool(split)
    queries = qs.split(split)
    index = BM25Index.build(pool)
    depth = max([*ks, 10])
    rankings = [[h.passage_id for h in index.search(q.text, depth)] for q in queries]
    return score(rankings, queries, ks)


def rank_by_embeddings(
    query_emb: torch.Tensor, passage_emb: torch.Tensor, passage_ids: Sequence[str], depth: int
) -> list[list[str]]:
    """Cosine ranking (embeddings are normalised); ties broken by passage order."""
    import torch

    sims = query_emb @ passage_emb.T
    n = sims.shape[1]
    # stable descending sort: ties keep passage order
    order = torch.sort(-sims, dim=1, stable=True).indices[:, : min(depth, n)]
    return [[passage_ids[i] for i in row] for row in order.tolist()]


def evaluate_embeddings(
    qs: QuerySet,
    encoder: Encoder | None = None,
    split: Split = "test",
    ks: Sequence[int] = DEFAULT_KS,
    *,
    max_query_length: int = 64,
    max_passage_length: int = 128,
) -> dict[str, float]:
    """Dense retrieval with MiniLM (base model unless ``encoder`` carries an adapter)."""
    from rara_rag import embed

    enc = encoder or embed.load()
    pool = qs.pool(split)
    queries = qs.split(split)
    p_emb = embed.encode(enc, [p.text for p in pool], max_length=max_passage_length)
    q_emb = embed.encode(enc, [q.text for q in queries], max_length=max_query_length)
    rankings = rank_by_embeddings(q_emb, p_emb, [p.id for p in pool], max([*ks, 10]))
    return score(rankings, queries, ks)


def prefixed(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    return {f"{prefix}/{k}": v for k, v in metrics.items()}


# --- confidence intervals --------------------------------------------------------------------


def per_query(
    rankings: Sequence[Sequence[str]], queries: Sequence[LabelledQuery], ks: Sequence[int]
) -> dict[str, list[float]]:
    """Each metric of ``score`` per query (its mean over queries is ``score``'s value)."""
    if len(rankings) != len(queries):
        raise ValueError("one ranking per query")
    out: dict[str, list[float]] = {f"recall@{k}": [] for k in ks}
    out["mrr@10"] = []
    for ranking, q in zip(rankings, queries, strict=True):
        rel = set(q.relevant)
        for k in ks:
            out[f"recall@{k}"].append(len(set(ranking[:k]) & rel) / len(rel))
        rr = next((1.0 / r for r, pid in enumerate(ranking[:10], start=1) if pid in rel), 0.0)
        out["mrr@10"].append(rr)
    return out


def bootstrap(
    values: Mapping[str, Sequence[float]],
    baseline: Mapping[str, Sequence[float]] | None = None,
    *,
    seed: int = 0,
    resamples: int = 1000,
    level: float = 0.95,
) -> dict[str, float]:
    """Means with percentile-bootstrap intervals over queries: ``m``, ``m_lo``, ``m_hi``.

    With ``baseline`` (the same queries scored by another retriever) the intervals are of the
    paired difference ``values - baseline``: every resample draws the same queries for both,
    which is what makes a small difference on a shared query set measurable at all. Seeded:
    the same inputs give the same intervals.
    """
    import numpy as np

    out: dict[str, float] = {}
    rng = np.random.default_rng(seed)
    n = len(next(iter(values.values()), []))
    if n == 0:
        return out
    draws = rng.integers(0, n, size=(resamples, n))
    tail = (1.0 - level) / 2 * 100
    for name, xs in values.items():
        x = np.asarray(xs, dtype=np.float64)
        if baseline is not None:
            x = x - np.asarray(baseline[name], dtype=np.float64)
        means = x[draws].mean(axis=1)
        lo, hi = np.percentile(means, [tail, 100 - tail])
        out[name] = float(x.mean())
        out[f"{name}_lo"], out[f"{name}_hi"] = float(lo), float(hi)
    return out


def rrf(rankings: Sequence[Sequence[Sequence[str]]], depth: int, k: int = 60) -> list[list[str]]:
    """Reciprocal rank fusion (Cormack et al. 2009) of several rankings per query.

    A passage scores ``sum 1 / (k + rank)`` over the rankings it appears in; ties go to the
    order of first appearance (first ranking first), so fusion is deterministic.
    """
    fused: list[list[str]] = []
    for per_query_rankings in zip(*rankings, strict=True):
        scores: dict[str, float] = {}
        for ranking in per_query_rankings:
            for rank, pid in enumerate(ranking, start=1):
                scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank)
        order = sorted(scores, key=lambda pid: -scores[pid])  # stable: first appearance wins
        fused.append(order[:depth])
    return fused


def bm25_rankings(qs: QuerySet, split: Split = "test", depth: int = 10) -> list[list[str]]:
    """BM25 over the split's redacted pool, one ranking per query of the split."""
    index = BM25Index.build(qs.pool(split))
    return [[h.passage_id for h in index.search(q.text, depth)] for q in qs.split(split)]


# --- hard negatives -------------------------------------------------------------------------


def mine_hard_negatives(
    qs: QuerySet,
    index: BM25Index,
    *,
    per_query: int = 1,
    depth: int = 40,
    skip: int = 10,
    other_docs: bool = True,
) -> list[tuple[str, ...]]:
    """For each train pair (``qs.pairs("train")`` order), BM25's best non-relevant passages.

    ``index`` is the ``index`` step's, over the unredacted corpus. A negative must be a *train*
    passage (test documents stay unseen, even as negatives), not relevant to the query, and
    not the positive's neighbour in its document (neighbours overlap, so they would be half
    positives) — with ``other_docs``, from another document altogether: passages of the same
    module describe the same thing, and training against them as negatives made MRR worse.
    ``skip`` ignores BM25's first hits (the likeliest false negatives). Texts are the
    redacted ones training sees.
    """
    by_id = {p.id: p for p in qs.passages}
    train_ids = {p.id for p in qs.pool("train")}
    out: list[tuple[str, ...]] = []
    for q in qs.split("train"):
        pos = by_id[q.relevant[0]]
        rel = set(q.relevant)
        found: list[str] = []
        for hit in index.search(q.text, depth)[skip:]:
            cand = by_id.get(hit.passage_id)
            if cand is None or cand.id in rel or cand.id not in train_ids or cand.text == pos.text:
                continue  # (two passages can be equal once their query sentences are redacted)
            if cand.doc_id == pos.doc_id and (other_docs or abs(cand.ordinal - pos.ordinal) <= 1):
                continue
            found.append(cand.text)
            if len(found) == per_query:
                break
        out.append(tuple(found))
    return out
