"""Chaos for the demo: SIGKILL and restart services at random; the reference digests."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

from rich.console import Console

from rara_rag.demo.processes import Child


class ChaosMonkey:
    """SIGKILLs at random, then one aimed kill: the executor, once adaptation has checkpointed.

    The random phase kills any child every few seconds; the aimed kill proves the point of
    checkpoints — the retried adaptation must resume from the checkpoint, not from step 0.
    """

    def __init__(
        self,
        children: list[Child],
        *,
        url: str,
        run_id: int,
        seed: int | None,
        console: Console,
        interval: tuple[float, float] = (3.0, 8.0),
        random_kills: int = 3,
    ) -> None:
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.random = random.Random(self.seed)
        self.children = {c.name: c for c in children}
        self.url, self.run_id = url, run_id
        self.console = console
        self.interval = interval
        self.random_kills = random_kills
        self.kills: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def start(self) -> None:
        self.console.print(f"chaos: seed {self.seed}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for child in self.children.values():  # whatever was down comes back for a clean stop
            if not child.alive():
                child.start()

    def _kill(self, victim: Child, why: str) -> bool:
        victim.kill()
        self.kills[victim.name] += 1
        self.console.print(f"chaos: SIGKILL {victim.name} ({why})")
        if self._stop.wait(self.random.uniform(0.5, 2.0)):
            return False
        victim.start()
        return True

    def _run(self) -> None:
        for _ in range(self.random_kills):
            if self._stop.wait(self.random.uniform(*self.interval)):
                return
            victim = self.random.choice(sorted(self.children.values(), key=lambda c: c.name))
            if not self._kill(victim, "random"):
                return
        while not self._stop.wait(0.5):
            if self._adapt_checkpointed():
                self._kill(self.children["executor"], "adaptation has a checkpoint")
                return

    def _adapt_checkpointed(self) -> bool:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM rara_checkpoints c JOIN rara_steps s ON s.id = c.step_id "
                "WHERE s.run_id = %s AND s.key = 'adapt' AND c.attempt = s.attempt "
                "AND s.status = 'running'",
                (self.run_id,),
            ).fetchone()
        return bool(row and row[0])

    def report(self) -> str:
        kills = ", ".join(f"{n} {name}" for name, n in sorted(self.kills.items())) or "none"
        return f"chaos: seed {self.seed}; SIGKILLs: {kills}"


def deterministic_digests(
    run_input: dict[str, Any] | None = None, shards: int = 4
) -> dict[tuple[str, str], str]:
    """What collect, clean, the index-shard children and index must produce, computed directly
    (no runtime involved; the index unsharded, which the sharded one must equal)."""
    import hashlib

    from rara_rag import corpus, index, index_shards
    from rara_rag.demo.handlers import DEFAULT_CORPUS

    run_input = run_input or {}
    docs = corpus.collect(run_input.get("paths"), corpus=run_input.get("corpus", DEFAULT_CORPUS))
    limit = run_input.get("limit")
    if isinstance(limit, int):
        docs = docs[:limit]
    documents = corpus.documents_to_jsonl(docs)
    passages = corpus.clean(docs, words=100, overlap=20)

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    expected = {
        ("collect", "documents.jsonl"): digest(documents),
        ("clean", "passages.jsonl"): digest(corpus.passages_to_jsonl(passages)),
        ("index", "index.bm25"): digest(index.build(passages).to_bytes()),
    }
    for i, shard in enumerate(corpus.split_shards(passages, shards)):
        expected["clean", f"passages-{i:03d}.jsonl"] = digest(corpus.passages_to_jsonl(shard))
        expected[f"index-shard[{i}]", "tokens.json.gz"] = digest(index_shards.tokenize_shard(shard))
    return expected
