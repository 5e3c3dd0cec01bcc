"""A BM25 retrieval index over passages, serialised to deterministic bytes.

bm25s builds the sparse BM25 score matrix (a maintained library, numpy only); this module owns
tokenisation, ranking and the artifact format. The artifact is ``packing.pack_dir`` of bm25s's
own ``.npy``/JSON files plus ``passages.jsonl`` and ``meta.json``: sorted members, zeroed
mtimes/owners, fixed gzip header, so the same passages always give the same bytes — and
therefore the same content address in the artifact store.

Ranking ties are broken by passage order (a stable sort on the full score vector), so
``search`` is deterministic too; bm25s's own top-k uses argpartition, which is not.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from rara_rag.corpus import Passage, passages_from_jsonl, passages_to_jsonl
from rara_rag.packing import pack_dir, unpack

FORMAT = "rara.bm25/1"
MEDIA_TYPE = "application/vnd.rara.bm25+tar+gzip"
_TOKEN = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(STOPWORDS_EN)


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric/underscore runs minus English stopwords (keeps ``__init__``)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True, slots=True)
class Hit:
    passage_id: str
    score: float
    rank: int


class BM25Index:
    """BM25 (Lucene variant, k1/b as given) over a fixed, ordered list of passages."""

    def __init__(self, retriever: Any, passages: Sequence[Passage], params: dict[str, Any]):
        self._bm25 = retriever
        self.passages = list(passages)
        self.params = params
        self._ids = [p.id for p in self.passages]

    @classmethod
    def build(cls, passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75) -> BM25Index:
        if not passages:
            raise ValueError("cannot index an empty passage list")
        # Our own vocabulary, sorted: bm25s builds one from a set when given strings, whose
        # order follows Python's per-process string hashing — the saved index (and so the
        # artifact digest) would differ from one process to the next.
        docs = [tokenize(p.text) for p in passages]
        vocab = {token: i for i, token in enumerate(sorted({t for doc in docs for t in doc}))}
        return cls.from_token_ids(
            passages, [[vocab[t] for t in doc] for doc in docs], vocab, k1=k1, b=b
        )

    @classmethod
    def from_token_ids(
        cls,
        passages: Sequence[Passage],
        ids: list[list[int]],
        vocab: dict[str, int],
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        """The index of passages already tokenized: ``ids[i]`` are passage i's tokens as
        positions in ``vocab``, the sorted vocabulary of all of them (what ``build`` makes,
        and ``index_shards.merge`` from per-shard tokens: the same ids give the same bytes)."""
        if not passages or len(ids) != len(passages):
            raise ValueError(f"{len(ids)} token lists for {len(passages)} passages")
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        tokenized = bm25s.tokenization.Tokenized(ids=ids, vocab=vocab)
        # Every passage gets at least the empty token, so an all-stopword passage is indexable.
        retriever.index(tokenized, show_progress=False)
        return cls(retriever, passages, {"k1": k1, "b": b, "method": "lucene"})

    def scores(self, query: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        """BM25 score of every passage for ``query`` (zeros when no query term is indexed)."""
        ids = self._bm25.get_tokens_ids(tokenize(query))
        if not ids:
            return np.zeros(len(self.passages), dtype=np.float32)
        return np.asarray(self._bm25.get_scores_from_ids(ids), dtype=np.float32)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Top ``k`` passages with a positive score, best first, ties by passage order."""
        scores = self.scores(query)
        order = np.lexsort((np.arange(len(scores)), -scores))[: max(k, 0)]
        return [
            Hit(self._ids[i], float(scores[i]), rank)
            for rank, i in enumerate(order.tolist(), start=1)
            if scores[i] > 0
        ]

    def to_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            self._bm25.save(root, show_progress=False)
            (root / "passages.jsonl").write_bytes(passages_to_jsonl(self.passages))
            meta = {"format": FORMAT, "params": self.params, "passages": len(self.passages)}
            (root / "meta.json").write_text(json.dumps(meta, sort_keys=True))
            return pack_dir(root)

    @classmethod
    def from_bytes(cls, data: bytes) -> BM25Index:
        with tempfile.TemporaryDirectory() as tmp:
            root = unpack(data, tmp)
            if not (root / "meta.json").is_file():
                raise ValueError(f"not a {FORMAT} artifact: no meta.json")
            meta = json.loads((root / "meta.json").read_text())
            if meta.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} artifact: format={meta.get('format')!r}")
            retriever = bm25s.BM25.load(root, show_progress=False, verbosity=0)
            passages = passages_from_jsonl((root / "passages.jsonl").read_bytes())
        return cls(retriever, passages, meta["params"])

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_bytes(self.to_bytes())
        return out

    @classmethod
    def read(cls, path: str | Path) -> BM25Index:
        return cls.from_bytes(Path(path).read_bytes())


def build(passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75) -> BM25Index:
    """Build a BM25 index over ``passages`` (order matters: it breaks score ties)."""
    return BM25Index.build(passages, k1=k1, b=b)
